//! [`PostgresStoreBuilder`]: the settings of a [`PostgresStore`], their
//! defaults and their validation.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fluxio_core::Result;
use fluxio_core::store::RedactedUrl;
use sqlx::postgres::PgPool;

use crate::connection::url_pool;
use crate::error::{PostgresStoreError, own_error};
use crate::statements::{Names, statements};
use crate::store::{Inner, PostgresStore};
use fluxio_sql::ServerStore;

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "public";
/// The default checkpoint table; the lease table is `<table>_leases`.
pub const DEFAULT_TABLE: &str = "fluxio_checkpoints";
/// The default timeout of every store call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest [timeout](PostgresStoreBuilder::timeout): `i32::MAX`
/// milliseconds (about 24.8 days), the most PostgreSQL's
/// `statement_timeout` holds.
pub const MAX_TIMEOUT: Duration = Duration::from_millis(2_147_483_647);
/// The default retention of completed runs' checkpoints: 7 days.
pub const DEFAULT_COMPLETED_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// The default pool size.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// Where the store's connections come from.
pub(crate) enum Source {
    /// A pool of the store's own, on this URL.
    Url(String),
    /// A pool given by the application.
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
    keep_completed: Option<usize>,
    timeout: Duration,
    read_only: bool,
}

impl fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = match &self.source {
            Source::Url(url) => RedactedUrl::new(url).url,
            Source::Pool(_) => "<given pool>".to_owned(),
        };
        f.debug_struct("PostgresStoreBuilder")
            .field("url", &url)
            .field("schema", &self.schema)
            .field("table", &self.table)
            .field("max_connections", &self.max_connections)
            .field("completed_retention", &self.completed_retention)
            .field("keep_completed", &self.keep_completed)
            .field("timeout", &self.timeout)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl PostgresStoreBuilder {
    pub(crate) fn new(source: Source) -> Self {
        PostgresStoreBuilder {
            source,
            schema: DEFAULT_SCHEMA.to_owned(),
            table: DEFAULT_TABLE.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            completed_retention: Some(DEFAULT_COMPLETED_RETENTION),
            keep_completed: None,
            timeout: DEFAULT_TIMEOUT,
            read_only: false,
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
    /// `None` keeps it forever. Running, failed and cancelled runs never expire. The
    /// retention is fixed when the completed checkpoint is written.
    #[must_use]
    pub fn completed_retention(mut self, retention: Option<Duration>) -> Self {
        self.completed_retention = retention;
        self
    }

    /// Keeps at most the `n` newest completed runs of each pipeline
    /// (default `None`: all of them, each until its
    /// [`completed_retention`](Self::completed_retention) passes). When a
    /// run completes (a save, fenced or not, of a
    /// [`RunStatus::Completed`](fluxio_core::store::RunStatus::Completed)
    /// checkpoint), the completed runs of its pipeline but the `n` newest
    /// (by when they completed, on the database's clock) are deleted, each
    /// whole (its row and its journal), in the transaction of that save.
    /// The pipeline of a run is the part of its key before the first `/`
    /// (empty for a bare run id), as in
    /// [`InMemoryStore::keep_completed`](fluxio_core::store::InMemoryStore::keep_completed).
    /// Running, failed and cancelled runs are never deleted by it. `Some(0)`
    /// deletes each run as it completes.
    #[must_use]
    pub fn keep_completed(mut self, n: Option<usize>) -> Self {
        self.keep_completed = n;
        self
    }

    /// The most any store call may take (default 10 s), including waiting
    /// for a pooled connection: the pool's acquire timeout, the server's
    /// `statement_timeout` (set per connection, unless the pool was given),
    /// and a client-side deadline on the whole call. More than zero and at
    /// most [`MAX_TIMEOUT`] (the longest `statement_timeout` the server
    /// takes); `connect` refuses anything else naming `timeout`.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Opens the store for reading only (default `false`): for tools that
    /// look at a store (such as the `fluxio` command's `runs list`) and must
    /// change nothing, in any database they are pointed at.
    ///
    /// A read-only [`connect`](Self::connect) creates no schema or table and
    /// applies no migration, and takes no lock: it checks that the schema
    /// holds the store's tables
    /// ([`PostgresStoreError::NoTables`] when it, or they, do not exist) at a
    /// schema version this build reads: every migration this build knows
    /// applied, unchanged ([`PostgresStoreError::SchemaOutdated`] for a
    /// missing one, [`PostgresStoreError::MigrationChanged`] for a changed
    /// one). A schema with migrations newer than this build is read
    /// (migrations only add). The store's own connections (from a URL) are
    /// read-only sessions (`default_transaction_read_only`), so every write
    /// fails with the server's error; a pool given to
    /// [`from_pool`](PostgresStore::from_pool) is used as it is.
    ///
    /// ```no_run
    /// # async fn f() -> fluxio_core::Result<()> {
    /// use fluxio_core::CheckpointStore as _;
    /// use fluxio_core::store::RunFilter;
    /// use fluxio_postgres::PostgresStore;
    ///
    /// let store = PostgresStore::builder("postgres://app:secret@db.internal/app")
    ///     .schema("orders")
    ///     .read_only(true)
    ///     .connect()
    ///     .await?;
    /// let page = store.list_runs(&RunFilter::new()).await?;
    /// # let _ = page; Ok(()) }
    /// ```
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Builds the store and applies the pending migrations (creating the
    /// schema and tables on first use); [read-only](Self::read_only), it
    /// checks the tables instead.
    ///
    /// # Errors
    /// [`Error::Store`](fluxio_core::Error::Store): an invalid setting
    /// ([`PostgresStoreError::InvalidSetting`], naming the setting and the
    /// value), an invalid URL, a server that refuses or cannot be reached
    /// ([`PostgresStoreError::Connect`], at once, with the I/O error as its
    /// source) or does not answer within the timeout, a failed migration.
    /// No message shows the URL's password.
    pub async fn connect(self) -> Result<PostgresStore> {
        let read_only = self.read_only;
        let store = self.connect_lazy()?;
        store.server().first_connection().await?;
        if read_only {
            store.check_readable().await?;
        } else {
            store.migrate().await?;
        }
        Ok(store)
    }

    /// Builds the store without connecting or migrating: the first call
    /// connects. For services that start before their database; call
    /// [`PostgresStore::migrate`] before the first run unless the tables
    /// exist already.
    ///
    /// # Errors
    /// [`Error::Store`](fluxio_core::Error::Store) for an invalid setting or
    /// URL; [`Error::NoRuntime`](fluxio_core::Error::NoRuntime) when called
    /// outside a tokio runtime (for a store built from a URL: its pool needs
    /// one).
    pub fn connect_lazy(self) -> Result<PostgresStore> {
        let names = Names::new(&self.schema, &self.table).map_err(own_error)?;
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            return Err(own_error(PostgresStoreError::InvalidSetting {
                setting: "timeout",
                value: format!("{:?}", self.timeout),
                reason: "it must be greater than zero and at most i32::MAX milliseconds \
                         (about 24 days: the server's statement_timeout)"
                    .to_owned(),
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
                let (pool, redacted) = url_pool(&url, self.max_connections, self.timeout)?;
                if self.read_only {
                    let options = (*pool.connect_options())
                        .clone()
                        .options([("default_transaction_read_only", "on")]);
                    pool.set_connect_options(options);
                }
                (pool, Some(redacted))
            }
        };
        let retention = fluxio_sql::Retention {
            expire_after: self.completed_retention,
            keep_completed: self.keep_completed,
        };
        let server = ServerStore::new(pool, statements(&names), self.timeout, retention, url);
        Ok(PostgresStore {
            inner: Arc::new(Inner { server, names }),
        })
    }
}
