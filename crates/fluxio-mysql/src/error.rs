//! The errors of this crate that are not sqlx's, and what kind of failure
//! (a timeout, a connection failure) each error of the store is.

use fluxio_core::Error;

/// The `backend` of every [`Error::Store`] this crate returns.
pub const BACKEND: &str = "mysql";

/// What went wrong in the store itself, rather than in sqlx or the server:
/// the error of every SQL server store, [`fluxio_sql::ServerStoreError`]
/// (whose `schema` is the store's database).
///
/// It always arrives as the `source` of [`fluxio_core::Error::Store`] with
/// `backend: "mysql"`; downcast the source to tell the cases apart.
pub type MySqlStoreError = fluxio_sql::ServerStoreError;

/// `e` as the source of an [`Error::Store`] of `e`'s kind.
pub(crate) fn own_error(e: MySqlStoreError) -> Error {
    e.into_store_error(BACKEND)
}
