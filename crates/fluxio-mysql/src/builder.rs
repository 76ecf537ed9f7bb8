//! [`MySqlStoreBuilder`]: the settings of a [`MySqlStore`], their defaults
//! and their validation, and the pool they make.

use std::time::Duration;

use crate::store::MySqlStoreBuilder;

pub use fluxio_sql::{DEFAULT_COMPLETED_RETENTION, DEFAULT_TABLE, DEFAULT_TIMEOUT};

/// The longest [timeout](MySqlStoreBuilder::timeout): a year, past which
/// nothing waits.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// The default pool size.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

impl MySqlStoreBuilder {
    fluxio_sql::settings_setters! {
        /// The database of the tables (default: the URL's, or the pool's
        /// connections'); created if missing. Must match
        /// `^[a-z_][a-z0-9_]{0,62}$` and not be a system database (`mysql`,
        /// `information_schema`, `performance_schema`, `sys`).
        database,
        /// The checkpoint table (default `fluxio_checkpoints`). Must match
        /// `^[a-z_][a-z0-9_]{0,62}$` and be at most 54 characters (so that
        /// `<table>_pipelines` fits in MySQL's 64).
        table,
        /// The pool's size (default 10). Ignored for [`MySqlStore::from_pool`](crate::MySqlStore::from_pool).
        max_connections,
        /// The most any store call may take (default 10 s), waiting for a
        /// pooled connection and for row locks included (the session's
        /// `innodb_lock_wait_timeout` is set to it, in whole seconds, on the
        /// store's own connections). More than zero and at most
        /// [`MAX_TIMEOUT`].
        timeout,
        /// Opens the store for reading only (default `false`): no database,
        /// table or migration is created, and nothing locked; `connect` checks
        /// that the tables exist ([`MySqlStoreError::NoTables`](crate::MySqlStoreError::NoTables)) at a schema
        /// version this build reads ([`MySqlStoreError::SchemaOutdated`](crate::MySqlStoreError::SchemaOutdated),
        /// [`MySqlStoreError::MigrationChanged`](crate::MySqlStoreError::MigrationChanged)). The store's own connections
        /// are read-only sessions, so every write fails with the server's
        /// error; a pool given to [`from_pool`](crate::MySqlStore::from_pool) is used
        /// as it is.
        read_only,
    }
}
