//! Checks of failures that are final (contract rule 35): a run a stage
//! failed for good is stored so, and neither `start` nor a worker that
//! retries failed runs takes it, on every store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::{Harness, namespace, suite_pipeline, suite_stage};
use crate::compile::Node;
use crate::context::Context;
use crate::error::{Error, TerminalError};
use crate::recovery::{RecoveryPolicy, RecoveryWorker};
use crate::stage::{ResourceReq, Resources, StageFuture};
use crate::store::{RunFilter, RunState, RunStatus};

/// How often the stage ran.
#[derive(Clone, Default)]
struct Calls(Arc<AtomicU32>);

fn refuse(_ctx: Context, resources: &Resources) -> StageFuture {
    let calls = resources.get::<Calls>();
    StageFuture::new(async move {
        let calls = calls.ok_or("the counter is registered")?;
        calls.0.fetch_add(1, Ordering::SeqCst);
        Err(TerminalError::new("refused for fraud").into())
    })
}

/// Rule 35: a stage's `TerminalError` is stored as a failure for good
/// (listed as failed, loaded and read from the journal as failed for good);
/// a repeated `start` answers `FailedForGood` and a worker that retries
/// failed runs leaves it, so the stage ran once.
pub async fn rule35_a_run_failed_for_good_is_stored_so_and_not_run_again<H: Harness>(h: &H) {
    const TAKES: &[fn() -> ResourceReq] = &[ResourceReq::of::<Calls>];
    let store: Arc<dyn crate::store::CheckpointStore> =
        Arc::new(h.store(&namespace("rule35_final")).await);
    let calls = Calls::default();
    let nodes: Vec<Node> = vec![suite_stage("refuse", 1, TAKES, refuse)];
    let p = suite_pipeline(
        nodes,
        *b"fluxio/conformance/final/v1\0\0\0\0\0",
        "fraud",
        &calls,
    )
    .store_arc(Arc::clone(&store))
    .build()
    .expect("the pipeline builds");
    let err = p.invoke("f", Context::new()).await.expect_err("refused");
    assert!(err.is_terminal(), "{err}");
    let cp = store.load("fraud/f").await.expect("load").expect("stored");
    assert_eq!(cp.status, RunStatus::Failed);
    assert!(cp.is_failed_for_good(), "{cp:?}");
    let journal = store.history("fraud/f").await.expect("history");
    assert!(
        journal
            .last()
            .is_some_and(crate::store::Checkpoint::is_failed_for_good)
    );
    assert!(
        matches!(p.start("f", Context::new()).await, Err(Error::FailedForGood { ref stage, .. }) if stage == "refuse"),
        "a client's retry runs nothing"
    );
    if let Ok(page) = store.list_runs(&RunFilter::new().pipeline("fraud")).await {
        assert_eq!(page.runs.len(), 1);
        assert_eq!(page.runs[0].state, RunState::Failed);
    }
    let worker = RecoveryWorker::builder()
        .pipeline(p.clone())
        .policy(
            RecoveryPolicy::new()
                .retry_failed(true)
                .backoff(Duration::ZERO, Duration::ZERO),
        )
        .build()
        .expect("a worker");
    if let Ok(sweep) = worker.run_once().await {
        assert_eq!(sweep.resumed, 0, "{sweep:?}");
    }
    assert_eq!(calls.0.load(Ordering::SeqCst), 1, "the stage ran once");
    let cp = store.load("fraud/f").await.expect("load").expect("stored");
    assert!(cp.is_failed_for_good(), "{cp:?}");
}

fn book(ctx: Context, resources: &Resources) -> StageFuture {
    let calls = resources.get::<Calls>();
    StageFuture::new(async move {
        calls.ok_or("the counter is registered")?;
        Ok(crate::stage::Output::Context(ctx.set("booked", "seat-7")?))
    })
}

/// Counts its calls (the counter's high half), and checks it got what
/// `book` produced.
fn unbook(ctx: Context, resources: &Resources) -> StageFuture {
    let calls = resources.get::<Calls>();
    StageFuture::new(async move {
        let calls = calls.ok_or("the counter is registered")?;
        let booked: String = ctx.get("booked")?;
        if booked != "seat-7" {
            return Err(format!("unbook got {booked}").into());
        }
        calls.0.fetch_add(1 << 16, Ordering::SeqCst);
        Ok(crate::stage::Output::Context(ctx))
    })
}

const TAKES_CALLS: &[fn() -> ResourceReq] = &[ResourceReq::of::<Calls>];

fn unbook_stage() -> crate::stage::Stage {
    let meta = crate::stage::StageMeta {
        resources: TAKES_CALLS,
        ..crate::__private::stage_meta("unbook", [3; 32])
    };
    crate::stage::Stage::new(meta, unbook)
}

/// Rule 35: a run that fails for good after a stage with a compensator
/// completed runs the compensator once, with what that stage produced;
/// every checkpoint of it is stored and read back with its compensation,
/// the last one failed for good with it done, and the history tells the
/// compensator as a step of its own. A repeated `start` runs nothing.
pub async fn rule35_a_compensation_is_stored_and_told_by_the_history<H: Harness>(h: &H) {
    let store: Arc<dyn crate::store::CheckpointStore> =
        Arc::new(h.store(&namespace("rule35_undo")).await);
    let calls = Calls::default();
    let meta = crate::stage::StageMeta {
        resources: TAKES_CALLS,
        compensate: Some(unbook_stage),
        ..crate::__private::stage_meta("book", [2; 32])
    };
    let nodes: Vec<Node> = vec![
        Node::Stage(crate::stage::Stage::new(meta, book)),
        suite_stage("refuse", 1, TAKES_CALLS, refuse),
    ];
    let p = suite_pipeline(
        nodes,
        *b"fluxio/conformance/undo/v1\0\0\0\0\0\0",
        "seats",
        &calls,
    )
    .store_arc(Arc::clone(&store))
    .build()
    .expect("the pipeline builds");
    let err = p.invoke("s", Context::new()).await.expect_err("refused");
    assert!(err.is_terminal(), "{err}");
    assert_eq!(
        calls.0.load(Ordering::SeqCst),
        (1 << 16) + 1,
        "unbook once, refuse once"
    );
    let cp = store.load("seats/s").await.expect("load").expect("stored");
    assert!(cp.is_failed_for_good(), "{cp:?}");
    let comp = cp
        .compensation
        .as_deref()
        .expect("the compensation is stored");
    assert!(comp.is_done(), "{comp:?}");
    assert_eq!(comp.steps.len(), 1);
    assert_eq!(
        (
            comp.steps[0].stage.as_str(),
            comp.steps[0].compensator.as_str()
        ),
        ("book", "unbook")
    );
    assert!(comp.reason.contains("refused for fraud"), "{}", comp.reason);
    let journal = store.history("seats/s").await.expect("history");
    let under_way = journal
        .iter()
        .filter(|cp| cp.compensation.as_ref().is_some_and(|c| !c.is_done()))
        .count();
    assert_eq!(under_way, 1, "one checkpoint before the compensator ran");
    let history = crate::history::History::of("seats/s", &journal);
    let told: Vec<(&str, Option<&str>, String)> = history
        .steps
        .iter()
        .map(|s| {
            (
                s.stage.as_str(),
                s.compensates.as_deref(),
                s.status.to_string(),
            )
        })
        .collect();
    assert_eq!(
        told,
        [
            ("book", None, "completed".to_owned()),
            ("refuse", None, "failed".to_owned()),
            ("unbook", Some("book"), "completed".to_owned()),
        ],
        "{history}"
    );
    assert!(
        matches!(
            p.start("s", Context::new()).await,
            Err(Error::FailedForGood { .. })
        ),
        "a client's retry runs nothing"
    );
    assert_eq!(
        calls.0.load(Ordering::SeqCst),
        (1 << 16) + 1,
        "nothing ran again"
    );
}
