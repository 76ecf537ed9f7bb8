//! The errors of this crate that are not sqlx's, and what kind of failure
//! (a timeout, a connection failure) each error is.

use fluxio_core::Error;

/// The `backend` of every [`Error::Store`] this crate returns.
pub const BACKEND: &str = "postgres";

/// What went wrong in the store itself, rather than in sqlx or PostgreSQL:
/// the error of every SQL server store, [`fluxio_sql::ServerStoreError`]
/// (whose `schema` is the store's [schema](crate::PostgresStoreBuilder::schema)).
///
/// It always arrives as the `source` of [`fluxio_core::Error::Store`] with
/// `backend: "postgres"`; downcast the source to tell the cases apart.
pub type PostgresStoreError = fluxio_sql::ServerStoreError;

/// `e` as the source of an [`Error::Store`] of `e`'s kind.
pub(crate) fn own_error(e: PostgresStoreError) -> Error {
    e.into_store_error(BACKEND)
}
