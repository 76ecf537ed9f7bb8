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
