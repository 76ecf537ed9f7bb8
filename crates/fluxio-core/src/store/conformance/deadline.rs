//! Checks of runs with a deadline (contract rule 30): stored with the run,
//! it stops the run before its next stage, or wakes it from a sleep or a
//! wait through the due-index, failed with a typed error that no resume or
//! recovery retries.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Harness;
use super::waits::{Approval, Calls, approving, built, count, counted, indexed, napping, worker};
use super::{namespace, suite_pipeline, suite_stage};
use crate::clock::Clock;
use crate::context::Context;
use crate::error::Error;
use crate::outcome::Outcome;
use crate::pipeline::{Pipeline, PipelineBuilder, StartOptions};
use crate::recovery::{RecoveryPolicy, RecoveryWorker};
use crate::stage::{Output, ResourceReq, Resources, StageFuture};
use crate::store::{CheckpointStore, DueFilter, RunStatus};
use crate::testing::TestClock;

/// Whether `result` is the deadline error of `key`, before step `step`, at
/// `at` (any time when `None`).
fn late(result: &crate::Result<Outcome>, key: &str, step: &str, at: Option<u64>) -> bool {
    matches!(
        result,
        Err(Error::DeadlineExceeded { run_id, step: s, deadline_ms })
            if run_id == key && s == step && at.is_none_or(|at| at == *deadline_ms)
    )
}

/// Stage 0 of [`hurried`]: counts its call and moves the run's clock on by
/// two hours, as a slow stage would.
fn slow(ctx: Context, resources: &Resources) -> StageFuture {
    let calls = resources.get::<Calls>();
    let clock = resources.get::<Clock>();
    StageFuture::new(async move {
        let (calls, clock) = (calls.ok_or("counters")?, clock.ok_or("a clock")?);
        calls.0[0].fetch_add(1, Ordering::SeqCst);
        clock.advance(Duration::from_secs(7200))?;
        Ok(Output::Context(ctx.set("ran_0", true)?))
    })
}

/// `slow, second`: the first stage takes two hours on the test clock.
fn hurried(calls: &Calls, clock: &TestClock) -> PipelineBuilder {
    const TAKES: &[fn() -> ResourceReq] = &[ResourceReq::of::<Calls>, ResourceReq::of::<Clock>];
    let nodes = vec![
        suite_stage("slow", 1, TAKES, slow),
        counted("second", 2, count::<1>),
    ];
    suite_pipeline(
        nodes,
        *b"fluxio/conformance/hurried/v1\0\0\0",
        "hurry",
        calls,
    )
    .resource(clock.clock())
    .clock(clock.clock())
}

/// A worker of `p` that retries failed runs.
fn retrying(p: &Pipeline) -> RecoveryWorker {
    RecoveryWorker::builder()
        .pipeline(p.clone())
        .policy(RecoveryPolicy::new().retry_failed(true))
        .build()
        .expect("a worker")
}

/// Rule 30: the deadline a run is started with is stored with it; past it
/// the run stops before its next stage, failed there with
/// `DeadlineExceeded`; a resume, a client's retried start and a worker
/// that retries failed runs run nothing more (the worker gives it up); a
/// run within its deadline, and one without, are not touched by it.
pub async fn rule30_a_run_past_its_deadline_stops_before_its_next_stage<H: Harness>(h: &H) {
    let (p, calls, clock) = built(h, "rule30_late", hurried).await;
    let hour = StartOptions::new().deadline_in(Duration::from_secs(3600));
    let at = clock.now_ms() + 3_600_000;
    let ended = p.invoke_with("h", Context::new(), hour.clone()).await;
    assert!(late(&ended, "hurry/h", "second", Some(at)), "{ended:?}");
    assert_eq!(
        calls.get(),
        [1, 0, 0],
        "the stage after the deadline never ran"
    );
    let stored = p.checkpoint("h").await.expect("load").expect("stored");
    assert_eq!(
        (stored.status, stored.step.as_str(), stored.deadline_ms),
        (RunStatus::Failed, "second", Some(at)),
        "failed before the step it did not reach, with its deadline"
    );
    assert!(
        stored
            .error_message
            .as_deref()
            .is_some_and(|m| m.contains("deadline")),
        "{stored:?}"
    );
    assert!(late(&p.resume("h").await, "hurry/h", "second", Some(at)));
    let retried = p.start_with("h", Context::new(), hour).await;
    assert!(late(&retried, "hurry/h", "second", Some(at)), "{retried:?}");
    assert_eq!(calls.get(), [1, 0, 0]);
    // (a store without listing has no workers)
    if p.store()
        .expect("durable")
        .list_runs(&Default::default())
        .await
        .is_ok()
    {
        let sweep = retrying(&p).run_once().await.expect("sweep");
        assert_eq!((sweep.gave_up, sweep.resumed), (1, 0), "{sweep:?}");
        let given_up = p.checkpoint("h").await.expect("load").expect("stored");
        assert_eq!(given_up.status, RunStatus::NeedsAttention);
        assert_eq!(given_up.deadline_ms, Some(at), "kept by the give-up");
    }
    assert_eq!(calls.get(), [1, 0, 0], "nothing ran again");

    // a deadline already past stops the run before its first stage
    let past = StartOptions::new().deadline_at_ms(clock.now_ms());
    let ended = p.invoke_with("past", Context::new(), past).await;
    assert!(late(&ended, "hurry/past", "slow", None), "{ended:?}");
    assert_eq!(calls.get(), [1, 0, 0]);
    let stored = p.checkpoint("past").await.expect("load").expect("stored");
    assert_eq!(
        (stored.status, stored.step.as_str()),
        (RunStatus::Failed, "slow"),
        "failed before its first stage, not left running"
    );

    // within its deadline, and without one, a run is not touched by it
    let day = StartOptions::new().deadline_in(Duration::from_secs(86_400));
    let done = p.invoke_with("day", Context::new(), day).await;
    assert!(matches!(done, Ok(Outcome::Completed(_))), "{done:?}");
    let done = p.invoke("none", Context::new()).await;
    assert!(matches!(done, Ok(Outcome::Completed(_))), "{done:?}");
    assert_eq!(calls.get(), [3, 2, 0]);
    let kept = p.checkpoint("day").await.expect("load").expect("stored");
    assert_eq!(kept.deadline_ms.map(|d| d > clock.now_ms()), Some(true));
    let none = p.checkpoint("none").await.expect("load").expect("stored");
    assert_eq!(none.deadline_ms, None);
}

/// Rules 30 and 27: a sleep that would outlast the run's deadline parks
/// the run until the deadline, in the due-index; the worker that wakes it
/// then fails it with `DeadlineExceeded` before the step after the sleep.
pub async fn rule30_a_sleep_past_the_deadline_wakes_the_run_to_fail_at_it<H: Harness>(h: &H) {
    let (p, calls, clock) = built(h, "rule30_nap", napping).await;
    let at = clock.now_ms() + 1_800_000;
    let half = StartOptions::new().deadline_at_ms(at);
    match p.invoke_with("n", Context::new(), half).await {
        Ok(Outcome::Sleeping { until_ms, .. }) => {
            assert_eq!(until_ms, at, "woken at the deadline, not after its hour");
        }
        other => panic!("the run sleeps: {other:?}"),
    }
    let stored = p.checkpoint("n").await.expect("load").expect("stored");
    assert_eq!(
        (stored.status, stored.deadline_ms),
        (RunStatus::Sleeping, Some(at))
    );
    clock.advance("30m").expect("advance");
    if indexed(&p).await {
        let store = p.store().expect("durable");
        let due = store.due_runs(&DueFilter::new(at).pipeline("nap")).await;
        let due: Vec<u64> = due.expect("due").iter().map(|r| r.due_ms).collect();
        assert_eq!(due, [at], "due at the deadline");
        let sweep = worker(&p).run_once().await.expect("sweep");
        assert_eq!(sweep.woken, 1, "{sweep:?}");
    } else {
        assert!(late(
            &p.resume("n").await,
            "nap/n",
            "sleep(3600000ms)",
            Some(at)
        ));
    }
    let failed = p.checkpoint("n").await.expect("load").expect("stored");
    assert_eq!(
        (failed.status, failed.step.as_str()),
        (RunStatus::Failed, "sleep(3600000ms)")
    );
    assert_eq!(calls.get(), [1, 0, 0], "nothing after the sleep ran");
    if indexed(&p).await {
        let store = p.store().expect("durable");
        let due = store
            .due_runs(&DueFilter::new(u64::MAX).pipeline("nap"))
            .await;
        assert_eq!(due.expect("due"), [], "a failed run is not due to wake");
    }
}

/// Rules 30 and 26: a wait whose deadline is later than the run's is left
/// at the run's deadline with `DeadlineExceeded`, not through its timeout
/// route; a signal delivered before the deadline continues the run as
/// always.
pub async fn rule30_a_wait_is_left_at_the_runs_deadline_not_its_timeout<H: Harness>(h: &H) {
    let (p, calls, clock) = built(h, "rule30_wait", approving).await;
    let at = clock.now_ms() + 3_600_000;
    let hour = StartOptions::new().deadline_at_ms(at);
    match p.invoke_with("w", Context::new(), hour.clone()).await {
        Ok(Outcome::Waiting { deadline_ms, .. }) => assert_eq!(deadline_ms, Some(at)),
        other => panic!("the run waits: {other:?}"),
    }
    let approval = Approval {
        ok: true,
        by: "ana".to_owned(),
    };
    match p.invoke_with("s", Context::new(), hour).await {
        Ok(Outcome::Waiting { .. }) => {}
        other => panic!("the run waits: {other:?}"),
    }
    p.signal("s", "approval", &approval)
        .await
        .expect("delivered");
    let w = worker(&p);
    if indexed(&p).await {
        assert_eq!(
            w.run_once().await.expect("sweep").woken,
            1,
            "the signalled run"
        );
    } else {
        assert!(matches!(p.resume("s").await, Ok(Outcome::Completed(_))));
    }
    assert_eq!(calls.get(), [2, 1, 0], "the signalled run went on");
    clock.advance("1h").expect("advance");
    if indexed(&p).await {
        assert_eq!(w.run_once().await.expect("sweep").woken, 1, "the late run");
    } else {
        assert!(late(
            &p.resume("w").await,
            "approve/w",
            "wait(approval)",
            Some(at)
        ));
    }
    let failed = p.checkpoint("w").await.expect("load").expect("stored");
    assert_eq!(failed.status, RunStatus::Failed, "{failed:?}");
    assert!(
        failed
            .error_message
            .as_deref()
            .is_some_and(|m| m.contains("deadline")),
        "{failed:?}"
    );
    assert_eq!(calls.get(), [2, 1, 0], "neither route ran for the late run");
}

/// Rule 30 on the store's own clock (the default): the deadline is read
/// from the store once, then kept by the process's monotonic clock; a
/// stage that outlasts it stops the run before the next one.
pub async fn rule30_a_deadline_on_the_stores_clock_stops_a_slow_run<H: Harness>(h: &H) {
    let store = h.store(&namespace("rule30_store_clock")).await;
    let calls = Calls::default();
    let nodes = vec![
        suite_stage(
            "sleepy",
            1,
            &[ResourceReq::of::<Calls>],
            |ctx, resources| {
                let calls = resources.get::<Calls>();
                StageFuture::new(async move {
                    calls.ok_or("counters")?.0[0].fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok(Output::Context(ctx))
                })
            },
        ),
        counted("second", 2, count::<1>),
    ];
    let p = suite_pipeline(
        nodes,
        *b"fluxio/conformance/sleepy/v1\0\0\0\0",
        "sleepy",
        &calls,
    )
    .store(store)
    .build()
    .expect("builds");
    let soon = StartOptions::new().deadline_in(Duration::from_millis(100));
    let ended = p.invoke_with("s", Context::new(), soon).await;
    assert!(late(&ended, "sleepy/s", "second", None), "{ended:?}");
    assert_eq!(calls.get(), [1, 0, 0]);
    let roomy = StartOptions::new().deadline_in(Duration::from_secs(3600));
    let done = p.invoke_with("r", Context::new(), roomy).await;
    assert!(matches!(done, Ok(Outcome::Completed(_))), "{done:?}");
    assert_eq!(calls.get(), [2, 1, 0]);
}
