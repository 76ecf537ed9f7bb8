//! A run deleted from the store while a stage of it runs (contract rule 18):
//! its owner's next checkpoint is refused with [`Error::RunDeleted`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::sync::Notify;

use super::{Harness, namespace, suite_pipeline, suite_stage};
use crate::context::Context;
use crate::error::Error;
use crate::pipeline::PipelineBuilder;
use crate::stage::{Output, ResourceReq, Resources, StageFuture};
use crate::store::{CheckpointStore, run_key};

/// The pipeline's name.
const NAME: &str = "deleted";

/// Holds `hold` until the check lets it go, and counts `after`'s calls.
#[derive(Debug, Clone, Default)]
struct Gate {
    started: Arc<Notify>,
    go: Arc<Notify>,
    after_calls: Arc<AtomicU32>,
}

fn hold(ctx: Context, resources: &Resources) -> StageFuture {
    let gate = resources.get::<Gate>();
    StageFuture::new(async move {
        let gate = gate.ok_or("the gate is registered")?;
        gate.started.notify_one();
        gate.go.notified().await;
        Ok(Output::Context(ctx.set("held", true)?))
    })
}

fn after(ctx: Context, resources: &Resources) -> StageFuture {
    let gate = resources.get::<Gate>();
    StageFuture::new(async move {
        let gate = gate.ok_or("the gate is registered")?;
        gate.after_calls.fetch_add(1, Ordering::SeqCst);
        Ok(Output::Context(ctx.set("after", true)?))
    })
}

/// `hold, after`, both taking the [`Gate`].
fn pipeline(gate: &Gate) -> PipelineBuilder {
    const TAKES_GATE: &[fn() -> ResourceReq] = &[ResourceReq::of::<Gate>];
    let nodes = vec![
        suite_stage("hold", 1, TAKES_GATE, hold),
        suite_stage("after", 2, TAKES_GATE, after),
    ];
    suite_pipeline(nodes, *b"fluxio/conformance/deleted/v1\0\0\0", NAME, gate)
}

/// Rule 18: a run whose checkpoints are deleted (a plain `delete`, as
/// `fluxio runs delete --force` does) while its first stage runs stops at
/// its next checkpoint with [`Error::RunDeleted`] naming the run: the next
/// stage never runs, nothing is written back, and the run id starts afresh.
pub async fn rule18_a_run_deleted_while_it_runs_stops_with_run_deleted<H: Harness>(h: &H) {
    let ns = namespace("deleted");
    let run = "order-18";
    let key = run_key(NAME, run);
    let gate = Gate::default();
    let owner = pipeline(&gate)
        .store(h.store(&ns).await)
        .build()
        .expect("the pipeline builds");
    // a context of some size, so the next checkpoint is a delta
    let input = Context::new()
        .set("order", "x".repeat(4096))
        .expect("serializes");
    let running = tokio::spawn({
        let owner = owner.clone();
        let input = input.clone();
        async move { owner.invoke(run, input).await }
    });
    gate.started.notified().await;

    let operator = h.store(&ns).await;
    assert!(
        operator.exists(&key).await.expect("exists"),
        "the first checkpoint is stored"
    );
    operator.delete(&key).await.expect("delete");
    gate.go.notify_one();

    let err = running
        .await
        .expect("the run does not panic")
        .expect_err("the run was deleted");
    assert!(
        matches!(&err, Error::RunDeleted { run_id, seq: 1 } if run_id == &key),
        "{err:?}"
    );
    assert!(err.to_string().contains("deleted while it ran"), "{err}");
    assert_eq!(gate.after_calls.load(Ordering::SeqCst), 0, "no stage after");
    assert!(
        !operator.exists(&key).await.expect("exists"),
        "nothing was written back"
    );

    // the lease was given back: the run id starts afresh
    let gate_again = gate.clone();
    let again = tokio::spawn(async move {
        gate_again.started.notified().await;
        gate_again.go.notify_one();
    });
    let out = owner
        .invoke(run, input)
        .await
        .and_then(crate::Outcome::completed)
        .expect("a fresh run");
    again.await.expect("the gate opens");
    assert!(out.get::<bool>("after").expect("ran to the end"));
}
