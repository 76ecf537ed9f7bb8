//! [`MySqlStoreBuilder`]: the settings of a [`MySqlStore`], their defaults
//! and their validation, and the pool they make.

use std::str::FromStr;
use std::time::Duration;

use fluxio_core::Result;
use fluxio_core::store::RedactedUrl;
use fluxio_sql::Settings;
use sqlx::Executor as _;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool};

use crate::dialect::MySql;
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

/// A pool on `url`, connecting lazily, whose sessions read committed rows
/// (as Postgres's do: each statement of a transaction sees what committed
/// before it, which the trims and the fenced writes rely on), wait for a
/// row lock at most the timeout, and are read-only when the store is.
pub(crate) fn url_pool(url: &str, settings: &Settings) -> Result<(MySqlPool, RedactedUrl)> {
    let options =
        fluxio_sql::pool_options::<sqlx::MySql>(settings, "MySqlStoreBuilder::connect_lazy")?;
    let redacted = RedactedUrl::new(url);
    let connect = MySqlConnectOptions::from_str(url)
        .map_err(|e| fluxio_sql::server::url_error::<MySql>(&redacted, e))?;
    let lock_wait = settings.timeout.as_secs().max(1);
    let access = if settings.read_only {
        "READ ONLY"
    } else {
        "READ WRITE"
    };
    let session = format!(
        "SET SESSION innodb_lock_wait_timeout = {lock_wait}; \
         SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED, {access}"
    );
    let pool = options
        .after_connect(move |conn: &mut sqlx::MySqlConnection, _| {
            let session = session.clone();
            Box::pin(async move {
                conn.execute(sqlx::raw_sql(&session)).await?;
                Ok(())
            })
        })
        .connect_lazy_with(connect);
    Ok((pool, redacted))
}
