//! Opening the store a URL names, with the builders' defaults for what the
//! options leave out. Every message shows the URL redacted.

use std::path::PathBuf;
use std::sync::Arc;

use fluxio_core::CheckpointStore;
use fluxio_core::store::RedactedUrl;
use fluxio_postgres::PostgresStore;
use fluxio_redis::RedisStore;
use fluxio_sqlite::SqliteStore;

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
        _ => Err(Failure::store(format_args!(
            "unsupported store URL `{}`: use sqlite://PATH, redis://..., rediss://..., \
             postgres://... or postgresql://...",
            RedactedUrl::new(url).url
        ))),
    }
}

/// Opens the store of `args`: [`Exit::Store`](crate::Exit::Store) when the
/// URL is missing, bad or unsupported, or the store cannot be opened.
pub(crate) async fn open(args: &StoreArgs) -> Result<Arc<dyn CheckpointStore>, Failure> {
    let Some(url) = args.store.as_deref() else {
        return Err(Failure::usage(
            "no store: pass --store URL or set FLUXIO_STORE (sqlite://PATH, redis://..., postgres://...)",
        ));
    };
    let shown = RedactedUrl::new(url).url;
    let cannot = |e: fluxio_core::Error| {
        Failure::store(format_args!(
            "cannot open the store {shown}: {}",
            e.message_with_causes()
        ))
    };
    let store: Arc<dyn CheckpointStore> = match backend(url)? {
        Backend::Sqlite(path) => {
            // the builder would create a missing file: a typo must not make
            // an empty store that lists nothing
            if !path.is_file() {
                return Err(Failure::store(format_args!(
                    "no SQLite database at {}",
                    path.display()
                )));
            }
            let mut builder = SqliteStore::builder(path).timeout(args.timeout);
            if let Some(table) = &args.table {
                builder = builder.table(table);
            }
            Arc::new(builder.connect().await.map_err(cannot)?)
        }
        Backend::Redis => {
            let mut builder = RedisStore::builder(url).command_timeout(args.timeout);
            if let Some(prefix) = &args.prefix {
                builder = builder.key_prefix(prefix);
            }
            Arc::new(builder.connect().await.map_err(cannot)?)
        }
        Backend::Postgres => {
            let mut builder = PostgresStore::builder(url).timeout(args.timeout);
            if let Some(schema) = &args.schema {
                builder = builder.schema(schema);
            }
            if let Some(table) = &args.table {
                builder = builder.table(table);
            }
            Arc::new(builder.connect().await.map_err(cannot)?)
        }
    };
    Ok(store)
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
            "mysql://root:hunter2@h/db",
        ] {
            let failure = backend(url).expect_err(url);
            assert_eq!(failure.exit, crate::Exit::Store, "{url}");
            assert!(!failure.message.contains("hunter2"), "{}", failure.message);
        }
    }
}
