//! Listing runs on SQLite (contract rule 21), past what the conformance
//! suite checks through the API: the SQL stores' shared checks
//! (`fluxio_test_support::sql`, `list.rs` there). A listing reads the run
//! rows, never a journal; a row it cannot read is a typed error; a file of
//! schema version 3 gains the attempt column and lists.

fluxio_test_support::sql_tests! { crate::sql::Sqlite;
    rule21_a_listing_reads_the_run_rows_not_the_journals,
    rule21_a_row_with_an_unknown_status_is_a_corrupt_checkpoint_error,
    rule21_a_file_of_schema_version_3_gains_the_attempt_and_lists
        = rule21_tables_of_schema_version_3_gain_the_attempt_and_list,
}
