//! The errors of this crate that are not sqlx's, and what kind of failure
//! (a timeout, a connection failure) each error of the store is.

use fluxio_core::Error;
use fluxio_core::store::StoreErrorKind;
use sqlx::mysql::MySqlDatabaseError;

/// The `backend` of every [`Error::Store`] this crate returns.
pub const BACKEND: &str = "mysql";

/// What went wrong in the store itself, rather than in sqlx or the server:
/// the error of every SQL server store, [`fluxio_sql::ServerStoreError`]
/// (whose `schema` is the store's database).
///
/// It always arrives as the `source` of [`fluxio_core::Error::Store`] with
/// `backend: "mysql"`; downcast the source to tell the cases apart.
pub type MySqlStoreError = fluxio_sql::ServerStoreError;

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
    e.into_store_error(BACKEND)
}
