//! An operator's compensation of a run (contract rule 35):
//! [`Pipeline::compensate`], and the continuation of a compensating run
//! that a resume, a worker or recovery finds.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument as _;

use super::Pipeline;
use super::resume::{Continue, ResumeOptions};
use crate::error::{Error, Result};
use crate::interpret::compensate::{self, At};
use crate::interpret::ownership::Ownership;
use crate::interpret::tail::Tail;
use crate::stage::bodies::RunBodies;
use crate::store::{Checkpoint, CheckpointStore, Compensation, Mark, RunStatus};

/// How long [`Pipeline::compensate`] waits, at most, between two tries to
/// take the lease of a run whose owner it asked to stop.
const MOST_BETWEEN_TRIES: Duration = Duration::from_secs(1);

impl Pipeline {
    /// Gives up on the run `run_id` and undoes it (contract rule 35): the
    /// compensators of the stages it completed since its last pivot run in
    /// reverse order, each a durable step with its own idempotency key
    /// ([`StageInfo::compensates`](crate::StageInfo::compensates)), with
    /// the context its stage produced. The run then stays failed for good
    /// (its checkpoint's [`compensation`](crate::store::Checkpoint::compensation)
    /// says what ran); returns that compensation.
    ///
    /// This is cancelling with compensation: a run a worker is running is
    /// [paused](Self::pause) first, and compensated once that worker
    /// stopped before its next stage (the stage running meanwhile did not
    /// complete as far as the journal knows, and is not compensated). A
    /// sleeping, waiting, paused, failed or needs-attention run is
    /// compensated at once; one compensating goes on where it stopped; one
    /// compensated already returns its compensation again. A completed run
    /// is not: it succeeded, and undoing it is a run of its own.
    ///
    /// ```
    /// use fluxio_core::__private::{Node, pipeline_builder, stage_meta};
    /// use fluxio_core::stage::{Output, Resources, Stage, StageFuture};
    /// use fluxio_core::{Context, InMemoryStore};
    ///
    /// // what `#[stage(compensate = release_seat)] async fn hold_seat` makes
    /// fn release_seat() -> Stage {
    ///     fn call(ctx: Context, _: &Resources) -> StageFuture {
    ///         StageFuture::ready(Ok(Output::Context(ctx)))
    ///     }
    ///     Stage::new(stage_meta("release_seat", [1; 32]), call)
    /// }
    /// fn hold_seat(ctx: Context, _: &Resources) -> StageFuture {
    ///     StageFuture::ready(ctx.set("seat", "12A").map(Output::Context).map_err(Into::into))
    /// }
    /// fn pay(_: Context, _: &Resources) -> StageFuture {
    ///     StageFuture::ready(Err("the card network is down".into()))
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// let mut meta = stage_meta("hold_seat", [2; 32]);
    /// meta.compensate = Some(release_seat);
    /// let stages = vec![
    ///     Node::Stage(Stage::new(meta, hold_seat)),
    ///     Node::Stage(Stage::new(stage_meta("pay", [3; 32]), pay)),
    /// ];
    /// let pipeline = pipeline_builder(stages, [1; 32], [2; 32])
    ///     .name("seats")
    ///     .store(InMemoryStore::new())
    ///     .build()?;
    /// assert!(pipeline.start("order-7", Context::new()).await.is_err());
    /// // the customer gave up waiting: undo what can be undone
    /// let done = pipeline.compensate("order-7").await?;
    /// assert_eq!(done.steps.len(), 1);
    /// assert_eq!(done.steps[0].compensator, "release_seat");
    /// let cp = pipeline.checkpoint("order-7").await?.expect("kept");
    /// assert!(cp.is_failed_for_good());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::CheckpointNotFound`] when nothing is stored for `run_id`;
    /// [`Error::RunFinished`] when it completed, or was cancelled (its
    /// journal is closed to writes); [`Error::CompensationFailed`] when a compensator fails
    /// (the run needs attention at it; call this again, or retry it, to go
    /// on); [`Error::CheckpointVersion`] when another version wrote it;
    /// [`Error::InvalidRunId`]; [`Error::Store`].
    ///
    /// # Cancel safety
    /// Dropping the future stops the compensation between two
    /// compensators, or while one runs: the run is left paused (if it was
    /// asked to stop) or compensating, and a later call, a resume or a
    /// worker goes on where it stopped.
    pub async fn compensate(&self, run_id: &str) -> Result<Compensation> {
        let (key, store, span) = self.durable_run("compensate", run_id, true)?;
        async {
            let owner = self.take_lease_stopping(store, run_id, &key).await?;
            let result = self.compensate_owned(store, &owner, run_id, &key).await;
            owner.release().await;
            result
        }
        .instrument(span)
        .await
    }

    /// The lease of run `key`: when a worker holds it, the run is paused
    /// (its worker stops before its next stage) and the lease taken once
    /// that worker gave it back.
    async fn take_lease_stopping(
        &self,
        store: &Arc<dyn CheckpointStore>,
        run_id: &str,
        key: &str,
    ) -> Result<Ownership> {
        let mut paused = false;
        let mut wait = Duration::from_millis(20);
        loop {
            match self.take_lease(store, key).await {
                Err(Error::RunIdInUse { .. }) => {
                    if !paused {
                        tracing::info!(
                            run = key,
                            "compensate: pausing the run, which a worker runs"
                        );
                        self.pause(run_id).await?;
                        paused = true;
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(MOST_BETWEEN_TRIES);
                }
                taken => return taken,
            }
        }
    }

    /// [`compensate`](Self::compensate)'s body, holding the lease.
    async fn compensate_owned(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        run_id: &str,
        key: &str,
    ) -> Result<Compensation> {
        let load = async || {
            store
                .load(key)
                .await?
                .ok_or_else(|| Error::CheckpointNotFound {
                    run_id: key.to_owned(),
                })
        };
        let mut cp = load().await?;
        if cp.status == RunStatus::Paused {
            // under the lease, so that no worker takes it meanwhile
            let now_ms = self.inner.clock.now_ms(Some(store.as_ref())).await?;
            store.mark(key, Mark::Unpause { now_ms }).await?;
            cp = load().await?;
        }
        match (&cp.compensation, cp.status) {
            (Some(done), RunStatus::Failed) if done.is_done() => return Ok((**done).clone()),
            (_, status @ (RunStatus::Completed | RunStatus::Cancelled)) => {
                return Err(Error::RunFinished {
                    run_id: key.to_owned(),
                    status,
                });
            }
            _ => {}
        }
        let reason = match &cp.error_message {
            Some(e) => format!("compensated by an operator after: {e}"),
            None => format!("compensated by an operator at step `{}`", cp.step),
        };
        let runner = self.version_for(key, &cp, Continue::Resume, ResumeOptions::new())?;
        runner
            .compensate_stored(store, owner, run_id, cp, Some(reason))
            .await
    }

    /// Compensates the stored run `cp` under `owner`'s lease: goes on with
    /// its compensation when it has one under way, else starts one for
    /// `reason` (`None`: a resume, which only goes on) from its journal.
    pub(super) async fn compensate_stored(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        run_id: &str,
        cp: Checkpoint,
        reason: Option<String>,
    ) -> Result<Compensation> {
        let key = cp.key();
        let (_, by_ip) = self.resume_point(&key, &cp)?;
        let mut durable = self.durable(
            store,
            owner,
            (run_id, &key),
            (cp.created_at_ms, cp.deadline_ms),
            None,
            Tail::after(&cp, self.inner.settings.history_depth),
        );
        durable.by_ip = by_ip;
        durable.queue = cp.queue.clone().map(|q| Box::new(q.started()));
        let program = &self.inner.program;
        let under_way = cp.compensation.as_ref().is_some_and(|c| !c.is_done());
        let work = async {
            match reason {
                Some(reason) if !under_way => {
                    let at = At::of(&cp);
                    let done = compensate::begin(program, &durable, &at, reason, true).await?;
                    done.ok_or_else(|| Error::Internal {
                        message: format!("run `{key}`: its compensation did not start"),
                    })
                }
                _ => compensate::resume(program, &durable, &cp).await,
            }
        };
        RunBodies::scope(Some(owner.keep()), work).await
    }
}
