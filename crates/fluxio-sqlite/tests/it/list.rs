//! Listing runs on SQLite (contract rule 21), past what the conformance
//! suite checks through the API: a listing reads the run rows, never a
//! journal; a row it cannot read is a typed error; a file of schema
//! version 3 gains the attempt column and lists.

use fluxio_core::Error;
use fluxio_core::store::{CheckpointStore, RunFilter, RunState};
use fluxio_sqlite::SqliteStore;
use fluxio_test_support as support;

/// Rule 21: SQLite lists natively (so the conformance suite's `rule21`
/// checks run in full on it, rather than stopping at `Unsupported`), from
/// the run rows: a run whose every step is unreadable still lists, with its
/// status, step, attempt and error, while loading it fails.
#[tokio::test]
async fn rule21_a_listing_reads_the_run_rows_not_the_journals() {
    let dir = support::TempDir::new("list_rows");
    let file = dir.db("x");
    let store = SqliteStore::connect(&file).await.expect("open");
    let mut cp = support::checkpoint("r", 2)
        .in_pipeline("orders")
        .failed("card declined");
    cp.attempt = 7;
    store.save(cp.clone()).await.expect("save");
    let mut conn = support::sqlite::raw_connection(&file).await;
    sqlx::query("UPDATE fluxio_checkpoints_steps SET payload = X'00'")
        .execute(&mut conn)
        .await
        .expect("break every step");
    assert!(matches!(
        store.load(&cp.key()).await,
        Err(Error::CorruptCheckpoint { .. })
    ));

    let page = store
        .list_runs(&RunFilter::new().pipeline("orders").state(RunState::Failed))
        .await
        .expect("SQLite lists natively");
    assert_eq!(page.runs.len(), 1, "{page:?}");
    let run = &page.runs[0];
    assert_eq!(
        (
            run.key.as_str(),
            run.run_id.as_str(),
            run.step.as_str(),
            run.attempt,
            run.error_message.as_deref(),
            run.state
        ),
        (
            "orders/r",
            "r",
            "step-2",
            7,
            Some("card declined"),
            RunState::Failed
        )
    );
}

/// Rule 21: a row whose status this build does not know (a newer build's,
/// or an operator's edit) is a typed error naming the run, not a guess.
#[tokio::test]
async fn rule21_a_row_with_an_unknown_status_is_a_corrupt_checkpoint_error() {
    let dir = support::TempDir::new("list_status");
    let file = dir.db("x");
    let store = SqliteStore::connect(&file).await.expect("open");
    let cp = support::checkpoint("r", 1).in_pipeline("orders");
    store.save(cp.clone()).await.expect("save");
    let mut conn = support::sqlite::raw_connection(&file).await;
    sqlx::query("UPDATE fluxio_checkpoints SET status = 'paused'")
        .execute(&mut conn)
        .await
        .expect("an unknown status");
    match store.list_runs(&RunFilter::new()).await {
        Err(Error::CorruptCheckpoint { run_id, reason, .. }) => {
            assert_eq!(run_id, "orders/r");
            assert!(reason.contains("`paused`"), "{reason}");
        }
        other => panic!("expected CorruptCheckpoint, got {other:?}"),
    }
}

/// Rule 21: schema version 4 adds the attempt column to a file of version
/// 3 (its rows read attempt 0 until their run's next write) and the
/// listing's indexes; an older build, which never names the column, still
/// writes rows.
#[tokio::test]
async fn rule21_a_file_of_schema_version_3_gains_the_attempt_and_lists() {
    let dir = support::TempDir::new("list_migrate");
    let file = dir.db("x");
    let store = SqliteStore::connect(&file).await.expect("open");
    let mut cp = support::checkpoint("r", 1).in_pipeline("orders");
    cp.attempt = 4;
    store.save(cp.clone()).await.expect("save");
    drop(store);
    let mut conn = support::sqlite::raw_connection(&file).await;
    sqlx::raw_sql(
        "DROP INDEX fluxio_checkpoints_state; DROP INDEX fluxio_checkpoints_pipeline_state; \
         ALTER TABLE fluxio_checkpoints DROP COLUMN attempt; \
         DELETE FROM _fluxio_migrations WHERE version = 4",
    )
    .execute(&mut conn)
    .await
    .expect("back to schema version 3");

    let store = SqliteStore::connect(&file).await.expect("migrates");
    let attempts = |store: SqliteStore| async move {
        let page = store.list_runs(&RunFilter::new()).await.expect("list");
        page.runs
            .iter()
            .map(|r| (r.key.clone(), r.attempt))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        attempts(store.clone()).await,
        [("orders/r".to_owned(), 0)],
        "0 until the next write"
    );
    store.save(cp.clone()).await.expect("save again");
    assert_eq!(attempts(store.clone()).await, [("orders/r".to_owned(), 4)]);
    sqlx::query(
        "INSERT INTO fluxio_checkpoints \
           (run_id, payload, version, ip, step, status, created_at, updated_at) \
         VALUES ('orders/old', X'', 'v', 0, '', 'failed', 0, 0)",
    )
    .execute(&mut conn)
    .await
    .expect("a row as an older build writes it");
    let failed = store
        .list_runs(&RunFilter::new().state(RunState::Failed))
        .await
        .expect("list");
    assert_eq!(failed.runs.len(), 1);
    assert_eq!(
        (failed.runs[0].key.as_str(), failed.runs[0].attempt),
        ("orders/old", 0)
    );
}
