//! Checks of handing runs back to the recovery workers (contract rule 22).

use std::time::Duration;

use super::{Harness, checkpoint, namespace};
use crate::error::Error;
use crate::store::{CheckpointStore, RunFilter, RunState, RunStatus, retry_run};

/// Rule 22: `retry_run` turns a failed run, and one recovery gave up on,
/// into an abandoned one at the same stage and context with its attempts
/// started over, keeping the failure in the history; it refuses a run that
/// is finished, missing or held by a worker, and changes nothing then.
pub async fn rule22_retry_hands_a_failed_run_back_to_the_workers<H: Harness>(h: &H) {
    let ns = namespace("rule22_retry");
    let store = h.store(&ns).await;
    let failed = checkpoint(&format!("{ns}-failed"), 3)
        .in_pipeline("p")
        .failed("card declined");
    store.save(failed.clone()).await.expect("save");
    let retried = retry_run(&store, &failed.key()).await.expect("retry");
    let loaded = store.load(&failed.key()).await.expect("load").expect("run");
    assert_eq!(loaded, retried, "retry returns what it stored");
    assert_eq!(
        (loaded.status, loaded.ip, loaded.attempt, loaded.seq),
        (RunStatus::Running, 3, 0, failed.seq + 1)
    );
    assert_eq!(loaded.error_message, None);
    assert_eq!(loaded.context, failed.context, "the context is kept");
    let history = store.history(&failed.key()).await.expect("history");
    assert_eq!(history.len(), 2, "the failure stays in the history");
    assert_eq!(history[0].error_message.as_deref(), Some("card declined"));
    match store
        .list_runs(&RunFilter::new().state(RunState::Abandoned))
        .await
    {
        Err(Error::Unsupported { .. }) => {}
        Ok(page) => assert!(
            page.runs.iter().any(|r| r.key == failed.key()),
            "a retried run lists as abandoned: {page:?}"
        ),
        Err(e) => panic!("list_runs: {e}"),
    }
    // retrying it again changes nothing: it already waits for a worker
    assert_eq!(
        retry_run(&store, &failed.key()).await.expect("again"),
        loaded
    );

    let stuck = checkpoint(&format!("{ns}-stuck"), 2)
        .in_pipeline("p")
        .failed("timeout")
        .needing_attention();
    store.save(stuck.clone()).await.expect("save");
    let retried = retry_run(&store, &stuck.key()).await.expect("retry");
    assert_eq!((retried.status, retried.attempt), (RunStatus::Running, 0));

    let done = checkpoint(&format!("{ns}-done"), 4)
        .in_pipeline("p")
        .completed();
    store.save(done.clone()).await.expect("save");
    assert!(matches!(
        retry_run(&store, &done.key()).await,
        Err(Error::RunFinished { status: RunStatus::Completed, ref run_id }) if *run_id == done.key()
    ));
    assert_eq!(store.load(&done.key()).await.expect("load"), Some(done));

    let missing = format!("p/{ns}-missing");
    assert!(matches!(
        retry_run(&store, &missing).await,
        Err(Error::CheckpointNotFound { ref run_id }) if *run_id == missing
    ));

    let held = checkpoint(&format!("{ns}-held"), 1)
        .in_pipeline("p")
        .failed("boom");
    store.save(held.clone()).await.expect("save");
    let lease = store
        .acquire_lease(&held.key(), Duration::from_secs(30))
        .await
        .expect("lease");
    assert!(matches!(
        retry_run(&store, &held.key()).await,
        Err(Error::RunIdInUse { .. })
    ));
    assert_eq!(store.load(&held.key()).await.expect("load"), Some(held));
    store.release_lease(lease).await.expect("release");
}
