//! The operator's calls and ownership: `cancel`, `exists`, `hold`, `shutdown`, `run_step`
//! and `explain`.

use std::sync::Arc;
use std::time::Duration;

use super::{Inner, Pipeline};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::stage::Output;
use crate::store::CheckpointStore;

impl Pipeline {
    /// Cancels the run `run_id` of this pipeline (contract rule 14), from
    /// this process or any other sharing the store: the stored checkpoint
    /// says [`RunStatus::Cancelled`](crate::store::RunStatus::Cancelled) from now on, and the run never runs
    /// again under this id: [`resume`](Self::resume), [`resume_with`](Self::resume_with)
    /// and [`replay`](Self::replay) fail with [`Error::Cancelled`], running
    /// nothing. Only a fresh [`invoke`](Self::invoke) of the id, which
    /// deletes the old run, starts it again.
    ///
    /// A run that is executing right now stops before its next stage: its
    /// next checkpoint write (before a stage, at a failure, or at the end)
    /// is refused by the store, so the owner learns of the cancel without
    /// any extra store call per stage. (An [`Async`](crate::Durability::Async)
    /// run does not wait for its writes: it stops before the first stage
    /// that starts once the refusal is back, see [`crate::durability`].)
    /// It returns [`Error::Cancelled`] and gives its lease back. A stage body already running is not
    /// interrupted: it finishes, and its result is dropped.
    ///
    /// A run that is running (whether its owner is alive or gone) or failed
    /// can be cancelled; a completed or already cancelled one cannot. What a
    /// cancel reaches depends on the store (see
    /// [`CheckpointStore::cancel`]): the built-in stores stop an owner in
    /// any process; a store with only the four required methods stops
    /// owners in this process only.
    ///
    /// ```
    /// # use fluxio_core::{Context, Error, InMemoryStore, RunStatus};
    /// # use fluxio_core::store::{Checkpoint, CheckpointStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # // `fluxio::pipeline![...]` builds real ones; this one is empty
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// # let store = pipeline.store().expect("durable");
    /// # let failed = Checkpoint::new("order-7", pipeline.version(), 0, "charge", Context::new().snapshot())
    /// #     .in_pipeline("orders")
    /// #     .failed("card declined");
    /// # store.save(failed).await?;
    /// // order-7 failed earlier; nobody should retry it
    /// pipeline.cancel("order-7").await?;
    /// let cp = pipeline.checkpoint("order-7").await?.expect("kept");
    /// assert_eq!(cp.status, RunStatus::Cancelled);
    /// assert!(matches!(pipeline.resume("order-7").await, Err(Error::Cancelled { .. })));
    ///
    /// // a second cancel, or one of a completed run, says so and changes nothing
    /// let again = pipeline.cancel("order-7").await;
    /// assert!(matches!(again, Err(Error::RunFinished { status: RunStatus::Cancelled, .. })));
    /// pipeline.invoke("order-8", Context::new()).await?;
    /// let done = pipeline.cancel("order-8").await;
    /// assert!(matches!(done, Err(Error::RunFinished { status: RunStatus::Completed, .. })));
    ///
    /// // a fresh invoke of the id starts the run over
    /// pipeline.invoke("order-7", Context::new()).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::CheckpointNotFound`] when nothing is stored for `run_id`;
    /// [`Error::RunFinished`] when the run completed or was cancelled
    /// already (nothing changes); [`Error::InvalidRunId`] for a malformed
    /// run id; [`Error::Store`] from the store. The errors name the run by
    /// its store key (`name/run_id`).
    ///
    /// A run waiting for a child run (contract rule 29) has it cancelled
    /// too, and the child's own, through the child's pipeline when it is
    /// registered on this one ([`PipelineBuilder::child`](crate::PipelineBuilder::child)),
    /// else in this pipeline's store.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the run cancelled or not, never half-way
    /// (a child not yet cancelled stays as it is).
    pub async fn cancel(&self, run_id: &str) -> Result<()> {
        let key = self.key(run_id)?;
        let store = self.require_store("cancel")?;
        self.cancel_stored(store, &key, crate::store::Mark::Cancel)
            .await
    }

    /// Pauses the run `run_id` (contract rule 30), from any process that
    /// shares the store: its stored checkpoint says
    /// [`RunStatus::Paused`](crate::RunStatus::Paused) from now on, so the
    /// run lists as paused, no worker continues it, and its owner, if one
    /// is running it, stops before its next stage ([`Error::Paused`] from
    /// its next checkpoint write) and gives its lease back. A sleeping or
    /// waiting run stays paused past its wake time or deadline; signals
    /// sent meanwhile are kept. [`unpause`](Self::unpause) lets it go on.
    ///
    /// ```
    /// # use fluxio_core::{Context, Error, InMemoryStore, RunStatus};
    /// # use fluxio_core::store::{Checkpoint, CheckpointStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// # let store = pipeline.store().expect("durable");
    /// # let failed = Checkpoint::new("order-7", pipeline.version(), 0, "charge", Context::new().snapshot())
    /// #     .in_pipeline("orders")
    /// #     .failed("card declined");
    /// # store.save(failed).await?;
    /// pipeline.pause("order-7").await?;
    /// let cp = pipeline.checkpoint("order-7").await?.expect("kept");
    /// assert_eq!(cp.status, RunStatus::Paused);
    /// assert!(matches!(pipeline.resume("order-7").await, Err(Error::Paused { .. })));
    /// pipeline.unpause("order-7").await?;
    /// // due at once: a worker (or a resume) continues it at `charge`
    /// assert_eq!(pipeline.checkpoint("order-7").await?.expect("kept").status, RunStatus::Sleeping);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::CheckpointNotFound`] when nothing is stored for `run_id`;
    /// [`Error::RunFinished`] when the run completed or was cancelled;
    /// [`Error::InvalidRunId`] for a malformed run id; [`Error::Store`].
    ///
    /// # Cancel safety
    /// Dropping the future leaves the run paused or not, never half-way.
    pub async fn pause(&self, run_id: &str) -> Result<()> {
        let key = self.key(run_id)?;
        let store = self.require_store("pause")?;
        store.mark(&key, crate::store::Mark::Pause).await
    }

    /// Unpauses the paused run `run_id` (contract rule 30): a run paused
    /// in a sleep or a wait goes back to it (due at its wake time or
    /// deadline, or at once when it passed or a signal came); any other is
    /// due at once, on the pipeline's clock, and a worker (or a
    /// [`resume`](Self::resume)) continues it at the step it was paused
    /// at. Nothing runs in this call.
    ///
    /// # Errors
    /// [`Error::NotPaused`] when the run is not paused; as
    /// [`pause`](Self::pause).
    ///
    /// # Cancel safety
    /// As [`pause`](Self::pause).
    pub async fn unpause(&self, run_id: &str) -> Result<()> {
        let key = self.key(run_id)?;
        let store = self.require_store("unpause")?;
        let now_ms = self.inner.clock.now_ms(Some(store.as_ref())).await?;
        store
            .mark(&key, crate::store::Mark::Unpause { now_ms })
            .await
    }

    /// Whether a checkpoint is stored for `run_id`.
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::Store`] from the store; [`Error::InvalidRunId`] for a
    /// malformed run id.
    pub async fn exists(&self, run_id: &str) -> Result<bool> {
        let key = self.key(run_id)?;
        self.require_store("exists")?.exists(&key).await
    }

    /// Keeps `older`, another version of this pipeline, beside this one
    /// (rule 13): a resume of a checkpoint that `older` wrote runs on
    /// `older`'s code, so in-flight runs finish on the code they started
    /// with, while new runs ([`invoke`](Self::invoke)) use this version.
    /// Versions `older` holds are held too. Both must have the same name and
    /// should use the same store.
    ///
    /// ```
    /// # fn demo(new: fluxio_core::Pipeline, old: fluxio_core::Pipeline) -> fluxio_core::Result<()> {
    /// let orders = new.hold(old)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] (setting `hold`) when the names differ or
    /// `older` is not durable.
    pub fn hold(self, older: Pipeline) -> Result<Pipeline> {
        if older.inner.name != self.inner.name || older.inner.store.is_none() {
            return Err(Error::InvalidSetting {
                setting: "hold",
                message: format!(
                    "pipeline `{}` (version {}) can hold only durable versions of itself, \
                     not `{}` (version {}{})",
                    self.inner.name,
                    self.inner.version,
                    older.inner.name,
                    older.inner.version,
                    if older.inner.store.is_none() {
                        ", not durable"
                    } else {
                        ""
                    }
                ),
            });
        }
        let mut inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(shared) => Inner::clone(&shared),
        };
        let mut versions = vec![older.clone()];
        versions.extend(older.inner.held.iter().cloned());
        for v in versions {
            let v = v.without_held();
            if v.inner.version != inner.version
                && !inner
                    .held
                    .iter()
                    .any(|h| h.inner.version == v.inner.version)
            {
                inner.held.push(v);
            }
        }
        Ok(Pipeline {
            inner: Arc::new(inner),
        })
    }

    /// The versions held beside this one ([`hold`](Self::hold)), newest
    /// first as held.
    #[must_use]
    pub fn held_versions(&self) -> Vec<&str> {
        self.inner
            .held
            .iter()
            .map(|p| p.inner.version.as_str())
            .collect()
    }

    pub(super) fn without_held(&self) -> Pipeline {
        if self.inner.held.is_empty() {
            return self.clone();
        }
        let mut inner = Inner::clone(&self.inner);
        inner.held.clear();
        Pipeline {
            inner: Arc::new(inner),
        }
    }

    /// Shuts the pipeline down: it starts no run any more, and every lease
    /// its runs took is given back to the store before this returns `Ok`, so
    /// that other processes can take the runs over at once (rule 15).
    ///
    /// From the call on, `invoke`, `resume`, `replay` and `stream` of this
    /// pipeline, and of every clone of it, fail with [`Error::ShutDown`]
    /// (build the pipeline again to run more). Then `shutdown` waits, at most
    /// `within`, until no lease of its runs is held or being given back:
    ///
    /// - a run that was dropped (its future, or its stream) gives its lease
    ///   back from a background task; `shutdown` waits for that task, so a
    ///   process may exit as soon as `shutdown` returns and no other process
    ///   has to wait for the lease to lapse;
    /// - a run still executing is not interrupted: `shutdown` waits for it to
    ///   end (drop it first to stop it at once; a resume repeats the step it
    ///   was in);
    /// - a blocking stage body that outlived its run (after a timeout or a
    ///   drop) keeps the run's lease until it returns, and `shutdown` waits
    ///   for it too.
    ///
    /// A pipeline that is not durable holds no leases: it returns `Ok` at once.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use fluxio_core::{Context, Error, InMemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # // `fluxio::pipeline![...]` builds real ones; this one is empty
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// // a worker told to stop: stop its runs, then give their leases back
    /// let run = tokio::spawn({
    ///     let pipeline = pipeline.clone();
    ///     async move { pipeline.invoke("order-7", Context::new()).await }
    /// });
    /// run.abort();
    /// pipeline.shutdown(Duration::from_secs(10)).await?;
    ///
    /// // every lease is back in the store; the pipeline takes no new run
    /// let refused = pipeline.invoke("order-8", Context::new()).await;
    /// assert!(matches!(refused, Err(Error::ShutDown { .. })));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::ShutdownTimeout`] when leases are still held after `within`
    /// (runs still executing, blocking bodies still running, or a store that
    /// does not answer): if the process exits anyway they lapse after their
    /// time-to-live, as if it had crashed. [`Error::NoRuntime`] outside a
    /// tokio runtime while leases are held.
    ///
    /// # Cancel safety
    /// Dropping the future stops the waiting only; the pipeline stays shut
    /// down, and calling `shutdown` again waits again.
    pub async fn shutdown(&self, within: Duration) -> Result<()> {
        let leases = &self.inner.leases;
        leases.close();
        if leases.held() == 0 {
            return Ok(());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "shutdown".to_owned(),
            });
        }
        match tokio::time::timeout(within, leases.all_released()).await {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::ShutdownTimeout {
                waited: within,
                held: leases.held(),
            }),
        }
    }

    /// Runs the stage called `name` alone on `ctx`, through its middleware (no
    /// checkpoints). A router returns `ctx` with its patch applied.
    ///
    /// # Errors
    /// [`Error::UnknownStep`], or the stage's failure.
    pub async fn run_step(&self, name: &str, ctx: Context) -> Result<Context> {
        let program = &self.inner.program;
        let Some(index) = program.stages.iter().position(|s| s.name() == name) else {
            return Err(Error::UnknownStep {
                step: name.to_owned(),
                available: program.stage_names(),
            });
        };
        let stage = &program.stages[index];
        let chain = program.middleware.get(index).map_or(&[][..], |c| &c[..]);
        match crate::middleware::Next::new(stage, chain)
            .run_caught(ctx.clone())
            .await?
        {
            Output::Context(c) => Ok(c),
            Output::Route(send) => Ok(send
                .patch
                .into_iter()
                .fold(ctx, |c, (k, v)| c.set_value(k, v))),
        }
    }

    /// The compiled program, one instruction per line, headed by the version.
    #[must_use]
    pub fn explain(&self) -> String {
        let mode = if self.inner.auto_parallel {
            "on"
        } else {
            "off"
        };
        let durable = if self.is_durable() {
            "durable"
        } else {
            "not durable"
        };
        format!(
            "pipeline version {} ({durable}, auto-parallel {mode}, {} instructions)\n{}",
            self.inner.version,
            self.inner.program.instrs.len(),
            self.inner.program
        )
    }
}
