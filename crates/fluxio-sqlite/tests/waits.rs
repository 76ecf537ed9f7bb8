//! Runs that wait (contract rules 25-28) in the SQLite store, past the
//! conformance suite: the due time in the run's row, the mailbox going
//! with its run, a 16 MiB payload, a file of schema version 4, the store's
//! wake-ups (in process) and SQLite's clock. The checks are
//! `fluxio_test_support::sql`'s, on the harness of `it/sql.rs`.

#[path = "it/sql.rs"]
#[allow(dead_code)]
mod sql;

use fluxio_sqlite::SqliteStore;
use sql::Sqlite;

/// Takes a file back to schema version 4: the mailbox, its trigger, the
/// due index and column, and the bookkeeping row of version 5.
const BEFORE_WAITS: &str = "DROP TRIGGER fluxio_checkpoints_signals_cascade; \
     DROP TABLE fluxio_checkpoints_signals; DROP INDEX fluxio_checkpoints_due; \
     ALTER TABLE fluxio_checkpoints DROP COLUMN due_at; \
     DELETE FROM _fluxio_migrations WHERE version = 5";

fluxio_test_support::sql_waits_tests! { Sqlite, sql::Types;
    before_waits = BEFORE_WAITS,
    builder = |h| SqliteStore::builder(h.file()),
}
