//! The errors of this crate that are not sqlx's, and what kind of failure
//! (a timeout, a connection failure) each error is.

use fluxio_core::Error;
use fluxio_core::store::StoreErrorKind;

/// The `backend` of every [`Error::Store`] this crate returns.
pub const BACKEND: &str = "postgres";

/// What went wrong in the store itself, rather than in sqlx or PostgreSQL:
/// the error of every SQL server store, [`fluxio_sql::ServerStoreError`]
/// (whose `schema` is the store's [schema](crate::PostgresStoreBuilder::schema)).
///
/// It always arrives as the `source` of [`fluxio_core::Error::Store`] with
/// `backend: "postgres"`; downcast the source to tell the cases apart.
pub type PostgresStoreError = fluxio_sql::ServerStoreError;

/// What kind of failure an error of sqlx is: waiting for a pooled
/// connection or the server's `statement_timeout` (`57014`, the only cancel
/// this store causes) is a timeout; [a failed connection](is_connection_error)
/// or a failed TLS handshake a connection failure.
pub(crate) fn sql_kind(e: &sqlx::Error) -> StoreErrorKind {
    match e {
        sqlx::Error::PoolTimedOut => StoreErrorKind::Timeout,
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => StoreErrorKind::Timeout,
        sqlx::Error::Database(db) if db.code().is_some_and(|c| c == "57014") => {
            StoreErrorKind::Timeout
        }
        sqlx::Error::Tls(_) => StoreErrorKind::Connection,
        e if is_connection_error(e) => StoreErrorKind::Connection,
        _ => StoreErrorKind::Other,
    }
}

/// Whether `e` says the connection failed rather than the statement: the
/// server ended the session (`57P01` admin shutdown, e.g.
/// `pg_terminate_backend`; `57P02` crash shutdown; `57P03` cannot connect
/// now), a connection exception (class `08`), or an I/O error. The
/// statement may still have run when the failure came after it was sent.
pub(crate) fn is_connection_error(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| matches!(&*c, "57P01" | "57P02" | "57P03") || c.starts_with("08")),
        _ => false,
    }
}

/// `e` as the source of an [`Error::Store`] of `e`'s kind.
pub(crate) fn own_error(e: PostgresStoreError) -> Error {
    e.into_store_error(BACKEND)
}
