//! [`ServerStoreError`]: the errors of a SQL server store (Postgres, MySQL)
//! that are not the driver's, one enum for both, which each store crate
//! names after itself (`PostgresStoreError`, `MySqlStoreError`).

use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::StoreErrorKind;

/// What went wrong in a SQL server store itself, rather than in sqlx or the
/// server. `fluxio_postgres::PostgresStoreError` and
/// `fluxio_mysql::MySqlStoreError` are this type.
///
/// It always arrives as the `source` of [`fluxio_core::Error::Store`], whose
/// `backend` names the store (`"postgres"`, `"mysql"`); downcast the source
/// to tell the cases apart. Errors of sqlx are the source themselves (a
/// [`sqlx::Error`]): to ask whether any error of a store was a timeout or a
/// connection failure, ask the [`fluxio_core::Error`]
/// ([`store_error_kind`](fluxio_core::Error::store_error_kind)), which
/// covers both.
///
/// `schema` is where the store's tables are: the schema of a Postgres store,
/// the database of a MySQL one (MySQL's word for a schema).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerStoreError {
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
        /// The schema (MySQL: the database).
        schema: String,
        /// The checkpoint table.
        table: String,
        /// The migration's version.
        version: i64,
        /// The migration's description.
        description: String,
    },

    /// A store opened read-only found no checkpoint table of this name (or
    /// no bookkeeping of the store's migrations) in the schema, or no such
    /// schema: it is not a fluxio store. Nothing was created.
    #[error("no fluxio tables here (schema `{schema}`, table `{table}`)")]
    NoTables {
        /// The schema looked in (MySQL: the database).
        schema: String,
        /// The checkpoint table looked for.
        table: String,
    },

    /// A store opened read-only found the tables at a schema version older
    /// than this build reads: a migration it needs was never applied.
    /// Opening the store for writing (any worker of this build) applies it.
    #[error(
        "the tables of `{table}` in schema `{schema}` are older than this build reads: migration {version} ({description}) is not applied; open the store for writing once to migrate them"
    )]
    SchemaOutdated {
        /// The schema (MySQL: the database).
        schema: String,
        /// The checkpoint table.
        table: String,
        /// The first migration missing.
        version: i64,
        /// Its description.
        description: String,
    },

    /// The server could not be reached (or refused the connection) when
    /// the store opened its first connection. `url` has the password
    /// replaced by `***`; the source is the [`sqlx::Error`] (for a refused
    /// connection, an I/O error).
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The server's URL, with the password replaced by `***`.
        url: String,
        /// Why: the [`sqlx::Error`], or a [`ServerStoreError::Scrubbed`]
        /// when its message quoted the password.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// An error of sqlx or the server whose message quoted the URL's
    /// password (or a part of a malformed URL that may be one, such as a
    /// misplaced user info read as the database name): its message with
    /// that part replaced by `***`, instead of the error itself.
    #[error("{message}")]
    Scrubbed {
        /// The error's message, scrubbed.
        message: String,
    },
}

impl ServerStoreError {
    /// Whether this is a timeout, a connection failure or another failure:
    /// the `kind` of the [`Error::Store`](fluxio_core::Error::Store) it
    /// arrives in.
    #[must_use]
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            ServerStoreError::Timeout { .. } => StoreErrorKind::Timeout,
            ServerStoreError::Connect { .. } => StoreErrorKind::Connection,
            ServerStoreError::InvalidSetting { .. }
            | ServerStoreError::MigrationChanged { .. }
            | ServerStoreError::NoTables { .. }
            | ServerStoreError::SchemaOutdated { .. }
            | ServerStoreError::Scrubbed { .. } => StoreErrorKind::Other,
        }
    }

    /// This error as the source of an [`Error::Store`] of its kind, from
    /// the store named `backend`.
    #[must_use]
    pub fn into_store_error(self, backend: &'static str) -> Error {
        Error::store_with_kind(backend, self.kind(), self)
    }

    /// The refusal of `setting`, whose rejected `value` is shown as given.
    #[must_use]
    pub fn invalid(
        setting: &'static str,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        ServerStoreError::InvalidSetting {
            setting,
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// `value` of `setting` as a SQL identifier: refused, naming both, when
    /// it is not one [`check_identifier`](crate::check_identifier) takes.
    ///
    /// # Errors
    /// [`InvalidSetting`](Self::InvalidSetting) with the reason.
    pub fn check_identifier(setting: &'static str, value: &str) -> Result<(), Self> {
        crate::check_identifier(value).map_err(|reason| Self::invalid(setting, value, reason))
    }

    /// The error of the read-only open of the tables of `table` in `schema`
    /// that a check of the applied migrations found unreadable.
    #[must_use]
    pub fn unreadable(schema: &str, table: &str, unreadable: crate::Unreadable) -> Self {
        let (schema, table) = (schema.to_owned(), table.to_owned());
        match unreadable {
            crate::Unreadable::Missing {
                version,
                description,
            } => ServerStoreError::SchemaOutdated {
                schema,
                table,
                version,
                description,
            },
            crate::Unreadable::Changed {
                version,
                description,
            } => ServerStoreError::MigrationChanged {
                schema,
                table,
                version,
                description,
            },
        }
    }
}
