//! Runs that wait (contract rules 25-28) in the MySQL store, past the
//! conformance suite: the due time in the run's row, the mailbox going
//! with its run, a 16 MiB payload (refused by name past the server's
//! `max_allowed_packet`), tables of schema version 1, no wake-ups (the
//! workers poll) and the server's clock. The checks are
//! `fluxio_test_support::sql`'s.

use fluxio_mysql::MySqlStore;
use fluxio_test_support as support;

fluxio_test_support::sql_store!(Types: fluxio_mysql::MySqlStore,
    fluxio_mysql::MySqlStoreBuilder, fluxio_mysql::MySqlStoreError,
    "mysql", on = database);

/// A database of one test on the test server.
type MySql = support::sql::Server<support::mysql::MySql, Types>;

/// Takes a database back to schema version 1: the mailbox, the due column
/// and its index, and the bookkeeping row of version 2.
const BEFORE_WAITS: &str = "DROP TABLE {s}.fluxio_checkpoints_signals; \
     ALTER TABLE {s}.fluxio_checkpoints DROP KEY fluxio_due, DROP COLUMN due_at; \
     DELETE FROM {s}._fluxio_migrations WHERE version = 2";

fluxio_test_support::sql_waits_tests! { MySql, Types;
    before_waits = BEFORE_WAITS,
    builder = |h| MySqlStore::builder(support::mysql::url()).database(h.name()),
}
