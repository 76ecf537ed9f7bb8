//! The errors of this crate that are not sqlx's, and what kind of failure
//! (a timeout, a connection failure) each error of the store is.

use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::StoreErrorKind;
use sqlx::mysql::MySqlDatabaseError;

/// The `backend` of every [`Error::Store`] this crate returns.
pub const BACKEND: &str = "mysql";

/// What went wrong in the store itself, rather than in sqlx or the server.
///
/// It always arrives as the `source` of [`fluxio_core::Error::Store`] with
/// `backend: "mysql"`; downcast the source to tell the cases apart. Errors
/// of sqlx are the source themselves (a [`sqlx::Error`]): to ask whether
/// any error of this store was a timeout or a connection failure, ask the
/// [`fluxio_core::Error`]
/// ([`store_error_kind`](fluxio_core::Error::store_error_kind)), which
/// covers both.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MySqlStoreError {
    /// A setting of the builder was rejected before anything was sent.
    #[error("invalid {setting} {value:?}: {reason}")]
    InvalidSetting {
        /// The setting, e.g. `"database"` or `"table"`.
        setting: &'static str,
        /// The rejected value (never a password: URLs are redacted).
        value: String,
        /// Why it was rejected.
        reason: String,
    },

    /// A store call did not finish within the store's timeout.
    #[error("{operation} timed out after {timeout:?}")]
    Timeout {
        /// The operation, e.g. `"save"` or `"migrate"`.
        operation: &'static str,
        /// The configured timeout.
        timeout: Duration,
    },

    /// A migration embedded in this build differs from the one recorded as
    /// applied: a migration file was edited after it was released.
    #[error(
        "migration {version} ({description}) of table `{table}` differs from the one applied to database `{database}`"
    )]
    MigrationChanged {
        /// The database.
        database: String,
        /// The checkpoint table.
        table: String,
        /// The migration's version.
        version: i64,
        /// The migration's description.
        description: String,
    },

    /// A store opened [read-only](crate::MySqlStoreBuilder::read_only)
    /// found no checkpoint table of this name (or no bookkeeping of the
    /// store's migrations) in the database: it is not a fluxio store.
    /// Nothing was created.
    #[error("no fluxio tables here (database `{database}`, table `{table}`)")]
    NoTables {
        /// The database looked in.
        database: String,
        /// The checkpoint table looked for.
        table: String,
    },

    /// A store opened [read-only](crate::MySqlStoreBuilder::read_only)
    /// found the tables at a schema version older than this build reads.
    /// Opening the store for writing (any worker of this build) migrates
    /// them.
    #[error(
        "the tables of `{table}` in database `{database}` are older than this build reads: migration {version} ({description}) is not applied; open the store for writing once to migrate them"
    )]
    SchemaOutdated {
        /// The database.
        database: String,
        /// The checkpoint table.
        table: String,
        /// The first migration missing.
        version: i64,
        /// Its description.
        description: String,
    },

    /// The server could not be reached (or refused the connection) when
    /// [`connect`](crate::MySqlStoreBuilder::connect) opened its first
    /// connection. `url` has the password replaced by `***`.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The server's URL, with the password replaced by `***`.
        url: String,
        /// Why: the [`sqlx::Error`], or a [`MySqlStoreError::Scrubbed`]
        /// when its message quoted the password.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// An error of sqlx or the server whose message quoted the URL's
    /// password: its message with that part replaced by `***`, instead of
    /// the error itself.
    #[error("{message}")]
    Scrubbed {
        /// The error's message, scrubbed.
        message: String,
    },
}

impl MySqlStoreError {
    /// Whether this is a timeout, a connection failure or another failure:
    /// the `kind` of the [`Error::Store`](fluxio_core::Error::Store) it
    /// arrives in.
    #[must_use]
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            MySqlStoreError::Timeout { .. } => StoreErrorKind::Timeout,
            MySqlStoreError::Connect { .. } => StoreErrorKind::Connection,
            _ => StoreErrorKind::Other,
        }
    }
}

/// The server's error number (`ER_*`), for an error the server reported.
fn number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()
        .and_then(|db| db.try_downcast_ref::<MySqlDatabaseError>())
        .map(MySqlDatabaseError::number)
}

/// `ER_LOCK_WAIT_TIMEOUT`: a row lock was not granted within
/// `innodb_lock_wait_timeout` (which the store sets to its timeout).
const LOCK_WAIT_TIMEOUT: u16 = 1205;
/// `ER_QUERY_TIMEOUT` (MySQL's `max_execution_time`) and
/// `ER_STATEMENT_TIMEOUT` (MariaDB's `max_statement_time`).
const STATEMENT_TIMEOUTS: [u16; 2] = [3024, 1969];
/// The server ends the session: `ER_SERVER_SHUTDOWN`, `ER_CONNECTION_KILLED`
/// (MariaDB's `KILL`), `ER_NEW_ABORTING_CONNECTION`, and MySQL's
/// `ER_CLIENT_INTERACTION_TIMEOUT`.
const SESSION_ENDED: [u16; 4] = [1053, 1927, 1184, 4031];

/// What kind of failure an error of sqlx is: waiting for a pooled
/// connection, a lock or a statement past its time is a timeout; a failed
/// connection or TLS handshake a connection failure.
pub(crate) fn sql_kind(e: &sqlx::Error) -> StoreErrorKind {
    match e {
        sqlx::Error::PoolTimedOut => StoreErrorKind::Timeout,
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => StoreErrorKind::Timeout,
        sqlx::Error::Tls(_) => StoreErrorKind::Connection,
        e if is_connection_error(e) => StoreErrorKind::Connection,
        e => match number(e) {
            Some(n) if n == LOCK_WAIT_TIMEOUT || STATEMENT_TIMEOUTS.contains(&n) => {
                StoreErrorKind::Timeout
            }
            _ => StoreErrorKind::Other,
        },
    }
}

/// Whether `e` says the connection failed rather than the statement: an
/// I/O error, or the server ending the session. The statement may still
/// have run when the failure came after it was sent.
pub(crate) fn is_connection_error(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) => true,
        e => number(e).is_some_and(|n| SESSION_ENDED.contains(&n)),
    }
}

/// `e` as the source of an [`Error::Store`] of `e`'s kind.
pub(crate) fn own_error(e: MySqlStoreError) -> Error {
    Error::store_with_kind(BACKEND, e.kind(), e)
}
