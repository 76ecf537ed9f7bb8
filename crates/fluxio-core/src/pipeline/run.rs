//! Running a run: `invoke`, `start` and `stream`, and how a durable run takes its lease
//! and writes its first checkpoint.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use super::resume::Resuming;
use super::{Pipeline, StartOptions, check_runtime};
use crate::context::{Context, Lineage, Snapshot};
use crate::durability::{AsyncWriter, Durability};
use crate::error::Result;
use crate::interpret::ownership::Ownership;
use crate::interpret::tail::Tail;
use crate::interpret::{self, Durable};
use crate::outcome::Outcome;
use crate::stage::bodies::RunBodies;
use crate::store::{Begin, CheckpointStore, RunStatus, now_ms};
use crate::stream::{RunStream, STREAM_TX, StreamEvent};

/// What `start` returns for the stored run `cp` without running it: a
/// completed run's final context (final on any code), the sleep or wait
/// a parked run is in (a client's retry never wakes a run early, and
/// writes nothing), or a run's failure for good (rule 35); `None` for a
/// run `start` continues.
fn settled(cp: &crate::store::Checkpoint, key: &str) -> Option<Result<Outcome>> {
    match (&cp.status, &cp.pending) {
        (RunStatus::Completed, _) => Some(Ok(Outcome::Completed(cp.context.to_context()))),
        (status, Some(pending)) if status.is_pending() => {
            Some(Ok(Outcome::parked(key, pending, cp.context.to_context())))
        }
        _ if cp.is_failed_for_good() => Some(Err(cp.failed_for_good_error())),
        _ => None,
    }
}

/// What [`Pipeline::begin`] did with a fresh run.
pub(super) enum Fresh {
    /// It began and ran: how it ended.
    Ran(Result<Outcome>),
    /// It did not begin; the lease is held.
    Stored(Ownership),
}

impl Pipeline {
    /// Runs the pipeline on `input` as a fresh run.
    ///
    /// Durable pipelines take ownership of `run_id` for the whole run, delete
    /// any checkpoint stored for it (a fresh run never continues old state),
    /// save a checkpoint before every stage, a failure checkpoint pointing at
    /// a failing stage, and a completed checkpoint at the end. Pipelines that
    /// are not durable use `run_id` only in logs.
    ///
    /// # Errors
    /// The failing stage's error ([`Error::Stage`](crate::Error::Stage) with the stage's own error
    /// as source, [`Error::StagePanic`](crate::Error::StagePanic), [`Error::StageTimeout`](crate::Error::StageTimeout));
    /// [`Error::Cancelled`](crate::Error::Cancelled) when the run was [cancelled](Self::cancel) while
    /// it ran (it stopped before its next stage);
    /// [`Error::RunIdInUse`](crate::Error::RunIdInUse) when another run holds `run_id`;
    /// [`Error::ShutDown`](crate::Error::ShutDown) once the pipeline is [shut down](Self::shutdown);
    /// [`Error::MergeConflict`](crate::Error::MergeConflict), [`Error::UnknownRoute`](crate::Error::UnknownRoute), [`Error::Store`](crate::Error::Store),
    /// [`Error::InvalidRunId`](crate::Error::InvalidRunId).
    ///
    /// # Cancel safety
    /// Dropping the future stops the run at its next `.await`; the last saved
    /// checkpoint stays, so the run can be resumed, and the lease on the run
    /// id is released by a background task, which
    /// [`shutdown`](Self::shutdown) waits for (if the task cannot run or the
    /// store fails, the lease expires). A blocking stage body that is running
    /// cannot be stopped: it finishes on the blocking pool and the run keeps
    /// its lease until it returns, so no other run of the id starts beside it.
    // (a plain `fn`: an `async fn` would keep its arguments beside
    // `invoke_with`'s future, in every parked run, rule 24)
    pub fn invoke<'a>(
        &'a self,
        run_id: &'a str,
        input: Context,
    ) -> impl Future<Output = Result<Outcome>> + Send + 'a {
        self.invoke_with(run_id, input, StartOptions::new())
    }

    /// [`invoke`](Self::invoke) with `options`: a fresh run with a
    /// [deadline](StartOptions::deadline_in), stored with its first
    /// checkpoint (contract rule 30).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use fluxio_core::{Context, InMemoryStore, StartOptions};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// let within = StartOptions::new().deadline_in(Duration::from_secs(30));
    /// pipeline.invoke_with("order-7", Context::new(), within).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`invoke`](Self::invoke); [`Error::DeadlineExceeded`](crate::Error::DeadlineExceeded)
    /// when the deadline passes before the run's end (it is failed before
    /// the step it did not reach); [`Error::NotDurable`](crate::Error::NotDurable)
    /// for a deadline on a pipeline without a store (nothing would keep it).
    ///
    /// # Cancel safety
    /// As [`invoke`](Self::invoke).
    pub async fn invoke_with(
        &self,
        run_id: &str,
        input: Context,
        options: StartOptions,
    ) -> Result<Outcome> {
        let key = self.key(run_id)?;
        let span = self.span(&key, false);
        async move {
            // stage timeouts, blocking stages and fire-and-forget branches
            // need tokio's timer and pools, durable runs its lease renewal
            check_runtime("invoke", &key)?;
            let Some(store) = &self.inner.store else {
                if options.has_deadline() {
                    return Err(crate::Error::NotDurable {
                        operation: "invoke_with",
                    });
                }
                self.inner.leases.check_open(&key)?;
                let program = &self.inner.program;
                let run = interpret::run(program, &key, 0, input.clear_written(), None);
                // only blocking bodies read the run's `RunBodies`
                if !program.blocking {
                    return run.await;
                }
                return RunBodies::scope(None, run).await;
            };
            // (reads the clock only for a deadline given as a duration)
            let deadline = options
                .deadline_ms(&self.inner.clock, Some(store.as_ref()))
                .await?;
            // rule 24: `Exit` writes no first checkpoint, so it only takes
            // the lease, and clears what is stored (a cancel mark too)
            if self.inner.settings.durability == Durability::Exit {
                // (boxed: not the common case, and large)
                return Box::pin(async {
                    let owner = self.take_lease(store, &key).await?;
                    self.replace_and_run(store, owner, (run_id, &key), input, deadline)
                        .await
                })
                .await;
            }
            match self
                .begin(
                    store,
                    (run_id, &key),
                    &input.snapshot(),
                    (Begin::Replace, deadline),
                )
                .await?
            {
                Fresh::Ran(result) => result,
                // `Replace` always begins; a program with no stage took
                // the lease only
                Fresh::Stored(owner) => {
                    Box::pin(self.replace_and_run(store, owner, (run_id, &key), input, deadline))
                        .await
                }
            }
        }
        .instrument(span)
        .await
    }

    /// `invoke` holding the run's lease with nothing written yet: deletes
    /// the stored run, runs the pipeline from its first stage, and gives the
    /// lease back.
    pub(super) async fn replace_and_run(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: Ownership,
        (run_id, key): (&str, &str),
        input: Context,
        deadline: Option<u64>,
    ) -> Result<Outcome> {
        let result = async {
            store.delete_fenced(key, owner.lease()).await?;
            self.run_fresh_from(
                store,
                &owner,
                (run_id, key),
                (0, deadline),
                &input.snapshot(),
            )
            .await
        }
        .await;
        owner.release().await;
        result
    }

    /// Starts the run `run_id` on `input`, or, when the run was started
    /// before, carries it to its end once (contract rule 11): a client may
    /// call it any number of times for one run id and the run's stages run
    /// as if it had been called once. What is stored decides:
    ///
    /// - nothing: the run starts fresh on `input`, like
    ///   [`invoke`](Self::invoke);
    /// - a completed run: its stored final context is returned and no stage
    ///   runs, whatever version of the pipeline completed it (a result does
    ///   not depend on the code that reads it back: a client retrying
    ///   yesterday's request after a redeploy gets yesterday's result);
    /// - a run that failed for good (a stage returned a
    ///   [`TerminalError`](crate::TerminalError), rule 35):
    ///   [`Error::FailedForGood`](crate::Error::FailedForGood), running nothing;
    /// - a failed run, or a running one whose owner's lease has lapsed (a
    ///   crashed worker): it is resumed, like [`resume`](Self::resume);
    ///   `input` is not used. A run of other code is resumed only on a
    ///   [held](Self::hold) version that wrote it: `start` never opts in to
    ///   code changes, so a run of code this pipeline does not hold is
    ///   [`Error::CheckpointVersion`](crate::Error::CheckpointVersion), with nothing run and nothing written
    ///   (the caller may then [`resume_with`](Self::resume_with) it);
    /// - a running run whose owner holds its lease: [`Error::RunIdInUse`](crate::Error::RunIdInUse);
    /// - a [cancelled](Self::cancel) run: [`Error::Cancelled`](crate::Error::Cancelled), running
    ///   nothing.
    ///
    /// The decision is taken while holding the run's lease, so it holds
    /// across processes: of any number of concurrent calls, one runs the
    /// stages and the others get [`Error::RunIdInUse`](crate::Error::RunIdInUse) or, once it has
    /// completed, its result. A completed run's result is read without
    /// taking the lease, so concurrent starts of a finished run all get it.
    /// Like `resume`, it adopts a run stored before
    /// pipelines had names and continues a run of a [held](Self::hold)
    /// version on that version.
    ///
    /// ```
    /// # use fluxio_core::{Context, InMemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # // `fluxio::pipeline![...]` builds real ones; this one is empty
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// let input = Context::new().set("cents", 1999u64)?;
    /// let first = pipeline.start("order-42", input.clone()).await?;
    /// // a client retrying the request gets the same result; nothing runs again
    /// let again = pipeline.start("order-42", input).await?;
    /// assert_eq!(first, again);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotDurable`](crate::Error::NotDurable) when the pipeline has no store (nothing could
    /// tell a repeated call from the first); [`Error::RunIdInUse`](crate::Error::RunIdInUse) as above;
    /// [`Error::CheckpointVersion`](crate::Error::CheckpointVersion) when the stored run, not completed, was
    /// written by code this pipeline does not run; the errors of [`invoke`](Self::invoke) and
    /// [`resume`](Self::resume).
    ///
    /// # Cancel safety
    /// As [`invoke`](Self::invoke).
    // (a plain `fn`, as `invoke`)
    pub fn start<'a>(
        &'a self,
        run_id: &'a str,
        input: Context,
    ) -> impl Future<Output = Result<Outcome>> + Send + 'a {
        self.start_with(run_id, input, StartOptions::new())
    }

    /// [`start`](Self::start) with `options`, which a run started fresh is
    /// stored with (contract rule 30: its deadline); a run stored already
    /// keeps its own, as it keeps its input.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use fluxio_core::{Context, InMemoryStore, StartOptions};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// let within = StartOptions::new().deadline_in(Duration::from_secs(30));
    /// pipeline.start_with("order-42", Context::new(), within.clone()).await?;
    /// // a client's retry gets the same result, whatever options it sends
    /// pipeline.start_with("order-42", Context::new(), within).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`start`](Self::start) and [`invoke_with`](Self::invoke_with).
    ///
    /// # Cancel safety
    /// As [`invoke`](Self::invoke).
    pub async fn start_with(
        &self,
        run_id: &str,
        input: Context,
        options: StartOptions,
    ) -> Result<Outcome> {
        let (key, store, span) = self.durable_run("start", run_id, false)?;
        async {
            // (reads the clock only for a deadline given as a duration)
            let deadline = options
                .deadline_ms(&self.inner.clock, Some(store.as_ref()))
                .await?;
            // a completed run is final: its result needs no lease, so
            // repeated starts of it never contend for one, and it does not
            // depend on code, so it is returned whatever version wrote it
            if let Some(cp) = store.load(&key).await? {
                if let Some(outcome) = settled(&cp, &key) {
                    return outcome;
                }
            } else {
                // nothing stored under the key (and, for a named pipeline,
                // no run of before names under the bare id to adopt): the
                // lease and the first checkpoint in one call, which leaves a
                // run stored meanwhile by a concurrent start alone
                // (`Exit` writes no first checkpoint: the lease alone, below)
                let exit = self.inner.settings.durability == Durability::Exit;
                let unnamed = self.inner.name.is_empty();
                if !exit && (unnamed || !store.exists(run_id).await?) {
                    match self
                        .begin(
                            store,
                            (run_id, &key),
                            &input.snapshot(),
                            (Begin::IfAbsent, deadline),
                        )
                        .await?
                    {
                        Fresh::Ran(result) => return result,
                        Fresh::Stored(owner) => {
                            let result = self
                                .start_owned(store, &owner, (run_id, &key), input, deadline)
                                .await;
                            owner.release().await;
                            return result;
                        }
                    }
                }
            }
            self.with_lease(store, &key, async |owner| {
                self.start_owned(store, owner, (run_id, &key), input, deadline)
                    .await
            })
            .await
        }
        .instrument(span)
        .await
    }

    /// `start` holding the run's lease: the stored run decides (see
    /// [`start`](Self::start)); with none, the run starts on `input`.
    pub(super) async fn start_owned(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        (run_id, key): (&str, &str),
        input: Context,
        deadline: Option<u64>,
    ) -> Result<Outcome> {
        let r = Resuming::of(store, owner, run_id);
        match self.load_or_adopt(r).await? {
            None => {
                self.run_fresh_from(
                    store,
                    owner,
                    (run_id, key),
                    (0, deadline),
                    &input.snapshot(),
                )
                .await
            }
            // completed since `start` looked (or adopted): final on any code;
            // parked: its worker continues it when it is due
            Some(cp) => match settled(&cp, key) {
                Some(outcome) => outcome,
                None => self.resume_stored(r, cp).await,
            },
        }
    }

    /// A fresh run of `key` on `input` that takes its lease and writes its
    /// first checkpoint in one call ([`CheckpointStore::begin_run`], rule
    /// 24), then runs to its end and gives the lease back with its last
    /// checkpoint. [`Fresh::Stored`] when it did not begin: `begin` is
    /// [`Begin::IfAbsent`] and a run is stored, or the program has no stage
    /// (nothing to write before one); the caller then holds the lease.
    pub(super) async fn begin(
        &self,
        store: &Arc<dyn CheckpointStore>,
        (run_id, key): (&str, &str),
        input: &Snapshot,
        (begin, deadline): (Begin, Option<u64>),
    ) -> Result<Fresh> {
        // the first write in an `async fn` of its own: its checkpoint and
        // journal are gone before the run starts, instead of staying in
        // this future's state for as long as the run goes on (rule 24)
        let (owner, (tail, created, took)) = match self
            .write_first(store, (run_id, key), input, (begin, deadline))
            .await?
        {
            (owner, Some(first)) => (owner, first),
            (owner, None) => return Ok(Fresh::Stored(owner)),
        };
        let durable = self.durable(
            store,
            &owner,
            (run_id, key),
            (created, deadline),
            None,
            tail,
        );
        *durable
            .prewritten
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(took);
        let result = self.interpret_from(&owner, &durable, 0, input).await;
        drop(durable);
        owner.release().await;
        Ok(Fresh::Ran(result))
    }

    /// [`begin`](Self::begin)'s first write: the lease, and the first
    /// checkpoint with it. Returns the lease, and, when the checkpoint was
    /// written, the run's journal after it, its creation time and how long
    /// the write took; `None` when it was not (a run is stored and `begin`
    /// is [`Begin::IfAbsent`], or the program has no stage).
    pub(super) async fn write_first(
        &self,
        store: &Arc<dyn CheckpointStore>,
        (run_id, key): (&str, &str),
        input: &Snapshot,
        (begin, deadline): (Begin, Option<u64>),
    ) -> Result<(Ownership, Option<(Tail, u64, Duration)>)> {
        let created = now_ms();
        let mut tail = Tail::fresh(self.inner.settings.history_depth);
        let meta = [
            self.inner.name.as_str(),
            run_id,
            self.inner.version.as_str(),
        ];
        let first = interpret::first_checkpoint(
            (&self.inner.program, 0),
            meta,
            &self.inner.structure,
            (created, deadline),
            input,
            &mut tail,
        );
        let (ttl, leases) = (self.inner.settings.lease_ttl, &self.inner.leases);
        let Some(first) = first else {
            return Ok((Ownership::acquire(store, key, ttl, leases).await?, None));
        };
        let (seq, context) = (first.seq, first.context.clone());
        let started = Instant::now();
        let (owner, begun) = Box::pin(Ownership::begin(store, first, ttl, leases, begin)).await?;
        if !begun {
            return Ok((owner, None));
        }
        // the run's context takes its epoch at its first `CHECKPOINT`,
        // which finds this one written (`Durable::prewritten`)
        tail.advance(seq, context, true, 0, &self.inner.version, Lineage::NONE);
        Ok((owner, Some((tail, created, started.elapsed()))))
    }

    /// Runs the pipeline on `input` as a fresh run, like
    /// [`invoke`](Self::invoke), on a task of its own, and streams the chunks
    /// of its stream stages (see [`crate::stream`]) as they are emitted.
    ///
    /// The stream yields [`StreamEvent::Chunk`]s in emission order, then
    /// [`StreamEvent::Done`] with the final context, or one `Err` (any error
    /// of `invoke`) when the run fails, then ends. Chunks pass through a
    /// bounded buffer ([`PipelineBuilder::stream_buffer`](crate::PipelineBuilder::stream_buffer)): a stage emitting
    /// into a full buffer waits, so a slow consumer slows the stage.
    ///
    /// A durable run owns `run_id` for the whole stream. Dropping the stream
    /// cancels the run (its task is aborted; the last checkpoint stays and
    /// the lease is released in the background, as for a dropped `invoke`,
    /// which [`shutdown`](Self::shutdown) waits for).
    /// A resume re-runs an interrupted stream stage from its start: chunks
    /// emitted before a crash or failure are emitted again.
    ///
    /// The run is spawned on the current tokio runtime; called outside one,
    /// the stream yields one `Err(`[`Error::NoRuntime`](crate::Error::NoRuntime)`)`.
    pub fn stream(&self, run_id: &str, input: Context) -> RunStream {
        let pipeline = self.clone();
        let id = run_id.to_owned();
        RunStream::spawn(
            self.inner.settings.stream_buffer,
            run_id,
            move |tx| async move {
                let result = STREAM_TX
                    .scope(tx.clone(), pipeline.invoke(&id, input))
                    .await;
                // the receiver may be gone: nothing left to tell
                let event = result.map(|outcome| match outcome {
                    Outcome::Completed(ctx) => StreamEvent::Done(ctx),
                    parked => StreamEvent::Parked(parked),
                });
                let _ = tx.send(event).await;
            },
        )
    }

    /// Runs `body` owning `key` (its lease taken by
    /// [`take_lease`](Self::take_lease)), and gives the lease back after,
    /// whatever `body` returned.
    pub(super) async fn with_lease<T>(
        &self,
        store: &Arc<dyn CheckpointStore>,
        key: &str,
        body: impl AsyncFnOnce(&Ownership) -> Result<T>,
    ) -> Result<T> {
        let owner = self.take_lease(store, key).await?;
        let result = body(&owner).await;
        owner.release().await;
        result
    }

    /// Takes the lease of `key` for a run of this pipeline: refused once the
    /// pipeline is shut down, and [`RunIdInUse`](crate::Error::RunIdInUse)
    /// when another run holds it.
    pub(super) async fn take_lease(
        &self,
        store: &Arc<dyn CheckpointStore>,
        key: &str,
    ) -> Result<Ownership> {
        Ownership::acquire(
            store,
            key,
            self.inner.settings.lease_ttl,
            &self.inner.leases,
        )
        .await
    }

    /// Holds `lease`, taken by the caller ([`CheckpointStore::claim_due`]),
    /// for a run of this pipeline, renewing it as [`take_lease`](Self::take_lease)'s.
    /// Once the pipeline is shut down the lease is given back and
    /// [`ShutDown`](crate::Error::ShutDown) returned.
    pub(super) async fn adopt_lease(
        &self,
        store: &Arc<dyn CheckpointStore>,
        lease: crate::store::Lease,
    ) -> Result<Ownership> {
        Ownership::adopt(
            store,
            lease,
            self.inner.settings.lease_ttl,
            &self.inner.leases,
        )
        .await
    }

    /// The time-to-live of this pipeline's leases.
    pub(crate) fn lease_ttl(&self) -> std::time::Duration {
        self.inner.settings.lease_ttl
    }

    /// The interpreter's durable side of a run of `key` under `owner`'s
    /// lease: where it checkpoints, how (and, for `Async`, its writer), and
    /// the journal `tail` it continues.
    pub(super) fn durable<'a>(
        &'a self,
        store: &'a Arc<dyn CheckpointStore>,
        owner: &'a Ownership,
        (run_id, key): (&'a str, &'a str),
        (created_at_ms, deadline_ms): (u64, Option<u64>),
        resumed: Option<(usize, u32)>,
        tail: Tail,
    ) -> Durable<'a> {
        let tail = Arc::new(std::sync::Mutex::new(tail));
        let mode = self.inner.settings.durability;
        let writer = (mode == Durability::Async).then(|| {
            let lease = owner.lease();
            let handle = crate::store::Lease::new(lease.run_id(), lease.token());
            Box::new(AsyncWriter::new(
                Arc::clone(store),
                handle,
                Arc::clone(&tail),
                &self.inner.version,
                self.inner.settings.async_flush,
                owner.keep(),
            ))
        });
        Durable {
            store: store.as_ref(),
            owner,
            mode,
            writer,
            pipeline: &self.inner.name,
            run_id,
            key,
            version: &self.inner.version,
            structure: &self.inner.structure,
            created_at_ms,
            deadline: deadline_ms.map(crate::interpret::RunDeadline::new),
            queue: None,
            resumed,
            resumed_branches: Vec::new(),
            resumed_pending: None,
            resumed_parked: false,
            woken_at: None,
            clock: &self.inner.clock,
            by_ip: false,
            delete_completed: self.inner.settings.delete_completed,
            tail,
            prewritten: std::sync::Mutex::new(None),
        }
    }
}
