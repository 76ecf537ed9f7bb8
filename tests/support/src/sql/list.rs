//! Listing runs in SQL (contract rule 21), past what the conformance suite
//! checks through the API: a listing reads the run rows, never a journal; a
//! row it cannot read is a typed error; tables of schema version 3 gain the
//! attempt column and list.

use fluxio_core::Error;
use fluxio_core::store::{CheckpointStore, RunFilter, RunState};

use super::{SqlHarness, open};

/// Rule 21: an SQL store lists natively (so the conformance suite's
/// `rule21` checks run in full on it, rather than stopping at
/// `Unsupported`), from the run rows: a run whose every step is unreadable
/// still lists, with its status, step, attempt, error and start, while
/// loading it fails.
pub async fn rule21_a_listing_reads_the_run_rows_not_the_journals<H: SqlHarness>(h: &H) {
    let store = open(h).await;
    let mut cp = crate::checkpoint("r", 2)
        .in_pipeline("orders")
        .failed("card declined");
    cp.attempt = 7;
    store.save(cp.clone()).await.expect("save");
    let garbage = h.blob(&[0]);
    h.execute(&format!(
        "UPDATE {{s}}.fluxio_checkpoints_steps SET payload = {garbage}"
    ))
    .await;
    assert!(matches!(
        store.load(&cp.key()).await,
        Err(Error::CorruptCheckpoint { .. })
    ));

    let page = store
        .list_runs(&RunFilter::new().pipeline("orders").state(RunState::Failed))
        .await
        .unwrap_or_else(|e| panic!("{} lists natively: {e:?}", H::BACKEND));
    assert_eq!(page.runs.len(), 1, "{page:?}");
    let run = &page.runs[0];
    assert_eq!(
        (
            run.key.as_str(),
            run.run_id.as_str(),
            run.step.as_str(),
            run.attempt,
            run.error_message.as_deref(),
            run.state,
            run.created_at_ms
        ),
        (
            "orders/r",
            "r",
            "step-2",
            7,
            Some("card declined"),
            RunState::Failed,
            cp.created_at_ms
        )
    );
}

/// Rule 21: a row whose status this build does not know (a newer build's,
/// or an operator's edit) is a typed error naming the run, not a guess.
pub async fn rule21_a_row_with_an_unknown_status_is_a_corrupt_checkpoint_error<H: SqlHarness>(
    h: &H,
) {
    let store = open(h).await;
    let cp = crate::checkpoint("r", 1).in_pipeline("orders");
    store.save(cp.clone()).await.expect("save");
    h.execute("UPDATE {s}.fluxio_checkpoints SET status = 'resting'")
        .await;
    match store.list_runs(&RunFilter::new()).await {
        Err(Error::CorruptCheckpoint { run_id, reason, .. }) => {
            assert_eq!(run_id, "orders/r");
            assert!(reason.contains("`resting`"), "{reason}");
        }
        other => panic!("expected CorruptCheckpoint, got {other:?}"),
    }
}

/// Rule 21: schema version 4 adds the attempt column to tables of version 3
/// (their rows read attempt 0 until their run's next write) and the
/// listing's indexes; an older build, which never names the column, still
/// writes rows.
pub async fn rule21_tables_of_schema_version_3_gain_the_attempt_and_list<H: SqlHarness>(h: &H) {
    let first = open(h).await;
    let mut cp = crate::checkpoint("r", 1).in_pipeline("orders");
    cp.attempt = 4;
    first.save(cp.clone()).await.expect("save");
    drop(first);
    h.undo_migration(4).await;

    let store = open(h).await;
    let attempts = |store: H::Store| async move {
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
    // a row as an older build writes it
    h.insert_old_row("orders/old", "v", "failed", &[]).await;
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
