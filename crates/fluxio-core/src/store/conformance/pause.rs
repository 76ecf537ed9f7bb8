//! Checks of paused runs (contract rule 30): a pause from any process
//! stops the owner before its next stage through the store's fenced
//! writes, holds a parked run out of the due-index, keeps its signals, and
//! an unpause lets the run go on once.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Harness;
use super::waits::{Approval, Calls, approving, built, count, counted, indexed, napping, worker};
use super::{namespace, suite_pipeline, suite_stage};
use crate::context::Context;
use crate::error::Error;
use crate::outcome::Outcome;
use crate::pipeline::Pipeline;
use crate::recovery::{RecoveryPolicy, RecoveryWorker};
use crate::stage::{Output, ResourceReq, Resources, StageFuture};
use crate::store::{CheckpointStore, DueFilter, Mark, RunFilter, RunState, RunStatus};

/// What the stage `pausing` pauses: its run, through a second handle on
/// the store (as another process would).
#[derive(Clone)]
struct Pauser(Arc<dyn CheckpointStore>);

/// Stage 0 of [`pausing`]: counts its call and, on the first, pauses its
/// own run `pause/p` while it runs.
fn pause_self(ctx: Context, resources: &Resources) -> StageFuture {
    let calls = resources.get::<Calls>();
    let pauser = resources.get::<Pauser>();
    StageFuture::new(async move {
        let (calls, pauser) = (calls.ok_or("counters")?, pauser.ok_or("a store")?);
        if calls.0[0].fetch_add(1, Ordering::SeqCst) == 0 {
            pauser.0.mark("pause/p", Mark::Pause).await?;
        }
        Ok(Output::Context(ctx.set("ran_0", true)?))
    })
}

/// Whether the store of `p` lists runs.
async fn lists(p: &Pipeline) -> bool {
    let store = p.store().expect("durable");
    store.list_runs(&RunFilter::new()).await.is_ok()
}

/// The keys of `p`'s runs listed as paused.
async fn listed_paused(p: &Pipeline) -> Vec<String> {
    let store = p.store().expect("durable");
    let filter = RunFilter::new().state(RunState::Paused);
    let page = store.list_runs(&filter).await.expect("list");
    page.runs.into_iter().map(|r| r.key).collect()
}

/// Continues `p`'s due run `id`: a worker's sweep on a store with a
/// due-index (which must wake exactly one run), a resume otherwise.
async fn continue_due(p: &Pipeline, id: &str) {
    if indexed(p).await {
        let sweep = worker(p).run_once().await.expect("sweep");
        assert_eq!(sweep.woken, 1, "{id} is due: {sweep:?}");
    } else {
        let out = p.resume(id).await;
        assert!(out.is_ok(), "{id}: {out:?}");
    }
}

/// Rule 30: a pause from another handle while the run's stage runs stops
/// the owner before its next stage (`Error::Paused` from its next fenced
/// write), and gives the lease back; the run lists as paused, is not due,
/// and a resume or a client's start runs nothing; pausing it again
/// changes nothing. An unpause makes it due at once at the step it was
/// paused at: it goes on to its end once. Unpausing a run that is not
/// paused, or pausing a completed one, is a typed error.
pub async fn rule30_a_pause_stops_the_owner_before_its_next_stage<H: Harness>(h: &H) {
    let ns = namespace("rule30_pause");
    let calls = Calls::default();
    let other: Arc<dyn CheckpointStore> = Arc::new(h.store(&ns).await);
    const TAKES: &[fn() -> ResourceReq] = &[ResourceReq::of::<Calls>, ResourceReq::of::<Pauser>];
    let nodes = vec![
        suite_stage("first", 1, TAKES, pause_self),
        counted("second", 2, count::<1>),
    ];
    let p = suite_pipeline(
        nodes,
        *b"fluxio/conformance/pausing/v1\0\0\0",
        "pause",
        &calls,
    )
    .resource(Pauser(Arc::clone(&other)))
    .store(h.store(&ns).await)
    .build()
    .expect("builds");
    let stopped = p.invoke("p", Context::new()).await;
    assert!(
        matches!(stopped, Err(Error::Paused { ref run_id }) if run_id == "pause/p"),
        "{stopped:?}"
    );
    assert_eq!(
        calls.get(),
        [1, 0, 0],
        "the stage after the pause never started"
    );
    let stored = p.checkpoint("p").await.expect("load").expect("stored");
    assert_eq!(
        (stored.status, stored.step.as_str()),
        (RunStatus::Paused, "first")
    );
    let store = p.store().expect("durable");
    let lease = store.acquire_lease("pause/p", Duration::from_secs(5)).await;
    let lease = lease.expect("the owner gave its lease back");
    store.release_lease(lease).await.expect("release");
    if lists(&p).await {
        assert_eq!(listed_paused(&p).await, ["pause/p"]);
    }
    if indexed(&p).await {
        let due = store
            .due_runs(&DueFilter::new(u64::MAX))
            .await
            .expect("due");
        assert_eq!(due, [], "a paused run is not due");
        assert_eq!(worker(&p).run_once().await.expect("sweep").woken, 0);
    }
    assert!(matches!(p.resume("p").await, Err(Error::Paused { .. })));
    let retried = p.start("p", Context::new()).await;
    assert!(matches!(retried, Err(Error::Paused { .. })), "{retried:?}");
    p.pause("p")
        .await
        .expect("pausing a paused run again is fine");
    assert_eq!(calls.get(), [1, 0, 0]);

    p.unpause("p").await.expect("unpause");
    let due = p.checkpoint("p").await.expect("load").expect("stored");
    assert_eq!(
        (due.status, due.step.as_str()),
        (RunStatus::Sleeping, "first")
    );
    continue_due(&p, "p").await;
    let done = p.checkpoint("p").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(
        calls.get(),
        [2, 1, 0],
        "the stage paused in ran again, then the rest once"
    );
    if lists(&p).await {
        assert_eq!(listed_paused(&p).await, Vec::<String>::new());
    }
    let again = p.unpause("p").await;
    assert!(
        matches!(
            again,
            Err(Error::NotPaused {
                status: RunStatus::Completed,
                ..
            })
        ),
        "{again:?}"
    );
    let done = p.pause("p").await;
    assert!(matches!(done, Err(Error::RunFinished { .. })), "{done:?}");
    let none = p.pause("nobody").await;
    assert!(
        matches!(none, Err(Error::CheckpointNotFound { .. })),
        "{none:?}"
    );
}

/// Rules 30 and 26-27: a paused waiting run keeps a signal sent meanwhile
/// but is not due, not even past its wait's deadline; unpaused, it waits
/// again, is due at once for the signal it holds, and takes it. A paused
/// sleeping run is not woken past its wake time; unpaused, it is.
pub async fn rule30_a_paused_wait_or_sleep_goes_back_to_it_when_unpaused<H: Harness>(h: &H) {
    let (p, calls, clock) = built(h, "rule30_pause_wait", approving).await;
    let out = p.invoke("w", Context::new()).await;
    assert!(matches!(out, Ok(Outcome::Waiting { .. })), "{out:?}");
    p.pause("w").await.expect("pause");
    let approval = Approval {
        ok: true,
        by: "ana".to_owned(),
    };
    p.signal("w", "approval", &approval)
        .await
        .expect("kept while paused");
    clock.advance("3h").expect("advance");
    if indexed(&p).await {
        let store = p.store().expect("durable");
        let due = store
            .due_runs(&DueFilter::new(u64::MAX))
            .await
            .expect("due");
        assert_eq!(due, [], "paused: not due for its signal nor its deadline");
    }
    assert_eq!(calls.get(), [1, 0, 0]);
    p.unpause("w").await.expect("unpause");
    let back = p.checkpoint("w").await.expect("load").expect("stored");
    assert_eq!(back.status, RunStatus::Waiting, "waiting again");
    continue_due(&p, "w").await;
    let done = p.checkpoint("w").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(
        calls.get(),
        [1, 1, 0],
        "it took the signal, not the timeout"
    );

    let (p, calls, clock) = built(h, "rule30_pause_nap", napping).await;
    let out = p.invoke("n", Context::new()).await;
    assert!(matches!(out, Ok(Outcome::Sleeping { .. })), "{out:?}");
    p.pause("n").await.expect("pause");
    clock.advance("2h").expect("advance");
    if indexed(&p).await {
        assert_eq!(worker(&p).run_once().await.expect("sweep").woken, 0);
    }
    p.unpause("n").await.expect("unpause");
    assert_eq!(
        p.checkpoint("n").await.expect("load").map(|cp| cp.status),
        Some(RunStatus::Sleeping)
    );
    continue_due(&p, "n").await;
    assert_eq!(calls.get(), [1, 1, 0], "the stage after the sleep ran once");
}

/// Rule 30 with rule 22: a worker whose policy pauses the runs it gives up
/// on leaves such a run paused, not needs-attention; unpaused, it is due
/// and the next worker resumes it.
pub async fn rule30_a_recovery_policy_can_pause_what_it_gives_up<H: Harness>(h: &H) {
    let (p, calls, _clock) = built(h, "rule30_pause_give_up", super::waits::failing).await;
    if !lists(&p).await {
        return;
    }
    let failed = p.invoke("f", Context::new()).await;
    assert!(failed.is_err(), "{failed:?}");
    let pausing = RecoveryWorker::builder()
        .pipeline(p.clone())
        .policy(
            RecoveryPolicy::new()
                .retry_failed(true)
                .max_attempts(1)
                .pause_given_up(true),
        )
        .build()
        .expect("a worker");
    let sweep = pausing.run_once().await.expect("sweep");
    assert_eq!((sweep.gave_up, sweep.resumed), (1, 0), "{sweep:?}");
    let paused = p.checkpoint("f").await.expect("load").expect("stored");
    assert_eq!(paused.status, RunStatus::Paused);
    assert_eq!(listed_paused(&p).await, ["flaky/f"]);
    assert_eq!(calls.get(), [1, 1, 0]);
    p.unpause("f").await.expect("unpause");
    continue_due(&p, "f").await;
    assert_eq!(calls.get(), [1, 2, 0], "flaky ran again, once");
}

/// Rule 30: a pause racing an owner that saves checkpoint after checkpoint
/// (one a millisecond, as quick stages do) wins for good: once it returns,
/// every fenced save is refused with `Error::Paused`, and the stored
/// checkpoint is the owner's last, paused. An unpause while the owner still
/// holds its lease lets that owner go on: its next fenced save lands.
/// Three rounds.
pub async fn rule30_a_pause_racing_fenced_saves_wins_until_unpaused<H: Harness>(h: &H) {
    use super::cancel::at;
    use std::sync::atomic::AtomicU32;
    for round in 0..3 {
        let ns = namespace(&format!("pause_race{round}"));
        let owner = Arc::new(h.store(&ns).await);
        let pauser = h.store(&ns).await;
        let key = at("orders", &ns, 1).key();
        let ttl = Duration::from_secs(30);
        let lease = Arc::new(owner.acquire_lease(&key, ttl).await.expect("acquire"));
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
                        Err(Error::Paused { run_id }) => {
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
        pauser.mark(&key, Mark::Pause).await.expect("pause");
        let refused_at = writer.await.expect("the owner does not panic");
        let last = saved.load(Ordering::SeqCst);
        assert_eq!(refused_at, last + 1, "round {round}: refused right after");
        let stored = pauser.load(&key).await.expect("load").expect("stored");
        assert_eq!(
            (stored.status, stored.ip),
            (RunStatus::Paused, last),
            "round {round}: the last save, paused"
        );
        let later = owner.save_fenced(at("orders", &ns, last + 2), &lease).await;
        assert!(matches!(later, Err(Error::Paused { .. })), "{later:?}");
        pauser
            .mark(&key, Mark::Unpause { now_ms: 0 })
            .await
            .expect("unpause");
        let due = pauser.load(&key).await.expect("load").expect("stored");
        assert_eq!((due.status, due.ip), (RunStatus::Sleeping, last));
        owner
            .save_fenced(at("orders", &ns, last + 3), &lease)
            .await
            .expect("the owner goes on once unpaused");
        if let Ok(lease) = Arc::try_unwrap(lease) {
            owner.release_lease(lease).await.expect("release");
        }
    }
}
