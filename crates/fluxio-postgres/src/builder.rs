//! [`PostgresStoreBuilder`]: the settings of a [`PostgresStore`], their
//! defaults and their validation.

use std::time::Duration;

use crate::store::PostgresStoreBuilder;

pub use fluxio_sql::{DEFAULT_COMPLETED_RETENTION, DEFAULT_TABLE, DEFAULT_TIMEOUT};

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "public";
/// The longest [timeout](PostgresStoreBuilder::timeout): `i32::MAX`
/// milliseconds (about 24.8 days), the most PostgreSQL's
/// `statement_timeout` holds.
pub const MAX_TIMEOUT: Duration = Duration::from_millis(2_147_483_647);
/// The default pool size.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

impl PostgresStoreBuilder {
    fluxio_sql::settings_setters! {
        /// The schema of the tables (default `public`); created if missing.
        /// Must match `^[a-z_][a-z0-9_]{0,62}$`, and not be a system schema of
        /// PostgreSQL (`information_schema`, `pg_*`).
        schema,
        /// The checkpoint table (default `fluxio_checkpoints`); the others are
        /// `<table>_steps`, `<table>_leases` and `<table>_signals`. Must match
        /// `^[a-z_][a-z0-9_]{0,62}$` and be at most 55 characters (so the
        /// mailbox table's name fits in 63 too).
        table,
        /// The pool's size (default 10). Ignored for [`PostgresStore::from_pool`](crate::PostgresStore::from_pool).
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
        /// [`from_pool`](crate::PostgresStore::from_pool) is used as it is.
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
}
