//! The schedule test's pipeline (rule 32), and the child-run crash test's
//! pipelines (contract rule 29): a parent
//! `f1, child!("famchild"), f2` and its child `fc`, every stage writing the
//! crash ledger; and a store that stops a process just after its parent
//! stored the child, before the parent's parked checkpoint is written.

use std::time::Duration;

use fluxio::store::backend::{Begin, Begun, Decision, RunEvents, Take};
use fluxio::store::{
    Checkpoint, CheckpointStore, Claimed, Delivery, DueFilter, DueRun, Lease, Mark, RunFilter,
    RunPage, Signal,
};
use fluxio::{Context, Pipeline, PipelineBuilder, StageResult, pipeline, stage};

use crate::crash_step;

#[stage]
async fn f1(ctx: Context) -> StageResult {
    crash_step(ctx, "f1", "f1", 1).await
}

#[stage]
async fn fc(ctx: Context) -> StageResult {
    crash_step(ctx, "fc", "fc", 3).await
}

#[stage]
async fn f2(ctx: Context) -> StageResult {
    let from_child: u64 = ctx.get("fc")?;
    crash_step(ctx, "f2", "f2", from_child % 1_000).await
}

/// The child pipeline, `famchild`: one stage, `fc`.
pub fn family_child() -> PipelineBuilder {
    pipeline![fc].name(FAMILY_CHILD)
}

/// The parent pipeline, `family`: `f1, child!("famchild"), f2`, with
/// `child` registered.
pub fn family_parent(child: Pipeline) -> PipelineBuilder {
    pipeline![f1, child!("famchild", poll = "200ms"), f2]
        .name(FAMILY_PARENT)
        .child(child)
}

/// The parent's name.
pub const FAMILY_PARENT: &str = "family";

#[stage]
async fn tock(ctx: Context) -> StageResult {
    crash_step(ctx, "tock", "tock", 9).await
}

/// The schedule test's pipeline, `ticks`: one stage, `tock`, writing the
/// ledger.
pub fn ticks_pipeline() -> PipelineBuilder {
    pipeline![tock].name(TICKS_PIPELINE)
}

/// [`ticks_pipeline`]'s name.
pub const TICKS_PIPELINE: &str = "ticks";
/// The child's name.
pub const FAMILY_CHILD: &str = "famchild";

/// A store that, at the parked write of a run waiting for its child,
/// prints `child-stored` and never returns: the process stands between
/// storing the child and recording it, for a SIGKILL. Every other call
/// goes to `inner`. It stops an enqueue (rule 31) the same way, before
/// the write that makes the stored run queued.
#[derive(Debug)]
pub struct StopBeforePark {
    /// The store every call goes to.
    pub inner: std::sync::Arc<dyn CheckpointStore>,
}

#[fluxio::async_trait]
impl CheckpointStore for StopBeforePark {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
        self.inner.save(checkpoint).await
    }
    async fn load(&self, key: &str) -> fluxio::Result<Option<Checkpoint>> {
        self.inner.load(key).await
    }
    async fn delete(&self, key: &str) -> fluxio::Result<()> {
        self.inner.delete(key).await
    }
    async fn exists(&self, key: &str) -> fluxio::Result<bool> {
        self.inner.exists(key).await
    }
    async fn history(&self, key: &str) -> fluxio::Result<Vec<Checkpoint>> {
        self.inner.history(key).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> fluxio::Result<RunPage> {
        self.inner.list_runs(filter).await
    }
    async fn acquire_lease(&self, key: &str, ttl: Duration) -> fluxio::Result<Lease> {
        self.inner.acquire_lease(key, ttl).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> fluxio::Result<()> {
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: Lease) -> fluxio::Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> fluxio::Result<()> {
        self.inner.save_fenced(checkpoint, lease).await
    }
    async fn delete_fenced(&self, key: &str, lease: &Lease) -> fluxio::Result<()> {
        self.inner.delete_fenced(key, lease).await
    }
    async fn begin_run(
        &self,
        first: Checkpoint,
        ttl: Duration,
        begin: Begin,
    ) -> fluxio::Result<Begun> {
        self.inner.begin_run(first, ttl, begin).await
    }
    async fn finish_run(&self, last: Checkpoint, lease: Lease, delete: bool) -> fluxio::Result<()> {
        if fluxio::store::open_child(&last).is_some() {
            println!("child-stored");
            std::future::pending::<()>().await;
        }
        // an enqueue's second write (rule 31): the run stands stored, not queued
        if last.queue.as_ref().is_some_and(|q| q.queued) {
            std::future::pending::<()>().await;
        }
        self.inner.finish_run(last, lease, delete).await
    }
    async fn cancel(&self, key: &str) -> fluxio::Result<()> {
        self.inner.cancel(key).await
    }
    async fn mark(&self, key: &str, mark: Mark) -> fluxio::Result<()> {
        self.inner.mark(key, mark).await
    }
    async fn send_signal(&self, key: &str, signal: Signal) -> fluxio::Result<Delivery> {
        self.inner.send_signal(key, signal).await
    }
    async fn take_signal(&self, key: &str, take: &Take, lease: &Lease) -> fluxio::Result<Decision> {
        self.inner.take_signal(key, take, lease).await
    }
    async fn signals(&self, key: &str) -> fluxio::Result<Vec<Signal>> {
        self.inner.signals(key).await
    }
    async fn due_runs(&self, filter: &DueFilter) -> fluxio::Result<Vec<DueRun>> {
        self.inner.due_runs(filter).await
    }
    async fn claim_due(&self, filter: &DueFilter, ttl: Duration) -> fluxio::Result<Vec<Claimed>> {
        self.inner.claim_due(filter, ttl).await
    }
    async fn set_due(&self, lease: &Lease, due_ms: Option<u64>) -> fluxio::Result<()> {
        self.inner.set_due(lease, due_ms).await
    }
    async fn clock_ms(&self) -> fluxio::Result<Option<u64>> {
        self.inner.clock_ms().await
    }
    async fn watch(&self) -> fluxio::Result<Option<RunEvents>> {
        self.inner.watch().await
    }
}
