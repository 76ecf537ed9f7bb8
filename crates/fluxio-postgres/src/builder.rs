//! [`PostgresStoreBuilder`]: the settings of a [`PostgresStore`], their
//! defaults and their validation.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fluxio_core::Result;

use crate::connection::url_pool;
use crate::error::own_error;
use crate::statements::{Names, statements};
use crate::store::{Inner, PostgresStore};
use fluxio_sql::ServerStore;

pub use fluxio_sql::{DEFAULT_COMPLETED_RETENTION, DEFAULT_TABLE, DEFAULT_TIMEOUT};

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "public";
/// The longest [timeout](PostgresStoreBuilder::timeout): `i32::MAX`
/// milliseconds (about 24.8 days), the most PostgreSQL's
/// `statement_timeout` holds.
pub const MAX_TIMEOUT: Duration = Duration::from_millis(2_147_483_647);
/// The default pool size.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// Where the store's connections come from.
pub(crate) type Source = fluxio_sql::Source<sqlx::Postgres>;

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
#[derive(Clone)]
pub struct PostgresStoreBuilder {
    source: Source,
    schema: String,
    pub(crate) settings: fluxio_sql::Settings,
}

impl fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStoreBuilder")
            .field("url", &self.source)
            .field("schema", &self.schema)
            .field("settings", &self.settings)
            .finish()
    }
}

impl PostgresStoreBuilder {
    pub(crate) fn new(source: Source) -> Self {
        PostgresStoreBuilder {
            source,
            schema: DEFAULT_SCHEMA.to_owned(),
            settings: fluxio_sql::Settings::new(DEFAULT_MAX_CONNECTIONS),
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

    fluxio_sql::settings_setters! {
        /// The checkpoint table (default `fluxio_checkpoints`); the lease table
        /// is `<table>_leases`. Must match `^[a-z_][a-z0-9_]{0,62}$` and be at
        /// most 56 characters (so the lease table's name fits too).
        table,
        /// The pool's size (default 10). Ignored for [`PostgresStore::from_pool`].
        max_connections,
        /// The most any store call may take (default 10 s), including waiting
        /// for a pooled connection: the pool's acquire timeout, the server's
        /// `statement_timeout` (set per connection, unless the pool was given),
        /// and a client-side deadline on the whole call. More than zero and at
        /// most [`MAX_TIMEOUT`] (the longest `statement_timeout` the server
        /// takes); `connect` refuses anything else naming `timeout`.
        timeout,
        /// Opens the store for reading only (default `false`): for tools that
        /// look at a store (such as the `fluxio` command's `runs list`) and must
        /// change nothing, in any database they are pointed at.
        ///
        /// A read-only [`connect`](Self::connect) creates no schema or table and
        /// applies no migration, and takes no lock: it checks that the schema
        /// holds the store's tables
        /// ([`PostgresStoreError::NoTables`](crate::PostgresStoreError::NoTables) when it, or they, do not exist) at a
        /// schema version this build reads: every migration this build knows
        /// applied, unchanged ([`PostgresStoreError::SchemaOutdated`](crate::PostgresStoreError::SchemaOutdated) for a
        /// missing one, [`PostgresStoreError::MigrationChanged`](crate::PostgresStoreError::MigrationChanged) for a changed
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
        read_only,
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
        let names = Names::new(&self.schema, &self.settings.table).map_err(own_error)?;
        let why = "i32::MAX milliseconds (about 24 days: the server's statement_timeout)";
        let sql = statements(&names);
        let server = ServerStore::build(
            self.source,
            self.settings,
            (MAX_TIMEOUT, why),
            sql,
            url_pool,
        )?;
        Ok(PostgresStore {
            inner: Arc::new(Inner { server, names }),
        })
    }
}
