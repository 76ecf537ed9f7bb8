//! [`SqliteStoreBuilder`]: the settings of a [`SqliteStore`], their
//! defaults and their validation, and [`Synchronous`].

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use fluxio_core::Result;
use fluxio_sql::Settings;
use sqlx::sqlite::SqliteSynchronous;

use crate::connection::{check_readable, pools, prepare};
use crate::error::{SqliteStoreError, own_error};
use crate::statements::{Names, Sql, validate_path};
use crate::store::{Inner, SqliteStore};
use crate::writer::Writer;

pub use fluxio_sql::{DEFAULT_COMPLETED_RETENTION, DEFAULT_TABLE, DEFAULT_TIMEOUT};

/// The default busy timeout: how long a write waits for another connection
/// (of this or another process) to finish its write.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// The default number of connections: one that writes and three that read.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 4;

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
    pub(crate) fn to_sqlx(self) -> SqliteSynchronous {
        match self {
            Synchronous::Full => SqliteSynchronous::Full,
            Synchronous::Normal => SqliteSynchronous::Normal,
        }
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
    pub(crate) path: PathBuf,
    pub(crate) settings: Settings,
    pub(crate) busy_timeout: Duration,
    pub(crate) synchronous: Synchronous,
}

impl SqliteStoreBuilder {
    pub(crate) fn new(path: PathBuf) -> Self {
        SqliteStoreBuilder {
            path,
            settings: Settings::new(DEFAULT_MAX_CONNECTIONS),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            synchronous: Synchronous::Full,
        }
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

    fluxio_sql::settings_setters! {
        /// The checkpoint table (default `fluxio_checkpoints`); the lease table
        /// is `<table>_leases`. Must match `^[a-z_][a-z0-9_]{0,62}$` and not
        /// start with `sqlite_`. Several stores with different tables can share
        /// a file.
        table,
        /// The most any store call may take (default 10 s), including waiting
        /// for a pooled connection and for the write lock; past it the call
        /// fails with a [`SqliteStoreError::Timeout`]. Must be greater than zero.
        timeout,
        /// How many connections the store opens at most (default 4): one writes,
        /// the others read (`load`, `exists`) in parallel with it and with each
        /// other. With 1, the one connection does both. SQLite admits one writer
        /// at a time, so more writing connections would only wait for each other.
        max_connections,
        /// Opens the file for reading only (default `false`): for tools that
        /// look at a store (such as the `fluxio` command's `runs list`) and must
        /// change nothing, on any file they are pointed at.
        ///
        /// A read-only [`connect`](Self::connect) opens the file with SQLite's
        /// read-only flag (`mode=ro`): a missing file is not created
        /// ([`SqliteStoreError::Open`]), nothing is migrated, the journal mode
        /// is left as it is, and no table, index or row is written. It checks
        /// that the file holds the store's tables
        /// ([`SqliteStoreError::NoTables`] when it does not) at a schema version
        /// this build reads: every migration this build knows applied, unchanged
        /// ([`SqliteStoreError::SchemaOutdated`] for a missing one,
        /// [`SqliteStoreError::MigrationChanged`] for a changed one). A file
        /// with migrations newer than this build is read (migrations only
        /// add). Every write of the store then fails with SQLite's error for a
        /// read-only database.
        ///
        /// ```no_run
        /// # async fn f() -> fluxio_core::Result<()> {
        /// use fluxio_core::CheckpointStore as _;
        /// use fluxio_core::store::RunFilter;
        /// use fluxio_sqlite::SqliteStore;
        ///
        /// let store = SqliteStore::builder("/var/lib/orders/fluxio.db")
        ///     .read_only(true)
        ///     .connect()
        ///     .await?;
        /// let page = store.list_runs(&RunFilter::new()).await?;
        /// # let _ = page; Ok(()) }
        /// ```
        read_only,
    }

    /// Opens the store: creates the file if it is missing, switches it to
    /// write-ahead logging and applies the pending migrations (creating the
    /// tables on first use), within the [timeout](Self::timeout). Several
    /// processes may open one fresh file at the same time.
    ///
    /// # Errors
    /// [`Error::Store`](fluxio_core::Error::Store): an invalid setting
    /// ([`SqliteStoreError::InvalidSetting`], naming the setting and the
    /// value), a file that cannot be opened or created
    /// ([`SqliteStoreError::Open`]) or written
    /// ([`SqliteStoreError::NotWritable`], checked by trying a write that is
    /// rolled back), a file that cannot use WAL ([`SqliteStoreError::NotWal`]), a failed or changed migration
    /// ([`SqliteStoreError::MigrationChanged`]), a timeout. Opened
    /// [read-only](Self::read_only), it writes nothing and fails as that
    /// says instead.
    pub async fn connect(self) -> Result<SqliteStore> {
        let names = Names::new(&self.settings.table).map_err(own_error)?;
        validate_path(&self.path).map_err(own_error)?;
        let invalid = |setting: &'static str, value: String, reason: String| {
            own_error(SqliteStoreError::InvalidSetting {
                setting,
                value,
                reason,
            })
        };
        if let Some((setting, value, reason)) = self.settings.refusal(None) {
            return Err(invalid(setting, value, reason));
        }
        if i32::try_from(self.busy_timeout.as_millis()).is_err() {
            return Err(invalid(
                "busy_timeout",
                format!("{:?}", self.busy_timeout),
                "it must be at most i32::MAX milliseconds (about 24 days)".to_owned(),
            ));
        }

        let commits = Arc::new(AtomicU64::new(0));
        let (writer, reader) = pools(&self, &commits);
        let applied = if self.settings.read_only {
            check_readable(&reader, &names, &self.path, self.settings.timeout).await?;
            0
        } else {
            prepare(&writer, &names, &self.path, self.settings.timeout).await?
        };
        tracing::debug!(
            path = %self.path.display(),
            table = %names.table,
            applied,
            "checkpoint tables are up to date"
        );
        let sql = Sql::new(&names);
        let writes = Writer::new(writer.clone(), &sql);
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                writes,
                writer,
                reader,
                names,
                sql,
                timeout: self.settings.timeout,
                config: self,
                commits,
                events: std::sync::OnceLock::new(),
            }),
        })
    }
}
