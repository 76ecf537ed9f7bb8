//! How the SQL stores' shared checks (`fluxio_test_support::sql`) reach
//! MySQL or MariaDB: a database per test (`FLUXIO_MYSQL_URL`), dropped when
//! the check passes, and SQL on a small pool of its own.
//!
//! The checks that take the tables back to an older schema version (rule
//! 18's row of an earlier build, rule 21's schema version 3, a read-only
//! open of tables an older build left) do not run here: this store's first
//! schema version is its whole schema, so no older tables of it exist. Nor
//! do the ones that count commits (see `support::mysql::MySql`), or
//! name every table of two stores (this store has five tables per store).
//!
//! The harness is `support::sql::Server`, in `support::mysql::MySql`'s SQL.

use fluxio_test_support as support;

fluxio_test_support::sql_store!(Types: fluxio_mysql::MySqlStore,
    fluxio_mysql::MySqlStoreBuilder, fluxio_mysql::MySqlStoreError,
    "mysql", on = database);

/// A database of one test on the test server.
pub(crate) type MySql = support::sql::Server<support::mysql::MySql, Types>;

fluxio_test_support::sql_tests! { MySql;
    rule18_a_durable_run_writes_its_context_once_then_only_changed_keys,
    rule20_a_load_reads_only_from_the_last_whole_checkpoint,
    rule21_a_listing_reads_the_run_rows_not_the_journals,
    rule21_a_row_with_an_unknown_status_is_a_corrupt_checkpoint_error,
    read_only_reads_a_store_and_refuses_every_write,
    rule24_begin_and_finish_run_answer_as_the_defaults,
    reopening_changes_nothing_and_an_edited_migration_is_refused,
    the_pipeline_column_is_generated_from_the_run_id,
}

/// Eight stores opening one fresh database at once all succeed, the
/// migration applied once (the runners queue on the named lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_first_opens_all_succeed() {
    support::sql::run::<MySql, _, _>("eight_opens", |h| {
        support::sql::eight_concurrent_first_opens_all_succeed(h, 2)
    })
    .await;
}
