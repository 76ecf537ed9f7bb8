//! The errors of this crate that are not sqlx's, and what kind of failure
//! (a timeout, a connection failure) each error is.

use std::path::PathBuf;
use std::sync::Arc;

use fluxio_core::Error;
use fluxio_core::store::StoreErrorKind;

/// The `backend` of every [`Error::Store`] this crate returns.
pub const BACKEND: &str = "sqlite";

fluxio_sql::store_error! {
    /// What went wrong in the store itself, rather than in sqlx or SQLite.
    ///
    /// It always arrives as the `source` of [`fluxio_core::Error::Store`] with
    /// `backend: "sqlite"`; downcast the source to tell the cases apart. Errors
    /// of sqlx and SQLite after opening (a busy database past the busy timeout, a
    /// full disk) are the source themselves (a [`sqlx::Error`]); at open they
    /// are wrapped in [`Open`](Self::Open) or [`NotWritable`](Self::NotWritable),
    /// which name the file. To ask whether any error of this store was a
    /// timeout or a connection failure, ask the [`fluxio_core::Error`]
    /// ([`store_error_kind`](fluxio_core::Error::store_error_kind)), which
    /// covers both.
    ///
    /// Its first variants, [`InvalidSetting`](Self::InvalidSetting) and
    /// [`Timeout`](Self::Timeout), are every SQL store's (`fluxio-sql`
    /// declares them once).
    pub enum SqliteStoreError {
        /// The database could not be switched to write-ahead logging, which the
        /// store needs (readers next to a writer, one fsync per commit). SQLite
        /// refuses WAL on some network filesystems, among others.
        #[error("the database stayed in journal mode {mode:?}: the store needs WAL")]
        NotWal {
            /// The journal mode SQLite reported.
            mode: String,
        },

        /// A migration embedded in this build differs from the one recorded as
        /// applied: a migration file was edited after it was released.
        #[error("migration {version} ({description}) of table `{table}` differs from the one applied")]
        MigrationChanged {
            /// The checkpoint table.
            table: String,
            /// The migration's version.
            version: i64,
            /// The migration's description.
            description: String,
        },

        /// A store opened [read-only](crate::SqliteStoreBuilder::read_only)
        /// found no checkpoint table of this name (or no bookkeeping of the
        /// store's migrations) in the file: it is not a fluxio store, or not one
        /// with this table. Nothing was created.
        #[error("no fluxio tables here (table `{table}` in {})", path.display())]
        NoTables {
            /// The file.
            path: PathBuf,
            /// The checkpoint table looked for.
            table: String,
        },

        /// A store opened [read-only](crate::SqliteStoreBuilder::read_only)
        /// found the tables at a schema version older than this build reads: a
        /// migration it needs was never applied. Opening the store for writing
        /// (any worker of this build) applies it.
        #[error(
            "the tables of `{table}` in {} are older than this build reads: migration {version} ({description}) is not applied; open the store for writing once to migrate them",
            path.display()
        )]
        SchemaOutdated {
            /// The file.
            path: PathBuf,
            /// The checkpoint table.
            table: String,
            /// The first migration missing.
            version: i64,
            /// Its description.
            description: String,
        },

        /// The database file could not be opened or prepared (a missing
        /// directory, a path that is not a database, no permission); the source
        /// is the [`sqlx::Error`].
        #[error("cannot open the database {}: {source}{}", path.display(), url_hint(path))]
        Open {
            /// The file.
            path: PathBuf,
            /// SQLite's error.
            #[source]
            source: sqlx::Error,
        },

        /// The database opens but cannot be written (a read-only file or
        /// filesystem, a file SQLite treats as read-only): refused at open, since
        /// every run would fail at its first checkpoint.
        #[error("the database {} cannot be written: {source}", path.display())]
        NotWritable {
            /// The file.
            path: PathBuf,
            /// SQLite's error for the write that was tried.
            #[source]
            source: sqlx::Error,
        },

        /// The transaction that held this write failed as a whole (it could
        /// not begin, or its commit failed), so the write is not stored. The
        /// store commits the writes that wait together in one transaction
        /// (group commit): each of them gets this error, sharing SQLite's
        /// error as the source.
        #[error("the transaction of this write failed: {source}")]
        GroupCommit {
            /// SQLite's error.
            #[source]
            source: Arc<sqlx::Error>,
        },

        /// The store's writing task stopped (its tokio runtime shut down)
        /// before it answered: the write may or may not have been committed.
        #[error("the store's writer stopped before answering")]
        WriterStopped,
    }
    kind {
        SqliteStoreError::Open { .. } => StoreErrorKind::Connection,
        SqliteStoreError::GroupCommit { source } => sql_kind(source),
        SqliteStoreError::NotWal { .. }
        | SqliteStoreError::MigrationChanged { .. }
        | SqliteStoreError::NoTables { .. }
        | SqliteStoreError::SchemaOutdated { .. }
        | SqliteStoreError::NotWritable { .. }
        | SqliteStoreError::WriterStopped => StoreErrorKind::Other,
    }
}

/// The hint an [`Open`](SqliteStoreError::Open) error adds for a path
/// given as a `sqlite:` URL (what the CLI takes, not the store).
fn url_hint(path: &std::path::Path) -> &'static str {
    if path.to_string_lossy().starts_with("sqlite:") {
        " (the store takes a file path; `sqlite://` URLs are for the `fluxio` command)"
    } else {
        ""
    }
}

/// SQLite's primary result code for a database locked by another
/// connection past the busy timeout ("database is locked").
const SQLITE_BUSY: i32 = 5;
/// SQLite's primary result code for a file it cannot open.
const SQLITE_CANTOPEN: i32 = 14;

/// What kind of failure an error of sqlx is: SQLite's busy timeout or the
/// wait for a pooled connection is a timeout; a file that cannot be opened
/// (or an I/O error of the driver) a connection failure.
pub(crate) fn sql_kind(e: &sqlx::Error) -> StoreErrorKind {
    let primary_code = e
        .as_database_error()
        .and_then(|db| db.code())
        .and_then(|code| code.parse::<i32>().ok())
        .map(|code| code & 0xff);
    match (e, primary_code) {
        (sqlx::Error::PoolTimedOut, _) | (_, Some(SQLITE_BUSY)) => StoreErrorKind::Timeout,
        (sqlx::Error::Io(_), _) | (_, Some(SQLITE_CANTOPEN)) => StoreErrorKind::Connection,
        _ => StoreErrorKind::Other,
    }
}

/// `e` as the source of an [`Error::Store`] of `e`'s kind.
pub(crate) fn sql_error(e: sqlx::Error) -> Error {
    Error::store_with_kind(BACKEND, sql_kind(&e), e)
}

/// `e` as the source of an [`Error::Store`] of `e`'s kind.
pub(crate) fn own_error(e: SqliteStoreError) -> Error {
    Error::store_with_kind(BACKEND, e.kind(), e)
}
