//! [`PostgresStore`] and its builder.

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use fluxio_core::store::{Checkpoint, CheckpointStore, Lease, RunStatus, check_lease_ttl};
use fluxio_core::{Error, Result};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection as _, Postgres};

use crate::error::{PostgresStoreError, is_connection_error, sql_kind};
use crate::migrate::{self, MigrateError};
use crate::names::{Names, Sql};
use crate::redact::Redacted;

/// The `backend` of every [`Error::Store`] this crate returns.
pub const BACKEND: &str = "postgres";

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "public";
/// The default checkpoint table; the lease table is `<table>_leases`.
pub const DEFAULT_TABLE: &str = "fluxio_checkpoints";
/// The default timeout of every store call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default retention of completed runs' checkpoints: 7 days.
pub const DEFAULT_COMPLETED_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// The default pool size.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// A pooled connection idle for this long is pinged before it is handed out
/// (a busy pool skips the extra round trip; a pool that sat through a server
/// restart still drops its dead connections). A connection that died less
/// than this after its last use fails its next statement, which
/// [`Retry`] covers.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// How a call survives a pooled connection that died (terminated by an
/// administrator, a server restart, a reset) since its last use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// For statements that may run twice (idempotent, or checking the
    /// lease's token): on a pooled connection, as fast as it comes; after a
    /// [connection failure](is_connection_error) once more, on a
    /// [checked](PostgresStore::checked_connection) connection.
    Once,
    /// For statements whose repeat would answer differently (acquire: the
    /// second attempt would find the first one's lease; purge: its count):
    /// only on a [checked](PostgresStore::checked_connection) connection, so
    /// a dead one is found before the statement is sent, and never twice.
    Never,
}

fn own_error(e: PostgresStoreError) -> Error {
    Error::store_with_kind(BACKEND, e.kind(), e)
}

/// `e` as the source of an [`Error::Store`] of `e`'s kind, or, when its
/// message quotes the password of `url` (a server quoting a database name
/// that is really a misplaced user info), a
/// [`PostgresStoreError::Scrubbed`] in its place.
fn scrubbed_sql_error(url: Option<&Redacted>, e: sqlx::Error) -> Error {
    Error::store_with_kind(BACKEND, sql_kind(&e), scrubbed(url, e))
}

fn scrubbed(url: Option<&Redacted>, e: sqlx::Error) -> Box<dyn std::error::Error + Send + Sync> {
    match url {
        Some(url) if url.leaks(&format!("{e} {e:?}")) => Box::new(PostgresStoreError::Scrubbed {
            message: url.scrub(&e.to_string()),
        }),
        _ => Box::new(e),
    }
}

impl Inner {
    /// The URL as messages show it.
    fn shown_url(&self) -> &str {
        self.url.as_ref().map_or("<given pool>", |u| u.url.as_str())
    }
}

/// A [`CheckpointStore`] in PostgreSQL, on a sqlx [`PgPool`].
///
/// Cloning is cheap (one `Arc`) and the clones share the pool. See the
/// [crate documentation](crate) for the schema, the lease protocol, retention
/// and the guarantees.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    names: Names,
    sql: Sql,
    timeout: Duration,
    completed_retention: Option<Duration>,
    /// The URL with its password replaced by `***`; `None` for a given pool.
    url: Option<Redacted>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("PostgresStore")
            .field("url", &inner.shown_url())
            .field("schema", &inner.names.schema)
            .field("table", &inner.names.table)
            .field("timeout", &inner.timeout)
            .field("completed_retention", &inner.completed_retention)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`) with
    /// the default settings and applies the pending migrations.
    ///
    /// # Errors
    /// [`Error::Store`] when the URL is invalid, the server cannot be
    /// reached within the [timeout](PostgresStoreBuilder::timeout), or a
    /// migration fails.
    pub async fn connect(url: &str) -> Result<PostgresStore> {
        Self::builder(url).connect().await
    }

    /// A builder connecting to `url`.
    pub fn builder(url: impl Into<String>) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(Source::Url(url.into()))
    }

    /// A builder on an existing pool: the pool's own size and connect
    /// options are kept ([`max_connections`](PostgresStoreBuilder::max_connections)
    /// is ignored and no server-side `statement_timeout` is set; the
    /// client-side [timeout](PostgresStoreBuilder::timeout) still bounds
    /// every call). Finish it with [`connect`](PostgresStoreBuilder::connect)
    /// (which migrates) or [`connect_lazy`](PostgresStoreBuilder::connect_lazy).
    pub fn from_pool(pool: PgPool) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(Source::Pool(pool))
    }

    /// The pool this store runs on.
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The schema of the tables.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.inner.names.schema
    }

    /// The checkpoint table (the lease table is `<table>_leases`).
    #[must_use]
    pub fn table(&self) -> &str {
        &self.inner.names.table
    }

    /// Creates the schema if needed and applies the pending migrations.
    /// [`connect`](PostgresStoreBuilder::connect) does this already;
    /// stores made with [`connect_lazy`](PostgresStoreBuilder::connect_lazy)
    /// call it themselves. Idempotent and safe to run from many processes at
    /// once (they queue on an advisory lock per schema).
    ///
    /// # Errors
    /// [`Error::Store`] with the sqlx error, a
    /// [`PostgresStoreError::MigrationChanged`] or a timeout.
    pub async fn migrate(&self) -> Result<()> {
        let inner = &self.inner;
        // One transaction, which a retry repeats only if it did not commit, or
        // finds done.
        let applied = self
            .call("migrate", Retry::Once, |mut conn| async move {
                Ok::<_, Failure>(migrate::run(&mut conn, &inner.names).await?)
            })
            .await?;
        tracing::debug!(
            url = inner.shown_url(),
            schema = %inner.names.schema,
            table = %inner.names.table,
            applied,
            "checkpoint tables are up to date"
        );
        Ok(())
    }

    /// Opens one connection outside the pool and closes it: a server that
    /// refuses or cannot be reached is reported at once, with its I/O error,
    /// rather than as the pool's timeout after retrying for the whole
    /// [timeout](PostgresStoreBuilder::timeout). Only for stores built from
    /// a URL.
    async fn first_connection(&self) -> Result<()> {
        let inner = &self.inner;
        let Some(url) = &inner.url else {
            return Ok(());
        };
        let options = inner.pool.connect_options();
        match tokio::time::timeout(inner.timeout, PgConnection::connect_with(&options)).await {
            Ok(Ok(conn)) => {
                if let Err(e) = conn.close().await {
                    tracing::debug!(error = %e, "closing the first connection failed");
                }
                Ok(())
            }
            Ok(Err(e)) => Err(own_error(PostgresStoreError::Connect {
                url: url.url.clone(),
                source: scrubbed(Some(url), e),
            })),
            Err(_elapsed) => Err(own_error(PostgresStoreError::Timeout {
                operation: "connect",
                timeout: inner.timeout,
            })),
        }
    }

    /// Deletes the checkpoints of completed runs whose retention has passed
    /// (see [`completed_retention`](PostgresStoreBuilder::completed_retention))
    /// and returns how many it deleted. It also deletes lease rows that are
    /// released or expired (not counted): fencing tokens come from a
    /// sequence, so a run id acquired again still gets a greater token.
    ///
    /// Expired checkpoints are already invisible to `load` and `exists`;
    /// purging only reclaims the space. Call it periodically (say hourly)
    /// from one worker; concurrent calls are harmless.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn purge_expired(&self) -> Result<u64> {
        let inner = &self.inner;
        // Never twice: a repeat would count only what the first one left.
        self.call("purge_expired", Retry::Never, |mut conn| async move {
            let done = sqlx::query(&inner.sql.purge).execute(&mut *conn).await?;
            Ok::<_, Failure>(done.rows_affected())
        })
        .await
    }

    /// Runs `attempt` on a pooled connection within the store's timeout,
    /// retried as `retry` says.
    async fn call<T, F, Fut>(
        &self,
        operation: &'static str,
        retry: Retry,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut(PoolConnection<Postgres>) -> Fut,
        Fut: Future<Output = std::result::Result<T, Failure>>,
    {
        self.timed(operation, async {
            let conn = match retry {
                Retry::Once => self.inner.pool.acquire().await?,
                Retry::Never => self.checked_connection(operation).await?,
            };
            match attempt(conn).await {
                Err(e) if retry == Retry::Once && e.is_connection_error() => {
                    tracing::debug!(
                        operation,
                        error = %e,
                        "the connection failed; running the statement again on a checked one"
                    );
                    let conn = self.checked_connection(operation).await?;
                    attempt(conn).await
                }
                result => result,
            }
        })
        .await
    }

    /// A pooled connection that answered a ping (a `Sync` message: one round
    /// trip, no statement). One that does not is closed and the next one
    /// tried: each failure takes a dead connection out of the pool, after
    /// which the pool opens new ones; after `max_connections + 1` failures,
    /// the last error. A failure here proves that no statement was sent.
    async fn checked_connection(
        &self,
        operation: &'static str,
    ) -> std::result::Result<PoolConnection<Postgres>, Failure> {
        let pool = &self.inner.pool;
        let tries = pool.options().get_max_connections().saturating_add(1);
        let mut failed = 0;
        loop {
            let mut conn = pool.acquire().await?;
            match conn.ping().await {
                Ok(()) => return Ok(conn),
                Err(e) => {
                    // Closed at once, without a goodbye to a dead server; its
                    // pool slot is free for a new connection.
                    drop(conn.detach());
                    failed += 1;
                    if failed >= tries {
                        return Err(e.into());
                    }
                    tracing::debug!(operation, error = %e, "dropped a dead pooled connection");
                }
            }
        }
    }

    /// Runs `fut` within the store's timeout.
    async fn timed<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = std::result::Result<T, Failure>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.inner.timeout, fut).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(match e {
                Failure::Sql(e) | Failure::Migrate(MigrateError::Sql(e)) => {
                    scrubbed_sql_error(self.inner.url.as_ref(), e)
                }
                Failure::Migrate(MigrateError::Store(e)) => own_error(e),
                Failure::Fluxio(e) => e,
            }),
            Err(_elapsed) => Err(own_error(PostgresStoreError::Timeout {
                operation,
                timeout: self.inner.timeout,
            })),
        }
    }

    /// Binds the `$1..$9` of a save.
    fn bind_save<'q>(
        &self,
        sql: &'q str,
        checkpoint: &'q Checkpoint,
        payload: &'q [u8],
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let retention = match checkpoint.status {
            RunStatus::Completed => self.inner.completed_retention.map(|d| d.as_secs_f64()),
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
            // milliseconds up to 2^53 are exact in an f64
            .bind(checkpoint.created_at_ms as f64 / 1000.0)
            .bind(retention)
    }
}

/// What the body of a store call fails with; [`PostgresStore::timed`] maps
/// it to fluxio's [`Error`].
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

impl Failure {
    fn is_connection_error(&self) -> bool {
        match self {
            Failure::Sql(e) | Failure::Migrate(MigrateError::Sql(e)) => is_connection_error(e),
            Failure::Migrate(MigrateError::Store(_)) | Failure::Fluxio(_) => false,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Sql(e) | Failure::Migrate(MigrateError::Sql(e)) => e.fmt(f),
            Failure::Migrate(MigrateError::Store(e)) => e.fmt(f),
            Failure::Fluxio(e) => e.fmt(f),
        }
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

/// A time-to-live in seconds, as the database's intervals take it.
fn ttl_secs(ttl: Duration) -> f64 {
    ttl.as_secs_f64()
}

#[async_trait::async_trait]
impl CheckpointStore for PostgresStore {
    /// One upsert.
    async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
        fluxio_core::store::check_run_id(&checkpoint.run_id)?;
        let payload = checkpoint.to_bytes()?;
        let (inner, checkpoint, payload) = (&self.inner, &checkpoint, &payload[..]);
        self.call("save", Retry::Once, |mut conn| async move {
            self.bind_save(&inner.sql.save, checkpoint, payload)
                .execute(&mut *conn)
                .await?;
            Ok::<_, Failure>(())
        })
        .await
    }

    /// Expired rows (completed runs past their retention) read as absent.
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        fluxio_core::store::check_run_id(run_id)?;
        let inner = &self.inner;
        self.call("load", Retry::Once, |mut conn| async move {
            let payload: Option<Vec<u8>> = sqlx::query_scalar(&inner.sql.load)
                .bind(run_id)
                .fetch_optional(&mut *conn)
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
        self.call("delete", Retry::Once, |mut conn| async move {
            sqlx::query(&inner.sql.delete)
                .bind(run_id)
                .execute(&mut *conn)
                .await?;
            Ok::<_, Failure>(())
        })
        .await
    }

    /// Expired rows read as absent.
    async fn exists(&self, run_id: &str) -> Result<bool> {
        fluxio_core::store::check_run_id(run_id)?;
        let inner = &self.inner;
        self.call("exists", Retry::Once, |mut conn| async move {
            let exists: bool = sqlx::query_scalar(&inner.sql.exists)
                .bind(run_id)
                .fetch_one(&mut *conn)
                .await?;
            Ok::<_, Failure>(exists)
        })
        .await
    }

    /// One conditional upsert of the lease row (database clock), on a
    /// connection pinged first, and never sent twice: a second attempt after
    /// a first that committed would find that lease and report `RunIdInUse`.
    async fn acquire_lease(&self, run_id: &str, ttl: Duration) -> Result<Lease> {
        fluxio_core::store::check_run_id(run_id)?;
        check_lease_ttl(ttl)?;
        let inner = &self.inner;
        self.call("acquire_lease", Retry::Never, |mut conn| async move {
            let token: Option<i64> = sqlx::query_scalar(&inner.sql.acquire)
                .bind(run_id)
                .bind(ttl_secs(ttl))
                .fetch_optional(&mut *conn)
                .await?;
            match token.map(u64::try_from) {
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
        self.call("renew_lease", Retry::Once, |mut conn| async move {
            let done = sqlx::query(&inner.sql.renew)
                .bind(lease.run_id())
                .bind(token)
                .bind(ttl_secs(ttl))
                .execute(&mut *conn)
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
        let lease = &lease;
        self.call("release_lease", Retry::Once, |mut conn| async move {
            sqlx::query(&inner.sql.release)
                .bind(lease.run_id())
                .bind(token)
                .execute(&mut *conn)
                .await?;
            Ok::<_, Failure>(())
        })
        .await
    }

    /// One statement: the upsert of [`save`](Self::save), guarded by the
    /// share-locked lease row.
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        let token = match i64::try_from(lease.token()) {
            Ok(token) if lease.run_id() == checkpoint.run_id => token,
            _ => return Err(lease_lost(lease)),
        };
        let payload = checkpoint.to_bytes()?;
        let (inner, checkpoint, payload) = (&self.inner, &checkpoint, &payload[..]);
        self.call("save_fenced", Retry::Once, |mut conn| async move {
            let done = self
                .bind_save(&inner.sql.save_fenced, checkpoint, payload)
                .bind(token)
                .execute(&mut *conn)
                .await?;
            if done.rows_affected() == 1 {
                Ok(())
            } else {
                Err(Failure::Fluxio(lease_lost(lease)))
            }
        })
        .await
    }

    /// One statement, as [`save_fenced`](Self::save_fenced).
    async fn delete_fenced(&self, run_id: &str, lease: &Lease) -> Result<()> {
        let token = match i64::try_from(lease.token()) {
            Ok(token) if lease.run_id() == run_id => token,
            _ => return Err(lease_lost(lease)),
        };
        let inner = &self.inner;
        self.call("delete_fenced", Retry::Once, |mut conn| async move {
            let held: bool = sqlx::query_scalar(&inner.sql.delete_fenced)
                .bind(run_id)
                .bind(token)
                .fetch_one(&mut *conn)
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

enum Source {
    Url(String),
    Pool(PgPool),
}

/// Settings of a [`PostgresStore`]; made by [`PostgresStore::builder`] or
/// [`PostgresStore::from_pool`].
///
/// ```no_run
/// # async fn f() -> fluxio_core::Result<()> {
/// use std::time::Duration;
/// use fluxio_postgres::PostgresStore;
///
/// let store = PostgresStore::builder("postgres://app:secret@db.internal/app")
///     .schema("orders")
///     .table("checkpoints")
///     .max_connections(20)
///     .completed_retention(Some(Duration::from_secs(24 * 60 * 60)))
///     .timeout(Duration::from_secs(5))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
pub struct PostgresStoreBuilder {
    source: Source,
    schema: String,
    table: String,
    max_connections: u32,
    completed_retention: Option<Duration>,
    timeout: Duration,
}

impl fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = match &self.source {
            Source::Url(url) => Redacted::new(url).url,
            Source::Pool(_) => "<given pool>".to_owned(),
        };
        f.debug_struct("PostgresStoreBuilder")
            .field("url", &url)
            .field("schema", &self.schema)
            .field("table", &self.table)
            .field("max_connections", &self.max_connections)
            .field("completed_retention", &self.completed_retention)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl PostgresStoreBuilder {
    fn new(source: Source) -> Self {
        PostgresStoreBuilder {
            source,
            schema: DEFAULT_SCHEMA.to_owned(),
            table: DEFAULT_TABLE.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            completed_retention: Some(DEFAULT_COMPLETED_RETENTION),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The schema of the tables (default `public`); created if missing.
    /// Must match `^[a-z_][a-z0-9_]{0,62}$`, and not be a system schema of
    /// PostgreSQL (`information_schema`, `pg_*`).
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The checkpoint table (default `fluxio_checkpoints`); the lease table
    /// is `<table>_leases`. Must match `^[a-z_][a-z0-9_]{0,62}$` and be at
    /// most 56 characters (so the lease table's name fits too).
    #[must_use]
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The pool's size (default 10). Ignored for [`PostgresStore::from_pool`].
    #[must_use]
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
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
    /// for a pooled connection: the pool's acquire timeout, the server's
    /// `statement_timeout` (set per connection, unless the pool was given),
    /// and a client-side deadline on the whole call.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Builds the store and applies the pending migrations (creating the
    /// schema and tables on first use).
    ///
    /// # Errors
    /// [`Error::Store`]: an invalid setting
    /// ([`PostgresStoreError::InvalidSetting`], naming the setting and the
    /// value), an invalid URL, a server that refuses or cannot be reached
    /// ([`PostgresStoreError::Connect`], at once, with the I/O error as its
    /// source) or does not answer within the timeout, a failed migration.
    /// No message shows the URL's password.
    pub async fn connect(self) -> Result<PostgresStore> {
        let store = self.connect_lazy()?;
        store.first_connection().await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Builds the store without connecting or migrating: the first call
    /// connects. For services that start before their database; call
    /// [`PostgresStore::migrate`] before the first run unless the tables
    /// exist already.
    ///
    /// # Errors
    /// [`Error::Store`] for an invalid setting or URL;
    /// [`Error::NoRuntime`] when called outside a tokio runtime (for a store
    /// built from a URL: its pool needs one).
    pub fn connect_lazy(self) -> Result<PostgresStore> {
        let names = Names::new(&self.schema, &self.table).map_err(own_error)?;
        if self.timeout.is_zero() {
            return Err(own_error(PostgresStoreError::InvalidSetting {
                setting: "timeout",
                value: format!("{:?}", self.timeout),
                reason: "it must be greater than zero".to_owned(),
            }));
        }
        if self.max_connections == 0 {
            return Err(own_error(PostgresStoreError::InvalidSetting {
                setting: "max_connections",
                value: "0".to_owned(),
                reason: "it must be at least 1".to_owned(),
            }));
        }
        let (pool, url) = match self.source {
            Source::Pool(pool) => (pool, None),
            Source::Url(url) => {
                // sqlx's pool starts a task: without a runtime it would panic.
                if tokio::runtime::Handle::try_current().is_err() {
                    return Err(Error::NoRuntime {
                        operation: "PostgresStoreBuilder::connect_lazy".to_owned(),
                    });
                }
                let redacted = Redacted::new(&url);
                let options = PgConnectOptions::from_str(&url)
                    .map_err(|e| scrubbed_sql_error(Some(&redacted), e))?
                    // The server gives up on a statement when the client does.
                    .options([("statement_timeout", self.timeout.as_millis().max(1))]);
                let pool = PgPoolOptions::new()
                    .max_connections(self.max_connections)
                    .acquire_timeout(self.timeout)
                    .test_before_acquire(false)
                    .before_acquire(|conn, meta| {
                        Box::pin(async move {
                            if meta.idle_for >= PING_IF_IDLE_FOR {
                                sqlx::Connection::ping(conn).await?;
                            }
                            Ok(true)
                        })
                    })
                    .connect_lazy_with(options);
                (pool, Some(redacted))
            }
        };
        let sql = Sql::new(&names);
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                pool,
                names,
                sql,
                timeout: self.timeout,
                completed_retention: self.completed_retention,
                url,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    /// A server error with a SQLSTATE.
    #[derive(Debug)]
    struct Sqlstate(&'static str);

    impl fmt::Display for Sqlstate {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "SQLSTATE {}", self.0)
        }
    }

    impl std::error::Error for Sqlstate {}

    impl sqlx::error::DatabaseError for Sqlstate {
        fn message(&self) -> &str {
            self.0
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn db(code: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(Sqlstate(code)))
    }

    #[test]
    fn connection_errors_are_told_from_statement_errors() {
        for code in ["57P01", "57P02", "57P03", "08000", "08006", "08P01"] {
            assert!(is_connection_error(&db(code)), "{code}");
        }
        // query_canceled (statement_timeout), serialization, unique violation
        for code in ["57014", "40001", "23505", "42P01"] {
            assert!(!is_connection_error(&db(code)), "{code}");
        }
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(is_connection_error(&sqlx::Error::Io(io)));
        assert!(!is_connection_error(&sqlx::Error::PoolTimedOut));
        assert!(!is_connection_error(&sqlx::Error::PoolClosed));
        assert!(!is_connection_error(&sqlx::Error::RowNotFound));
        let failure = Failure::Migrate(MigrateError::Sql(db("57P01")));
        assert!(failure.is_connection_error());
        assert!(!Failure::Fluxio(Error::RunIdInUse { run_id: "r".into() }).is_connection_error());
    }
}
