//! [`ServerStoreError`]: the errors of a SQL server store (Postgres, MySQL)
//! that are not the driver's, one enum for both, which each store crate
//! names after itself (`PostgresStoreError`, `MySqlStoreError`).

use fluxio_core::Error;
use fluxio_core::store::StoreErrorKind;

/// A SQL store's error enum (`ServerStoreError`, `SqliteStoreError`):
/// `Debug`, `thiserror::Error` and `#[non_exhaustive]`, with the two
/// variants every SQL store refuses or fails with alike, [`InvalidSetting`]
/// and [`Timeout`], before the store's own; and its `kind`, which is
/// [`Timeout`]'s for a timeout, `Other` for an invalid setting, and for the
/// store's own variants, what the arms after `kind` say.
///
/// [`InvalidSetting`]: ServerStoreError::InvalidSetting
/// [`Timeout`]: ServerStoreError::Timeout
#[doc(hidden)]
#[macro_export]
macro_rules! store_error {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $($variants:tt)* }
        kind { $($own:pat => $kind:expr),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, thiserror::Error)]
        #[non_exhaustive]
        pub enum $name {
            /// A setting of the builder was rejected before the store
            /// touched its database.
            #[error("invalid {setting} {value:?}: {reason}")]
            InvalidSetting {
                /// The setting, e.g. `"table"`.
                setting: &'static str,
                /// The rejected value (never a password: URLs are redacted).
                value: String,
                /// Why it was rejected.
                reason: String,
            },

            /// A store call did not finish within the store's timeout.
            #[error("{operation} timed out after {timeout:?}")]
            Timeout {
                /// The operation, e.g. `"save"` or `"open"`.
                operation: &'static str,
                /// The configured timeout.
                timeout: ::std::time::Duration,
            },

            $($variants)*
        }

        impl $name {
            /// Whether this is a timeout, a connection failure or another
            /// failure: the `kind` of the
            /// [`Error::Store`](fluxio_core::Error::Store) it arrives in.
            #[must_use]
            pub fn kind(&self) -> ::fluxio_core::store::StoreErrorKind {
                match self {
                    $name::Timeout { .. } => ::fluxio_core::store::StoreErrorKind::Timeout,
                    $name::InvalidSetting { .. } => ::fluxio_core::store::StoreErrorKind::Other,
                    $($own => $kind,)+
                }
            }
        }
    };
}

crate::store_error! {
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
    ///
    /// Its first variants, [`InvalidSetting`](Self::InvalidSetting) and
    /// [`Timeout`](Self::Timeout), are every SQL store's (SQLite's error has
    /// them too: [`store_error!`](crate::store_error)).
    pub enum ServerStoreError {
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
    kind {
        ServerStoreError::Connect { .. } => StoreErrorKind::Connection,
        ServerStoreError::MigrationChanged { .. }
        | ServerStoreError::NoTables { .. }
        | ServerStoreError::SchemaOutdated { .. }
        | ServerStoreError::Scrubbed { .. } => StoreErrorKind::Other,
    }
}

impl ServerStoreError {
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
        let crate::Unreadable {
            missing,
            version,
            description,
        } = unreadable;
        let (schema, table) = (schema.to_owned(), table.to_owned());
        if missing {
            ServerStoreError::SchemaOutdated {
                schema,
                table,
                version,
                description,
            }
        } else {
            ServerStoreError::MigrationChanged {
                schema,
                table,
                version,
                description,
            }
        }
    }
}
