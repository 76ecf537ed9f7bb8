//! Checks of [`CheckpointStore::cancel`] (contract rule 14): what a cancel
//! does to the stored checkpoint, and how it fences the run's owner.
//!
//! Two handles on one namespace stand for two processes: the owner's, which
//! holds the lease and writes fenced, and the canceller's. Every run id
//! carries the check's namespace: the default cancel of a four-method store
//! marks runs per store *type* (like its leases), so checks running at the
//! same time must not share run ids.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::{
    Harness, acquire, assert_lease_held, checkpoint, namespace, save_owned, save_released,
    two_handles,
};
use crate::context::Context;
use crate::error::Error;
use crate::store::{Checkpoint, CheckpointStore, RunStatus};

const TTL: Duration = Duration::from_secs(30);

/// The checkpoint of run `run` of pipeline `pipeline` at `ip`, with a
/// context worth keeping: its key is `pipeline/run`.
pub(super) fn at(pipeline: &str, run: &str, ip: u32) -> Checkpoint {
    let mut cp = checkpoint(run, ip).in_pipeline(pipeline);
    cp.context = Context::new()
        .set("ip", ip)
        .and_then(|c| c.set("name", "ünïcode 🦀"))
        .map(|c| c.snapshot())
        .unwrap_or_else(|e| panic!("the context serializes: {e}"));
    cp
}

async fn load<S: CheckpointStore>(store: &S, key: &str) -> Checkpoint {
    store
        .load(key)
        .await
        .unwrap_or_else(|e| panic!("load {key}: {e}"))
        .unwrap_or_else(|| panic!("{key} is stored"))
}

/// `stored` is `before`, cancelled: the same run, position, step, context,
/// attempt, start and error message.
fn assert_cancelled_version_of(stored: &Checkpoint, before: &Checkpoint, what: &str) {
    assert_eq!(stored.status, RunStatus::Cancelled, "{what}: {stored:?}");
    let mut expected = before.clone();
    expected.status = RunStatus::Cancelled;
    expected.updated_at_ms = stored.updated_at_ms;
    // the cancel is the next checkpoint of the run's journal (rule 18)
    expected.seq = before.seq + 1;
    expected.change = crate::store::Change::none();
    expected.keep_from = 0;
    expected.branches.clear();
    assert_eq!(
        stored, &expected,
        "{what}: only the status and the time change"
    );
}

fn assert_cancelled_error(result: crate::Result<()>, key: &str, what: &str) {
    match result {
        Err(Error::Cancelled { run_id }) => assert_eq!(run_id, key, "{what}"),
        other => panic!("{what}: expected Error::Cancelled, got {other:?}"),
    }
}

/// The next owner of the cancelled run `cancelled` (`store` takes its
/// lease) is refused its fenced save of `next` with `Cancelled`, and the
/// run stays as it was.
async fn assert_next_owner_refused<S: CheckpointStore>(
    store: &S,
    next: Checkpoint,
    cancelled: &Checkpoint,
    what: &str,
) {
    let key = next.key();
    let lease = acquire(store, &key, TTL).await;
    assert_cancelled_error(store.save_fenced(next, &lease).await, &key, what);
    assert_eq!(
        &load(store, &key).await,
        cancelled,
        "{what}: nothing changed"
    );
    store.release_lease(lease).await.expect("release");
}

/// A cancel of the finished run `stored` (with `store`) is refused with
/// `RunFinished` saying `status`, and the run is left as it was.
async fn assert_cancel_refused<S: CheckpointStore>(
    store: &S,
    stored: &Checkpoint,
    status: RunStatus,
    what: &str,
) {
    let key = stored.key();
    match store.cancel(&key).await {
        Err(Error::RunFinished { run_id, status: s }) => {
            assert_eq!((run_id.as_str(), s), (key.as_str(), status), "{what}");
        }
        other => panic!("{what}: expected Error::RunFinished({status:?}), got {other:?}"),
    }
    assert_eq!(&load(store, &key).await, stored, "{what}: nothing changed");
}

/// A cancel of a run id with nothing stored is `CheckpointNotFound` naming
/// it, and stores nothing.
pub async fn rule14_cancel_of_an_unknown_run_is_checkpoint_not_found<H: Harness>(h: &H) {
    let ns = namespace("cancel_unknown");
    let store = h.store(&ns).await;
    let key = at("orders", &ns, 1).key();
    match store.cancel(&key).await {
        Err(Error::CheckpointNotFound { run_id }) => assert_eq!(run_id, key),
        other => panic!("expected CheckpointNotFound, got {other:?}"),
    }
    assert!(!store.exists(&key).await.expect("exists"), "nothing stored");
    assert!(
        matches!(
            store.cancel("bad\0id").await,
            Err(Error::InvalidRunId { .. })
        ),
        "a malformed run id is InvalidRunId"
    );
}

/// A running run, its owner holding the lease, is cancelled from another
/// handle: the stored checkpoint is the same one, cancelled; the owner's
/// next fenced save is refused with `Cancelled` and changes nothing; its
/// lease is left alone.
pub async fn rule14_cancel_marks_a_running_run_and_fences_its_owner<H: Harness>(h: &H) {
    let ns = namespace("cancel_running");
    let (owner, canceller) = two_handles(h, &ns).await;
    let running = at("orders", &ns, 2);
    let key = running.key();
    let lease = save_owned(&owner, running.clone(), TTL).await;

    canceller.cancel(&key).await.expect("cancel a running run");
    let cancelled = load(&canceller, &key).await;
    assert_cancelled_version_of(&cancelled, &running, "seen by the canceller");
    assert_eq!(load(&owner, &key).await, cancelled, "seen by the owner");

    assert_cancelled_error(
        owner.save_fenced(at("orders", &ns, 3), &lease).await,
        &key,
        "the owner's next fenced save",
    );
    assert_eq!(
        load(&owner, &key).await,
        cancelled,
        "the refused save changed nothing"
    );
    let what = "the cancel left the owner's lease alone";
    assert_lease_held(&canceller, &key, TTL, what).await;
    owner.release_lease(lease).await.expect("release");
}

/// A completed run cannot be cancelled: `RunFinished` saying completed, and
/// the checkpoint is untouched.
pub async fn rule14_cancel_of_a_completed_run_is_run_finished<H: Harness>(h: &H) {
    let ns = namespace("cancel_completed");
    let store = h.store(&ns).await;
    let done = at("orders", &ns, 9).completed();
    save_released(&store, done.clone(), TTL).await;
    let what = "cancel of a completed run";
    assert_cancel_refused(&store, &done, RunStatus::Completed, what).await;
}

/// A second cancel is `RunFinished` saying cancelled, and changes nothing
/// (not even the time of the write).
pub async fn rule14_cancel_twice_is_run_finished_cancelled<H: Harness>(h: &H) {
    let ns = namespace("cancel_twice");
    let (first, second) = two_handles(h, &ns).await;
    let running = at("orders", &ns, 4);
    let key = running.key();
    first.save(running).await.expect("save");
    first.cancel(&key).await.expect("the first cancel");
    let cancelled = load(&first, &key).await;
    assert_cancel_refused(
        &second,
        &cancelled,
        RunStatus::Cancelled,
        "the second cancel",
    )
    .await;
}

/// A failed run can be cancelled: its error message, position and attempt
/// stay, and a new owner's fenced save is refused.
pub async fn rule14_a_failed_run_can_be_cancelled<H: Harness>(h: &H) {
    let ns = namespace("cancel_failed");
    let (owner, canceller) = two_handles(h, &ns).await;
    let failed = at("orders", &ns, 5).failed("stage `charge` failed: card declined");
    let key = failed.key();
    save_released(&owner, failed.clone(), TTL).await;

    canceller.cancel(&key).await.expect("cancel a failed run");
    let cancelled = load(&owner, &key).await;
    assert_cancelled_version_of(&cancelled, &failed, "a cancelled failure");
    assert_eq!(
        cancelled.error_message.as_deref(),
        Some("stage `charge` failed: card declined")
    );

    let what = "a resume's fenced save";
    assert_next_owner_refused(&owner, at("orders", &ns, 5), &cancelled, what).await;
}

/// A running run whose owner is gone (its lease given back, as after a
/// crash once the lease lapsed) can be cancelled, and whoever takes it over
/// next is fenced out.
pub async fn rule14_a_run_whose_owner_is_gone_can_be_cancelled<H: Harness>(h: &H) {
    let ns = namespace("cancel_orphan");
    let (gone, canceller) = two_handles(h, &ns).await;
    let running = at("orders", &ns, 6);
    let key = running.key();
    save_released(&gone, running.clone(), TTL).await;
    drop(gone);

    canceller.cancel(&key).await.expect("cancel");
    let cancelled = load(&canceller, &key).await;
    assert_cancelled_version_of(&cancelled, &running, "an orphan, cancelled");
    let taker = h.store(&ns).await;
    let what = "the next owner's fenced save";
    assert_next_owner_refused(&taker, at("orders", &ns, 7), &cancelled, what).await;
}

/// A delete removes a cancelled run entirely: a fresh run under the same
/// key (as `invoke` starts one: a new lease, a fenced delete, fenced saves)
/// is not cancelled. Through `delete_fenced`, and through plain `delete`.
pub async fn rule14_delete_clears_a_cancel<H: Harness>(h: &H) {
    let ns = namespace("cancel_delete");
    let (store, canceller) = two_handles(h, &ns).await;
    let first = at("orders", &ns, 2);
    let key = first.key();
    save_released(&store, first, TTL).await;
    canceller.cancel(&key).await.expect("cancel");

    let lease = store.acquire_lease(&key, TTL).await.expect("a new run");
    store
        .delete_fenced(&key, &lease)
        .await
        .expect("a fenced delete of a cancelled run");
    assert!(!store.exists(&key).await.expect("exists"), "deleted");
    let fresh = at("orders", &ns, 0);
    store
        .save_fenced(fresh.clone(), &lease)
        .await
        .expect("the fresh run saves");
    assert_eq!(load(&canceller, &key).await, fresh, "a running checkpoint");

    canceller.cancel(&key).await.expect("cancel the fresh run");
    store.delete(&key).await.expect("a plain delete");
    assert!(!store.exists(&key).await.expect("exists"), "deleted");
    let again = at("orders", &ns, 1);
    store
        .save_fenced(again.clone(), &lease)
        .await
        .expect("saves after a plain delete");
    assert_eq!(load(&canceller, &key).await, again);
    store.release_lease(lease).await.expect("release");
}

/// A plain `save` replaces a cancelled checkpoint like any other, and the
/// run is no longer cancelled: its owner's fenced saves are accepted again.
pub async fn rule14_a_plain_save_replaces_a_cancel<H: Harness>(h: &H) {
    let ns = namespace("cancel_save");
    let (store, canceller) = two_handles(h, &ns).await;
    let running = at("orders", &ns, 3);
    let key = running.key();
    let lease = save_owned(&store, running, TTL).await;
    canceller.cancel(&key).await.expect("cancel");

    let replaced = at("orders", &ns, 4);
    canceller
        .save(replaced.clone())
        .await
        .expect("a plain save replaces it");
    assert_eq!(load(&store, &key).await, replaced, "running again");
    let next = at("orders", &ns, 5);
    store
        .save_fenced(next.clone(), &lease)
        .await
        .expect("the owner's fenced save is accepted again");
    assert_eq!(load(&canceller, &key).await, next);
    canceller
        .cancel(&key)
        .await
        .expect("it can be cancelled again");
    assert_cancelled_error(
        store.save_fenced(at("orders", &ns, 6), &lease).await,
        &key,
        "after the second cancel",
    );
    store.release_lease(lease).await.expect("release");
}

/// A cancel touches its own run only: the run of another pipeline with the
/// same run id (keys `a/<id>` and `b/<id>`) keeps running and saving.
pub async fn rule14_cancel_does_not_touch_another_key<H: Harness>(h: &H) {
    let ns = namespace("cancel_other");
    let (store, canceller) = two_handles(h, &ns).await;
    let (a, b) = (at("a", &ns, 1), at("b", &ns, 1));
    let (key_a, key_b) = (a.key(), b.key());
    let lease_a = save_owned(&store, a, TTL).await;
    let lease_b = save_owned(&store, b.clone(), TTL).await;

    canceller.cancel(&key_a).await.expect("cancel a");
    assert_eq!(load(&canceller, &key_b).await, b, "b is untouched");
    let b2 = at("b", &ns, 2);
    store
        .save_fenced(b2.clone(), &lease_b)
        .await
        .expect("b's owner goes on saving");
    assert_eq!(load(&canceller, &key_b).await, b2);
    assert_cancelled_error(
        store.save_fenced(at("a", &ns, 2), &lease_a).await,
        &key_a,
        "a's owner",
    );
    store.release_lease(lease_a).await.expect("release a");
    store.release_lease(lease_b).await.expect("release b");
}

/// A cancel racing an owner that saves checkpoint after checkpoint (one a
/// millisecond, as quick stages do) wins for good: once it returns, every
/// fenced save is refused, and the stored checkpoint is the last one the
/// owner saved, cancelled (no save lands after the cancel, and the cancel
/// never puts back an older checkpoint). Three rounds.
pub async fn rule14_a_cancel_racing_fenced_saves_wins_for_good<H: Harness>(h: &H) {
    for round in 0..3 {
        let ns = namespace(&format!("cancel_race{round}"));
        let owner = Arc::new(h.store(&ns).await);
        let canceller = h.store(&ns).await;
        let key = at("orders", &ns, 1).key();
        let lease = Arc::new(owner.acquire_lease(&key, TTL).await.expect("acquire"));
        let saved = Arc::new(AtomicU32::new(0));
        let writer = {
            let (owner, lease, saved, ns, key) = (
                Arc::clone(&owner),
                Arc::clone(&lease),
                Arc::clone(&saved),
                ns.clone(),
                key.clone(),
            );
            tokio::spawn(async move {
                for ip in 1..=100_000u32 {
                    match owner.save_fenced(at("orders", &ns, ip), &lease).await {
                        Ok(()) => saved.store(ip, Ordering::SeqCst),
                        Err(Error::Cancelled { run_id }) => {
                            assert_eq!(run_id, key);
                            return ip;
                        }
                        Err(e) => panic!("unexpected: {e}"),
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                panic!("the owner was never refused")
            })
        };
        while saved.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        canceller.cancel(&key).await.expect("cancel");
        let refused_at = writer.await.expect("the owner does not panic");
        let last = saved.load(Ordering::SeqCst);
        assert_eq!(refused_at, last + 1, "round {round}: refused right after");
        let stored = load(&canceller, &key).await;
        assert_cancelled_version_of(
            &stored,
            &at("orders", &ns, last),
            &format!("round {round}: the last save, cancelled"),
        );
        assert_cancelled_error(
            owner.save_fenced(at("orders", &ns, last + 2), &lease).await,
            &key,
            "a later save",
        );
        if let Ok(lease) = Arc::try_unwrap(lease) {
            owner.release_lease(lease).await.expect("release");
        }
    }
}
