//! The settings every SQL store's builder has ([`Settings`]), their
//! defaults, their validation, the setters that set them
//! ([`settings_setters!`](crate::settings_setters)), and the pool options
//! they make ([`pool_options`]).

use std::time::Duration;

use fluxio_core::store::RedactedUrl;
use fluxio_core::{Error, Result};
use sqlx::pool::PoolOptions;
use sqlx::{Database, Pool};

use crate::Retention;

/// The default checkpoint table of every SQL store.
pub const DEFAULT_TABLE: &str = "fluxio_checkpoints";
/// The default timeout of every store call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default retention of completed runs' checkpoints: 7 days.
pub const DEFAULT_COMPLETED_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// A pooled connection idle for this long is pinged before it is handed
/// out (a busy pool skips the extra round trip; a pool that sat through a
/// server restart still drops its dead connections). A connection that
/// died less than this after its last use fails its next statement, which
/// [`Retry`](crate::server::Retry) covers.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// The settings a SQL store's builder has whatever the database: the
/// checkpoint table, the pool's size, the retention of completed runs, the
/// timeout of every call, and whether the store only reads.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where the tables are (a Postgres schema, a MySQL database; not yet
    /// validated); `None`: the store's default.
    pub namespace: Option<String>,
    /// The checkpoint table (not yet validated).
    pub table: String,
    /// The most connections the store's pool opens.
    pub max_connections: u32,
    /// What completed runs the store keeps.
    pub retention: Retention,
    /// The most any call may take.
    pub timeout: Duration,
    /// Whether the store is opened for reading only.
    pub read_only: bool,
}

impl Settings {
    /// The defaults, with a pool of `max_connections`.
    #[must_use]
    pub fn new(max_connections: u32) -> Self {
        Settings {
            namespace: None,
            table: DEFAULT_TABLE.to_owned(),
            max_connections,
            retention: Retention {
                expire_after: Some(DEFAULT_COMPLETED_RETENTION),
                keep_completed: None,
            },
            timeout: DEFAULT_TIMEOUT,
            read_only: false,
        }
    }

    /// The first setting out of its range, as (setting, value, reason): a
    /// timeout of zero or over the `longest` one (with the words that say
    /// what bounds it), or a pool of no connection.
    #[must_use]
    pub fn refusal(
        &self,
        longest: Option<(Duration, &str)>,
    ) -> Option<(&'static str, String, String)> {
        let too_long = longest.filter(|(max, _)| self.timeout > *max);
        if self.timeout.is_zero() || too_long.is_some() {
            let bound = longest.map_or_else(String::new, |(_, why)| format!(" and at most {why}"));
            return Some((
                "timeout",
                format!("{:?}", self.timeout),
                format!("it must be greater than zero{bound}"),
            ));
        }
        (self.max_connections == 0).then(|| {
            (
                "max_connections",
                "0".to_owned(),
                "it must be at least 1".to_owned(),
            )
        })
    }
}

/// Where a server store's connections come from.
#[doc(hidden)]
pub enum Source<DB: Database> {
    /// A pool of the store's own, on this URL.
    Url(String),
    /// A pool given by the application.
    Pool(Pool<DB>),
}

impl<DB: Database> Clone for Source<DB> {
    fn clone(&self) -> Self {
        match self {
            Source::Url(url) => Source::Url(url.clone()),
            Source::Pool(pool) => Source::Pool(pool.clone()),
        }
    }
}

impl<DB: Database> std::fmt::Debug for Source<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

impl<DB: Database> Source<DB> {
    /// The URL as a builder's `Debug` shows it: with the password
    /// redacted, or `<given pool>`.
    #[must_use]
    pub fn shown(&self) -> String {
        match self {
            Source::Url(url) => RedactedUrl::new(url).url,
            Source::Pool(_) => "<given pool>".to_owned(),
        }
    }
}

/// The options of a store's own pool: at most `max_connections`, waiting
/// at most `timeout` for a connection, and a connection idle for a second
/// pinged before it is handed out (instead of before every use).
///
/// # Errors
/// [`Error::NoRuntime`] outside a tokio runtime (sqlx's pool starts a task:
/// without a runtime it would panic), naming `operation`.
#[doc(hidden)]
pub fn pool_options<DB: Database>(settings: &Settings, operation: &str) -> Result<PoolOptions<DB>> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::NoRuntime {
            operation: operation.to_owned(),
        });
    }
    Ok(PoolOptions::<DB>::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.timeout)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IF_IDLE_FOR {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        }))
}

/// The setters of a SQL store builder's [`Settings`] (its field
/// `settings`), written inside the builder's `impl`: the ones listed, each
/// with the docs given to it (`schema` or `database`, `table`,
/// `max_connections`, `timeout`, `read_only`), and always `completed_retention` and `keep_completed`,
/// whose meaning is the same in every store.
#[doc(hidden)]
#[macro_export]
macro_rules! settings_setters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        $($crate::settings_setters!(@one [$(#[$doc])*] $name);)*

        /// How long a completed run's checkpoint stays visible (default 7
        /// days); `None` keeps it until it is deleted. Running, failed and
        /// cancelled runs never expire. The retention is fixed when the
        /// completed checkpoint is written.
        #[must_use]
        pub fn completed_retention(mut self, retention: Option<::std::time::Duration>) -> Self {
            self.settings.retention.expire_after = retention;
            self
        }

        /// Keeps at most the `n` newest completed runs of each pipeline
        /// (default `None`: all of them, each until its
        /// [`completed_retention`](Self::completed_retention) passes). When
        /// a run completes (a save, fenced or not, of a
        /// [`RunStatus::Completed`](fluxio_core::store::RunStatus::Completed)
        /// checkpoint), the completed runs of its pipeline but the `n`
        /// newest (by when they completed, on the database's clock) are
        /// deleted, each whole (its row and its journal), in the
        /// transaction of that save. The pipeline of a run is the part of
        /// its key before the first `/` (empty for a bare run id), as in
        /// [`InMemoryStore::keep_completed`](fluxio_core::store::InMemoryStore::keep_completed).
        /// Running, failed and cancelled runs are never deleted by it.
        /// `Some(0)` deletes each run as it completes.
        #[must_use]
        pub fn keep_completed(mut self, n: Option<usize>) -> Self {
            self.settings.retention.keep_completed = n;
            self
        }
    };
    // where the tables are: one setter, named as the database names it
    (@one [$($doc:tt)*] schema) => {
        $crate::settings_setters!(@namespace [$($doc)*] schema);
    };
    (@one [$($doc:tt)*] database) => {
        $crate::settings_setters!(@namespace [$($doc)*] database);
    };
    (@namespace [$($doc:tt)*] $name:ident) => {
        $($doc)*
        #[must_use]
        pub fn $name(mut self, $name: impl Into<String>) -> Self {
            self.settings.namespace = Some($name.into());
            self
        }
    };
    (@one [$($doc:tt)*] table) => {
        $($doc)*
        #[must_use]
        pub fn table(mut self, table: impl Into<String>) -> Self {
            self.settings.table = table.into();
            self
        }
    };
    (@one [$($doc:tt)*] max_connections) => {
        $($doc)*
        #[must_use]
        pub fn max_connections(mut self, max: u32) -> Self {
            self.settings.max_connections = max;
            self
        }
    };
    (@one [$($doc:tt)*] timeout) => {
        $($doc)*
        #[must_use]
        pub fn timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.settings.timeout = timeout;
            self
        }
    };
    (@one [$($doc:tt)*] read_only) => {
        $($doc)*
        #[must_use]
        pub fn read_only(mut self, read_only: bool) -> Self {
            self.settings.read_only = read_only;
            self
        }
    };
}
