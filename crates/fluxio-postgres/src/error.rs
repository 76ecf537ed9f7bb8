//! The errors of this crate that are not sqlx's.

use std::time::Duration;

/// What went wrong in the store itself, rather than in sqlx or PostgreSQL.
///
/// It always arrives as the `source` of
/// [`fluxio_core::Error::Store`] with `backend: "postgres"`; downcast the
/// source to tell the cases apart. Errors of sqlx are the source themselves
/// (a [`sqlx::Error`]).
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
