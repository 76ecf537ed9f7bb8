//! Contract rules 25-28 end to end, with the macros: sleeps, waits and
//! signals on `InMemoryStore`, continued by a worker on a test clock (the
//! same checks on every store are the conformance suite's `rule25_*` to
//! `rule27_*`; real processes are in `waits_processes.rs`).

use std::sync::atomic::{AtomicU32, Ordering};

use futures::StreamExt as _;
use std::time::Duration;

use fluxio::recovery::RecoveryWorker;
use fluxio::store::{CheckpointStore, Delivery, InMemoryStore, MAX_UNTIL_MS, RunFilter, RunState};
use fluxio::testing::TestClock;
use fluxio::{
    Context, Error, Outcome, Pipeline, RunStatus, StageResult, StreamEvent, pipeline, stage,
};

static REMINDED: AtomicU32 = AtomicU32::new(0);

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Approval {
    approved: bool,
    by: String,
}

#[stage]
async fn submit(ctx: Context) -> StageResult {
    Ok(ctx.set("submitted", true)?)
}

#[stage]
async fn remind(ctx: Context) -> StageResult {
    REMINDED.fetch_add(1, Ordering::SeqCst);
    Ok(ctx.set("reminded", true)?)
}

#[stage]
async fn pay(ctx: Context) -> StageResult {
    let decision: Approval = ctx.get("decision")?;
    Ok(ctx.set("paid", decision.approved)?)
}

#[stage]
async fn escalate(ctx: Context) -> StageResult {
    Ok(ctx.set("escalated", true)?)
}

fn worker(p: &Pipeline) -> RecoveryWorker {
    RecoveryWorker::builder()
        .pipeline(p.clone())
        .build()
        .expect("a worker")
}

/// submit, sleep 24h, remind, wait for approval (72h) => pay or escalate.
fn expenses(clock: &TestClock) -> Pipeline {
    pipeline![
        submit,
        sleep!("24h"),
        remind,
        wait!("approval" as Approval into "decision", deadline = "72h") => {
            "approval" => pay,
            "timeout" => escalate,
        },
    ]
    .name("expenses")
    .store(InMemoryStore::new())
    .clock(clock.clock())
    .build()
    .expect("the pipeline builds")
}

#[tokio::test]
async fn rule25_rule26_an_expense_sleeps_waits_and_is_approved_by_a_signal() {
    let clock = TestClock::new();
    let p = expenses(&clock);
    let w = worker(&p);
    let start = clock.now_ms();
    let out = p.invoke("e-1", Context::new()).await.expect("runs");
    let Outcome::Sleeping {
        until_ms, context, ..
    } = out
    else {
        panic!("the run sleeps: {out:?}");
    };
    assert_eq!(until_ms, start + 24 * 3_600_000);
    assert!(context.get::<bool>("submitted").expect("submitted"));
    let listed = p
        .store()
        .expect("durable")
        .list_runs(&RunFilter::new().state(RunState::Sleeping))
        .await
        .expect("listing");
    assert_eq!(listed.runs.len(), 1);

    clock.advance("24h").expect("advance");
    assert_eq!(w.run_once().await.expect("sweep").woken, 1);
    let waiting = p.checkpoint("e-1").await.expect("load").expect("stored");
    assert_eq!(waiting.status, RunStatus::Waiting);
    let pending = waiting.pending.expect("what it waits for");
    assert_eq!(pending.waits[0].name, "approval");
    assert_eq!(pending.until_ms, Some(start + 96 * 3_600_000));

    let approval = Approval {
        approved: true,
        by: "ana".into(),
    };
    let sent = p
        .signal("e-1", "approval", &approval)
        .await
        .expect("signal");
    assert_eq!(sent, Delivery::Delivered);
    assert_eq!(
        p.signal("e-1", "approval", &approval).await.expect("again"),
        Delivery::Duplicate
    );
    assert_eq!(w.run_once().await.expect("sweep").woken, 1);
    let done = p.checkpoint("e-1").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    let ctx = done.context.to_context();
    assert_eq!(ctx.get::<Approval>("decision").expect("decision"), approval);
    assert!(ctx.get::<bool>("paid").expect("paid"));
    assert!(!ctx.contains_key("escalated"));
    let history = p.history("e-1").await.expect("history");
    let shown = history.to_string();
    assert!(
        shown.contains("sleep(86400000ms)") && shown.contains("wait(approval)"),
        "{shown}"
    );
    assert!(shown.contains("signal approval: consumed"), "{shown}");
}

#[tokio::test]
async fn rule26_an_expense_nobody_approves_takes_the_timeout_route() {
    let clock = TestClock::new();
    let p = expenses(&clock);
    let w = worker(&p);
    let out = p.invoke("e-2", Context::new()).await.expect("runs");
    assert!(matches!(out, Outcome::Sleeping { .. }));
    clock.advance("24h").expect("advance");
    w.run_once().await.expect("sweep");
    clock.advance("71h 59m").expect("advance");
    assert_eq!(w.run_once().await.expect("sweep").woken, 0, "not yet");
    clock.advance("1m").expect("advance");
    assert_eq!(w.run_once().await.expect("sweep").woken, 1);
    let done = p.checkpoint("e-2").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    assert!(
        done.context
            .to_context()
            .get::<bool>("escalated")
            .expect("escalated")
    );
    let late = p
        .signal(
            "e-2",
            "approval",
            &Approval {
                approved: true,
                by: "late".into(),
            },
        )
        .await;
    assert!(matches!(late, Err(Error::RunFinished { .. })), "{late:?}");
}

#[tokio::test]
async fn rule26_a_signal_sent_early_is_taken_when_the_wait_is_reached() {
    let clock = TestClock::new();
    let p = expenses(&clock);
    let w = worker(&p);
    let out = p.invoke("e-3", Context::new()).await.expect("runs");
    assert!(matches!(out, Outcome::Sleeping { .. }));
    let approval = Approval {
        approved: false,
        by: "bo".into(),
    };
    p.signal("e-3", "approval", &approval).await.expect("kept");
    clock.advance("24h").expect("advance");
    assert_eq!(w.run_once().await.expect("sweep").woken, 1);
    let done = p.checkpoint("e-3").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed, "no second park");
    assert!(!done.context.to_context().get::<bool>("paid").expect("paid"));
}

#[stage]
async fn noted(ctx: Context) -> StageResult {
    Ok(ctx.set("noted", true)?)
}

#[tokio::test]
async fn rule26_the_first_of_several_names_decides_and_closes_the_others() {
    let clock = TestClock::new();
    let p = pipeline![
        wait_any!("approve" as Approval, "reject" as String; deadline = "1h") => {
            "approve" => noted,
            "reject" => escalate,
            "timeout" => remind,
        },
    ]
    .name("either")
    .store(InMemoryStore::new())
    .clock(clock.clock())
    .build()
    .expect("builds");
    let out = p.invoke("x", Context::new()).await.expect("runs");
    let Outcome::Waiting { waits, .. } = out else {
        panic!("waits");
    };
    assert_eq!(waits.len(), 2);
    p.signal("x", "reject", "over budget")
        .await
        .expect("signal");
    let done = p
        .resume("x")
        .await
        .expect("resume")
        .completed()
        .expect("done");
    assert_eq!(
        done.get::<String>("reject").expect("payload"),
        "over budget"
    );
    assert!(done.get::<bool>("escalated").expect("escalated"));
    let approve = Approval {
        approved: true,
        by: "late".into(),
    };
    let closed = p.signal("x", "approve", &approve).await;
    assert!(
        matches!(
            closed,
            Err(Error::RunFinished { .. } | Error::WaitClosed { .. })
        ),
        "{closed:?}"
    );
}

#[tokio::test]
async fn rule26_a_timeout_value_is_written_as_if_signalled() {
    let clock = TestClock::new();
    let p = pipeline![
        wait!("limit" as u64, deadline = "10m", timeout = value(100u64)),
        noted,
    ]
    .name("limits")
    .store(InMemoryStore::new())
    .clock(clock.clock())
    .build()
    .expect("builds");
    assert!(matches!(
        p.invoke("l", Context::new()).await.expect("runs"),
        Outcome::Waiting { .. }
    ));
    clock.advance("10m").expect("advance");
    assert_eq!(worker(&p).run_once().await.expect("sweep").woken, 1);
    let done = p.checkpoint("l").await.expect("load").expect("stored");
    assert_eq!(
        done.context
            .to_context()
            .get::<u64>("limit")
            .expect("default"),
        100
    );
}

#[tokio::test]
async fn rule26_a_wait_that_times_out_fails_the_run_by_default() {
    let clock = TestClock::new();
    let p = pipeline![wait!("ok" as bool, deadline = "1s"), noted]
        .name("strict")
        .store(InMemoryStore::new())
        .clock(clock.clock())
        .build()
        .expect("builds");
    assert!(matches!(
        p.invoke("s", Context::new()).await.expect("runs"),
        Outcome::Waiting { .. }
    ));
    clock.advance("1s").expect("advance");
    let resumed = p.resume("s").await;
    assert!(
        matches!(resumed, Err(Error::WaitTimedOut { ref wait, ref run_id }) if wait == "ok" && run_id == "strict/s"),
        "{resumed:?}"
    );
    let failed = p.checkpoint("s").await.expect("load").expect("stored");
    assert_eq!(failed.status, RunStatus::Failed);
    assert!(matches!(
        p.signal("s", "ok", &true).await,
        Err(Error::WaitClosed { .. })
    ));
}

#[tokio::test]
async fn rule25_zero_past_and_endless_sleeps_have_one_outcome_each() {
    let clock = TestClock::new();
    let now = clock.now_ms();
    let p = pipeline![
        sleep!("0s"),
        sleep!(until = "at"),
        noted,
        sleep!(until = "never")
    ]
    .name("times")
    .store(InMemoryStore::new())
    .clock(clock.clock())
    .build()
    .expect("builds");
    // a zero sleep and an instant in the past go on at once; an instant
    // past 9999 is read as the end of 9999
    let input = Context::new()
        .set("at", now - 5_000)
        .and_then(|c| c.set("never", u64::MAX))
        .expect("instants");
    match p.invoke("t", input).await.expect("runs") {
        Outcome::Sleeping {
            until_ms, context, ..
        } => {
            assert_eq!(until_ms, MAX_UNTIL_MS);
            assert!(context.get::<bool>("noted").expect("noted"));
        }
        other => panic!("{other:?}"),
    }
    // RFC 3339 text and a SystemTime are instants too; a negative
    // integer is before the epoch: due at once
    for at in [
        Context::new().set("at", "2001-09-09T01:46:40Z"),
        Context::new().set("at", std::time::SystemTime::UNIX_EPOCH),
        Context::new().set("at", -1i64),
    ] {
        let input = at.and_then(|c| c.set("never", now)).expect("instants");
        let out = p.invoke("t2", input).await.expect("runs");
        assert!(out.is_completed(), "{out:?}");
    }
    // a key that is missing or holds no instant fails the run, naming it
    let missing = p.invoke("t3", Context::new()).await;
    assert!(
        matches!(missing, Err(Error::MissingKey { ref key, .. }) if key == "at"),
        "{missing:?}"
    );
    let wrong = p
        .invoke("t4", Context::new().set("at", vec![1, 2]).expect("set"))
        .await;
    let wrong = wrong.expect_err("not an instant").to_string();
    assert!(
        wrong.contains("`at`") && wrong.contains("not an instant"),
        "{wrong}"
    );
    let bad_text = p
        .invoke("t5", Context::new().set("at", "next tuesday").expect("set"))
        .await;
    assert!(bad_text.is_err(), "{bad_text:?}");
    let sleep_max = pipeline![sleep!("500000y")]
        .name("forever")
        .store(InMemoryStore::new())
        .clock(clock.clock())
        .build()
        .expect("builds");
    match sleep_max.invoke("f", Context::new()).await.expect("runs") {
        Outcome::Sleeping { until_ms, .. } => assert_eq!(until_ms, MAX_UNTIL_MS),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn rule26_bad_payloads_are_typed_errors_and_nothing_is_lost() {
    let clock = TestClock::new();
    let p = expenses(&clock);
    assert!(matches!(
        p.invoke("b", Context::new()).await.expect("runs"),
        Outcome::Sleeping { .. }
    ));
    let wrong = p.signal("b", "approval", &"yes please").await;
    assert!(
        matches!(wrong, Err(Error::SignalRefused { ref wait, .. }) if wait == "approval"),
        "{wrong:?}"
    );
    let huge = vec![7u8; 100 << 20];
    let too_large = p.signal("b", "approval", &huge).await;
    assert!(
        matches!(too_large, Err(Error::ValueTooLarge { .. })),
        "{too_large:?}"
    );
    let mut deep = fluxio::Value::Unit;
    for _ in 0..200 {
        deep = fluxio::Value::Some(Box::new(deep));
    }
    let too_deep = p.signal_value("b", "approval", &deep, "ops").await;
    assert!(
        matches!(too_deep, Err(Error::ValueTooDeep { .. })),
        "{too_deep:?}"
    );
    let unknown = p.signal("b", "approve", &true).await;
    assert!(
        matches!(unknown, Err(Error::UnknownWait { ref available, .. }) if available == &["approval"]),
        "{unknown:?}"
    );
    let no_run = p
        .signal(
            "nobody",
            "approval",
            &Approval {
                approved: true,
                by: String::new(),
            },
        )
        .await;
    assert!(
        matches!(no_run, Err(Error::CheckpointNotFound { .. })),
        "{no_run:?}"
    );
    assert!(
        p.store()
            .expect("durable")
            .signals("expenses/b")
            .await
            .expect("mailbox")
            .is_empty(),
        "nothing was stored"
    );
    let stored = p.checkpoint("b").await.expect("load").expect("stored");
    assert_eq!(stored.status, RunStatus::Sleeping, "the run is as it was");
}

#[tokio::test]
async fn rule26_wake_is_an_operators_now() {
    let clock = TestClock::new();
    let p = expenses(&clock);
    assert!(matches!(
        p.invoke("w", Context::new()).await.expect("runs"),
        Outcome::Sleeping { .. }
    ));
    // the sleep ends now; the run goes on to its wait
    let out = p.wake("w").await.expect("woken");
    assert!(matches!(out, Outcome::Waiting { .. }), "{out:?}");
    assert!(REMINDED.load(Ordering::SeqCst) > 0);
    // the wait takes its timeout outcome now
    let done = p.wake("w").await.expect("woken").completed().expect("done");
    assert!(done.get::<bool>("escalated").expect("escalated"));
    let again = p.wake("w").await;
    assert!(matches!(again, Err(Error::NotParked { .. })), "{again:?}");

    let open = pipeline![wait!("ok" as bool)]
        .name("open")
        .store(InMemoryStore::new())
        .build()
        .expect("builds");
    assert!(matches!(
        open.invoke("o", Context::new()).await.expect("runs"),
        Outcome::Waiting {
            deadline_ms: None,
            ..
        }
    ));
    let woken = open.wake("o").await;
    let why = woken.expect_err("only a signal wakes it").to_string();
    assert!(why.contains("without a deadline"), "{why}");
}

#[tokio::test]
async fn rule26_start_of_a_parked_run_writes_nothing_and_stream_says_it_parked() {
    let clock = TestClock::new();
    let p = expenses(&clock);
    let first = p.start("s", Context::new()).await.expect("starts");
    let before = p.checkpoint("s").await.expect("load").expect("stored").seq;
    let again = p.start("s", Context::new()).await.expect("retried");
    assert_eq!(first, again);
    assert_eq!(
        p.checkpoint("s").await.expect("load").expect("stored").seq,
        before
    );

    let mut stream = p.stream("st", Context::new());
    let mut last = None;
    while let Some(event) = stream.next().await {
        last = Some(event.expect("no error"));
    }
    assert!(
        matches!(last, Some(StreamEvent::Parked(Outcome::Sleeping { .. }))),
        "{last:?}"
    );
}

#[tokio::test]
async fn rule27_wait_for_returns_when_the_run_ends_or_the_timeout_passes() {
    let clock = TestClock::new();
    let p = expenses(&clock);
    assert!(matches!(
        p.invoke("wf", Context::new()).await.expect("runs"),
        Outcome::Sleeping { .. }
    ));
    let none = p
        .wait_for("wf", Duration::from_millis(50))
        .await
        .expect("waits");
    assert!(none.is_none(), "still sleeping");
    let waiter = {
        let p = p.clone();
        tokio::spawn(async move { p.wait_for("wf", Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let waiting = p.wake("wf").await.expect("to the wait");
    assert!(matches!(waiting, Outcome::Waiting { .. }), "{waiting:?}");
    let done = p.wake("wf").await.expect("to the end");
    assert!(done.is_completed(), "{done:?}");
    let ended = waiter
        .await
        .expect("no panic")
        .expect("waits")
        .expect("ended");
    assert_eq!(ended.status, RunStatus::Completed);
    let missing = p.wait_for("nobody", Duration::from_millis(10)).await;
    assert!(matches!(missing, Err(Error::CheckpointNotFound { .. })));
}

#[tokio::test]
async fn rule28_a_spawned_worker_wakes_what_an_advance_made_due() {
    let clock = TestClock::new();
    let p = expenses(&clock);
    let handle = RecoveryWorker::builder()
        .pipeline(p.clone())
        .due_poll(Duration::from_secs(3600))
        .build()
        .expect("a worker")
        .spawn()
        .expect("spawned");
    assert!(matches!(
        p.invoke("sp", Context::new()).await.expect("runs"),
        Outcome::Sleeping { .. }
    ));
    clock.advance("24h").expect("advance");
    let mut status = RunStatus::Sleeping;
    for _ in 0..200 {
        status = p
            .checkpoint("sp")
            .await
            .expect("load")
            .expect("stored")
            .status;
        if status == RunStatus::Waiting {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        status,
        RunStatus::Waiting,
        "the advance woke it, not the hourly poll"
    );
    // a signal wakes it through the store's wake-ups, not the poll
    p.signal(
        "sp",
        "approval",
        &Approval {
            approved: true,
            by: "cy".into(),
        },
    )
    .await
    .expect("signal");
    let ended = p
        .wait_for("sp", Duration::from_secs(5))
        .await
        .expect("waits");
    assert_eq!(ended.map(|cp| cp.status), Some(RunStatus::Completed));
    handle
        .shutdown(Duration::from_secs(5))
        .await
        .expect("stops");
}

#[test]
fn sleeps_and_waits_are_refused_where_they_cannot_park() {
    let inside = pipeline![parallel![submit, [sleep!("1h"), remind]]]
        .name("inside")
        .store(InMemoryStore::new())
        .build();
    let why = inside
        .expect_err("a sleep inside a parallel block")
        .to_string();
    assert!(why.contains("inside a parallel block"), "{why}");
    let plain = pipeline![wait!("ok" as bool)].build();
    let why = plain.expect_err("no store").to_string();
    assert!(why.contains("needs a durable pipeline"), "{why}");
    let twice = pipeline![wait!("ok" as bool), wait!("ok" as u8)]
        .name("twice")
        .store(InMemoryStore::new())
        .build();
    let why = twice.expect_err("one name twice").to_string();
    assert!(
        why.contains("two waits of the pipeline are named `ok`"),
        "{why}"
    );
    let routes = pipeline![wait!("ok" as bool, deadline = "1h") => { "ok" => noted }]
        .name("routes")
        .store(InMemoryStore::new())
        .build();
    let why = routes.expect_err("no timeout route").to_string();
    assert!(why.contains("missing [\"timeout\"]"), "{why}");
}

#[test]
fn a_checkpoint_of_a_run_that_waits_is_format_5_one_with_a_deadline_6_a_queues_7_failed_for_good_8_others_4()
 {
    use fluxio::store::backend::FORMAT_VERSION;
    use fluxio::store::{Checkpoint, Pending, QueueEntry};
    let format = |cp: &Checkpoint| {
        let bytes = cp.to_bytes().expect("encodes");
        u16::from_le_bytes([bytes[4], bytes[5]])
    };
    let plain = Checkpoint::new("r", "v", 1, "s", Context::new().snapshot()).in_pipeline("p");
    assert_eq!(format(&plain), 4, "readable by builds before waits");
    let parked = plain.clone().parked(Pending::sleep(5));
    assert_eq!(format(&parked), 5, "readable by builds before deadlines");
    let mut late = parked.clone();
    late.deadline_ms = Some(9);
    assert_eq!(format(&late), 6, "readable by builds before queues");
    let mut queued = late.clone();
    queued.queue = Some(Box::new(QueueEntry::new("q", None, 0)));
    assert_eq!(
        format(&queued),
        7,
        "readable by builds before final failures"
    );
    let mut failed = plain.clone().failed("refused");
    failed.failed_for_good = true;
    assert_eq!(format(&failed), FORMAT_VERSION);
    assert_eq!(FORMAT_VERSION, 8);
    // what a build before final failures says of it: a format it does not
    // read, by number (here: a format newer than this build's, the same check)
    let mut newer = failed.to_bytes().expect("encodes");
    newer[4..6].copy_from_slice(&9u16.to_le_bytes());
    let err = Checkpoint::from_bytes("p/r", &newer)
        .expect_err("refused")
        .to_string();
    assert!(err.contains("format 9") && err.contains("newer"), "{err}");
}

/// Rule 27 after a redeploy: a worker claims only the versions it holds.
/// A due run of a version it does not hold is left sleeping, reported
/// (`RecoveryEvent::NotHeld`, once) and counted; the same worker on a
/// build that holds the old version wakes it, once.
#[tokio::test]
async fn rule27_a_due_run_of_a_version_nobody_holds_is_reported_and_left() {
    let clock = TestClock::new();
    let store = std::sync::Arc::new(InMemoryStore::new());
    let old = pipeline![submit, sleep!("1h"), remind]
        .name("deploys")
        .store(std::sync::Arc::clone(&store))
        .clock(clock.clock())
        .build()
        .expect("the old build");
    let new = pipeline![submit, sleep!("1h"), remind, escalate]
        .name("deploys")
        .store(std::sync::Arc::clone(&store))
        .clock(clock.clock())
        .build()
        .expect("the new build");
    assert_ne!(old.version(), new.version());
    let out = old.invoke("d1", Context::new()).await.expect("runs");
    assert!(matches!(out, Outcome::Sleeping { .. }), "{out:?}");
    clock.advance("2h").expect("advance");
    let reported = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let told = std::sync::Arc::clone(&reported);
    let w = RecoveryWorker::builder()
        .pipeline(new.clone())
        .on_event(move |e| {
            if let fluxio::recovery::RecoveryEvent::NotHeld { key, version } = e {
                told.lock()
                    .expect("lock")
                    .push((key.clone(), version.clone()));
            }
        })
        .build()
        .expect("a worker");
    for _ in 0..2 {
        let sweep = w.run_once().await.expect("sweep");
        assert_eq!(sweep.woken, 0, "not the new build's to wake");
        assert!(sweep.not_held >= 1, "counted as not held: {sweep:?}");
    }
    assert_eq!(
        *reported.lock().expect("lock"),
        [("deploys/d1".to_owned(), old.version().to_owned())],
        "reported once, naming the run and its version"
    );
    let stored = old.checkpoint("d1").await.expect("load").expect("stored");
    assert_eq!(stored.status, RunStatus::Sleeping, "left as it was");
    let holding = new.clone().hold(old.clone()).expect("holds the old build");
    let sweep = worker(&holding).run_once().await.expect("sweep");
    assert_eq!(sweep.woken, 1, "the build that holds it wakes it");
    let done = old.checkpoint("d1").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    assert!(
        done.context
            .to_context()
            .get::<bool>("reminded")
            .expect("reminded")
    );
}
