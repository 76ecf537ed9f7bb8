//! [`SqliteStore`] and its builder.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fluxio_core::store::{Checkpoint, CheckpointStore, Lease, RunStatus, check_lease_ttl};
use fluxio_core::{Error, Result};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use crate::error::{SqliteStoreError, sql_kind};
use crate::migrate::{self, MigrateError};
use crate::names::{Names, Sql, validate_path};

/// The `backend` of every [`Error::Store`] this crate returns.
pub const BACKEND: &str = "sqlite";

/// The default checkpoint table; the lease table is `<table>_leases`.
pub const DEFAULT_TABLE: &str = "fluxio_checkpoints";
/// The default timeout of every store call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default busy timeout: how long a write waits for another connection
/// (of this or another process) to finish its write.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// The default retention of completed runs' checkpoints: 7 days.
pub const DEFAULT_COMPLETED_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// The default number of connections: one that writes and three that read.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 4;

/// Durations in SQL are capped here (about 100 years, in milliseconds), so
/// that `now + duration` stays an INTEGER.
const MAX_MILLIS: i64 = 100 * 366 * 24 * 60 * 60 * 1000;

fn sql_error(e: sqlx::Error) -> Error {
    Error::store_with_kind(BACKEND, sql_kind(&e), e)
}

fn own_error(e: SqliteStoreError) -> Error {
    Error::store_with_kind(BACKEND, e.kind(), e)
}

/// When SQLite makes a commit durable: its `PRAGMA synchronous`, in WAL
/// mode.
///
/// Either way a commit survives a crash of the process that made it, and
/// the database is never corrupted by a crash or a power loss. They differ
/// on a power loss or an operating-system crash only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Synchronous {
    /// The write-ahead log is synced to the disk at every commit: a save
    /// that returned survives a power loss (on a filesystem and disk that
    /// honour `fsync`). The default.
    #[default]
    Full,
    /// The log is synced only when it is checkpointed into the database,
    /// not at every commit: saves are faster (no `fsync` each), but the last
    /// commits before a power loss or an operating-system crash may be rolled
    /// back. For fluxio this means a run resumes from an earlier checkpoint
    /// and runs again stages that had finished. (Leases lost the same way do
    /// no harm: the processes holding them died with the machine.)
    Normal,
}

impl Synchronous {
    fn to_sqlx(self) -> SqliteSynchronous {
        match self {
            Synchronous::Full => SqliteSynchronous::Full,
            Synchronous::Normal => SqliteSynchronous::Normal,
        }
    }
}

/// A [`CheckpointStore`] in an SQLite file, on sqlx's SQLite driver.
///
/// Cloning is cheap (one `Arc`) and the clones share the connections. See
/// the [crate documentation](crate) for the schema, the lease protocol, the
/// clock, retention and the guarantees.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// One connection: every write of this store goes through it, so the
    /// store's own writes queue in the pool (first come, first served)
    /// instead of contending for SQLite's write lock.
    writer: SqlitePool,
    /// The other connections, `query_only`; the writer itself when
    /// `max_connections` is 1.
    reader: SqlitePool,
    names: Names,
    sql: Sql,
    path: PathBuf,
    timeout: Duration,
    busy_timeout: Duration,
    synchronous: Synchronous,
    max_connections: u32,
    completed_retention: Option<Duration>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("SqliteStore")
            .field("path", &inner.path)
            .field("table", &inner.names.table)
            .field("timeout", &inner.timeout)
            .field("busy_timeout", &inner.busy_timeout)
            .field("synchronous", &inner.synchronous)
            .field("max_connections", &inner.max_connections)
            .field("completed_retention", &inner.completed_retention)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens the store in the SQLite file at `path` with the default
    /// settings, creating the file and the tables if needed. Named
    /// `connect`, like the Redis and Postgres stores' constructors.
    ///
    /// # Errors
    /// [`Error::Store`] when the path is invalid, the file cannot be opened
    /// or created (a missing directory, no permission:
    /// [`SqliteStoreError::Open`]) or written
    /// ([`SqliteStoreError::NotWritable`]), or preparing it fails within the
    /// [timeout](SqliteStoreBuilder::timeout). The errors name the file.
    pub async fn connect(path: impl AsRef<Path>) -> Result<SqliteStore> {
        Self::builder(path.as_ref()).connect().await
    }

    /// A builder for the store in the SQLite file at `path`.
    pub fn builder(path: impl Into<PathBuf>) -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(path.into())
    }

    /// The path of the database file (as given).
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The checkpoint table (the lease table is `<table>_leases`).
    #[must_use]
    pub fn table(&self) -> &str {
        &self.inner.names.table
    }

    /// The pool of the store's writing connection (a pool of one). Run your
    /// own writes to the same file through it and they queue with the
    /// store's, rather than contending for SQLite's write lock; reads can use
    /// it too, or connections of your own.
    #[must_use]
    pub fn pool(&self) -> &SqlitePool {
        &self.inner.writer
    }

    /// Deletes the checkpoints of completed runs whose retention has passed
    /// (see [`completed_retention`](SqliteStoreBuilder::completed_retention))
    /// and returns how many it deleted. It also deletes lease rows that are
    /// released or expired (not counted), except the one holding the greatest
    /// token, so a run id acquired again still gets a greater token.
    ///
    /// Expired checkpoints are already invisible to `load` and `exists`;
    /// purging only reclaims the space (SQLite reuses the freed pages; the
    /// file does not shrink). One transaction, which holds the write lock
    /// while it deletes: call it periodically (say hourly) from one process;
    /// concurrent calls are harmless.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn purge_expired(&self) -> Result<u64> {
        let inner = &self.inner;
        self.timed("purge_expired", async {
            let mut tx = inner.writer.begin_with("BEGIN IMMEDIATE").await?;
            sqlx::query(&inner.sql.purge_leases)
                .execute(&mut *tx)
                .await?;
            let done = sqlx::query(&inner.sql.purge_checkpoints)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok::<_, Failure>(done.rows_affected())
        })
        .await
    }

    /// Runs `fut` within the store's timeout.
    async fn timed<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = std::result::Result<T, Failure>>,
    ) -> Result<T> {
        timed(self.inner.timeout, operation, fut).await
    }

    /// Binds the `?1..?9` of a save.
    fn bind_save<'q>(
        &self,
        sql: &'q str,
        checkpoint: &'q Checkpoint,
        payload: Vec<u8>,
    ) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
        let retention = match checkpoint.status {
            RunStatus::Completed => self.inner.completed_retention.map(millis),
            _ => None,
        };
        sqlx::query(sql)
            .bind(checkpoint.run_id.as_str())
            .bind(payload)
            .bind(checkpoint.version.as_str())
            .bind(i64::from(checkpoint.ip))
            .bind(checkpoint.step.as_str())
            .bind(status_name(checkpoint.status))
            .bind(checkpoint.error_message.as_deref())
            .bind(i64::try_from(checkpoint.created_at_ms).unwrap_or(i64::MAX))
            .bind(retention)
    }
}

/// Runs `fut` within `timeout`, mapping its failure to fluxio's [`Error`].
async fn timed<T>(
    timeout: Duration,
    operation: &'static str,
    fut: impl Future<Output = std::result::Result<T, Failure>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(match e {
            Failure::Sql(e) | Failure::Migrate(MigrateError::Sql(e)) => sql_error(e),
            Failure::Migrate(MigrateError::Store(e)) => own_error(e),
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

/// What the body of a store call fails with; [`timed`] maps it to fluxio's
/// [`Error`].
enum Failure {
    Sql(sqlx::Error),
    Migrate(MigrateError),
    Fluxio(Error),
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        Failure::Sql(e)
    }
}

impl From<MigrateError> for Failure {
    fn from(e: MigrateError) -> Self {
        Failure::Migrate(e)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Fluxio(e)
    }
}

fn status_name(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Running => "running",
        RunStatus::Failed => "failed",
        RunStatus::Completed => "completed",
        _ => "other",
    }
}

fn lease_lost(lease: &Lease) -> Error {
    Error::LeaseLost {
        run_id: lease.run_id().to_owned(),
        token: lease.token(),
    }
}

/// A duration in whole milliseconds, as the SQL adds it to SQLite's clock.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).map_or(MAX_MILLIS, |ms| ms.min(MAX_MILLIS))
}

#[async_trait::async_trait]
impl CheckpointStore for SqliteStore {
    /// One upsert.
    async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
        fluxio_core::store::check_run_id(&checkpoint.run_id)?;
        let payload = checkpoint.to_bytes()?;
        let inner = &self.inner;
        self.timed("save", async {
            self.bind_save(&inner.sql.save, &checkpoint, payload)
                .execute(&inner.writer)
                .await?;
            Ok::<_, Failure>(())
        })
        .await
    }

    /// Expired rows (completed runs past their retention) read as absent.
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        fluxio_core::store::check_run_id(run_id)?;
        let inner = &self.inner;
        self.timed("load", async {
            let payload: Option<Vec<u8>> = sqlx::query_scalar(&inner.sql.load)
                .bind(run_id)
                .fetch_optional(&inner.reader)
                .await?;
            Ok::<_, Failure>(
                payload
                    .map(|bytes| Checkpoint::from_bytes(run_id, &bytes))
                    .transpose()?,
            )
        })
        .await
    }

    async fn delete(&self, run_id: &str) -> Result<()> {
        fluxio_core::store::check_run_id(run_id)?;
        let inner = &self.inner;
        self.timed("delete", async {
            sqlx::query(&inner.sql.delete)
                .bind(run_id)
                .execute(&inner.writer)
                .await?;
            Ok::<_, Failure>(())
        })
        .await
    }

    /// Expired rows read as absent.
    async fn exists(&self, run_id: &str) -> Result<bool> {
        fluxio_core::store::check_run_id(run_id)?;
        let inner = &self.inner;
        self.timed("exists", async {
            let exists: bool = sqlx::query_scalar(&inner.sql.exists)
                .bind(run_id)
                .fetch_one(&inner.reader)
                .await?;
            Ok::<_, Failure>(exists)
        })
        .await
    }

    /// One conditional upsert of the lease row (SQLite's clock).
    async fn acquire_lease(&self, run_id: &str, ttl: Duration) -> Result<Lease> {
        fluxio_core::store::check_run_id(run_id)?;
        check_lease_ttl(ttl)?;
        let inner = &self.inner;
        self.timed("acquire_lease", async {
            // `fetch_all`, not `fetch_optional`: it steps the statement to
            // its end, where the autocommit transaction commits, so an error
            // of the commit (a full disk) is returned rather than lost when
            // sqlx resets the statement after the first row.
            let tokens: Vec<i64> = sqlx::query_scalar(&inner.sql.acquire)
                .bind(run_id)
                .bind(millis(ttl))
                .fetch_all(&inner.writer)
                .await?;
            match tokens.first().copied().map(u64::try_from) {
                Some(Ok(token)) => Ok(Lease::new(run_id, token)),
                Some(Err(e)) => Err(Failure::Fluxio(Error::store(BACKEND, e))),
                None => Err(Failure::Fluxio(Error::RunIdInUse {
                    run_id: run_id.to_owned(),
                })),
            }
        })
        .await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        check_lease_ttl(ttl)?;
        let Ok(token) = i64::try_from(lease.token()) else {
            return Err(lease_lost(lease));
        };
        let inner = &self.inner;
        self.timed("renew_lease", async {
            let done = sqlx::query(&inner.sql.renew)
                .bind(lease.run_id())
                .bind(token)
                .bind(millis(ttl))
                .execute(&inner.writer)
                .await?;
            if done.rows_affected() == 1 {
                Ok(())
            } else {
                Err(Failure::Fluxio(lease_lost(lease)))
            }
        })
        .await
    }

    async fn release_lease(&self, lease: Lease) -> Result<()> {
        let Ok(token) = i64::try_from(lease.token()) else {
            return Ok(());
        };
        let inner = &self.inner;
        self.timed("release_lease", async {
            sqlx::query(&inner.sql.release)
                .bind(lease.run_id())
                .bind(token)
                .execute(&inner.writer)
                .await?;
            Ok::<_, Failure>(())
        })
        .await
    }

    /// One statement: the upsert of [`save`](Self::save), guarded by the
    /// lease row, under SQLite's write lock.
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        let token = match i64::try_from(lease.token()) {
            Ok(token) if lease.run_id() == checkpoint.run_id => token,
            _ => return Err(lease_lost(lease)),
        };
        let payload = checkpoint.to_bytes()?;
        let inner = &self.inner;
        self.timed("save_fenced", async {
            let done = self
                .bind_save(&inner.sql.save_fenced, &checkpoint, payload)
                .bind(token)
                .execute(&inner.writer)
                .await?;
            if done.rows_affected() == 1 {
                Ok(())
            } else {
                Err(Failure::Fluxio(lease_lost(lease)))
            }
        })
        .await
    }

    /// One guarded delete, as [`save_fenced`](Self::save_fenced). When it
    /// deletes nothing, a read tells a lost lease from a missing checkpoint:
    /// a lease that is current now was current during the delete too (a
    /// lease, once expired, released or taken over, never becomes current
    /// again), so the checkpoint was simply absent.
    async fn delete_fenced(&self, run_id: &str, lease: &Lease) -> Result<()> {
        let token = match i64::try_from(lease.token()) {
            Ok(token) if lease.run_id() == run_id => token,
            _ => return Err(lease_lost(lease)),
        };
        let inner = &self.inner;
        self.timed("delete_fenced", async {
            let done = sqlx::query(&inner.sql.delete_fenced)
                .bind(run_id)
                .bind(token)
                .execute(&inner.writer)
                .await?;
            if done.rows_affected() > 0 {
                return Ok(());
            }
            let held: bool = sqlx::query_scalar(&inner.sql.lease_held)
                .bind(run_id)
                .bind(token)
                .fetch_one(&inner.reader)
                .await?;
            if held {
                Ok(())
            } else {
                Err(Failure::Fluxio(lease_lost(lease)))
            }
        })
        .await
    }
}

/// Settings of a [`SqliteStore`]; made by [`SqliteStore::builder`].
///
/// ```no_run
/// # async fn f() -> fluxio_core::Result<()> {
/// use std::time::Duration;
/// use fluxio_sqlite::{SqliteStore, Synchronous};
///
/// let store = SqliteStore::builder("/var/lib/orders/fluxio.db")
///     .table("checkpoints")
///     .completed_retention(Some(Duration::from_secs(24 * 60 * 60)))
///     .timeout(Duration::from_secs(5))
///     .busy_timeout(Duration::from_secs(2))
///     .synchronous(Synchronous::Full)
///     .max_connections(4)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStoreBuilder {
    path: PathBuf,
    table: String,
    completed_retention: Option<Duration>,
    timeout: Duration,
    busy_timeout: Duration,
    synchronous: Synchronous,
    max_connections: u32,
}

impl SqliteStoreBuilder {
    fn new(path: PathBuf) -> Self {
        SqliteStoreBuilder {
            path,
            table: DEFAULT_TABLE.to_owned(),
            completed_retention: Some(DEFAULT_COMPLETED_RETENTION),
            timeout: DEFAULT_TIMEOUT,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            synchronous: Synchronous::Full,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }

    /// The checkpoint table (default `fluxio_checkpoints`); the lease table
    /// is `<table>_leases`. Must match `^[a-z_][a-z0-9_]{0,62}$` and not
    /// start with `sqlite_`. Several stores with different tables can share
    /// a file.
    #[must_use]
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// How long a completed run's checkpoint stays visible (default 7 days);
    /// `None` keeps it forever. Running and failed runs never expire. The
    /// retention is fixed when the completed checkpoint is written.
    #[must_use]
    pub fn completed_retention(mut self, retention: Option<Duration>) -> Self {
        self.completed_retention = retention;
        self
    }

    /// The most any store call may take (default 10 s), including waiting
    /// for a pooled connection and for the write lock; past it the call
    /// fails with a [`SqliteStoreError::Timeout`]. Must be greater than zero.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long a write waits for the write lock while another connection
    /// (another process sharing the file, or a connection of your own)
    /// writes, before SQLite gives up with "database is locked" (default
    /// 5 s; SQLite's `busy_timeout`). Keep it below the
    /// [timeout](Self::timeout), so that a contended write reports SQLite's
    /// error rather than the store's timeout. At most about 24 days.
    #[must_use]
    pub fn busy_timeout(mut self, busy_timeout: Duration) -> Self {
        self.busy_timeout = busy_timeout;
        self
    }

    /// When a commit is durable (default [`Synchronous::Full`]: at every
    /// commit, so a save that returned survives a power loss).
    #[must_use]
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// How many connections the store opens at most (default 4): one writes,
    /// the others read (`load`, `exists`) in parallel with it and with each
    /// other. With 1, the one connection does both. SQLite admits one writer
    /// at a time, so more writing connections would only wait for each other.
    #[must_use]
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// Opens the store: creates the file if it is missing, switches it to
    /// write-ahead logging and applies the pending migrations (creating the
    /// tables on first use), within the [timeout](Self::timeout). Several
    /// processes may open one fresh file at the same time.
    ///
    /// # Errors
    /// [`Error::Store`]: an invalid setting
    /// ([`SqliteStoreError::InvalidSetting`], naming the setting and the
    /// value), a file that cannot be opened or created
    /// ([`SqliteStoreError::Open`]) or written
    /// ([`SqliteStoreError::NotWritable`], checked by trying a write that is
    /// rolled back), a file that cannot use WAL ([`SqliteStoreError::NotWal`]), a failed or changed migration
    /// ([`SqliteStoreError::MigrationChanged`]), a timeout.
    pub async fn connect(self) -> Result<SqliteStore> {
        let names = Names::new(&self.table).map_err(own_error)?;
        validate_path(&self.path).map_err(own_error)?;
        let invalid = |setting: &'static str, value: String, reason: &str| {
            own_error(SqliteStoreError::InvalidSetting {
                setting,
                value,
                reason: reason.to_owned(),
            })
        };
        if self.timeout.is_zero() {
            return Err(invalid(
                "timeout",
                format!("{:?}", self.timeout),
                "it must be greater than zero",
            ));
        }
        if i32::try_from(self.busy_timeout.as_millis()).is_err() {
            return Err(invalid(
                "busy_timeout",
                format!("{:?}", self.busy_timeout),
                "it must be at most i32::MAX milliseconds (about 24 days)",
            ));
        }
        if self.max_connections == 0 {
            return Err(invalid(
                "max_connections",
                "0".to_owned(),
                "it must be at least 1",
            ));
        }

        // The journal mode is not among the options: it is set once per file
        // (see `migrate::ensure_wal`), not per connection.
        let options = SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(true)
            .busy_timeout(self.busy_timeout)
            .synchronous(self.synchronous.to_sqlx())
            .foreign_keys(false);
        let pool = |max: u32, options: SqliteConnectOptions| {
            SqlitePoolOptions::new()
                .max_connections(max)
                .min_connections(0)
                .acquire_timeout(self.timeout)
                // A local file does not drop connections like a server does.
                .test_before_acquire(false)
                .connect_lazy_with(options)
        };
        let writer = pool(1, options.clone());
        let reader = if self.max_connections == 1 {
            writer.clone()
        } else {
            pool(self.max_connections - 1, options.pragma("query_only", "ON"))
        };

        let path = &self.path;
        let opening = |e: MigrateError| match e {
            MigrateError::Sql(source) => Failure::Fluxio(own_error(open_error(path, source))),
            other => Failure::Migrate(other),
        };
        let applied = timed(self.timeout, "open", async {
            migrate::ensure_wal(&writer).await.map_err(opening)?;
            let applied = migrate::run(&writer, &names).await.map_err(opening)?;
            check_writable(&writer).await.map_err(|source| {
                Failure::Fluxio(own_error(SqliteStoreError::NotWritable {
                    path: path.clone(),
                    source,
                }))
            })?;
            Ok::<_, Failure>(applied)
        })
        .await?;
        tracing::debug!(
            path = %self.path.display(),
            table = %names.table,
            applied,
            "checkpoint tables are up to date"
        );
        let sql = Sql::new(&names);
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                writer,
                reader,
                names,
                sql,
                path: self.path,
                timeout: self.timeout,
                busy_timeout: self.busy_timeout,
                synchronous: self.synchronous,
                max_connections: self.max_connections,
                completed_retention: self.completed_retention,
            }),
        })
    }
}
