//! Opening the SQLite file and running one store call: the writing and the
//! reading pools, preparing the file (write-ahead logging, migrations, a
//! write check), and the call's timeout. (A local file does not drop
//! connections like a server does: no call is sent twice.)

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fluxio_core::Result;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use crate::builder::SqliteStoreBuilder;
use crate::error::{SqliteStoreError, own_error, sql_error};
use crate::migrate::{self, MigrateError};
use crate::statements::Names;

/// The store's two pools on the file, connecting lazily: one writing
/// connection, and the readers (`query_only`; the writer itself when
/// `max_connections` is 1). Every commit of the writing connection adds
/// one to `commits` (SQLite's commit hook); the writing connection has its
/// [`GATE`](crate::statements::GATE) and [`BATCH`](crate::statements::BATCH) tables.
pub(crate) fn pools(
    builder: &SqliteStoreBuilder,
    commits: &Arc<AtomicU64>,
) -> (SqlitePool, SqlitePool) {
    // The journal mode is not among the options: it is set once per file
    // (see `migrate::ensure_wal`), not per connection.
    let options = SqliteConnectOptions::new()
        .filename(&builder.path)
        .create_if_missing(!builder.settings.read_only)
        .read_only(builder.settings.read_only)
        .busy_timeout(builder.busy_timeout)
        .foreign_keys(false);
    // `synchronous` is a setting of writes (and a read-only connection
    // changes nothing of the file)
    let options = if builder.settings.read_only {
        options
    } else {
        options.synchronous(builder.synchronous.to_sqlx())
    };
    let pool = |max: u32| {
        SqlitePoolOptions::new()
            .max_connections(max)
            .min_connections(0)
            .acquire_timeout(builder.settings.timeout)
            // A local file does not drop connections like a server does.
            .test_before_acquire(false)
    };
    if builder.settings.read_only {
        // one pool of read-only connections: no temporary tables, no
        // commits; a write fails with SQLite's error for a read-only database
        let reader = pool(builder.settings.max_connections).connect_lazy_with(options);
        return (reader.clone(), reader);
    }
    let commits = Arc::clone(commits);
    let writer = pool(1).after_connect(move |conn, _| {
        let commits = Arc::clone(&commits);
        Box::pin(async move {
            {
                let mut handle = conn.lock_handle().await?;
                handle.set_commit_hook(move || {
                    commits.fetch_add(1, Ordering::Relaxed);
                    true
                });
            }
            sqlx::query(crate::statements::CREATE_TEMP)
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    });
    let writer = writer.connect_lazy_with(options.clone());
    let reader = if builder.settings.max_connections == 1 {
        writer.clone()
    } else {
        pool(builder.settings.max_connections - 1)
            .connect_lazy_with(options.pragma("query_only", "ON"))
    };
    (writer, reader)
}

/// Prepares the file within `timeout`: write-ahead logging, the pending
/// migrations, and a write that is rolled back (a database that cannot be
/// written is refused here). Returns how many migrations it applied.
///
/// # Errors
/// [`Error::Store`]: [`SqliteStoreError::Open`] or
/// [`SqliteStoreError::NotWritable`] naming `path`, a failed or changed
/// migration, a timeout.
pub(crate) async fn prepare(
    writer: &SqlitePool,
    names: &Names,
    path: &Path,
    timeout: Duration,
) -> Result<usize> {
    let opening = |e: MigrateError| match e {
        MigrateError::Sql(source) => Failure::Fluxio(own_error(open_error(path, source))),
        other => other.into(),
    };
    timed(timeout, "open", async {
        migrate::ensure_wal(writer).await.map_err(opening)?;
        let applied = migrate::run(writer, names).await.map_err(opening)?;
        check_writable(writer).await.map_err(|source| {
            Failure::Fluxio(own_error(SqliteStoreError::NotWritable {
                path: path.to_owned(),
                source,
            }))
        })?;
        Ok::<_, Failure>(applied)
    })
    .await
}

/// Checks within `timeout`, writing nothing, that the file holds the
/// store's tables at a schema version this build reads (a store opened
/// [read-only](SqliteStoreBuilder::read_only)).
///
/// # Errors
/// [`Error::Store`]: [`SqliteStoreError::Open`] naming `path`,
/// [`SqliteStoreError::NoTables`], [`SqliteStoreError::SchemaOutdated`],
/// [`SqliteStoreError::MigrationChanged`], a timeout.
pub(crate) async fn check_readable(
    reader: &SqlitePool,
    names: &Names,
    path: &Path,
    timeout: Duration,
) -> Result<()> {
    timed(timeout, "open", async {
        let applied = migrate::applied(reader, names)
            .await
            .map_err(|source| Failure::Fluxio(own_error(open_error(path, source))))?;
        let Some(applied) = applied else {
            return Err(Failure::Fluxio(own_error(SqliteStoreError::NoTables {
                path: path.to_owned(),
                table: names.table.clone(),
            })));
        };
        migrate::readable(&applied, &names.table).map_err(|unreadable| {
            let fluxio_sql::Unreadable {
                missing,
                version,
                description,
            } = unreadable;
            let table = names.table.clone();
            Failure::Fluxio(own_error(if missing {
                SqliteStoreError::SchemaOutdated {
                    path: path.to_owned(),
                    table,
                    version,
                    description,
                }
            } else {
                SqliteStoreError::MigrationChanged {
                    table,
                    version,
                    description,
                }
            }))
        })?;
        Ok::<_, Failure>(())
    })
    .await
}

/// Runs `fut` within `timeout`, mapping its failure to fluxio's [`Error`].
pub(crate) async fn timed<T>(
    timeout: Duration,
    operation: &'static str,
    fut: impl Future<Output = std::result::Result<T, Failure>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(match e {
            Failure::Sql(e) => sql_error(e),
            Failure::Fluxio(e) => e,
        }),
        Err(_elapsed) => Err(own_error(SqliteStoreError::Timeout { operation, timeout })),
    }
}

/// SQLite's error while opening `path`: [`SqliteStoreError::NotWritable`]
/// for a read-only database (`SQLITE_READONLY` and its extended codes),
/// [`SqliteStoreError::Open`] otherwise; both name the file.
fn open_error(path: &Path, source: sqlx::Error) -> SqliteStoreError {
    let read_only = source
        .as_database_error()
        .and_then(|e| e.code())
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| code & 0xff == SQLITE_READONLY);
    if read_only {
        SqliteStoreError::NotWritable {
            path: path.to_owned(),
            source,
        }
    } else {
        SqliteStoreError::Open {
            path: path.to_owned(),
            source,
        }
    }
}

/// SQLite's primary result code for a write to a read-only database.
const SQLITE_READONLY: i32 = 8;

/// Tries a write and rolls it back: a database that opens but cannot be
/// written (a read-only file or filesystem, which root's permissions do not
/// help with) fails here rather than at a run's first checkpoint. Migrations
/// do not show it once the tables exist: they then write nothing.
async fn check_writable(writer: &SqlitePool) -> std::result::Result<(), sqlx::Error> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query("CREATE TABLE \"_fluxio_write_check\" (x)")
        .execute(&mut *tx)
        .await?;
    tx.rollback().await
}

/// What the body of a store call fails with (the driver's error or
/// fluxio's, as in every SQL store); [`timed`] maps it to fluxio's
/// [`Error`].
pub(crate) use fluxio_sql::Failure;

impl From<MigrateError> for Failure {
    fn from(e: MigrateError) -> Self {
        match e {
            MigrateError::Sql(e) => Failure::Sql(e),
            MigrateError::Store(e) => Failure::Fluxio(own_error(e)),
        }
    }
}
