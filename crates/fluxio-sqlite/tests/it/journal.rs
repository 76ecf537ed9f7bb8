//! The run journal in SQLite (contract rules 18 and 20): the SQL stores'
//! shared checks (`fluxio_test_support::sql`, `journal.rs` there) on a file
//! of each test's own. A run an earlier build wrote (one blob per run,
//! schema version 1) is migrated and resumes; a delta writes only the keys
//! that changed; a load reads from the last whole checkpoint on and nothing
//! before it.

fluxio_test_support::sql_tests! { crate::sql::Sqlite;
    rule18_a_row_of_an_earlier_build_is_migrated_and_resumes,
    rule18_a_durable_run_writes_its_context_once_then_only_changed_keys,
    rule20_a_load_reads_only_from_the_last_whole_checkpoint,
}
