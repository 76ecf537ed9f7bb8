//! The errors of this crate that are not sqlx's, and what kind of failure
//! (a timeout, a connection failure) each error is.

use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::StoreErrorKind;

/// The `backend` of every [`Error::Store`] this crate returns.
pub const BACKEND: &str = "postgres";

/// What went wrong in the store itself, rather than in sqlx or PostgreSQL.
///
/// It always arrives as the `source` of
/// [`fluxio_core::Error::Store`] with `backend: "postgres"`; downcast the
/// source to tell the cases apart. Errors of sqlx are the source themselves
/// (a [`sqlx::Error`]): to ask whether any error of this store was a timeout
/// or a connection failure, ask the [`fluxio_core::Error`]
/// ([`store_error_kind`](fluxio_core::Error::store_error_kind)), which
/// covers both.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresStoreError {
    /// A setting of the builder was rejected before anything was sent.
    #[error("invalid {setting} {value:?}: {reason}")]
    InvalidSetting {
        /// The setting, e.g. `"schema"` or `"table"`.
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
        "migration {version} ({description}) of table `{table}` differs from the one applied to schema `{schema}`"
    )]
    MigrationChanged {
        /// The schema.
        schema: String,
        /// The checkpoint table.
        table: String,
        /// The migration's version.
        version: i64,
        /// The migration's description.
        description: String,
    },

    /// A store opened [read-only](crate::PostgresStoreBuilder::read_only)
    /// found no checkpoint table of this name (or no bookkeeping of the
    /// store's migrations) in the schema, or no such schema: it is not a
    /// fluxio store. Nothing was created.
    #[error("no fluxio tables here (schema `{schema}`, table `{table}`)")]
    NoTables {
        /// The schema looked in.
        schema: String,
        /// The checkpoint table looked for.
        table: String,
    },

    /// A store opened [read-only](crate::PostgresStoreBuilder::read_only)
    /// found the tables at a schema version older than this build reads: a
    /// migration it needs was never applied. Opening the store for writing
    /// (any worker of this build) applies it.
    #[error(
        "the tables of `{table}` in schema `{schema}` are older than this build reads: migration {version} ({description}) is not applied; open the store for writing once to migrate them"
    )]
    SchemaOutdated {
        /// The schema.
        schema: String,
        /// The checkpoint table.
        table: String,
        /// The first migration missing.
        version: i64,
        /// Its description.
        description: String,
    },

    /// The server could not be reached (or refused the connection) when
    /// [`connect`](crate::PostgresStoreBuilder::connect) opened its first
    /// connection. `url` has the password replaced by `***`; the source is
    /// the [`sqlx::Error`] (for a refused connection, an I/O error).
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The server's URL, with the password replaced by `***`.
        url: String,
        /// Why: the [`sqlx::Error`], or a [`PostgresStoreError::Scrubbed`]
        /// when its message quoted the password.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// An error of sqlx or PostgreSQL whose message quoted the URL's
    /// password (or a part of a malformed URL that may be one, such as a
    /// misplaced user info read as the database name): its message with
    /// that part replaced by `***`, instead of the error itself.
    #[error("{message}")]
    Scrubbed {
        /// The error's message, scrubbed.
        message: String,
    },
}

impl PostgresStoreError {
    /// Whether this is a timeout, a connection failure or another failure:
    /// the `kind` of the [`Error::Store`](fluxio_core::Error::Store) it
    /// arrives in.
    #[must_use]
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            PostgresStoreError::Timeout { .. } => StoreErrorKind::Timeout,
            PostgresStoreError::Connect { .. } => StoreErrorKind::Connection,
            PostgresStoreError::InvalidSetting { .. }
            | PostgresStoreError::MigrationChanged { .. }
            | PostgresStoreError::NoTables { .. }
            | PostgresStoreError::SchemaOutdated { .. }
            | PostgresStoreError::Scrubbed { .. } => StoreErrorKind::Other,
        }
    }

    /// Whether the call did not finish within the store's
    /// [timeout](crate::PostgresStoreBuilder::timeout)
    /// ([`Timeout`](Self::Timeout)). A write may or may not have been
    /// applied.
    #[must_use]
    pub fn is_timeout(&self) -> bool {
        self.kind().is_timeout()
    }

    /// Whether the server could not be reached or refused the connection
    /// ([`Connect`](Self::Connect)).
    #[must_use]
    pub fn is_connection(&self) -> bool {
        self.kind().is_connection()
    }
}

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
    Error::store_with_kind(BACKEND, e.kind(), e)
}
