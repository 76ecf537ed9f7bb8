//! [`MySqlStoreBuilder`]: the settings of a [`MySqlStore`], their defaults
//! and their validation, and the pool they make.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use fluxio_core::store::RedactedUrl;
use fluxio_core::{Error, Result};
use fluxio_sql::{Retention, ServerStore};
use sqlx::Executor as _;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

use crate::dialect::MySql;
use crate::error::{MySqlStoreError, own_error};
use crate::statements::{Names, statements};
use crate::store::{Inner, MySqlStore};

/// The default checkpoint table; the others are `<table>_steps`,
/// `<table>_leases`, `<table>_tokens` and `<table>_pipelines`.
pub const DEFAULT_TABLE: &str = "fluxio_checkpoints";
/// The default timeout of every store call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest [timeout](MySqlStoreBuilder::timeout): a year, past which
/// nothing waits.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// The default retention of completed runs' checkpoints: 7 days.
pub const DEFAULT_COMPLETED_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// The default pool size.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// A pooled connection idle for this long is pinged before it is handed
/// out (a busy pool skips the round trip; one that sat through a server
/// restart drops its dead connections).
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// Where the store's connections come from.
pub(crate) enum Source {
    /// A pool of the store's own, on this URL.
    Url(String),
    /// A pool given by the application.
    Pool(MySqlPool),
}

/// Settings of a [`MySqlStore`]; made by [`MySqlStore::builder`] or
/// [`MySqlStore::from_pool`].
///
/// ```no_run
/// # async fn f() -> fluxio_core::Result<()> {
/// use std::time::Duration;
/// use fluxio_mysql::MySqlStore;
///
/// let store = MySqlStore::builder("mysql://app:secret@db.internal/app")
///     .table("checkpoints")
///     .max_connections(20)
///     .completed_retention(Some(Duration::from_secs(24 * 60 * 60)))
///     .timeout(Duration::from_secs(5))
///     .connect()
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
pub struct MySqlStoreBuilder {
    source: Source,
    database: Option<String>,
    table: String,
    max_connections: u32,
    retention: Retention,
    timeout: Duration,
    read_only: bool,
}

impl fmt::Debug for MySqlStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = match &self.source {
            Source::Url(url) => RedactedUrl::new(url).url,
            Source::Pool(_) => "<given pool>".to_owned(),
        };
        f.debug_struct("MySqlStoreBuilder")
            .field("url", &url)
            .field("database", &self.database)
            .field("table", &self.table)
            .field("max_connections", &self.max_connections)
            .field("retention", &self.retention)
            .field("timeout", &self.timeout)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl MySqlStoreBuilder {
    pub(crate) fn new(source: Source) -> Self {
        MySqlStoreBuilder {
            source,
            database: None,
            table: DEFAULT_TABLE.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            retention: Retention {
                expire_after: Some(DEFAULT_COMPLETED_RETENTION),
                keep_completed: None,
            },
            timeout: DEFAULT_TIMEOUT,
            read_only: false,
        }
    }

    /// The database of the tables (default: the URL's, or the pool's
    /// connections'); created if missing. Must match
    /// `^[a-z_][a-z0-9_]{0,62}$` and not be a system database (`mysql`,
    /// `information_schema`, `performance_schema`, `sys`).
    #[must_use]
    pub fn database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
        self
    }

    /// The checkpoint table (default `fluxio_checkpoints`). Must match
    /// `^[a-z_][a-z0-9_]{0,62}$` and be at most 54 characters (so that
    /// `<table>_pipelines` fits in MySQL's 64).
    #[must_use]
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The pool's size (default 10). Ignored for [`MySqlStore::from_pool`].
    #[must_use]
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// How long a completed run stays visible (default 7 days); `None`
    /// keeps it until deleted. Running, failed and cancelled runs never
    /// expire; [`MySqlStore::purge_expired`] reclaims the space.
    #[must_use]
    pub fn completed_retention(mut self, retention: Option<Duration>) -> Self {
        self.retention.expire_after = retention;
        self
    }

    /// Keeps at most the `n` newest completed runs of each pipeline
    /// (default `None`: all, each until its retention passes), deleting the
    /// others in the transaction of the completing save, as
    /// [`InMemoryStore::keep_completed`](fluxio_core::store::InMemoryStore::keep_completed)
    /// does. The completions of one pipeline trim one after the other.
    #[must_use]
    pub fn keep_completed(mut self, n: Option<usize>) -> Self {
        self.retention.keep_completed = n;
        self
    }

    /// The most any store call may take (default 10 s), waiting for a
    /// pooled connection and for row locks included (the session's
    /// `innodb_lock_wait_timeout` is set to it, in whole seconds, on the
    /// store's own connections). More than zero and at most
    /// [`MAX_TIMEOUT`].
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Opens the store for reading only (default `false`): no database,
    /// table or migration is created, and nothing locked; `connect` checks
    /// that the tables exist ([`MySqlStoreError::NoTables`]) at a schema
    /// version this build reads ([`MySqlStoreError::SchemaOutdated`],
    /// [`MySqlStoreError::MigrationChanged`]). The store's own connections
    /// are read-only sessions, so every write fails with the server's
    /// error; a pool given to [`from_pool`](MySqlStore::from_pool) is used
    /// as it is.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Builds the store and applies the pending migrations (creating the
    /// database and tables on first use); [read-only](Self::read_only), it
    /// checks the tables instead.
    ///
    /// # Errors
    /// [`Error::Store`]: an invalid setting
    /// ([`MySqlStoreError::InvalidSetting`]), an invalid URL, a server
    /// that refuses or cannot be reached ([`MySqlStoreError::Connect`], at
    /// once) or does not answer within the timeout, a failed migration. No
    /// message shows the URL's password.
    pub async fn connect(self) -> Result<MySqlStore> {
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
    /// connects. Call [`MySqlStore::migrate`] before the first run unless
    /// the tables exist already.
    ///
    /// # Errors
    /// [`Error::Store`] for an invalid setting or URL;
    /// [`Error::NoRuntime`] outside a tokio runtime (for a store built from
    /// a URL: its pool needs one).
    pub fn connect_lazy(self) -> Result<MySqlStore> {
        let names = Names::new(self.database.as_deref(), &self.table).map_err(own_error)?;
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            return Err(invalid(
                "timeout",
                format!("{:?}", self.timeout),
                "it must be greater than zero and at most a year",
            ));
        }
        if self.max_connections == 0 {
            return Err(invalid(
                "max_connections",
                "0".to_owned(),
                "it must be at least 1",
            ));
        }
        let (pool, url) = match &self.source {
            Source::Pool(pool) => (pool.clone(), None),
            Source::Url(url) => {
                let (pool, redacted) = url_pool(url, &self)?;
                (pool, Some(redacted))
            }
        };
        let server = ServerStore::new(pool, statements(&names), self.timeout, self.retention, url);
        Ok(MySqlStore {
            inner: Arc::new(Inner { server, names }),
        })
    }
}

fn invalid(setting: &'static str, value: String, reason: &str) -> Error {
    own_error(MySqlStoreError::InvalidSetting {
        setting,
        value,
        reason: reason.to_owned(),
    })
}

/// A pool on `url`, connecting lazily, whose sessions read committed rows
/// (as Postgres's do: each statement of a transaction sees what committed
/// before it, which the trims and the fenced writes rely on), wait for a
/// row lock at most the timeout, and are read-only when the store is.
fn url_pool(url: &str, settings: &MySqlStoreBuilder) -> Result<(MySqlPool, RedactedUrl)> {
    // sqlx's pool starts a task: without a runtime it would panic.
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::NoRuntime {
            operation: "MySqlStoreBuilder::connect_lazy".to_owned(),
        });
    }
    let redacted = RedactedUrl::new(url);
    let options = MySqlConnectOptions::from_str(url)
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
    let pool = MySqlPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.timeout)
        .test_before_acquire(false)
        .after_connect(move |conn, _| {
            let session = session.clone();
            Box::pin(async move {
                conn.execute(sqlx::raw_sql(&session)).await?;
                Ok(())
            })
        })
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IF_IDLE_FOR {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
        .connect_lazy_with(options);
    Ok((pool, redacted))
}
