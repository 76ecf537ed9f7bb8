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
}
