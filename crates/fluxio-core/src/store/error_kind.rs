//! [`StoreErrorKind`]: what kind of failure an [`Error::Store`] is, asked the
//! same way of every backend.

#[cfg(doc)]
use crate::Error;

/// Whether a store call failed because the store did not answer in time,
/// because it could not be reached, or otherwise: the one question every
/// backend answers the same way, so a caller can decide to retry (or alert
/// on an outage) without knowing the backend's own error types.
///
/// [`Error::store_error_kind`] gives it for any [`Error::Store`]; the
/// backends' error types (`RedisStoreError`, `SqliteStoreError`, and
/// `ServerStoreError`, which `PostgresStoreError` and `MySqlStoreError`
/// name) each have `kind()` for an error already downcast to them.
///
/// ```
/// use fluxio_core::Error;
/// use fluxio_core::store::StoreErrorKind;
///
/// fn worth_retrying(err: &Error) -> bool {
///     matches!(
///         err.store_error_kind(),
///         Some(StoreErrorKind::Timeout | StoreErrorKind::Connection)
///     )
/// }
///
/// let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let refused = Error::store_with_kind("custom", StoreErrorKind::Connection, io);
/// assert!(worth_retrying(&refused));
/// assert!(!worth_retrying(&Error::store("custom", "a constraint was violated")));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// No answer within a timeout: the store's own call timeout, waiting for
    /// a pooled connection, a server-side statement timeout, SQLite's busy
    /// timeout (another writer held the file). A write that timed out may or
    /// may not have been applied.
    Timeout,
    /// The store could not be reached, or the connection to it failed: a
    /// refused or reset connection, an I/O error, a TLS handshake that
    /// failed, a server ending the session; for SQLite, a database file that
    /// cannot be opened.
    Connection,
    /// Anything else: an error the server or database reported, a setting,
    /// a migration, or an error from a store that does not tell (see
    /// [`Error::store`]).
    Other,
}

impl StoreErrorKind {
    /// Whether this is [`StoreErrorKind::Timeout`].
    #[must_use]
    pub fn is_timeout(self) -> bool {
        self == StoreErrorKind::Timeout
    }

    /// Whether this is [`StoreErrorKind::Connection`].
    #[must_use]
    pub fn is_connection(self) -> bool {
        self == StoreErrorKind::Connection
    }
}
