//! docs/CONTRACT.md rule 35, compensation: when a run fails for good, the
//! compensators (`#[stage(compensate = ...)]`) of the stages it completed
//! since its last pivot run in reverse order, each a durable step with its
//! own idempotency key and the context its stage produced. A failing
//! compensator leaves the run needing attention; an operator's retry goes
//! on at it. `Pipeline::compensate` gives up on a run and undoes it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use fluxio::store::{CheckpointStore, InMemoryStore, retry_run};
use fluxio::{
    Context, Durability, Error, History, Pipeline, RunStatus, StageInfo, StageResult,
    TerminalError, pipeline, stage,
};

/// One call: `(stage, idempotency key, what it saw)`.
type Entry = (String, String, String);

/// What ran, per run id.
static LEDGER: Mutex<BTreeMap<String, Vec<Entry>>> = Mutex::new(BTreeMap::new());

fn note(ctx: &Context, what: &str) {
    let info = StageInfo::current().expect("called by a pipeline");
    let run = ctx.get::<String>("run").unwrap_or_default();
    let keys = ctx.keys().collect::<Vec<_>>().join(",");
    let mut ledger = LEDGER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    ledger.entry(run).or_default().push((
        what.to_owned(),
        info.idempotency_key(),
        format!("{keys}|{}", info.compensates.unwrap_or("")),
    ));
}

fn ran(run: &str) -> Vec<String> {
    let ledger = LEDGER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    ledger
        .get(run)
        .map(|v| v.iter().map(|(s, _, _)| s.clone()).collect())
        .unwrap_or_default()
}

fn entries(run: &str) -> Vec<Entry> {
    let ledger = LEDGER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    ledger.get(run).cloned().unwrap_or_default()
}

/// Whether the input asks `stage` to fail (`fail` lists stages; `once`
/// ones fail on their first call only).
fn fails(ctx: &Context, stage: &str) -> bool {
    let list = |key: &str| ctx.get::<Vec<String>>(key).unwrap_or_default();
    let once = list("once").iter().any(|s| s == stage);
    let run = ctx.get::<String>("run").unwrap_or_default();
    let calls = ran(&run).iter().filter(|s| *s == stage).count();
    list("fail").iter().any(|s| s == stage) || (once && calls == 1)
}

#[stage]
async fn cancel_flight(ctx: Context) -> StageResult {
    note(&ctx, "cancel_flight");
    if fails(&ctx, "cancel_flight") {
        return Err("the airline is down".into());
    }
    Ok(ctx)
}

#[stage(compensate = cancel_flight)]
async fn book_flight(ctx: Context) -> StageResult {
    note(&ctx, "book_flight");
    Ok(ctx.set("flight", "LH-400")?)
}

#[stage]
async fn cancel_hotel(ctx: Context) -> StageResult {
    note(&ctx, "cancel_hotel");
    if fails(&ctx, "cancel_hotel") {
        return Err("the hotel did not answer".into());
    }
    Ok(ctx)
}

#[stage(compensate = cancel_hotel)]
async fn book_hotel(ctx: Context) -> StageResult {
    note(&ctx, "book_hotel");
    Ok(ctx.set("hotel", "Adlon")?)
}

#[stage]
async fn book_car(ctx: Context) -> StageResult {
    note(&ctx, "book_car");
    if fails(&ctx, "book_car") {
        return Err(TerminalError::new("no car in that city").into());
    }
    Ok(ctx.set("car", "VW")?)
}

#[stage]
async fn flaky(ctx: Context) -> StageResult {
    note(&ctx, "flaky");
    Err("the gateway timed out".into())
}

fn trip(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![book_flight, book_hotel, book_car]
        .name("trips")
        .store_arc(Arc::clone(store))
        .build()
        .expect("valid")
}

fn input(run: &str, fail: &[&str], once: &[&str]) -> Context {
    let list = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    Context::new()
        .set("run", run)
        .and_then(|c| c.set("fail", list(fail)))
        .and_then(|c| c.set("once", list(once)))
        .expect("set")
}

#[tokio::test]
async fn rule35_a_final_failure_compensates_completed_stages_in_reverse() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = trip(&store);
    let err = p
        .invoke("t-1", input("t-1", &["book_car"], &[]))
        .await
        .expect_err("the car fails");
    assert!(
        err.is_terminal(),
        "the caller gets the stage's error: {err}"
    );
    assert_eq!(
        ran("t-1"),
        [
            "book_flight",
            "book_hotel",
            "book_car",
            "cancel_hotel",
            "cancel_flight"
        ]
    );
    let seen = entries("t-1");
    // each compensator got the context its stage produced
    assert_eq!(seen[3].2, "fail,flight,hotel,once,run|book_hotel");
    assert_eq!(seen[4].2, "fail,flight,once,run|book_flight");
    // its own idempotency key: its stage's, marked as a compensation
    assert_eq!(seen[3].1, format!("{}/compensate", seen[1].1));
    assert_eq!(seen[4].1, format!("{}/compensate", seen[0].1));
    let cp = p.checkpoint("t-1").await.expect("load").expect("stored");
    assert!(cp.is_failed_for_good(), "{cp:?}");
    let comp = cp.compensation.as_deref().expect("stored with it");
    assert!(comp.is_done());
    let names: Vec<&str> = comp.steps.iter().map(|s| s.compensator.as_str()).collect();
    assert_eq!(names, ["cancel_hotel", "cancel_flight"]);

    let history: History = p.history("t-1").await.expect("history");
    let told: Vec<(String, Option<String>, RunStatus, String)> = history
        .steps
        .iter()
        .map(|s| {
            (
                s.stage.clone(),
                s.compensates.clone(),
                history.status,
                s.status.to_string(),
            )
        })
        .collect();
    assert_eq!(told.len(), 5, "{history}");
    assert_eq!(told[2].3, "failed");
    assert_eq!(
        (told[3].0.as_str(), told[3].1.as_deref(), told[3].3.as_str()),
        ("cancel_hotel", Some("book_hotel"), "completed")
    );
    let table = history.to_string();
    assert!(
        table.contains("cancel_flight (undoes book_flight)"),
        "{table}"
    );
    assert!(table.contains("compensated 2 of 2"), "{table}");

    // a client's retry, a resume, an operator's compensate: nothing runs again
    assert!(matches!(
        p.start("t-1", input("t-1", &["book_car"], &[])).await,
        Err(Error::FailedForGood { .. })
    ));
    assert!(matches!(
        p.resume("t-1").await,
        Err(Error::FailedForGood { .. })
    ));
    let again = p.compensate("t-1").await.expect("compensated already");
    assert_eq!(&again, comp);
    assert_eq!(ran("t-1").len(), 5, "nothing ran again");
}

#[stage(pivot)]
async fn charge(ctx: Context) -> StageResult {
    note(&ctx, "charge");
    Ok(ctx.set("charged", true)?)
}

#[tokio::test]
async fn rule35_nothing_before_a_completed_pivot_is_compensated() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![book_flight, charge, book_hotel, book_car]
        .name("pivots")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    p.invoke("p-1", input("p-1", &["book_car"], &[]))
        .await
        .expect_err("the car fails");
    assert_eq!(
        ran("p-1"),
        [
            "book_flight",
            "charge",
            "book_hotel",
            "book_car",
            "cancel_hotel"
        ],
        "the flight was booked before the point of no return"
    );
}

#[stage]
async fn refuse_late(ctx: Context) -> StageResult {
    // the other branch finishes (and is recorded) first
    tokio::time::sleep(Duration::from_millis(50)).await;
    note(&ctx, "refuse_late");
    Err(TerminalError::new("fraud").into())
}

#[tokio::test]
async fn rule35_finished_parallel_branches_are_compensated_from_their_records() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![parallel![book_flight, refuse_late]]
        .name("branches")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    p.invoke("b-1", input("b-1", &[], &[]))
        .await
        .expect_err("a branch fails for good");
    assert_eq!(ran("b-1"), ["book_flight", "refuse_late", "cancel_flight"]);
    assert_eq!(entries("b-1")[2].2, "fail,flight,once,run|book_flight");

    // a completed block, then a final failure: every branch is undone
    let p = pipeline![parallel![book_flight, book_hotel], book_car]
        .name("blocks")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    p.invoke("b-2", input("b-2", &["book_car"], &[]))
        .await
        .expect_err("the car fails");
    let mut undone = ran("b-2")[3..].to_vec();
    undone.sort();
    assert_eq!(undone, ["cancel_flight", "cancel_hotel"]);
}

#[tokio::test]
async fn rule35_a_failing_compensator_needs_attention_and_a_retry_goes_on() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = trip(&store);
    let err = p
        .invoke("f-1", input("f-1", &["book_car"], &["cancel_hotel"]))
        .await
        .expect_err("fails");
    match &err {
        Error::CompensationFailed {
            run_id,
            stage,
            compensator,
            message,
        } => {
            assert_eq!(
                (run_id.as_str(), stage.as_str(), compensator.as_str()),
                ("trips/f-1", "book_hotel", "cancel_hotel")
            );
            assert!(message.contains("did not answer"), "{message}");
        }
        other => panic!("expected CompensationFailed, got {other:?}"),
    }
    let cp = p.checkpoint("f-1").await.expect("load").expect("stored");
    assert_eq!(cp.status, RunStatus::NeedsAttention);
    assert_eq!(cp.compensation.as_ref().map(|c| c.next), Some(0));
    assert!(
        cp.error_message
            .as_deref()
            .is_some_and(|e| e.contains("compensator `cancel_hotel`")),
        "{cp:?}"
    );
    // the operator retries it: the compensation goes on at cancel_hotel
    retry_run(store.as_ref(), "trips/f-1")
        .await
        .expect("retried");
    let err = p.resume("f-1").await.expect_err("failed for good");
    assert!(matches!(err, Error::FailedForGood { .. }), "{err}");
    assert_eq!(
        ran("f-1"),
        [
            "book_flight",
            "book_hotel",
            "book_car",
            "cancel_hotel",
            "cancel_hotel",
            "cancel_flight"
        ]
    );
    let cp = p.checkpoint("f-1").await.expect("load").expect("stored");
    assert!(cp.is_failed_for_good());
    let history = p.history("f-1").await.expect("history");
    let statuses: Vec<String> = history
        .steps
        .iter()
        .map(|s| format!("{}:{}", s.stage, s.status))
        .collect();
    assert_eq!(
        statuses,
        [
            "book_flight:completed",
            "book_hotel:completed",
            "book_car:failed",
            "cancel_hotel:failed",
            "cancel_hotel:completed",
            "cancel_flight:completed"
        ],
        "{history}"
    );
}

#[stage(timeout = "50ms")]
async fn slow_undo(ctx: Context) -> StageResult {
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(ctx)
}

#[stage(compensate = slow_undo)]
async fn reserve(ctx: Context) -> StageResult {
    Ok(ctx.set("reserved", true)?)
}

#[stage]
async fn panicking_undo(_ctx: Context) -> StageResult {
    panic!("the undo has a bug")
}

#[stage(compensate = panicking_undo)]
async fn hold(ctx: Context) -> StageResult {
    Ok(ctx.set("held", true)?)
}

#[tokio::test]
async fn rule35_a_compensator_that_times_out_or_panics_leaves_the_run_needing_attention() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    for (run, p) in [
        ("slow", pipeline![reserve, book_car]),
        ("panics", pipeline![hold, book_car]),
    ] {
        let p = p
            .name(run)
            .store_arc(Arc::clone(&store))
            .build()
            .expect("valid");
        let err = p
            .invoke(run, input(run, &["book_car"], &[]))
            .await
            .expect_err("fails");
        let Error::CompensationFailed { message, .. } = &err else {
            panic!("{run}: expected CompensationFailed, got {err:?}");
        };
        let wanted = if run == "slow" {
            "50ms"
        } else {
            "the undo has a bug"
        };
        assert!(message.contains(wanted), "{run}: {message}");
        let cp = p.checkpoint(run).await.expect("load").expect("stored");
        assert_eq!(cp.status, RunStatus::NeedsAttention, "{run}");
    }
}

#[tokio::test]
async fn rule35_compensate_gives_up_on_a_failed_run_and_undoes_it() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![book_flight, book_hotel, flaky]
        .name("giveup")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    let err = p
        .invoke("g-1", input("g-1", &[], &[]))
        .await
        .expect_err("flaky fails");
    assert!(!err.is_terminal(), "a transient failure: {err}");
    assert_eq!(
        ran("g-1"),
        ["book_flight", "book_hotel", "flaky"],
        "no compensation yet"
    );
    let done = p.compensate("g-1").await.expect("compensated");
    assert!(done.reason.contains("gateway timed out"), "{}", done.reason);
    assert_eq!(
        ran("g-1"),
        [
            "book_flight",
            "book_hotel",
            "flaky",
            "cancel_hotel",
            "cancel_flight"
        ]
    );
    let cp = p.checkpoint("g-1").await.expect("load").expect("stored");
    assert!(cp.is_failed_for_good());
    assert!(matches!(
        p.resume("g-1").await,
        Err(Error::FailedForGood { .. })
    ));

    // a run that completed has nothing to give up on; nor has an unknown one
    let done_run = pipeline![book_flight]
        .name("done")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    let out = done_run
        .invoke("d-1", input("d-1", &[], &[]))
        .await
        .expect("runs");
    assert!(out.is_completed());
    assert!(matches!(
        done_run.compensate("d-1").await,
        Err(Error::RunFinished {
            status: RunStatus::Completed,
            ..
        })
    ));
    assert!(matches!(
        done_run.compensate("nobody").await,
        Err(Error::CheckpointNotFound { .. })
    ));
    assert!(matches!(
        done_run.compensate("").await,
        Err(Error::InvalidRunId { .. })
    ));
}

#[tokio::test]
async fn rule35_a_pipeline_that_cannot_compensate_is_refused_at_build() {
    let cases = [
        ("no store", pipeline![book_flight].name("x").build().err()),
        (
            "exit durability",
            pipeline![book_flight]
                .name("x")
                .store(InMemoryStore::new())
                .durability(Durability::Exit)
                .build()
                .err(),
        ),
        (
            "async durability",
            pipeline![book_flight]
                .name("x")
                .store(InMemoryStore::new())
                .durability(Durability::Async)
                .build()
                .err(),
        ),
        (
            "history depth",
            pipeline![book_flight]
                .name("x")
                .store(InMemoryStore::new())
                .history_depth(Some(8))
                .build()
                .err(),
        ),
        (
            "fire and forget",
            pipeline![book_car, fire_and_forget![book_flight]]
                .name("x")
                .store(InMemoryStore::new())
                .build()
                .err(),
        ),
    ];
    for (case, err) in cases {
        let err = err.unwrap_or_else(|| panic!("{case}: built"));
        assert!(matches!(err, Error::Build { .. }), "{case}: {err:?}");
        assert!(err.to_string().contains("book_flight"), "{case}: {err}");
    }
}

#[stage]
async fn hang(ctx: Context) -> StageResult {
    note(&ctx, "hang");
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(ctx)
}

#[stage]
async fn slow_cancel_flight(ctx: Context) -> StageResult {
    note(&ctx, "slow_cancel_flight");
    if ran(&ctx.get::<String>("run").unwrap_or_default())
        .iter()
        .filter(|s| *s == "slow_cancel_flight")
        .count()
        == 1
    {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    Ok(ctx)
}

#[stage(compensate = slow_cancel_flight)]
async fn book_slow_flight(ctx: Context) -> StageResult {
    note(&ctx, "book_slow_flight");
    Ok(ctx.set("flight", "LH-400")?)
}

fn worker(p: &Pipeline, attempts: u32) -> fluxio::recovery::RecoveryWorker {
    fluxio::recovery::RecoveryWorker::builder()
        .pipeline(p.clone())
        .policy(
            fluxio::recovery::RecoveryPolicy::new()
                .max_attempts(attempts)
                .backoff(Duration::ZERO, Duration::ZERO),
        )
        .build()
        .expect("a worker")
}

#[tokio::test]
async fn rule35_a_worker_that_gives_up_on_a_run_compensates_it() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![book_flight, hang]
        .name("abandoned")
        .store_arc(Arc::clone(&store))
        .lease_ttl(Duration::from_millis(60))
        .build()
        .expect("valid");
    // the worker running it dies inside `hang`: the run is abandoned there
    let dropped = tokio::time::timeout(
        Duration::from_millis(100),
        p.invoke("a-1", input("a-1", &[], &[])),
    )
    .await;
    assert!(dropped.is_err(), "the run was still in `hang`");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sweep = worker(&p, 1).run_once().await.expect("a sweep");
    assert_eq!(sweep.gave_up, 1, "{sweep:?}");
    assert_eq!(ran("a-1"), ["book_flight", "hang", "cancel_flight"]);
    let cp = p.checkpoint("a-1").await.expect("load").expect("stored");
    assert!(cp.is_failed_for_good(), "{cp:?}");
    let comp = cp.compensation.expect("compensated");
    assert!(comp.reason.contains("recovery gave up"), "{}", comp.reason);
}

#[tokio::test]
async fn rule35_a_worker_goes_on_with_an_abandoned_compensation() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![book_slow_flight, book_car]
        .name("halfway")
        .store_arc(Arc::clone(&store))
        .lease_ttl(Duration::from_millis(60))
        .build()
        .expect("valid");
    // the process dies while `slow_cancel_flight` runs
    let dropped = tokio::time::timeout(
        Duration::from_millis(150),
        p.invoke("h-1", input("h-1", &["book_car"], &[])),
    )
    .await;
    assert!(dropped.is_err(), "the compensator was still running");
    let cp = p.checkpoint("h-1").await.expect("load").expect("stored");
    assert_eq!(cp.status, RunStatus::Running);
    assert_eq!(cp.compensation.as_ref().map(|c| c.next), Some(0));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sweep = worker(&p, 5).run_once().await.expect("a sweep");
    // resumed, to end failed for good
    assert_eq!((sweep.found, sweep.failed), (1, 1), "{sweep:?}");
    assert_eq!(
        ran("h-1"),
        [
            "book_slow_flight",
            "book_car",
            "slow_cancel_flight",
            "slow_cancel_flight"
        ],
        "it goes on compensating, never forward"
    );
    let seen = entries("h-1");
    assert_eq!(
        seen[2].1, seen[3].1,
        "the same idempotency key on both attempts"
    );
    let cp = p.checkpoint("h-1").await.expect("load").expect("stored");
    assert!(cp.is_failed_for_good(), "{cp:?}");
}

/// Lets `gated_undo` finish, per run.
static GATES: Mutex<BTreeMap<String, Arc<tokio::sync::Notify>>> = Mutex::new(BTreeMap::new());

fn gate(run: &str) -> Arc<tokio::sync::Notify> {
    let mut gates = GATES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Arc::clone(gates.entry(run.to_owned()).or_default())
}

#[stage]
async fn gated_undo(ctx: Context) -> StageResult {
    note(&ctx, "gated_undo");
    let run: String = ctx.get("run")?;
    if ran(&run).iter().filter(|s| *s == "gated_undo").count() == 1 {
        gate(&run).notified().await;
    }
    Ok(ctx)
}

#[stage(compensate = gated_undo)]
async fn book_gated(ctx: Context) -> StageResult {
    note(&ctx, "book_gated");
    Ok(ctx.set("booked", true)?)
}

#[tokio::test]
async fn rule35_a_compensation_cancelled_stops_and_one_paused_goes_on() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![book_flight, book_gated, book_car]
        .name("stopped")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    for (run, pause) in [("c-1", false), ("c-2", true)] {
        let running = {
            let p = p.clone();
            tokio::spawn(async move { p.invoke(run, input(run, &["book_car"], &[])).await })
        };
        // the run is inside its first compensator
        while !ran(run).contains(&"gated_undo".to_owned()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if pause {
            p.pause(run).await.expect("paused");
        } else {
            p.cancel(run).await.expect("cancelled");
        }
        gate(run).notify_one();
        let ended = running.await.expect("joined").expect_err("stopped");
        let cp = p.checkpoint(run).await.expect("load").expect("stored");
        if !pause {
            // cancelled: it stops before the next compensator, for good
            assert!(matches!(ended, Error::Cancelled { .. }), "{ended}");
            assert_eq!(cp.status, RunStatus::Cancelled);
            assert!(matches!(
                p.compensate(run).await,
                Err(Error::RunFinished {
                    status: RunStatus::Cancelled,
                    ..
                })
            ));
            assert_eq!(
                ran(run),
                ["book_flight", "book_gated", "book_car", "gated_undo"],
                "cancel_flight never ran"
            );
            continue;
        }
        // paused: the operator's compensate goes on where it stopped
        assert!(matches!(ended, Error::Paused { .. }), "{ended}");
        assert_eq!(cp.status, RunStatus::Paused);
        let done = p.compensate(run).await.expect("compensated");
        assert!(done.is_done());
        assert_eq!(
            ran(run),
            [
                "book_flight",
                "book_gated",
                "book_car",
                "gated_undo",
                "gated_undo",
                "cancel_flight"
            ],
            "the compensator that was running runs again (its completion was never recorded)"
        );
        let cp = p.checkpoint(run).await.expect("load").expect("stored");
        assert!(cp.is_failed_for_good(), "{cp:?}");
    }
}

#[tokio::test]
async fn rule35_compensate_undoes_a_sleeping_run_and_no_worker_wakes_it() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![book_flight, sleep!("1h"), book_hotel]
        .name("sleepers")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    let slept = p
        .invoke("z-1", input("z-1", &[], &[]))
        .await
        .expect("sleeps");
    assert!(!slept.is_completed());
    let done = p.compensate("z-1").await.expect("compensated");
    assert_eq!(done.steps.len(), 1);
    assert_eq!(ran("z-1"), ["book_flight", "cancel_flight"]);
    let cp = p.checkpoint("z-1").await.expect("load").expect("stored");
    assert!(cp.is_failed_for_good(), "{cp:?}");
    // a worker finds nothing to wake or resume
    let sweep = worker(&p, 5).run_once().await.expect("a sweep");
    assert_eq!((sweep.resumed, sweep.woken), (0, 0), "{sweep:?}");
    assert_eq!(ran("z-1").len(), 2, "book_hotel never ran");
}
