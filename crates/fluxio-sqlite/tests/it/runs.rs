//! Contract rule 24: a durable run starts and ends in one transaction each
//! (`begin_run`, `finish_run`), so a 10-stage run commits 11 times, counted
//! by SQLite's commit hook on the store's writing connection: the SQL
//! stores' shared checks (`fluxio_test_support::sql`, `runs.rs` there).

fluxio_test_support::sql_tests! { crate::sql::Sqlite;
    rule24_begin_and_finish_run_answer_as_the_defaults,
    rule24_a_ten_stage_run_commits_eleven_times,
    rule24_a_ten_stage_durable_invoke_commits_eleven_times,
}
