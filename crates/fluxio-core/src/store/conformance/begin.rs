//! Checks of beginning and ending a run in one call each (contract rule
//! 24): [`CheckpointStore::begin_run`] and [`CheckpointStore::finish_run`]
//! do what their calls one by one do, whether the store overrides them or
//! not.

use std::time::Duration;

use super::{
    Harness, acquire, assert_lease_free, assert_lease_held, checkpoint, namespace, race,
    two_handles,
};
use crate::error::Error;
use crate::store::{Begin, Begun, Checkpoint, CheckpointStore, RunStatus};

const TTL: Duration = Duration::from_secs(30);

/// `run_id`'s checkpoint number `seq`, at ip `seq`, whole.
fn numbered(run_id: &str, seq: u32) -> Checkpoint {
    let mut cp = checkpoint(run_id, seq).in_pipeline("p");
    cp.seq = seq;
    cp
}

/// Begins the run `run_id` with [`Begin::Replace`]: its first checkpoint
/// written, its lease held.
async fn begin<S: CheckpointStore>(store: &S, run_id: &str) -> Begun {
    store
        .begin_run(numbered(run_id, 0), TTL, Begin::Replace)
        .await
        .unwrap_or_else(|e| panic!("begin {run_id}: {e}"))
}

/// [`begin`]s the run `run_id`, and finishes it at once with its completed
/// checkpoint 1, deleting it when `delete` says so.
async fn begin_and_complete<S: CheckpointStore>(store: &S, run_id: &str, delete: bool) {
    let begun = begin(store, run_id).await;
    store
        .finish_run(numbered(run_id, 1).completed(), begun.lease, delete)
        .await
        .unwrap_or_else(|e| panic!("finish {run_id}: {e}"));
}

/// Rule 24: `begin_run` with [`Begin::Replace`] takes the lease and
/// replaces the stored run (its whole journal) with the first checkpoint;
/// while another owner holds the lease it is refused and changes nothing;
/// the lease it returns fences like one from `acquire_lease`.
pub async fn rule24_begin_run_replaces_a_stored_run_under_a_new_lease<H: Harness>(h: &H) {
    let ns = namespace("rule24_replace");
    let (store, other) = two_handles(h, &ns).await;
    let key = numbered("r", 0).key();
    let old = acquire(&other, &key, TTL).await;
    for seq in 0..3 {
        other
            .save_fenced(numbered("r", seq), &old)
            .await
            .expect("fenced save");
    }
    match store.begin_run(numbered("r", 0), TTL, Begin::Replace).await {
        Err(Error::RunIdInUse { run_id }) => assert_eq!(run_id, key),
        other => panic!("begin_run of a held run: {other:?}"),
    }
    assert_eq!(
        store.history(&key).await.expect("history").len(),
        3,
        "a refused begin changes nothing"
    );
    other.release_lease(old).await.expect("release");

    let mut first = numbered("r", 0);
    first.context = crate::Context::new()
        .set("fresh", true)
        .expect("a bool")
        .snapshot();
    let begun = store
        .begin_run(first.clone(), TTL, Begin::Replace)
        .await
        .expect("begin");
    assert!(begun.started, "Replace always writes the first checkpoint");
    let history = store.history(&key).await.expect("history");
    assert_eq!(history.len(), 1, "the old journal is gone: {history:?}");
    assert_eq!(history[0].context, first.context);
    assert_lease_held(&other, &key, TTL, "the lease is held").await;
    store
        .save_fenced(numbered("r", 1), &begun.lease)
        .await
        .expect("the begun lease fences writes");
    assert_eq!(
        store.load(&key).await.expect("load").map(|c| c.seq),
        Some(1)
    );
}

/// Rule 24: `begin_run` with [`Begin::IfAbsent`] writes the first
/// checkpoint only when nothing is stored; over a stored run it takes the
/// lease and leaves the run as it was, for the caller to decide.
pub async fn rule24_begin_run_if_absent_leaves_a_stored_run_alone<H: Harness>(h: &H) {
    let ns = namespace("rule24_ifabsent");
    let (store, other) = two_handles(h, &ns).await;
    let fresh = store
        .begin_run(numbered("new", 0), TTL, Begin::IfAbsent)
        .await
        .expect("begin");
    assert!(fresh.started);
    let key = numbered("new", 0).key();
    assert_eq!(store.history(&key).await.expect("history").len(), 1);
    store
        .finish_run(numbered("new", 1).completed(), fresh.lease, false)
        .await
        .expect("finish");

    let again = other
        .begin_run(numbered("new", 0), TTL, Begin::IfAbsent)
        .await
        .expect("begin over a stored run");
    assert!(!again.started, "a stored run is left alone");
    let stored = store.load(&key).await.expect("load").expect("a run");
    assert_eq!(
        (stored.seq, stored.status),
        (1, RunStatus::Completed),
        "untouched"
    );
    assert_lease_held(&store, &key, TTL, "the lease is held all the same").await;
    other.release_lease(again.lease).await.expect("release");
}

/// Rule 24: of concurrent `begin_run`s of one run id, exactly one begins;
/// the others are refused with `RunIdInUse`.
pub async fn rule24_concurrent_begins_of_one_run_begin_once<H: Harness>(h: &H) {
    let ns = namespace("rule24_race");
    let results = race(h, &ns, 16, |i, store| async move {
        let begin = if i % 2 == 0 {
            Begin::Replace
        } else {
            Begin::IfAbsent
        };
        store
            .begin_run(numbered("raced", 0), TTL, begin)
            .await
            .map(|b| b.started)
    })
    .await;
    let (mut begun, mut in_use) = (0, 0);
    for result in results {
        match result {
            Ok(true) => begun += 1,
            Err(Error::RunIdInUse { .. }) => in_use += 1,
            other => panic!("unexpected outcome: {other:?}"),
        }
    }
    assert_eq!((begun, in_use), (1, 15));
}

/// Rule 24: `finish_run` writes the last checkpoint and frees the lease at
/// once, deleting the run when asked; with a lease that was taken over it
/// is refused and the stored run stays the new owner's; on a cancelled run
/// it is refused with `Cancelled` and frees the lease all the same.
pub async fn rule24_finish_run_writes_the_last_checkpoint_and_frees_the_lease<H: Harness>(h: &H) {
    let ns = namespace("rule24_finish");
    let (store, other) = two_handles(h, &ns).await;
    let key = numbered("done", 0).key();
    begin_and_complete(&store, "done", false).await;
    let last = store.load(&key).await.expect("load").expect("a run");
    assert_eq!((last.seq, last.status), (1, RunStatus::Completed));
    assert_eq!(store.history(&key).await.expect("history").len(), 2);
    assert_lease_free(&other, &key).await;

    // delete: the run is gone with its history, and the lease free
    let gone = numbered("gone", 0).key();
    begin_and_complete(&store, "gone", true).await;
    assert!(!store.exists(&gone).await.expect("exists"));
    assert!(store.history(&gone).await.expect("history").is_empty());
    assert_lease_free(&other, &gone).await;

    // a stale lease: refused, the new owner's run untouched
    let stale_key = numbered("stale", 0).key();
    let stale = store
        .begin_run(
            numbered("stale", 0),
            Duration::from_millis(300),
            Begin::Replace,
        )
        .await
        .expect("begin");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let taken = other
        .begin_run(numbered("stale", 0), TTL, Begin::Replace)
        .await
        .expect("takeover after expiry");
    assert!(taken.lease.token() > stale.lease.token());
    match store
        .finish_run(numbered("stale", 1).failed("late"), stale.lease, false)
        .await
    {
        Err(Error::LeaseLost { run_id, .. }) => assert_eq!(run_id, stale_key),
        other => panic!("finish with a lost lease: {other:?}"),
    }
    let stored = store.load(&stale_key).await.expect("load").expect("a run");
    assert_eq!((stored.seq, stored.status), (0, RunStatus::Running));
    let what = "the new owner still holds its lease";
    assert_lease_held(&store, &stale_key, TTL, what).await;
    other.release_lease(taken.lease).await.expect("release");

    // a cancelled run: refused, and the lease freed
    let cancelled = numbered("cancelled", 0).key();
    let begun = begin(&store, "cancelled").await;
    other.cancel(&cancelled).await.expect("cancel");
    match store
        .finish_run(numbered("cancelled", 1).completed(), begun.lease, false)
        .await
    {
        Err(Error::Cancelled { run_id }) => assert_eq!(run_id, cancelled),
        other => panic!("finish of a cancelled run: {other:?}"),
    }
    let stored = store.load(&cancelled).await.expect("load").expect("a run");
    assert!(stored.is_cancelled(), "still cancelled: {stored:?}");
    assert_lease_free(&other, &cancelled).await;
}
