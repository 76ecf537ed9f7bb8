//! Checks of handing runs back to the recovery workers (contract rule 22).

use std::time::Duration;

use super::{Harness, acquire, checkpoint, namespace};
use crate::error::Error;
use crate::store::{
    CheckpointStore, DueFilter, Lease, Pending, RunFilter, RunState, RunStatus, retry_run,
};

/// A long lease, for the owners and workers the checks play.
const TTL: Duration = Duration::from_secs(30);

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

/// The due runs of pipeline `p` of `store` by `by`: (key, due time).
async fn due_by<S: CheckpointStore>(store: &S, by: u64) -> Vec<(String, u64)> {
    let due = store
        .due_runs(&DueFilter::new(by).pipeline("p"))
        .await
        .expect("due_runs");
    due.into_iter().map(|r| (r.key, r.due_ms)).collect()
}

/// Sets the recovery time of the run under `key` to `due`, holding its
/// lease for the call; `false` for a store without a due-index.
async fn set<S: CheckpointStore>(store: &S, key: &str, due: Option<u64>) -> bool {
    let lease = acquire(store, key, TTL).await;
    let set = store.set_due(&lease, due).await;
    store.release_lease(lease).await.expect("release");
    match set {
        Ok(()) => true,
        Err(Error::Unsupported { .. }) => false,
        Err(e) => panic!("set_due {key}: {e}"),
    }
}

/// Rules 22 and 27: a recovery worker's backoff is kept in the due-index.
/// A recovery time set under a run's lease makes a running (abandoned) or
/// failed run due from then, claimed with its lease like any due run; a
/// parked or finished run keeps the due time its checkpoint gives. The
/// run's next write (a checkpoint, a cancel, a delete) clears it, and so
/// does `None`; a lease that is not current changes nothing.
pub async fn rule27_a_recovery_time_is_kept_in_the_due_index<H: Harness>(h: &H) {
    let store = h.store(&namespace("rule27_retry")).await;
    let at = 1_800_000_000_000;
    store
        .save(checkpoint("gone", 2).in_pipeline("p"))
        .await
        .expect("save");
    let failed = checkpoint("bad", 3).in_pipeline("p").failed("boom");
    store.save(failed).await.expect("save");
    let done = checkpoint("done", 4).in_pipeline("p").completed();
    store.save(done).await.expect("save");
    let nap = checkpoint("nap", 2)
        .in_pipeline("p")
        .parked(Pending::sleep(at + 50));
    super::park(&store, nap).await;
    if !set(&store, "p/gone", Some(at)).await {
        // no due-index: its worker finds such runs by listing them
        assert!(store.due_runs(&DueFilter::new(at)).await.is_err());
        return;
    }
    assert!(set(&store, "p/bad", Some(at + 10)).await);
    assert!(set(&store, "p/done", Some(at)).await);
    assert!(set(&store, "p/nap", Some(at)).await);
    assert_eq!(due_by(&store, at - 1).await, [], "nothing is due before");
    assert_eq!(due_by(&store, at).await, [("p/gone".to_owned(), at)]);
    assert_eq!(
        due_by(&store, at + 100).await,
        [
            ("p/gone".to_owned(), at),
            ("p/bad".to_owned(), at + 10),
            ("p/nap".to_owned(), at + 50),
        ],
        "a completed run is never due, a sleeping one at its wake time"
    );

    // fenced: a lease given back sets nothing
    let old = acquire(&store, "p/bad", TTL).await;
    let stale = Lease::new(old.run_id(), old.token());
    store.release_lease(old).await.expect("release");
    assert!(matches!(
        store.set_due(&stale, None).await,
        Err(Error::LeaseLost { .. })
    ));
    let missing = acquire(&store, "p/missing", TTL).await;
    assert!(matches!(
        store.set_due(&missing, Some(at)).await,
        Err(Error::CheckpointNotFound { ref run_id }) if run_id == "p/missing"
    ));
    store.release_lease(missing).await.expect("release");

    // claimed with its lease, like any due run, and not due to others then
    let claimed = store
        .claim_due(&DueFilter::new(at).pipeline("p"), TTL)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let claim = claimed.into_iter().next().expect("one");
    assert_eq!((claim.run.key.as_str(), claim.run.due_ms), ("p/gone", at));
    assert_eq!(
        due_by(&store, at).await,
        [],
        "claimed: not due to anyone else"
    );
    // the run's next checkpoint clears it
    let mut next = checkpoint("gone", 3).in_pipeline("p");
    next.seq = 1;
    store.save_fenced(next, &claim.lease).await.expect("write");
    store.release_lease(claim.lease).await.expect("release");
    let keys = |due: Vec<(String, u64)>| due.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
    assert_eq!(keys(due_by(&store, at + 100).await), ["p/bad", "p/nap"]);

    // `None` clears it; so does a cancel, and a delete
    assert!(set(&store, "p/bad", None).await);
    assert_eq!(keys(due_by(&store, at + 100).await), ["p/nap"]);
    assert!(set(&store, "p/bad", Some(at)).await);
    store.cancel("p/bad").await.expect("cancel");
    assert_eq!(keys(due_by(&store, at + 100).await), ["p/nap"]);
    assert!(set(&store, "p/gone", Some(at)).await);
    store.delete("p/gone").await.expect("delete");
    store
        .save(checkpoint("gone", 2).in_pipeline("p"))
        .await
        .expect("save anew");
    assert_eq!(
        keys(due_by(&store, at + 100).await),
        ["p/nap"],
        "a run stored anew under the key is not due"
    );
    let cancelled = acquire(&store, "p/bad", TTL).await;
    assert!(matches!(
        store.set_due(&cancelled, Some(at)).await,
        Err(Error::Cancelled { .. })
    ));
    store.release_lease(cancelled).await.expect("release");
}
