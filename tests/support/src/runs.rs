//! What the SQL stores' tests of `begin_run` and `finish_run` share (contract
//! rule 24): the checkpoints of a 10-stage durable run, and checks that a
//! store's one-transaction overrides answer as the trait's defaults do.

use std::time::Duration;

use fluxio_core::store::{Begin, Change, Checkpoint, CheckpointStore, Lease, RunStatus};
use fluxio_core::{Context, Error};

/// A lease long enough for any test.
pub const TTL: Duration = Duration::from_secs(60);

/// The leases of a purge check, taken on `store` for `ttl`: `r` acquired
/// and released, then `held` acquired and kept (returned), then `last`
/// acquired and released, so the greatest token stored is a released
/// lease's.
///
/// # Panics
/// When the store refuses.
pub async fn leases_before_a_purge<S: CheckpointStore + ?Sized>(store: &S, ttl: Duration) -> Lease {
    let first = store.acquire_lease("r", ttl).await.expect("acquire");
    store.release_lease(first).await.expect("release");
    let held = store.acquire_lease("held", ttl).await.expect("acquire");
    let last = store.acquire_lease("last", ttl).await.expect("acquire");
    store.release_lease(last).await.expect("release");
    held
}

/// The checkpoints a durable run of 10 stages, each setting one key, writes
/// when it runs through: checkpoint 0 (whole, before the first stage), one
/// delta before each of the 9 stages after it, and the completed one (a
/// delta setting the tenth key). `key` is `pipeline/run`.
#[must_use]
pub fn ten_stage_run(pipeline: &str, run: &str) -> Vec<Checkpoint> {
    let mut ctx = Context::new();
    let mut out = Vec::new();
    for seq in 0..=10u32 {
        let before = ctx.clone();
        if seq > 0 {
            ctx = ctx
                .set(format!("stage-{seq}"), u64::from(seq))
                .expect("a number serializes");
        }
        let mut cp = Checkpoint::new(run, "0123456789ab", seq, "stage", ctx.snapshot())
            .in_pipeline(pipeline);
        cp.seq = seq;
        if seq > 0 {
            cp.change = Change::between(&before.snapshot(), &ctx.snapshot());
        }
        if seq == 10 {
            cp = cp.completed();
        }
        out.push(cp);
    }
    out
}

/// The checks of `begin_run` and `finish_run` on `store` (empty, or with no
/// run of pipeline `pipeline`), each as the defaults answer: who wins the
/// lease, what `Replace` and `IfAbsent` leave, and that a refused finish
/// still gives the lease back.
///
/// # Panics
/// When the store answers otherwise.
pub async fn check_begin_and_finish(store: &dyn CheckpointStore, pipeline: &str) {
    let run = ten_stage_run(pipeline, "a");
    let key = run[0].key();

    // Replace on an empty key: the lease and checkpoint 0.
    let begun = store
        .begin_run(run[0].clone(), TTL, Begin::Replace)
        .await
        .expect("begin");
    assert!(begun.started);
    assert_eq!(begun.lease.run_id(), key);
    let stored = store.load(&key).await.expect("load").expect("stored");
    assert_eq!((stored.seq, stored.status), (0, RunStatus::Running));

    // The lease is held: a second begin is refused and writes nothing.
    let other = store
        .begin_run(run[0].clone(), TTL, Begin::Replace)
        .await
        .expect_err("the lease is held");
    assert!(matches!(other, Error::RunIdInUse { .. }), "{other:?}");
    for cp in &run[1..10] {
        store
            .save_fenced(cp.clone(), &begun.lease)
            .await
            .expect("save");
    }
    let first_token = begun.lease.token();

    // The completed checkpoint and the release: another worker can begin at
    // once, with a greater token; IfAbsent finds the completed run and
    // writes nothing.
    store
        .finish_run(run[10].clone(), begun.lease, false)
        .await
        .expect("finish");
    let stored = store.load(&key).await.expect("load").expect("stored");
    assert_eq!((stored.seq, stored.status), (10, RunStatus::Completed));
    assert_eq!(stored.context.len(), 10);
    let again = store
        .begin_run(run[0].clone(), TTL, Begin::IfAbsent)
        .await
        .expect("the lease was released");
    assert!(!again.started);
    assert!(again.lease.token() > first_token);
    let stored = store.load(&key).await.expect("load").expect("stored");
    assert_eq!(stored.seq, 10, "IfAbsent left the stored run");
    store.release_lease(again.lease).await.expect("release");

    // Replace drops the old journal: only checkpoint 0 is left.
    let fresh = store
        .begin_run(run[0].clone(), TTL, Begin::Replace)
        .await
        .expect("begin again");
    assert!(fresh.started);
    let history = store.history(&key).await.expect("history");
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].seq, 0);

    // finish with delete: nothing stored, the lease free.
    store
        .save_fenced(run[1].clone(), &fresh.lease)
        .await
        .expect("save");
    let mut last = run[2].clone();
    last = last.completed();
    store
        .finish_run(last, fresh.lease, true)
        .await
        .expect("finish and delete");
    assert!(!store.exists(&key).await.expect("exists"));
    let lease = store.acquire_lease(&key, TTL).await.expect("free");
    store.release_lease(lease).await.expect("release");

    // A first checkpoint that is a delta has no predecessor: refused, and
    // the lease is not held afterwards.
    let b = ten_stage_run(pipeline, "b");
    let err = store
        .begin_run(b[1].clone(), TTL, Begin::Replace)
        .await
        .expect_err("a delta without its predecessor");
    assert!(matches!(err, Error::RunDeleted { seq: 1, .. }), "{err:?}");
    assert!(!store.exists(&b[0].key()).await.expect("exists"));
    let lease = store
        .acquire_lease(&b[0].key(), TTL)
        .await
        .expect("no lease was left taken");
    store.release_lease(lease).await.expect("release");

    // A cancelled run: finish is refused with Cancelled, the run stays
    // cancelled, and the lease is given back all the same.
    let c = ten_stage_run(pipeline, "c");
    let begun = store
        .begin_run(c[0].clone(), TTL, Begin::Replace)
        .await
        .expect("begin");
    store.cancel(&c[0].key()).await.expect("cancel");
    let err = store
        .finish_run(c[1].clone(), begun.lease, false)
        .await
        .expect_err("cancelled");
    assert!(matches!(err, Error::Cancelled { .. }), "{err:?}");
    let stored = store
        .load(&c[0].key())
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(stored.status, RunStatus::Cancelled);
    let lease = store
        .acquire_lease(&c[0].key(), TTL)
        .await
        .expect("finish released the lease");

    // A lease that was taken over: finish is refused with LeaseLost and
    // writes nothing.
    let d = ten_stage_run(pipeline, "d");
    let short = store
        .begin_run(d[0].clone(), Duration::from_millis(50), Begin::Replace)
        .await
        .expect("begin");
    tokio::time::sleep(Duration::from_millis(120)).await;
    let taker = store
        .acquire_lease(&d[0].key(), TTL)
        .await
        .expect("the short lease expired");
    let err = store
        .finish_run(d[1].clone(), short.lease, false)
        .await
        .expect_err("lost");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    let stored = store
        .load(&d[0].key())
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(stored.seq, 0, "the lost finish wrote nothing");
    store.release_lease(taker).await.expect("release");
    store.release_lease(lease).await.expect("release");
}

/// Runs the 10-stage run `run` of [`ten_stage_run`] against `store` as a
/// durable pipeline drives it with `begin_run` and `finish_run`: begin with
/// checkpoint 0, a fenced save of each of checkpoints 1 to 9, finish with
/// the completed one.
///
/// # Panics
/// When a call fails.
pub async fn drive(store: &dyn CheckpointStore, run: &[Checkpoint]) {
    let lease = drive_to_the_last(store, run).await;
    store
        .finish_run(run[run.len() - 1].clone(), lease, false)
        .await
        .expect("finish");
}

/// [`drive`] up to the last checkpoint: begin with checkpoint 0, a fenced
/// save of each checkpoint after it but the last; the run's lease, held.
///
/// # Panics
/// When a call fails.
pub async fn drive_to_the_last(store: &dyn CheckpointStore, run: &[Checkpoint]) -> Lease {
    let begun = store
        .begin_run(run[0].clone(), TTL, Begin::Replace)
        .await
        .expect("begin");
    for cp in &run[1..run.len() - 1] {
        store
            .save_fenced(cp.clone(), &begun.lease)
            .await
            .expect("save");
    }
    begun.lease
}
