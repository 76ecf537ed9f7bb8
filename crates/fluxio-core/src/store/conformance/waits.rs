//! Checks of runs that wait (contract rules 25-28): the parked checkpoint,
//! the mailbox, the decision of a wait, the due-index, and pipelines that
//! sleep and wait on the store, continued by workers on a test clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::{Harness, acquire, checkpoint, namespace, suite_pipeline, suite_stage};
use crate::compile::Node;
use crate::context::Context;
use crate::error::Error;
use crate::outcome::Outcome;
use crate::pipeline::PipelineBuilder;
use crate::recovery::{RecoveryEvent, RecoveryPolicy, RecoveryWorker};
use crate::stage::{CallFn, Output, ResourceReq, Resources, StageFuture};
use crate::store::{
    Checkpoint, CheckpointStore, Decision, Delivery, DueFilter, Payload, Pending, RunFilter,
    RunState, RunStatus, Signal, SignalState, Take, WaitName,
};
use crate::testing::TestClock;
use crate::waiting::{Sleep, Until, Wait};

/// A long lease, for the owners the checks play.
const TTL: Duration = Duration::from_secs(30);

/// A waiting checkpoint of run `id` of pipeline `p` (see [`checkpoint`]),
/// for `names` (their payloads `bool`s), until `until` (none: no deadline).
#[must_use]
pub fn waiting(id: &str, names: &[&str], until: Option<u64>) -> Checkpoint {
    let waits = names.iter().map(|n| WaitName::new(*n, "bool")).collect();
    checkpoint(id, 2)
        .in_pipeline("p")
        .parked(Pending::wait(waits, until))
}

/// Writes `cp` as its owner does when it parks: the run's last write
/// (`finish_run`), which gives the lease back.
///
/// # Panics
/// When the store refuses the lease or the write.
pub async fn park<S: CheckpointStore>(store: &S, cp: Checkpoint) {
    let key = cp.key();
    let lease = acquire(store, &key, TTL).await;
    store
        .finish_run(cp, lease, false)
        .await
        .unwrap_or_else(|e| panic!("parking {key}: {e}"));
}

/// Sends [`signal`]`(name, value)` to the run under `key`.
async fn send<S: CheckpointStore>(
    store: &S,
    key: &str,
    name: &str,
    value: bool,
) -> crate::Result<Delivery> {
    store.send_signal(key, signal(name, value)).await
}

/// A signal for `name` carrying `value`, sent by `conformance`.
///
/// # Panics
/// For a name [`Signal::new`] refuses.
#[must_use]
pub fn signal(name: &str, value: bool) -> Signal {
    Signal::new(name, Payload::new(&value).expect("a bool"), "conformance").expect("a name")
}

/// The due runs of `store` at `now` (of pipeline `p`), or `None` for a
/// store without a due-index (a store with the four required methods).
async fn due<S: CheckpointStore>(store: &S, now: u64) -> Option<Vec<String>> {
    match store.due_runs(&DueFilter::new(now).pipeline("p")).await {
        Ok(runs) => Some(runs.into_iter().map(|r| r.key).collect()),
        Err(Error::Unsupported { .. }) => None,
        Err(e) => panic!("due_runs: {e}"),
    }
}

/// Rule 25: a sleeping run is stored with its wake time, its lease given
/// back; it lists as sleeping, and it is due exactly from its wake time.
pub async fn rule25_a_sleeping_run_is_stored_with_its_wake_time_and_due_from_it<H: Harness>(h: &H) {
    let store = h.store(&namespace("rule25_park")).await;
    let until = 1_800_000_000_000;
    let asleep = checkpoint("nap", 2)
        .in_pipeline("p")
        .parked(Pending::sleep(until));
    park(&store, asleep.clone()).await;
    let back = store.load("p/nap").await.expect("load").expect("stored");
    assert_eq!(back, asleep, "the sleep reads back whole");
    assert_eq!(
        (back.status, back.pending.and_then(|p| p.until_ms)),
        (RunStatus::Sleeping, Some(until))
    );
    super::assert_lease_free(&store, "p/nap").await;
    match store
        .list_runs(&RunFilter::new().state(RunState::Sleeping))
        .await
    {
        Err(Error::Unsupported { .. }) => {}
        Ok(page) => assert_eq!(
            page.runs.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
            ["p/nap"]
        ),
        Err(e) => panic!("list_runs: {e}"),
    }
    if let Some(before) = due(&store, until - 1).await {
        assert!(
            before.is_empty(),
            "not due before its wake time: {before:?}"
        );
        assert_eq!(due(&store, until).await, Some(vec!["p/nap".to_owned()]));
        assert_eq!(due(&store, u64::MAX).await, Some(vec!["p/nap".to_owned()]));
    }
}

/// Rule 26: a signal is stored once; the same payload again changes
/// nothing; another payload for the name is a conflict; a signal to no
/// run, or to a finished one, is a typed error naming it.
pub async fn rule26_a_signal_is_stored_once_and_another_payload_conflicts<H: Harness>(h: &H) {
    let store = h.store(&namespace("rule26_once")).await;
    let run = checkpoint("order", 1).in_pipeline("p");
    store.save(run.clone()).await.expect("save");
    let sent = send(&store, "p/order", "ok", true).await;
    assert_eq!(sent.expect("stored"), Delivery::Delivered);
    let again = send(&store, "p/order", "ok", true).await;
    assert_eq!(again.expect("accepted"), Delivery::Duplicate);
    match send(&store, "p/order", "ok", false).await {
        Err(Error::SignalConflict { run_id, wait }) => {
            assert_eq!((run_id.as_str(), wait.as_str()), ("p/order", "ok"));
        }
        other => panic!("expected SignalConflict, got {other:?}"),
    }
    let mailbox = store.signals("p/order").await.expect("signals");
    assert_eq!(mailbox.len(), 1, "{mailbox:?}");
    assert_eq!(
        (
            mailbox[0].name.as_str(),
            mailbox[0].state,
            mailbox[0].sender.as_str()
        ),
        ("ok", SignalState::Delivered, "conformance")
    );
    assert!(mailbox[0].payload.deserialize::<bool>().expect("a bool"));
    assert_eq!(
        store.load("p/order").await.expect("load").map(|cp| cp.seq),
        Some(run.seq),
        "a signal writes no checkpoint"
    );
    assert!(matches!(
        send(&store, "p/none", "ok", true).await,
        Err(Error::CheckpointNotFound { ref run_id }) if run_id == "p/none"
    ));
    let done = checkpoint("done", 4).in_pipeline("p").completed();
    store.save(done).await.expect("save");
    assert!(matches!(
        send(&store, "p/done", "ok", true).await,
        Err(Error::RunFinished { status: RunStatus::Completed, ref run_id }) if run_id == "p/done"
    ));
    store.cancel("p/order").await.expect("cancel");
    assert!(matches!(
        send(&store, "p/order", "other", true).await,
        Err(Error::RunFinished {
            status: RunStatus::Cancelled,
            ..
        })
    ));
    store.delete("p/order").await.expect("delete");
    store.save(run).await.expect("a new run under the key");
    assert!(
        store.signals("p/order").await.expect("signals").is_empty(),
        "a deleted run's signals went with it"
    );
}

/// Rules 26-27: a waiting run is due at its deadline, or as soon as a name
/// it waits for is signalled (not another name), and not while a worker
/// holds it.
pub async fn rule27_a_waiting_run_is_due_when_signalled_or_past_its_deadline<H: Harness>(h: &H) {
    let store = h.store(&namespace("rule27_due")).await;
    let deadline = 1_900_000_000_000;
    park(&store, waiting("w", &["ok", "no"], Some(deadline))).await;
    park(&store, waiting("forever", &["ok"], None)).await;
    let now = 1_800_000_000_000;
    let Some(before) = due(&store, now).await else {
        return;
    };
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(due(&store, deadline).await, Some(vec!["p/w".to_owned()]));
    send(&store, "p/w", "unrelated", true)
        .await
        .expect("a name the run does not wait for is kept");
    assert_eq!(due(&store, now).await, Some(Vec::new()), "not its names");
    send(&store, "p/forever", "ok", true).await.expect("signal");
    let due_now = due(&store, u64::MAX).await.expect("listed");
    assert_eq!(
        due_now,
        ["p/forever", "p/w"],
        "the signalled one is due first"
    );
    let runs = store
        .due_runs(&DueFilter::new(u64::MAX).pipeline("p").limit(1))
        .await
        .expect("due");
    assert_eq!(runs.len(), 1, "the limit holds");
    assert_eq!(
        (runs[0].pipeline.as_str(), runs[0].run_id.as_str()),
        ("p", "forever")
    );
    assert!(
        store
            .due_runs(&DueFilter::new(u64::MAX).pipeline("other"))
            .await
            .expect("due")
            .is_empty(),
        "another pipeline's due runs are not listed"
    );
    let held = acquire(&store, "p/forever", TTL).await;
    assert_eq!(
        due(&store, u64::MAX).await,
        Some(vec!["p/w".to_owned()]),
        "a run a worker holds is not due"
    );
    store.release_lease(held).await.expect("release");
    store.delete("p/w").await.expect("delete");
    assert_eq!(
        due(&store, u64::MAX).await,
        Some(vec!["p/forever".to_owned()])
    );
}

/// Rule 26: the store decides a wait once: a delivered signal is taken
/// (and taken again, the same, by a worker that crashed after taking it),
/// and the wait's other names close; a wait past its deadline with no
/// signal times out and closes for good; a refused signal opens the wait
/// again.
pub async fn rule26_a_wait_is_decided_once_by_a_signal_or_its_deadline<H: Harness>(h: &H) {
    let store = h.store(&namespace("rule26_take")).await;
    let take = |expired: bool, now: u64| {
        Take::new(vec!["ok".to_owned(), "no".to_owned()], expired, None).at(now)
    };
    park(&store, waiting("a", &["ok", "no"], Some(5))).await;
    let lease = acquire(&store, "p/a", TTL).await;
    let open = store.take_signal("p/a", &take(false, 1), &lease).await;
    assert_eq!(open.expect("decided"), Decision::Open);
    send(&store, "p/a", "no", true).await.expect("signal");
    let Decision::Signal(taken) = store
        .take_signal("p/a", &take(false, 2), &lease)
        .await
        .expect("decided")
    else {
        panic!("the signal decides the wait");
    };
    assert_eq!(
        (taken.name.as_str(), taken.state),
        ("no", SignalState::Consumed)
    );
    let again = store.take_signal("p/a", &take(true, 9), &lease).await;
    assert_eq!(
        again.expect("decided"),
        Decision::Signal(taken),
        "decided once"
    );
    assert!(matches!(
        send(&store, "p/a", "ok", true).await,
        Err(Error::WaitClosed { ref wait, .. }) if wait == "ok"
    ));
    assert_eq!(
        send(&store, "p/a", "no", true).await.expect("same"),
        Delivery::Duplicate
    );
    store.release_lease(lease).await.expect("release");

    park(&store, waiting("b", &["ok", "no"], Some(5))).await;
    let lease = acquire(&store, "p/b", TTL).await;
    let timed_out = store.take_signal("p/b", &take(true, 6), &lease).await;
    assert_eq!(timed_out.expect("decided"), Decision::TimedOut);
    assert!(matches!(
        send(&store, "p/b", "ok", true).await,
        Err(Error::WaitClosed { .. })
    ));
    let again = store.take_signal("p/b", &take(false, 7), &lease).await;
    assert_eq!(again.expect("decided"), Decision::TimedOut, "decided once");
    store.release_lease(lease).await.expect("release");

    park(&store, waiting("c", &["ok", "no"], None)).await;
    send(&store, "p/c", "ok", false).await.expect("signal");
    let lease = acquire(&store, "p/c", TTL).await;
    assert!(matches!(
        store.take_signal("p/c", &take(false, 1), &lease).await,
        Ok(Decision::Signal(_))
    ));
    let refuse = Take {
        refuse: Some("ok".to_owned()),
        ..take(false, 2)
    };
    let reopened = store.take_signal("p/c", &refuse, &lease).await;
    assert_eq!(
        reopened.expect("decided"),
        Decision::Open,
        "the wait is open again"
    );
    assert!(
        store.signals("p/c").await.expect("signals").is_empty(),
        "the refused signal and the closed names are gone"
    );
    store.release_lease(lease).await.expect("release");
    assert_eq!(
        send(&store, "p/c", "ok", true).await.expect("a new signal"),
        Delivery::Delivered
    );
}

/// Rule 26: a signal racing the wait's timeout, and eight senders racing
/// on one wait, each have exactly one winner.
pub async fn rule26_racing_signals_and_deadlines_have_one_winner<H: Harness>(h: &H) {
    let ns = namespace("rule26_race");
    let store = Arc::new(h.store(&ns).await);
    for round in 0..10 {
        let id = format!("race-{round}");
        park(&*store, waiting(&id, &["ok"], Some(5))).await;
        let key = format!("p/{id}");
        let lease = acquire(&*store, &key, TTL).await;
        let take = Take::new(vec!["ok".to_owned()], true, None).at(6);
        let sender = Arc::clone(&store);
        let k = key.clone();
        let send = tokio::spawn(async move { sender.send_signal(&k, signal("ok", true)).await });
        let decided = store
            .take_signal(&key, &take, &lease)
            .await
            .expect("decided");
        let sent = send.await.expect("no panic");
        match decided {
            Decision::Signal(_) => assert!(matches!(sent, Ok(Delivery::Delivered)), "{sent:?}"),
            Decision::TimedOut => {
                assert!(matches!(sent, Err(Error::WaitClosed { .. })), "{sent:?}");
            }
            Decision::Open => panic!("an expired wait is decided"),
        }
        store.release_lease(lease).await.expect("release");
    }
    for same in [true, false] {
        let id = format!("eight-{same}");
        store
            .save(checkpoint(&id, 1).in_pipeline("p"))
            .await
            .expect("save");
        let key = format!("p/{id}");
        let results = super::race(h, &ns, 8, |i, s| {
            let key = key.clone();
            async move {
                let value = same || i % 2 == 0;
                let payload = Payload::new(&(value, if same { 0 } else { i })).expect("encodes");
                let sig = Signal::new("ok", payload, "racer").expect("a name");
                s.send_signal(&key, sig).await
            }
        })
        .await;
        let delivered = results
            .iter()
            .filter(|r| matches!(r, Ok(Delivery::Delivered)))
            .count();
        assert_eq!(delivered, 1, "one winner: {results:?}");
        for r in &results {
            match r {
                Ok(Delivery::Delivered) => {}
                Ok(Delivery::Duplicate) => assert!(same, "{results:?}"),
                Err(Error::SignalConflict { .. }) => assert!(!same, "{results:?}"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(store.signals(&key).await.expect("signals").len(), 1);
    }
}

/// Call counts of the stages of the waiting pipelines below.
#[derive(Debug, Clone, Default)]
pub(super) struct Calls(pub(super) Arc<[AtomicU32; 3]>);

impl Calls {
    pub(super) fn get(&self) -> [u32; 3] {
        [0, 1, 2].map(|i| self.0[i].load(Ordering::SeqCst))
    }
}

/// Stage `INDEX`: counts its call and sets `ran_<INDEX>`.
pub(super) fn count<const INDEX: usize>(ctx: Context, resources: &Resources) -> StageFuture {
    let index = INDEX;
    let calls = resources.get::<Calls>();
    StageFuture::new(async move {
        let calls = calls.ok_or("the counters are registered")?;
        calls.0[index].fetch_add(1, Ordering::SeqCst);
        Ok(Output::Context(ctx.set(format!("ran_{index}"), true)?))
    })
}

pub(super) fn counted(name: &'static str, n: u8, call: CallFn) -> Node {
    const TAKES: &[fn() -> ResourceReq] = &[ResourceReq::of::<Calls>];
    suite_stage(name, n, TAKES, call)
}

/// What an approval carries.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub(super) struct Approval {
    pub(super) ok: bool,
    pub(super) by: String,
}

/// `first, sleep(1h), second`.
pub(super) fn napping(calls: &Calls, clock: &TestClock) -> PipelineBuilder {
    let nodes = vec![
        counted("first", 1, count::<0>),
        Node::Sleep(Sleep::after(Duration::from_secs(3600))),
        counted("second", 2, count::<1>),
    ];
    suite_pipeline(nodes, *b"fluxio/conformance/napping/v1\0\0\0", "nap", calls)
        .clock(clock.clock())
}

/// `first, wait(approval: Approval, deadline 2h) => { approval: second,
/// timeout: third }`.
pub(super) fn approving(calls: &Calls, clock: &TestClock) -> PipelineBuilder {
    let wait = Wait::on::<Approval>("approval")
        .into_key("decision")
        .deadline(Until::After(Duration::from_secs(7200)));
    let nodes = vec![
        counted("first", 1, count::<0>),
        Node::Wait(wait),
        Node::Route {
            routes: vec![
                (
                    "approval".to_owned(),
                    vec![counted("second", 2, count::<1>)],
                ),
                ("timeout".to_owned(), vec![counted("third", 3, count::<2>)]),
            ],
        },
    ];
    suite_pipeline(
        nodes,
        *b"fluxio/conformance/approve/v1\0\0\0",
        "approve",
        calls,
    )
    .clock(clock.clock())
}

/// Stage 1 of [`failing`]: counts its call, and fails the first two.
fn flaky(ctx: Context, resources: &Resources) -> StageFuture {
    let calls = resources.get::<Calls>();
    StageFuture::new(async move {
        let calls = calls.ok_or("the counters are registered")?;
        if calls.0[1].fetch_add(1, Ordering::SeqCst) < 2 {
            return Err("flaky: its first two calls fail".into());
        }
        Ok(Output::Context(ctx.set("ran_1", true)?))
    })
}

/// `first, flaky`: fails at `flaky` on its first run and first retry.
pub(super) fn failing(calls: &Calls, clock: &TestClock) -> PipelineBuilder {
    let nodes = vec![counted("first", 1, count::<0>), counted("flaky", 2, flaky)];
    suite_pipeline(
        nodes,
        *b"fluxio/conformance/failing/v1\0\0\0",
        "flaky",
        calls,
    )
    .clock(clock.clock())
}

/// The pipeline `build` makes (`napping`, `approving`,
/// `failing`), with new counters
/// and a test clock, on a store of `h` in the namespace of `check`.
pub(super) async fn built<H: Harness>(
    h: &H,
    check: &str,
    build: fn(&Calls, &TestClock) -> PipelineBuilder,
) -> (crate::Pipeline, Calls, TestClock) {
    let store = h.store(&namespace(check)).await;
    let (calls, clock) = (Calls::default(), TestClock::new());
    let p = build(&calls, &clock)
        .store(store)
        .build()
        .expect("the pipeline builds");
    (p, calls, clock)
}

/// Whether the store of `p` keeps a due-index (a store with the four
/// required methods has none).
pub(super) async fn indexed(p: &crate::Pipeline) -> bool {
    let store = p.store().expect("durable");
    store.due_runs(&DueFilter::new(0)).await.is_ok()
}

/// What `p`'s resume of `run` ends with: it must complete.
async fn resumed_to_the_end(p: &crate::Pipeline, run: &str) -> Context {
    match p.resume(run).await {
        Ok(Outcome::Completed(done)) => done,
        other => panic!("the resume of {run} completes: {other:?}"),
    }
}

/// A worker of `pipeline`.
pub(super) fn worker(pipeline: &crate::Pipeline) -> RecoveryWorker {
    RecoveryWorker::builder()
        .pipeline(pipeline.clone())
        .build()
        .expect("a worker")
}

/// Rules 25, 27, 28: a run that reaches a sleep returns `Sleeping` with its
/// wake time on the pipeline's clock and holds nothing; a worker leaves it
/// until the clock passes the wake time, then continues it once; nothing
/// before the sleep runs again.
pub async fn rule25_a_sleep_parks_the_run_until_a_worker_wakes_it_once<H: Harness>(h: &H) {
    let (p, calls, clock) = built(h, "rule25_nap", napping).await;
    let start = clock.now_ms();
    match p.invoke("n", Context::new()).await.expect("runs") {
        Outcome::Sleeping {
            key,
            until_ms,
            context,
        } => {
            assert_eq!((key.as_str(), until_ms), ("nap/n", start + 3_600_000));
            assert!(context.get::<bool>("ran_0").expect("first ran"));
        }
        other => panic!("expected Sleeping, got {other:?}"),
    }
    assert_eq!(calls.get(), [1, 0, 0]);
    let stored = p.checkpoint("n").await.expect("load").expect("stored");
    assert_eq!(stored.status, RunStatus::Sleeping);
    // a client retrying the start writes nothing and wakes nothing
    let seq = stored.seq;
    let retried = p.start("n", Context::new()).await.expect("start");
    assert!(matches!(retried, Outcome::Sleeping { .. }), "{retried:?}");
    let again = p.checkpoint("n").await.expect("load").expect("stored");
    assert_eq!(again.seq, seq, "a start of a sleeping run writes nothing");
    let w = worker(&p);
    if !indexed(&p).await {
        // no due-index (a store with the four required methods): resume
        clock.advance("1h").expect("advance");
        let done = resumed_to_the_end(&p, "n").await;
        assert!(done.get::<bool>("ran_1").expect("second ran"));
        assert_eq!(calls.get(), [1, 1, 0]);
        return;
    }
    assert_eq!(w.run_once().await.expect("sweep").woken, 0, "not yet due");
    clock.advance("59m").expect("advance");
    assert_eq!(w.run_once().await.expect("sweep").woken, 0, "not yet due");
    clock.advance("1m").expect("advance");
    assert_eq!(w.run_once().await.expect("sweep").woken, 1, "due now");
    assert_eq!(calls.get(), [1, 1, 0], "the stage after the sleep ran once");
    let done = p.checkpoint("n").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(w.run_once().await.expect("sweep").woken, 0, "woken once");
    let history = p.history("n").await.expect("history");
    assert!(
        history.steps.iter().any(|s| s.stage == "sleep(3600000ms)"),
        "the sleep is a step: {history}"
    );
}

/// Rules 26-27: a waiting run takes a signal sent before it reached the
/// wait at once; one signalled later is continued by a worker with the
/// payload in its key and the signalled route; a wait past its deadline
/// takes the timeout route; a payload of the wrong type (sent without the
/// pipeline's types) is refused and the wait stays open.
pub async fn rule26_a_waiting_run_continues_with_its_signal_or_its_timeout<H: Harness>(h: &H) {
    let (p, calls, clock) = built(h, "rule26_wait", approving).await;
    let store = p.store().expect("durable").clone();
    let indexed = indexed(&p).await;
    let approval = Approval {
        ok: true,
        by: "ana".to_owned(),
    };

    // signalled before it was reached: the mailbox keeps it
    let mut early = Checkpoint::new("early", p.version(), 0, "first", Context::new().snapshot())
        .in_pipeline("approve");
    early.structure = Some(Arc::new(p.structure().clone()));
    store
        .save(early)
        .await
        .expect("a run stored before its wait");
    p.signal("early", "approval", &approval)
        .await
        .expect("kept");
    let done = resumed_to_the_end(&p, "early").await;
    assert_eq!(
        done.get::<Approval>("decision").expect("the payload"),
        approval
    );
    assert_eq!(calls.get(), [1, 1, 0]);

    // signalled while it waits
    let Outcome::Waiting {
        waits, deadline_ms, ..
    } = p.invoke("later", Context::new()).await.expect("runs")
    else {
        panic!("the run waits");
    };
    assert_eq!(waits[0].name, "approval");
    assert!(waits[0].payload.ends_with("Approval"), "{waits:?}");
    assert_eq!(deadline_ms, Some(clock.now_ms() + 7_200_000));
    assert!(matches!(
        p.signal("later", "approve", &approval).await,
        Err(Error::UnknownWait { ref wait, .. }) if wait == "approve"
    ));
    assert!(matches!(
        p.signal("later", "approval", &"yes").await,
        Err(Error::SignalRefused { .. })
    ));
    // a wrong payload sent without types (as an operator's JSON could be)
    send(&store, "approve/later", "approval", true)
        .await
        .expect("stored unchecked");
    let w = worker(&p);
    let wake = async |w: &RecoveryWorker, id: &str| {
        if indexed {
            w.run_once().await.expect("sweep").woken
        } else {
            let _outcome = p.resume(id).await.expect("resumes");
            1
        }
    };
    assert_eq!(wake(&w, "later").await, 1);
    let refused = p.checkpoint("later").await.expect("load").expect("stored");
    assert_eq!(refused.status, RunStatus::Waiting, "the wait stays open");
    let why = refused.error_message.unwrap_or_default();
    assert!(
        why.contains("approval") && why.contains("Approval"),
        "{why}"
    );
    assert_eq!(calls.get(), [2, 1, 0]);
    p.signal("later", "approval", &approval)
        .await
        .expect("a good one");
    assert_eq!(wake(&w, "later").await, 1);
    let done = p.checkpoint("later").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(
        done.context
            .to_context()
            .get::<Approval>("decision")
            .expect("payload"),
        approval
    );
    assert_eq!(calls.get(), [2, 2, 0], "the signalled route ran once");

    // never signalled: the deadline takes the timeout route
    let out = p.invoke("never", Context::new()).await.expect("runs");
    assert!(matches!(out, Outcome::Waiting { .. }), "{out:?}");
    if indexed {
        assert_eq!(w.run_once().await.expect("sweep").woken, 0, "not due");
    }
    clock.advance("2h").expect("advance");
    assert_eq!(wake(&w, "never").await, 1);
    let done = p.checkpoint("never").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(calls.get(), [3, 2, 1], "the timeout route ran once");
    assert!(matches!(
        p.signal("never", "approval", &approval).await,
        Err(Error::RunFinished { .. } | Error::WaitClosed { .. })
    ));
}

/// Rule 27: claims take each due run once, with its lease: two claims at
/// once get different runs, a claimed run is not due to anyone else until
/// its lease is given back, and a claim takes only the versions asked.
pub async fn rule27_a_claim_takes_each_due_run_once<H: Harness>(h: &H) {
    let store = h.store(&namespace("rule27_claim")).await;
    let at = 1_800_000_000_000;
    for i in 0..10_u64 {
        let nap = checkpoint(&format!("c{i}"), 2)
            .in_pipeline("p")
            .parked(Pending::sleep(at + i));
        park(&store, nap).await;
    }
    let mut other = checkpoint("old", 2)
        .in_pipeline("p")
        .parked(Pending::sleep(at));
    other.version = "ba9876543210".to_owned();
    park(&store, other).await;
    let asked = DueFilter::new(at + 100)
        .pipeline("p")
        .version("0123456789ab")
        .limit(6);
    let (a, b) =
        futures::future::join(store.claim_due(&asked, TTL), store.claim_due(&asked, TTL)).await;
    let (a, b) = match (a, b) {
        (Err(Error::Unsupported { .. }), _) | (_, Err(Error::Unsupported { .. })) => return,
        (a, b) => (a.expect("claim a"), b.expect("claim b")),
    };
    let mut keys: Vec<String> = a.iter().chain(&b).map(|c| c.run.key.clone()).collect();
    assert!(
        a.len() <= 6 && b.len() <= 6,
        "a claim takes at most its limit"
    );
    keys.sort();
    let before = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), before, "no run was claimed twice: {keys:?}");
    assert_eq!(
        keys.len(),
        10,
        "together they claimed every due run of the version: {keys:?}"
    );
    assert!(
        !keys.contains(&"p/old".to_owned()),
        "another version is not claimed"
    );
    for claim in a.iter().chain(&b) {
        assert_eq!(
            claim.lease.run_id(),
            claim.run.key,
            "the lease is the run's"
        );
        store
            .renew_lease(&claim.lease, TTL)
            .await
            .unwrap_or_else(|e| panic!("the claim holds {}: {e}", claim.run.key));
        assert!(
            matches!(
                store.acquire_lease(&claim.run.key, TTL).await,
                Err(Error::RunIdInUse { .. })
            ),
            "{} is held by its claim",
            claim.run.key
        );
    }
    let again = store.claim_due(&asked, TTL).await.expect("claim again");
    assert!(
        again.is_empty(),
        "claimed runs are not due to others: {again:?}"
    );
    let listed = due(&store, at + 100).await.expect("indexed");
    assert_eq!(listed, ["p/old"], "only the unclaimed run is listed due");
    let first = a.into_iter().chain(b).next().expect("a claim");
    let key = first.run.key.clone();
    store.release_lease(first.lease).await.expect("release");
    let back = store
        .claim_due(&asked, TTL)
        .await
        .expect("claim after release");
    assert_eq!(
        back.iter().map(|c| c.run.key.as_str()).collect::<Vec<_>>(),
        [key.as_str()],
        "a run given back unfinished is due again"
    );
    let none = store
        .claim_due(&DueFilter::new(at - 1).pipeline("p"), TTL)
        .await
        .expect("claim before due");
    assert!(none.is_empty(), "nothing is due before its time: {none:?}");
}

/// Rule 27: a worker that dies between claiming a due run and its next
/// checkpoint (its claim is never renewed nor given back) leaves the run
/// to the next worker once the claim's lease lapses; the stage after the
/// sleep runs once, by that worker.
pub async fn rule27_a_run_whose_claimant_died_is_woken_by_the_next_worker<H: Harness>(h: &H) {
    let (p, calls, clock) = built(h, "rule27_died", napping).await;
    if !indexed(&p).await {
        return;
    }
    let out = p.invoke("d", Context::new()).await.expect("runs");
    assert!(matches!(out, Outcome::Sleeping { .. }), "{out:?}");
    clock.advance("1h").expect("advance");
    let store = p.store().expect("durable");
    let asked = DueFilter::new(clock.now_ms()).pipeline("nap");
    let dead = store
        .claim_due(&asked, Duration::from_millis(60))
        .await
        .expect("claim");
    assert_eq!(dead.len(), 1, "the run is claimed: {dead:?}");
    // the claimant dies: its claim is dropped, never renewed or given back
    drop(dead);
    let w = worker(&p);
    assert_eq!(w.run_once().await.expect("sweep").woken, 0, "claimed still");
    assert_eq!(calls.get(), [1, 0, 0]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(w.run_once().await.expect("sweep").woken, 1, "due again");
    assert_eq!(calls.get(), [1, 1, 0], "the stage after the sleep ran once");
    let done = p.checkpoint("d").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(w.run_once().await.expect("sweep").woken, 0, "woken once");
}

/// Rule 27: four busy workers over 200 runs due at once, claiming while
/// the runs they woke write their checkpoints, wake each once and none
/// fails. (A claim that locked run rows before lease rows deadlocked with
/// the runs' owners under 4 worker processes, in `fluxio-waits-bench
/// wake`; in one process this check did not catch it.)
pub async fn rule27_busy_workers_wake_every_due_run_once_and_none_fails<H: Harness>(h: &H) {
    const RUNS: u32 = 200;
    let (p, calls, clock) = built(h, "rule27_busy", napping).await;
    if !indexed(&p).await {
        return;
    }
    for i in 0..RUNS {
        let out = p
            .invoke(&format!("b{i}"), Context::new())
            .await
            .expect("runs");
        assert!(matches!(out, Outcome::Sleeping { .. }), "{out:?}");
    }
    clock.advance("1h").expect("advance");
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let workers: Vec<RecoveryWorker> = (0..4)
        .map(|_| {
            let failures = Arc::clone(&failures);
            RecoveryWorker::builder()
                .pipeline(p.clone())
                .on_event(move |event| {
                    let failed = match event {
                        RecoveryEvent::Woken { error: Some(e), .. } => Some(e.to_string()),
                        RecoveryEvent::StoreFailed { error, .. } => Some(error.to_string()),
                        _ => None,
                    };
                    if let Some(failed) = failed {
                        failures.lock().expect("not poisoned").push(failed);
                    }
                })
                .build()
                .expect("a worker")
        })
        .collect();
    let mut woken = 0;
    for _ in 0..20 {
        let sweeps = futures::future::join_all(workers.iter().map(RecoveryWorker::run_once)).await;
        woken += sweeps
            .into_iter()
            .map(|s| s.expect("sweep").woken)
            .sum::<usize>();
        if calls.get()[1] >= RUNS {
            break;
        }
    }
    let failures = failures.lock().expect("not poisoned").clone();
    assert!(failures.is_empty(), "no wake-up failed: {failures:?}");
    assert_eq!(woken, RUNS as usize, "each run was claimed once");
    assert_eq!(
        calls.get(),
        [RUNS, RUNS, 0],
        "each run's next stage ran once"
    );
}

/// Rule 27: four workers racing over due runs continue each exactly once.
pub async fn rule27_racing_workers_continue_each_due_run_once<H: Harness>(h: &H) {
    let (p, calls, clock) = built(h, "rule27_race", napping).await;
    if !indexed(&p).await {
        return;
    }
    for i in 0..12 {
        let out = p
            .invoke(&format!("r{i}"), Context::new())
            .await
            .expect("runs");
        assert!(matches!(out, Outcome::Sleeping { .. }));
    }
    clock.advance("1h").expect("advance");
    let workers: Vec<RecoveryWorker> = (0..4).map(|_| worker(&p)).collect();
    let sweeps = futures::future::join_all(workers.iter().map(RecoveryWorker::run_once)).await;
    let woken: usize = sweeps.into_iter().map(|s| s.expect("sweep").woken).sum();
    assert_eq!(woken, 12, "each run was claimed by one worker");
    assert_eq!(calls.get(), [12, 12, 0], "each run's next stage ran once");
    for i in 0..12 {
        let cp = p
            .checkpoint(&format!("r{i}"))
            .await
            .expect("load")
            .expect("stored");
        assert_eq!(cp.status, RunStatus::Completed, "r{i}");
    }
}

/// Rules 22, 27, 28: a worker that finds a failed run before its backoff
/// ended writes the run's recovery time into the due-index, on the
/// pipeline's clock, once; it resumes the run, once, when a test clock
/// passes that time, not before, claiming it like any due run; a resume
/// that fails again leaves the run due after its next backoff.
pub async fn rule28_a_test_clock_fires_a_recovery_backoff<H: Harness>(h: &H) {
    let (p, calls, clock) = built(h, "rule28_backoff", failing).await;
    if !indexed(&p).await {
        return;
    }
    let failed = p.invoke("f", Context::new()).await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(calls.get(), [1, 1, 0]);
    let hour = Duration::from_secs(3600);
    let w = RecoveryWorker::builder()
        .pipeline(p.clone())
        .policy(RecoveryPolicy::new().retry_failed(true).backoff(hour, hour))
        .build()
        .expect("a worker");
    let first = w.run_once().await.expect("sweep");
    assert_eq!(
        (first.found, first.deferred, first.resumed),
        (1, 1, 0),
        "{first:?}"
    );
    let store = p.store().expect("durable");
    let due_flaky = || async {
        let all = DueFilter::new(u64::MAX).pipeline("flaky");
        store.due_runs(&all).await.expect("due runs")
    };
    // an hour after it failed, within a minute, on the test clock
    let an_hour_on = |due: &[crate::store::DueRun], from: u64| {
        let at: Vec<u64> = due.iter().map(|run| run.due_ms).collect();
        assert!(
            at.len() == 1 && at[0] > from + 3_540_000 && at[0] <= from + 3_600_000,
            "due an hour after {from}: {due:?}"
        );
    };
    an_hour_on(&due_flaky().await, clock.now_ms());
    let again = w.run_once().await.expect("sweep");
    assert_eq!(
        (again.deferred, again.resumed),
        (0, 0),
        "written once: {again:?}"
    );
    clock.advance("59m").expect("advance");
    assert_eq!(w.run_once().await.expect("sweep").resumed, 0, "not yet");
    assert_eq!(calls.get(), [1, 1, 0]);
    clock.advance("1m").expect("advance");
    let woke = w.run_once().await.expect("sweep");
    assert_eq!(woke.failed, 1, "resumed once the backoff passed: {woke:?}");
    assert_eq!(calls.get(), [1, 2, 0], "flaky ran again, once");
    // due again after its next backoff
    an_hour_on(&due_flaky().await, clock.now_ms());
    clock.advance("1h").expect("advance");
    let woke = w.run_once().await.expect("sweep");
    assert_eq!(woke.resumed, 1, "resumed again: {woke:?}");
    assert_eq!(calls.get(), [1, 3, 0], "flaky ran a third time, once");
    let done = p.checkpoint("f").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    let after = w.run_once().await.expect("sweep");
    assert_eq!((after.found, after.resumed, after.deferred), (0, 0, 0));
    assert_eq!(due_flaky().await, [], "a completed run is not due");
}
