//! Continuing a stored run: `resume`, `resume_with`, `replay`, the version a checkpoint
//! resumes on (rule 13), runs of earlier builds adopted, and the recovery worker's claim.

use std::sync::Arc;

use tracing::Instrument as _;

use super::Pipeline;
use crate::context::Snapshot;
use crate::error::{Error, Result};
use crate::interpret::ownership::Ownership;
use crate::interpret::tail::Tail;
use crate::interpret::{self, Durable};
use crate::outcome::Outcome;
use crate::stage::bodies::RunBodies;
use crate::store::{Checkpoint, CheckpointStore, RunStatus, now_ms};
use crate::structure::Changes;

/// How [`Pipeline::resume_with`] may continue a run.
///
/// ```
/// use fluxio_core::ResumeOptions;
/// let opts = ResumeOptions::new().allow_code_changes(true);
/// assert!(opts.allows_code_changes());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResumeOptions {
    allow_code_changes: bool,
}

impl ResumeOptions {
    /// The defaults: a checkpoint resumes only on the version that wrote it
    /// (or a held older version, see [`Pipeline::hold`]).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets a checkpoint written by other code resume on this pipeline's
    /// code when only stage bodies changed: same stages, same shape (rule
    /// 13). The fix-a-bug-then-resume case: the run continues at its step
    /// with the new code. A checkpoint of another shape, or one that does
    /// not record its structure (format 1), is still refused.
    #[must_use]
    pub fn allow_code_changes(mut self, on: bool) -> Self {
        self.allow_code_changes = on;
        self
    }

    /// Whether [`allow_code_changes`](Self::allow_code_changes) is on.
    #[must_use]
    pub fn allows_code_changes(&self) -> bool {
        self.allow_code_changes
    }
}

/// How a run continues from its stored checkpoint.
#[derive(Clone, Copy, Debug)]
pub(super) enum Continue<'a> {
    /// From the checkpoint; a completed run returns its final context.
    Resume,
    /// From the step's checkpoint `from` (runs again even when the run
    /// completed) with the context the run had there (rule 20), or,
    /// without a step, like `Resume`.
    Replay { from: Option<&'a Checkpoint> },
}

/// One continuation of a stored run: the store, the lease held on the
/// run, its id, how it continues and with what options.
#[derive(Clone, Copy)]
pub(super) struct Resuming<'a> {
    pub(super) store: &'a Arc<dyn CheckpointStore>,
    pub(super) owner: &'a Ownership,
    pub(super) run_id: &'a str,
    pub(super) how: Continue<'a>,
    pub(super) options: ResumeOptions,
    /// The time on the run's clock at which a worker found it due and
    /// claimed it: a woken sleep or wait reads it instead of the clock.
    pub(super) woken_at: Option<u64>,
}

impl<'a> Resuming<'a> {
    /// A plain resume of `run_id` (default options) under `owner`'s lease.
    pub(super) fn of(
        store: &'a Arc<dyn CheckpointStore>,
        owner: &'a Ownership,
        run_id: &'a str,
    ) -> Self {
        Resuming {
            store,
            owner,
            run_id,
            how: Continue::Resume,
            options: ResumeOptions::new(),
            woken_at: None,
        }
    }
}

impl Pipeline {
    /// Continues the run `run_id` from its stored checkpoint, with the stored
    /// context. A completed run returns its final context without running
    /// anything.
    ///
    /// A run stored before pipelines had names (checkpoint format 1, kept
    /// under the bare run id) is adopted: when nothing is stored under this
    /// pipeline's name and the bare run id holds an unnamed checkpoint of a
    /// version this pipeline runs (its own or a [held](Self::hold) one), the
    /// checkpoint moves to the pipeline's name, under the leases of both
    /// keys, and the run continues. [`checkpoint`](Self::checkpoint) shows
    /// such a run before it is adopted.
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::CheckpointNotFound`] when nothing is stored for `run_id`;
    /// [`Error::Cancelled`] when the run was [cancelled](Self::cancel) (nothing
    /// runs, the checkpoint is untouched); [`Error::FailedForGood`] when a
    /// stage failed it with a [`TerminalError`](crate::TerminalError) (rule
    /// 35: [`replay`](Self::replay) or [`fork`](Self::fork) it to run it again);
    /// [`Error::CheckpointVersion`] when the checkpoint was written by another
    /// version (nothing runs, the checkpoint is untouched); the errors of
    /// [`invoke`](Self::invoke).
    pub async fn resume(&self, run_id: &str) -> Result<Outcome> {
        self.resume_or_replay(run_id, Continue::Resume, ResumeOptions::new())
            .await
    }

    /// [`resume`](Self::resume) with options: see [`ResumeOptions`].
    ///
    /// # Errors
    /// As [`resume`](Self::resume); with
    /// [`allow_code_changes`](ResumeOptions::allow_code_changes), a
    /// checkpoint of other code whose shape is the same is no longer an
    /// error.
    pub async fn resume_with(&self, run_id: &str, options: ResumeOptions) -> Result<Outcome> {
        self.resume_or_replay(run_id, Continue::Resume, options)
            .await
    }

    /// Re-runs `run_id` from its stored checkpoint, or from `from_step`
    /// with the context the run had *before* that step (contract rule 20),
    /// read from the run's history. `from_step` is a stage name (its latest
    /// run; a stage inside a parallel block replays its whole block) or a
    /// step number from [`history`](Self::history). The replay continues the
    /// same run: its journal records the replay as further checkpoints, so
    /// the history keeps both passes. Works on failed and completed runs,
    /// not on cancelled ones ([`Error::Cancelled`]).
    ///
    /// # Errors
    /// [`Error::UnknownStep`] for a stage name the pipeline does not have;
    /// [`Error::StepNotInHistory`] for a step the kept history does not
    /// hold; the errors of [`resume`](Self::resume).
    pub async fn replay(&self, run_id: &str, from_step: Option<&str>) -> Result<Outcome> {
        let Some(step) = from_step else {
            return self
                .resume_or_replay(
                    run_id,
                    Continue::Replay { from: None },
                    ResumeOptions::new(),
                )
                .await;
        };
        let at = self.before_step("replay", run_id, step).await?;
        let from = Some(&at);
        self.resume_or_replay(run_id, Continue::Replay { from }, ResumeOptions::new())
            .await
    }

    /// The checkpoint `run_id` stood at before `step` (a stage name or a
    /// step number), from its history.
    pub(super) async fn before_step(
        &self,
        operation: &'static str,
        run_id: &str,
        step: &str,
    ) -> Result<Checkpoint> {
        let key = self.key(run_id)?;
        let program = &self.inner.program;
        let ip = if crate::history::is_step_number(step) {
            None
        } else {
            match program.steps.get(step) {
                Some(ip) => Some(*ip),
                None => {
                    return Err(Error::UnknownStep {
                        step: step.to_owned(),
                        available: program.stage_names(),
                    });
                }
            }
        };
        let journal = self.require_store(operation)?.history(&key).await?;
        // a cancelled run never runs again under its id (rule 14)
        // nor does a paused one before it is unpaused (rule 30)
        let last = journal.last().map(|cp| cp.status);
        if let Some(refused) = last.and_then(|s| crate::store::fenced_refusal(&key, s)) {
            if operation == "replay" {
                return Err(refused);
            }
        }
        // the journal records positions; a run checkpointed before
        // positions recorded ips (they differ only with schemas)
        let position = ip.map(|ip| program.position(ip) as usize);
        match crate::history::point_in(&journal, &key, step, position) {
            Err(Error::StepNotInHistory { .. }) if ip != position => {
                crate::history::point_in(&journal, &key, step, ip).cloned()
            }
            found => found.cloned(),
        }
    }

    /// Runs `key` as a fresh durable run (nothing stored for it) under
    /// `owner`'s lease, from the top-level checkpoint `ip` with `context`:
    /// `0` and the input for a new run, a step and its context for a fork.
    pub(super) async fn run_fresh_from(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        (run_id, key): (&str, &str),
        (ip, deadline): (usize, Option<u64>),
        context: &Snapshot,
    ) -> Result<Outcome> {
        let durable = self.durable(
            store,
            owner,
            (run_id, key),
            (now_ms(), deadline),
            None,
            Tail::fresh(self.inner.settings.history_depth),
        );
        self.interpret_from(owner, &durable, ip, context).await
    }

    /// [`resume`](Self::resume) and [`replay`](Self::replay): takes the
    /// run's lease, loads (or [adopts](Self::adopt_unnamed)) its checkpoint
    /// and [resumes it](Self::resume_stored) as `how` says.
    pub(super) async fn resume_or_replay(
        &self,
        run_id: &str,
        how: Continue<'_>,
        options: ResumeOptions,
    ) -> Result<Outcome> {
        let what = match how {
            Continue::Resume => "resume",
            Continue::Replay { .. } => "replay",
        };
        let (key, store, span) = self.durable_run(what, run_id, true)?;
        async {
            self.with_lease(store, &key, async |owner| {
                let r = Resuming {
                    how,
                    options,
                    ..Resuming::of(store, owner, run_id)
                };
                let cp = self
                    .load_or_adopt(r)
                    .await?
                    .ok_or_else(|| Error::CheckpointNotFound {
                        run_id: key.to_string(),
                    })?;
                self.resume_stored(r, cp).await
            })
            .await
        }
        .instrument(span)
        .await
    }

    /// Continues the stored run `cp` under `owner`'s lease on the version
    /// that runs it ([`version_for`](Self::version_for)): refused when it was
    /// cancelled (before the version check: a cancelled run is cancelled on
    /// any code).
    pub(super) async fn resume_stored(&self, r: Resuming<'_>, cp: Checkpoint) -> Result<Outcome> {
        let Resuming {
            store,
            owner,
            run_id,
            how,
            options,
            woken_at,
        } = r;
        let key = owner.lease().run_id();
        if let Some(refused) = crate::store::fenced_refusal(key, cp.status) {
            return Err(refused);
        }
        // rule 35: a final failure is not resumed (a replay from a step, an
        // operator's explicit choice, runs it again)
        if matches!(how, Continue::Resume) && cp.is_failed_for_good() {
            return Err(cp.failed_for_good_error());
        }
        let runner = self.version_for(key, &cp, how, options)?;
        runner
            .resume_from_checkpoint(store, owner, run_id, cp, (how, woken_at))
            .await
    }

    /// The checkpoint stored for `run_id` under this pipeline's key, or one
    /// [adopted](Self::adopt_unnamed) from before pipelines had names.
    pub(super) async fn load_or_adopt(&self, r: Resuming<'_>) -> Result<Option<Checkpoint>> {
        match r.store.load(r.owner.lease().run_id()).await? {
            Some(cp) => Ok(Some(cp)),
            None => self.adopt_unnamed(r).await,
        }
    }

    /// A run of this pipeline stored before pipelines had names: a format 1
    /// checkpoint (or one of an unnamed pipeline) kept under the bare
    /// `run_id`, with no pipeline name. When it was written by a version this
    /// pipeline continues ([`version_for`](Self::version_for)), it is moved
    /// to this pipeline's key under both the old key's lease and `owner`'s,
    /// and returned; `None` when there is no such run. A crash between the
    /// move's save and delete leaves a copy under the bare id, which is
    /// never read again once the named one exists.
    pub(super) async fn adopt_unnamed(&self, r: Resuming<'_>) -> Result<Option<Checkpoint>> {
        let (store, run_id) = (r.store, r.run_id);
        if self.inner.name.is_empty() {
            return Ok(None);
        }
        self.with_lease(store, run_id, async |old| {
            let Some(mut cp) = store.load(run_id).await? else {
                return Ok(None);
            };
            if !cp.pipeline.is_empty() {
                return Ok(None);
            }
            let key = self.key(run_id)?;
            self.version_for(&key, &cp, r.how, r.options)?;
            cp.pipeline.clone_from(&self.inner.name);
            // the run moves as its latest checkpoint, whole
            cp.change = crate::store::Change::Full;
            cp.earlier.clear();
            store.save_fenced(cp.clone(), r.owner.lease()).await?;
            store.delete_fenced(run_id, old.lease()).await?;
            tracing::info!(
                run = %key,
                "adopted a run stored before pipelines had names (under its bare run id)"
            );
            Ok(Some(cp))
        })
        .await
    }

    /// Whether this pipeline (or a version it holds) continues runs that
    /// `version` wrote.
    pub(crate) fn runs_version(&self, version: &str) -> bool {
        self.inner.version == version || self.inner.held.iter().any(|p| p.inner.version == version)
    }

    /// The pipeline that continues `cp`: this one, or the held version that
    /// wrote it, or this one on changed code when `options` allow it and
    /// only stage bodies changed. Replaying from a step needs the step's
    /// version to be this one (the step was looked up in this program).
    pub(super) fn version_for(
        &self,
        key: &str,
        cp: &Checkpoint,
        how: Continue<'_>,
        options: ResumeOptions,
    ) -> Result<&Pipeline> {
        if cp.version == self.inner.version {
            return Ok(self);
        }
        let replay_from_step = matches!(how, Continue::Replay { from: Some(_) });
        if !replay_from_step {
            if let Some(held) = self
                .inner
                .held
                .iter()
                .find(|p| p.inner.version == cp.version)
            {
                return Ok(held);
            }
        }
        let changes = cp
            .structure
            .as_ref()
            .map(|old| old.changes_to(&self.inner.structure));
        if options.allows_code_changes() && changes.as_ref().is_some_and(Changes::same_shape) {
            tracing::info!(
                run = key,
                from = %cp.version,
                to = %self.inner.version,
                "resuming on changed code (the shape is the same)"
            );
            return Ok(self);
        }
        Err(Error::CheckpointVersion {
            run_id: key.to_owned(),
            checkpoint_version: cp.version.clone(),
            pipeline_version: self.inner.version.clone(),
            changes: changes.map(Box::new),
        })
    }

    /// Runs the stored run `cp` on this pipeline's program under `owner`'s
    /// lease, from where `how` says (its resume point, or a replayed step);
    /// a completed run resumed returns its final context.
    pub(super) async fn resume_from_checkpoint(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        run_id: &str,
        cp: Checkpoint,
        (how, woken_at): (Continue<'_>, Option<u64>),
    ) -> Result<Outcome> {
        let key = cp.key();
        // rule 35: a compensating run goes on compensating
        if matches!(how, Continue::Resume) && cp.compensation.as_ref().is_some_and(|c| !c.is_done())
        {
            let stage = cp.step.clone();
            // boxed: this future is part of every resumed run's
            let done = Box::pin(self.compensate_stored(store, owner, run_id, cp, None)).await?;
            return Err(Error::FailedForGood {
                run_id: key,
                stage,
                message: done.reason,
            });
        }
        let from = match how {
            Continue::Replay { from: Some(step) } => step,
            Continue::Resume | Continue::Replay { from: None }
                if cp.status == RunStatus::Completed =>
            {
                return Ok(Outcome::Completed(cp.context.to_context()));
            }
            Continue::Resume | Continue::Replay { from: None } => &cp,
        };
        let (ip, by_ip) = self.resume_point(&key, from)?;
        let start = from.context.clone();
        // a retry of the stage the checkpoint points at is its next attempt
        let stopped = match cp.status {
            RunStatus::Completed => None,
            _ => Some(self.resume_point(&key, &cp)?.0),
        };
        let resumed = stopped.map(|at| (at, cp.attempt));
        let mut durable = self.durable(
            store,
            owner,
            (run_id, &key),
            (cp.created_at_ms, cp.deadline_ms),
            resumed,
            Tail::after(&cp, self.inner.settings.history_depth),
        );
        // a run checkpointed by ip goes on by ip, so that its stages keep
        // their keys (rule 12)
        durable.by_ip = by_ip;
        // a run of a queue stays in it (rule 31), started from now on
        durable.queue = cp.queue.clone().map(|q| Box::new(q.started()));
        // the finished branches of the block the run stopped in (rule
        // 19); a replay from a named step runs that step whole
        if stopped == Some(ip) && !matches!(how, Continue::Replay { from: Some(_) }) {
            durable.resumed_branches = cp.branches;
            // a sleep or wait goes on with the wake time or deadline it
            // had (rules 25-26); waking it is not another attempt
            durable.resumed_parked = cp.status.is_pending();
            durable.resumed_pending = cp.pending.map(|p| *p);
            durable.woken_at = woken_at.filter(|_| durable.resumed_parked);
        }
        self.interpret_from(owner, &durable, ip, &start).await
    }

    /// Where the stored checkpoint `cp` (of `key`) continues in this
    /// pipeline's program: the ip of the resume point at its position (see
    /// [`Program::position`]), and whether the run numbers its checkpoints
    /// by ip instead (it was checkpointed by a fluxio that recorded ips;
    /// they differ from positions only in a program with schemas).
    ///
    /// The step name the checkpoint records tells the two apart: a
    /// position is taken when its step is the checkpoint's, an ip when
    /// only its step is, and a position whose step has another name when
    /// nothing else fits (a checkpoint whose step names no stage).
    ///
    /// # Errors
    /// [`Error::CorruptCheckpoint`] when the checkpoint's version is this
    /// pipeline's and neither is a resume point of it (the same code always
    /// places its own checkpoints); [`Error::CheckpointVersion`] naming the
    /// step when another version wrote it (its position is not a step of
    /// this code: the shape changed in a way the structure did not show).
    pub(super) fn resume_point(&self, key: &str, cp: &Checkpoint) -> Result<(usize, bool)> {
        let program = &self.inner.program;
        let by_position = program.resume_point_at(cp.ip);
        let named = |ip: usize| program.step_at(ip) == Some(cp.step.as_str());
        if let Some(ip) = by_position.filter(|ip| named(*ip)) {
            return Ok((ip, false));
        }
        let ip = cp.ip as usize;
        if named(ip) {
            return Ok((ip, true));
        }
        if cp.version == self.inner.version {
            if let Some(ip) = by_position {
                return Ok((ip, false));
            }
            return Err(Error::CorruptCheckpoint {
                run_id: key.to_owned(),
                reason: format!(
                    "position {} (step `{}`) is not a checkpoint of pipeline version {}",
                    cp.ip, cp.step, self.inner.version
                ),
                source: None,
            });
        }
        let mut changes = cp
            .structure
            .as_ref()
            .map(|old| old.changes_to(&self.inner.structure))
            .unwrap_or_default();
        changes.moved.push(cp.step.clone());
        Err(Error::CheckpointVersion {
            run_id: key.to_owned(),
            checkpoint_version: cp.version.clone(),
            pipeline_version: self.inner.version.clone(),
            changes: Some(Box::new(changes)),
        })
    }

    /// Runs `durable`'s run from the top-level checkpoint `ip` (a resume
    /// point of this program) with `context`, under `owner`'s lease.
    pub(super) async fn interpret_from(
        &self,
        owner: &Ownership,
        durable: &Durable<'_>,
        ip: usize,
        context: &Snapshot,
    ) -> Result<Outcome> {
        debug_assert!(self.inner.program.is_resume_point(ip));
        // built in place: a future held in a local and then moved into
        // another is stored twice in this one (a parked run's size)
        RunBodies::scope(
            Some(owner.keep()),
            interpret::run(
                &self.inner.program,
                &Arc::from(durable.key),
                ip,
                context.to_context(),
                Some(durable),
            ),
        )
        .await
    }
}
