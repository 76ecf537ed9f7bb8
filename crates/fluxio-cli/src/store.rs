//! Opening the store a URL names, with the builders' defaults for what the
//! options leave out. Every message shows the URL redacted.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fluxio_core::CheckpointStore;
use fluxio_core::store::RedactedUrl;
use fluxio_mysql::MySqlStore;
use fluxio_postgres::{PostgresStore, PostgresStoreError as ServerStoreError};
use fluxio_redis::RedisStore;
use fluxio_sqlite::{SqliteStore, SqliteStoreError};

use crate::args::StoreArgs;
use crate::exit::Failure;

/// Which store a URL names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `sqlite://PATH` or `sqlite:PATH`.
    Sqlite(PathBuf),
    /// `redis://...` or `rediss://...`: the whole URL.
    Redis,
    /// `postgres://...` or `postgresql://...`: the whole URL.
    Postgres,
    /// `mysql://...` or `mariadb://...`: the whole URL.
    MySql,
}

/// The backend of `url`, or why it names none (the URL shown redacted).
pub(crate) fn backend(url: &str) -> Result<Backend, Failure> {
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("sqlite") => {
            let rest = &url["sqlite:".len()..];
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(Failure::store(
                    "the SQLite URL has no path: use sqlite://PATH or sqlite:PATH",
                ));
            }
            Ok(Backend::Sqlite(PathBuf::from(path)))
        }
        Some("redis" | "rediss") => Ok(Backend::Redis),
        Some("postgres" | "postgresql") => Ok(Backend::Postgres),
        Some("mysql" | "mariadb") => Ok(Backend::MySql),
        _ => Err(Failure::store(format_args!(
            "unsupported store URL `{}`: use sqlite://PATH, redis://..., rediss://..., \
             postgres://..., postgresql://..., mysql://... or mariadb://...",
            RedactedUrl::new(url).url
        ))),
    }
}

/// What a command does to the store it opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// `list`, `show`, `diff`: the store is opened read-only, so nothing is
    /// ever created or migrated in it.
    Read,
    /// `retry`, `cancel`, `delete`, `purge`: the store must already hold
    /// fluxio's tables (checked read-only first, creating nothing); then it
    /// is opened as a worker opens it, applying its pending migrations.
    Write,
}

/// The longest `--timeout` PostgreSQL takes: its `statement_timeout` is a
/// 32-bit count of milliseconds (about 24.8 days).
const POSTGRES_MAX_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// What opening a SQL store's `builder` ends with: the table `args` name,
/// if any, then [`checked_open`] for `access`, read-only or not (the
/// builders share these setters, but no trait).
macro_rules! open_sql {
    ($builder:expr, $args:expr, $access:expr) => {{
        let mut builder = $builder;
        if let Some(table) = &$args.table {
            builder = builder.table(table);
        }
        let open = |read_only| builder.clone().read_only(read_only).connect();
        checked_open($access, open).await
    }};
}

/// Opens the store of `args` for `access`: [`Exit::Usage`](crate::Exit::Usage)
/// when no URL is given or a setting is out of range,
/// [`Exit::Store`](crate::Exit::Store) when the URL is bad or unsupported,
/// the store cannot be opened, or it holds no fluxio tables (or older ones
/// than a read can use).
pub(crate) async fn open(
    args: &StoreArgs,
    access: Access,
) -> Result<Arc<dyn CheckpointStore>, Failure> {
    // an empty FLUXIO_STORE (or --store "") names no store
    let Some(url) = args.store.as_deref().filter(|url| !url.trim().is_empty()) else {
        return Err(Failure::usage(
            "no store: pass --store URL or set FLUXIO_STORE (sqlite://PATH, redis://..., postgres://..., mysql://...)",
        ));
    };
    let shown = RedactedUrl::new(url).url;
    let cannot = |e: fluxio_core::Error| match unreadable(&e) {
        // the store's own message says where it looked
        Some(message) => Failure::store(message),
        None => Failure::store(format_args!(
            "cannot open the store {shown}: {}",
            e.message_with_causes()
        )),
    };
    let store: Arc<dyn CheckpointStore> = match backend(url)? {
        Backend::Sqlite(path) => {
            // a typo must not look like an empty store that lists nothing
            if !path.is_file() {
                return Err(Failure::store(format_args!(
                    "no SQLite database at {}",
                    path.display()
                )));
            }
            let builder = SqliteStore::builder(path).timeout(args.timeout);
            Arc::new(open_sql!(builder, args, access).map_err(cannot)?)
        }
        Backend::Redis => {
            // nothing to create or migrate: a read writes no key
            let mut builder = RedisStore::builder(url).command_timeout(args.timeout);
            if let Some(prefix) = &args.prefix {
                builder = builder.key_prefix(prefix);
            }
            Arc::new(builder.connect().await.map_err(cannot)?)
        }
        Backend::Postgres => {
            if args.timeout > POSTGRES_MAX_TIMEOUT {
                return Err(Failure::of(&fluxio_core::Error::InvalidSetting {
                    setting: "timeout",
                    message: format!(
                        "{} is longer than PostgreSQL's statement_timeout takes (at most {})",
                        humantime::format_duration(args.timeout),
                        humantime::format_duration(POSTGRES_MAX_TIMEOUT)
                    ),
                }));
            }
            let mut builder = PostgresStore::builder(url).timeout(args.timeout);
            if let Some(schema) = &args.schema {
                builder = builder.schema(schema);
            }
            Arc::new(open_sql!(builder, args, access).map_err(cannot)?)
        }
        Backend::MySql => {
            let mut builder = MySqlStore::builder(url).timeout(args.timeout);
            // MySQL calls a database a schema too
            if let Some(database) = &args.schema {
                builder = builder.database(database);
            }
            Arc::new(open_sql!(builder, args, access).map_err(cannot)?)
        }
    };
    Ok(store)
}

/// The store `open(read_only)` opens for `access`: read-only for a read;
/// for a write, opened for writing only once a read-only open found tables
/// it may migrate ([`writable`]).
async fn checked_open<S, F, O>(access: Access, open: F) -> fluxio_core::Result<S>
where
    F: Fn(bool) -> O,
    O: Future<Output = fluxio_core::Result<S>>,
{
    let checked = open(true).await;
    match access {
        Access::Read => checked,
        Access::Write => {
            writable(checked)?;
            open(false).await
        }
    }
}

/// Whether a store a read-only open answered `checked` for may be opened
/// for writing: one it reads, or one whose tables are older than a read
/// takes (opening it for writing migrates them). No tables, or any other
/// failure, is the answer.
fn writable<S>(checked: fluxio_core::Result<S>) -> fluxio_core::Result<()> {
    match checked {
        Ok(_) => Ok(()),
        Err(e) if outdated(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The store's source error inside `e`, when it is one.
fn own<E: std::error::Error + 'static>(e: &fluxio_core::Error) -> Option<&E> {
    match e {
        fluxio_core::Error::Store { source, .. } => source.downcast_ref::<E>(),
        _ => None,
    }
}

/// Whether `e` says the tables are older than a read-only open reads.
fn outdated(e: &fluxio_core::Error) -> bool {
    matches!(
        own::<SqliteStoreError>(e),
        Some(SqliteStoreError::SchemaOutdated { .. })
    ) || matches!(
        own::<ServerStoreError>(e),
        Some(ServerStoreError::SchemaOutdated { .. })
    )
}

/// The message of `e` when it says the store holds no fluxio tables, or
/// older ones than a read takes.
fn unreadable(e: &fluxio_core::Error) -> Option<String> {
    if let Some(
        own @ (SqliteStoreError::NoTables { .. } | SqliteStoreError::SchemaOutdated { .. }),
    ) = own::<SqliteStoreError>(e)
    {
        return Some(own.to_string());
    }
    // the Postgres and the MySQL store's (one type)
    match own::<ServerStoreError>(e) {
        Some(
            own @ (ServerStoreError::NoTables { .. } | ServerStoreError::SchemaOutdated { .. }),
        ) => Some(own.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend() {
        let sqlite = |p: &str| Ok(Backend::Sqlite(PathBuf::from(p)));
        let cases = [
            ("sqlite://runs.db", sqlite("runs.db")),
            ("sqlite:runs.db", sqlite("runs.db")),
            ("sqlite:///var/lib/runs.db", sqlite("/var/lib/runs.db")),
            ("SQLITE:runs.db", sqlite("runs.db")),
            ("redis://127.0.0.1:6379/0", Ok(Backend::Redis)),
            ("rediss://h", Ok(Backend::Redis)),
            ("postgres://u@h/db", Ok(Backend::Postgres)),
            ("postgresql://u@h/db", Ok(Backend::Postgres)),
            ("mysql://u@h/db", Ok(Backend::MySql)),
            ("mariadb://u@h/db", Ok(Backend::MySql)),
        ];
        for (url, want) in cases {
            assert_eq!(backend(url).map_err(|f| f.message), want, "{url}");
        }
    }

    #[test]
    fn a_bad_url_is_a_store_failure_without_its_password() {
        for url in [
            "ftp://u:hunter2@h",
            "sqlite:",
            "hunter2",
            "mongodb://root:hunter2@h/db",
        ] {
            let failure = backend(url).expect_err(url);
            assert_eq!(failure.exit, crate::Exit::Store, "{url}");
            assert!(!failure.message.contains("hunter2"), "{}", failure.message);
        }
    }
}
