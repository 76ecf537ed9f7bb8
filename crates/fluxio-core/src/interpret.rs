//! The interpreter: one loop over the instruction list.
//!
//! [`exec`] runs one frame (the top-level program, or one branch of a
//! parallel block) from an instruction pointer until the end of the program
//! or the frame's `END_BRANCH`, calling one function per instruction
//! (`emit_step`, `validate`, `call`, `fork`, `route`). Parallel branches are
//! frames of their own, run concurrently by the `FORK` that starts them.
//!
//! The top-level frame carries a checkpoint hook ([`Top`]): durable runs
//! ([`Durable`]) save a checkpoint at every `CHECKPOINT`, a failure checkpoint
//! when the frame fails, and a completed checkpoint when it finishes.

mod child;
pub(crate) mod compensate;
pub(crate) mod ownership;
pub(crate) mod renew;
pub(crate) mod tail;
mod waits;

use waits::{durable_top, park};

use tail::Tail;

use std::sync::Arc;

use std::time::{Duration, Instant};

use futures::future::{BoxFuture, try_join_all};

use tracing::Instrument as _;

use crate::callback::{CHUNK_SINK, ChunkSink, StepEvent, emit};

use crate::compile::{Event, Instr, Program};

use crate::context::{Context, Lineage, Snapshot};

use crate::durability::{AsyncWriter, Durability};

use crate::error::{Error, Result};

use crate::middleware::Next;

use crate::stage::{
    Ended, Output, StageInfo, StageKind, Started, WithInfo, span_if_wanted, with_info,
};

use crate::outcome::Outcome;
use crate::store::{BranchRecord, Checkpoint, CheckpointStore, Pending, RunStatus};
use ownership::Ownership;

use crate::structure::Structure;

/// What a durable run needs to write its checkpoints.
pub(crate) struct Durable<'a> {
    pub(crate) store: &'a dyn CheckpointStore,
    /// The run's lease: every write is fenced by it, and the last one gives
    /// it back ([`Ownership::finish`]).
    pub(crate) owner: &'a Ownership,
    /// The pipeline's name (empty when unnamed) and the caller's run id:
    /// the checkpoint's key is both.
    pub(crate) pipeline: &'a str,
    pub(crate) run_id: &'a str,
    /// The run's store key (`pipeline/run_id`), what callbacks and logs name.
    pub(crate) key: &'a str,
    pub(crate) version: &'a str,
    pub(crate) structure: &'a Arc<Structure>,
    pub(crate) created_at_ms: u64,
    /// The run's deadline (rule 30), which every checkpoint carries (boxed:
    /// this struct is part of every durable run's future, rule 24).
    pub(crate) deadline: Option<Box<RunDeadline>>,
    /// The run's queue (rule 31) when it was enqueued, which every
    /// checkpoint carries, started (boxed, as `deadline` is).
    pub(crate) queue: Option<Box<crate::store::QueueEntry>>,
    /// Where a resume starts and the attempt stored there: the first
    /// checkpoint at that ip is the next attempt of its stage.
    pub(crate) resumed: Option<(usize, u32)>,
    /// The finished branches recorded at the resumed checkpoint, when it is
    /// a parallel block's (rule 19): they are rebuilt, not run again.
    pub(crate) resumed_branches: Vec<BranchRecord>,
    /// What the resumed checkpoint's sleep or wait waits for (rules
    /// 25-26), fixed when the run first reached it: every checkpoint at
    /// that step carries it, and the step reads its wake time or deadline
    /// from it.
    pub(crate) resumed_pending: Option<Pending>,
    /// The resumed checkpoint was parked (sleeping or waiting): waking it
    /// is not a new attempt of its step.
    pub(crate) resumed_parked: bool,
    /// The time on the run's clock at which a worker claimed the woken
    /// run as due: its sleep or wait reads it instead of the clock.
    pub(crate) woken_at: Option<u64>,
    /// Where wake times and deadlines come from (rule 28).
    pub(crate) clock: &'a crate::clock::Clock,
    /// The run was checkpointed by a fluxio that recorded ips, not
    /// positions (see [`Program::position`]): it keeps numbering its
    /// checkpoints and its stages' idempotency keys by ip to its end, so
    /// that every stage keeps the key it had (rule 12). Only differs for a
    /// program with schemas.
    pub(crate) by_ip: bool,
    /// Delete the run once its completed checkpoint is written.
    pub(crate) delete_completed: bool,
    /// Where the run's journal stands: what the next checkpoint is written
    /// against (rule 18).
    pub(crate) tail: Arc<std::sync::Mutex<Tail>>,
    /// When checkpoints are written (rule 24).
    pub(crate) mode: Durability,
    /// `Async` runs: the background writer of their checkpoints (boxed:
    /// this struct is part of every durable run's future, rule 24).
    pub(crate) writer: Option<Box<AsyncWriter>>,
    /// Set when the run's first checkpoint was written with its lease
    /// ([`Ownership::begin`]), and how long that took: the first
    /// `CHECKPOINT` then only reports it.
    pub(crate) prewritten: std::sync::Mutex<Option<Duration>>,
}

/// The first checkpoint of a fresh run of `program` on `input`, before its
/// first stage, numbered in `tail`, or `None` for a program with no stage:
/// what [`Ownership::begin`] writes with the run's lease. The run's
/// [`Durable`] then has [`prewritten`](Durable::prewritten) set, and its
/// first `CHECKPOINT` writes nothing. Returns the checkpoint and what
/// [`Tail::advance`] needs once it is written.
pub(crate) fn first_checkpoint(
    (program, ip): (&Program, usize),
    meta: [&str; 3],
    structure: &Arc<Structure>,
    (created_at_ms, deadline_ms): (u64, Option<u64>),
    input: &Snapshot,
    tail: &mut Tail,
) -> Option<Checkpoint> {
    let Some(Instr::Checkpoint { step }) = program.instrs.get(ip) else {
        return None;
    };
    let [pipeline, run_id, version] = meta;
    let mut cp = new_checkpoint(
        [pipeline, run_id, version],
        structure,
        created_at_ms,
        program.position(ip),
        step,
        input.clone(),
    );
    cp.attempt = 1;
    cp.deadline_ms = deadline_ms;
    tail.stamp(&mut cp, Lineage::NONE);
    Some(cp)
}

/// A running checkpoint of the run `run_id` of `pipeline` at `position`
/// (see [`Program::position`]).
fn new_checkpoint(
    [pipeline, run_id, version]: [&str; 3],
    structure: &Arc<Structure>,
    created_at_ms: u64,
    ip: u32,
    step: &str,
    context: Snapshot,
) -> Checkpoint {
    let mut cp = Checkpoint::new(run_id, version, ip, step, context).in_pipeline(pipeline);
    cp.structure = Some(Arc::clone(structure));
    cp.created_at_ms = created_at_ms;
    cp
}

impl Durable<'_> {
    /// What a checkpoint of the instruction at `ip` records: its position,
    /// or its ip in a run that numbers by ip ([`by_ip`](Self::by_ip)).
    pub(crate) fn place(&self, program: &Program, ip: usize) -> u32 {
        if self.by_ip {
            u32::try_from(ip).unwrap_or(u32::MAX)
        } else {
            program.position(ip)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn checkpoint(
        &self,
        program: &Program,
        ip: usize,
        step: &str,
        ctx: &Context,
        status: RunStatus,
        error: Option<String>,
        attempt: u32,
    ) -> Checkpoint {
        let meta = [self.pipeline, self.run_id, self.version];
        let mut cp = new_checkpoint(
            meta,
            self.structure,
            self.created_at_ms,
            self.place(program, ip),
            step,
            ctx.snapshot(),
        );
        cp.attempt = attempt;
        cp.status = status;
        cp.error_message = error;
        cp.deadline_ms = self.deadline_ms();
        cp.queue.clone_from(&self.queue);
        cp
    }

    /// The run's deadline, in ms since the Unix epoch (rule 30).
    pub(crate) fn deadline_ms(&self) -> Option<u64> {
        self.deadline.as_ref().map(|d| d.at_ms)
    }

    /// The checkpoint of `last` again, as `status` (with the `error` of a
    /// failure).
    fn at_last(
        &self,
        program: &Program,
        last: &Last,
        status: RunStatus,
        error: Option<String>,
    ) -> Checkpoint {
        self.checkpoint(
            program,
            last.ip,
            &last.step,
            &last.ctx,
            status,
            error,
            last.attempt,
        )
    }
}

/// A run's deadline (rule 30), and when it passes by this process's
/// monotonic clock, found at the first check by one reading of the run's
/// clock, so that later checks ask no store.
pub(crate) struct RunDeadline {
    /// Milliseconds since the Unix epoch, on the run's clock.
    pub(crate) at_ms: u64,
    /// When it passes by `Instant` (`None`: not within its range); unused on
    /// a manual clock, which is read at every check.
    passes: std::sync::OnceLock<Option<Instant>>,
}

impl RunDeadline {
    /// The deadline `at_ms`, not yet checked.
    pub(crate) fn new(at_ms: u64) -> Box<Self> {
        Box::new(RunDeadline {
            at_ms,
            passes: std::sync::OnceLock::new(),
        })
    }

    /// Whether the deadline has passed, when that is known without a store:
    /// by `now` (the time a worker claimed the run, for the step it woke
    /// at), a manual clock, or the monotonic clock once the run's clock was
    /// read; `None` before that first reading ([`read`](Self::read)).
    fn passed(&self, now: Option<u64>, clock: &crate::clock::Clock) -> Option<bool> {
        match now.or_else(|| clock.manual_now()) {
            Some(now) => Some(now >= self.at_ms),
            None => self
                .passes
                .get()
                .map(|passes| passes.is_some_and(|p| Instant::now() >= p)),
        }
    }

    /// Reads the run's clock (the store's, for a store clock) once: whether
    /// the deadline has passed, and when it will by the monotonic clock.
    async fn read(&self, clock: &crate::clock::Clock, store: &dyn CheckpointStore) -> Result<bool> {
        let now = clock.now_ms(Some(store)).await?;
        let left = Duration::from_millis(self.at_ms.saturating_sub(now));
        let _ = self.passes.set(Instant::now().checked_add(left));
        Ok(now >= self.at_ms)
    }
}

/// The last checkpoint the top-level frame passed: where a failure points.
struct Last {
    ip: usize,
    step: Arc<str>,
    ctx: Context,
    attempt: u32,
}

/// What the top-level frame adds to a branch frame: its checkpoints.
struct Top<'a> {
    durable: Option<&'a Durable<'a>>,
    /// What the step at `last` waits for, when the run resumed at a sleep
    /// or a wait it had reached before (rules 25-26).
    pending: Option<Pending>,
    /// The last checkpoint a durable run passed, where a failure checkpoint
    /// points (`None` in a plain run).
    last: Option<Last>,
    /// The finished branches of the parallel block at `last` (rule 19),
    /// which every checkpoint written there carries.
    records: Vec<BranchRecord>,
}

impl Top<'_> {
    /// The checkpoint hook, run at every top-level `CHECKPOINT`: fixes the
    /// attempt of what runs next, saves a checkpoint (durable runs) and
    /// remembers it as the place a failure points at.
    async fn checkpoint(
        &mut self,
        program: &Program,
        ip: usize,
        step: &Arc<str>,
        ctx: &mut Context,
        scope: &mut Scope,
    ) -> Result<()> {
        // a plain run is never resumed and records no branches: its
        // checkpoints change nothing
        let Some(d) = self.durable else {
            return Ok(());
        };
        let resumed_here = d.resumed.filter(|(at, _)| *at == ip);
        // waking a sleeping or waiting run is not another attempt of it
        scope.attempt = resumed_here.map_or(1, |(_, attempt)| {
            if d.resumed_parked {
                attempt
            } else {
                attempt.saturating_add(1)
            }
        });
        (self.records, self.pending) = match resumed_here {
            Some(_) => (d.resumed_branches.clone(), d.resumed_pending.clone()),
            None => (Vec::new(), None),
        };
        let woken = resumed_here.is_some() && d.resumed_parked;
        {
            // rule 24: `Exit` writes no step's checkpoint (the run's first
            // one, written with its lease, is `Sync`'s and `Async`'s); a
            // woken sleep or wait writes none either: the parked checkpoint
            // at this step is stored, and leaves the run due (not
            // abandoned) should this worker die before the next step's
            if d.mode != Durability::Exit && !woken {
                let lineage = ctx.next_epoch();
                // the checkpoint goes into the boxed save at once: a local
                // would stay in this future (a parked run's) beside it
                let saving = {
                    let mut cp = d.checkpoint(
                        program,
                        ip,
                        step,
                        ctx,
                        RunStatus::Running,
                        None,
                        scope.attempt,
                    );
                    cp.branches.clone_from(&self.records);
                    cp.pending = self.pending.clone().map(Box::new);
                    Box::pin(save(program, d, cp, lineage, Write::Step))
                };
                saving.await?;
            }
            // only a durable run points a failure at it: a plain run
            // keeps no clone, so its stages change the context in place
            self.last = Some(Last {
                ip,
                step: Arc::clone(step),
                ctx: ctx.clone(),
                attempt: scope.attempt,
            });
        }
        if let Some(deadline) = &d.deadline {
            let now = woken.then_some(d.woken_at).flatten();
            let passed = match deadline.passed(now, d.clock) {
                Some(passed) => passed,
                // once a run (boxed: not in every stage's future)
                None => Box::pin(deadline.read(d.clock, d.store)).await?,
            };
            if passed {
                // rule 30: the run stops before this step, and is failed
                // at it (with what it waited for, when it woke at a sleep
                // or wait): the failure checkpoint points at `last`
                return Err(Error::DeadlineExceeded {
                    run_id: d.key.to_owned(),
                    step: step.to_string(),
                    deadline_ms: deadline.at_ms,
                });
            }
        }
        Ok(())
    }

    /// `FORK` of a parallel block of a durable run's top-level frame (rule
    /// 19): a branch recorded at the block's checkpoint is rebuilt from its
    /// record; every other branch runs, and when it finishes the block's
    /// checkpoint is saved again with its record (one save at a time, each
    /// carrying all records so far). Then all branches merge in block
    /// order, as an uninterrupted run's would.
    async fn fork_recorded(
        &mut self,
        program: &Arc<Program>,
        scope: &Scope,
        branches: &[usize],
        names: &[Arc<str>],
        ctx: Context,
    ) -> std::result::Result<Context, Halt> {
        let (Some(d), Some(last)) = (self.durable, self.last.as_ref()) else {
            // [`exec`] calls this only for a durable run past a checkpoint
            return Err(Halt::Failed(Error::Internal {
                message: "a parallel block's records outside a durable run's checkpoint".to_owned(),
            }));
        };
        emit_branches(program, scope, names);
        let records = tokio::sync::Mutex::new(std::mem::take(&mut self.records));
        let bound = program.max_parallel.map(tokio::sync::Semaphore::new);
        let runs = branches
            .iter()
            .zip(names)
            .enumerate()
            .map(|(i, (start, name))| {
                let (records, ctx, bound) = (&records, &ctx, bound.as_ref());
                async move {
                    let index = u32::try_from(i).unwrap_or(u32::MAX);
                    let recorded = records
                        .lock()
                        .await
                        .iter()
                        .find(|r| r.branch == index)
                        .map(|r| r.replay(ctx));
                    if let Some(done) = recorded {
                        tracing::debug!(branch = &**name, "a finished branch is not run again");
                        return Ok::<Context, Halt>(done);
                    }
                    // at most `max_parallel` branches of this block at once
                    let _turn = match bound {
                        Some(b) => Some(b.acquire().await.map_err(|_| {
                            Halt::Failed(Error::Internal {
                                message: "a parallel block's bound was closed".to_owned(),
                            })
                        })?),
                        None => None,
                    };
                    let done = branch(program, *start, ctx.fork(name.clone()), scope.clone())
                        .await
                        .map_err(Halt::Failed)?;
                    let mut held = records.lock().await;
                    held.push(BranchRecord::of(index, name, &done));
                    held.sort_by_key(|r| r.branch);
                    Box::pin(save(
                        program,
                        d,
                        // the checkpoint of `last` again, with the finished branches
                        Checkpoint {
                            branches: held.to_vec(),
                            ..d.at_last(program, last, RunStatus::Running, None)
                        },
                        Lineage::NONE,
                        Write::Step,
                    ))
                    .await
                    .map_err(Halt::Store)?;
                    Ok(done)
                }
            });
        let results = try_join_all(runs).await;
        self.records = records.into_inner();
        Ok(Context::merge(&ctx, &results?)?)
    }
}

/// State of one frame between instructions.
#[derive(Default)]
struct Frame {
    /// The route the last router chose, for the `ROUTE` after it.
    /// (A `Box<str>`: a word less than a `String` in every frame, rule 24.)
    route: Option<Box<str>>,
    /// When the current stage's `EMIT step_start` ran (only with callbacks).
    step_started: Option<Instant>,
    /// What [`StageInfo::current`] returns inside the frame's stage calls,
    /// made at the first and updated for each.
    info: Option<StageInfo>,
}

/// What a stage call is told about its run (see [`StageInfo`]).
#[derive(Clone)]
struct Scope {
    run_id: Arc<str>,
    attempt: u32,
    /// Stages' keys are their `CALL`'s ip, not its position (a run that
    /// numbers by ip: [`Durable::by_ip`]).
    by_ip: bool,
}

/// Why a frame stopped early.
enum Halt {
    /// A stage or the machinery failed after the last checkpoint (if any).
    Failed(Error),
    /// Saving a checkpoint failed: the store is in trouble, write nothing more.
    Store(Error),
    /// The run reached a sleep or a wait that is not due (rules 25-26): it
    /// parks at its last checkpoint, waiting for this; a refused signal
    /// says why in the message.
    Parked(Pending, Option<String>),
}

impl From<Error> for Halt {
    fn from(e: Error) -> Self {
        Halt::Failed(e)
    }
}

impl From<Box<Error>> for Halt {
    fn from(e: Box<Error>) -> Self {
        Halt::Failed(*e)
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs the whole program from `ip` (a resume point) with `ctx`, durably when
/// `durable` is given.
pub(crate) async fn run(
    program: &Arc<Program>,
    run_id: &Arc<str>,
    ip: usize,
    ctx: Context,
    durable: Option<&Durable<'_>>,
) -> Result<Outcome> {
    let cbs = &program.callbacks;
    // read the clock only for someone who is told the run's duration
    let started = (!cbs.is_empty()).then(Instant::now);
    let pipeline = durable.map_or("", |d| d.pipeline);
    crate::metrics::run_started(pipeline);
    if !cbs.is_empty() {
        emit(cbs, "pipeline_start", |c| {
            c.on_pipeline_start(run_id, &program.version)
        });
    }
    // the frame and its end in this one future: a future per level keeps
    // its own copy of the arguments (the context) while the run waits
    let mut top = Top {
        durable,
        pending: None,
        last: None,
        records: Vec::new(),
    };
    let scope = Scope {
        run_id: Arc::clone(run_id),
        attempt: 1,
        by_ip: durable.is_some_and(|d| d.by_ip),
    };
    let done = exec(program, ip, ctx, scope, Some(&mut top)).await;
    // one await for the end, so that nothing it holds (the last
    // checkpoint, the error) is kept beside the frame while a stage runs
    let result = end(program, durable, top, done).await;
    crate::metrics::run_ended(pipeline, &result);
    if !cbs.is_empty() {
        if let Err(e) = &result {
            emit(cbs, "error", |c| c.on_error(run_id, e));
        }
        let took = started.map(|t| t.elapsed()).unwrap_or_default();
        emit(cbs, "pipeline_end", |c| {
            c.on_pipeline_end(run_id, took, result.as_ref().err())
        });
    }
    result
}

/// How [`save`] writes a checkpoint.
#[derive(Clone, Copy)]
enum Write {
    /// A checkpoint before a step: the run goes on.
    Step,
    /// The run's last checkpoint (completed, failed): the lease is given
    /// back with it, and the run deleted after it when `delete`.
    Last { delete: bool },
}

/// Saves `cp` fenced, telling the callbacks how long the store took. A run
/// that was cancelled (rule 14) learns of it here, and only here: the store
/// refuses the write with [`Error::Cancelled`], and the run stops.
///
/// `lineage` is the context's around this checkpoint (see [`Lineage`]).
async fn save(
    program: &Program,
    d: &Durable<'_>,
    mut cp: Checkpoint,
    lineage: Lineage,
    write: Write,
) -> Result<()> {
    let (ip, status) = (cp.ip as usize, cp.status);
    let (saved, latency) = if let Some(took) = lock(&d.prewritten).take() {
        // written with the lease: [`first_checkpoint`] numbered it in the
        // tail, from the context this one is of
        lock(&d.tail).since = lineage.after;
        (Ok(()), took)
    } else if let (Write::Step, Durability::Exit) = (write, d.mode) {
        // rule 24: only the run's end is written
        return Ok(());
    } else if let (Write::Step, Some(writer)) = (write, &d.writer) {
        // rule 24: sent in the background; a refused earlier write stops
        // the run here
        return writer.submit(cp, lineage);
    } else {
        if let (Write::Last { .. }, Some(writer)) = (write, &d.writer) {
            // every write sent is acknowledged before the run's last one
            Box::pin(writer.drain()).await?;
        }
        // read the clock only for someone who is told the write's latency
        let timed = crate::metrics::ON || !program.callbacks.is_empty();
        let started = timed.then(Instant::now);
        let delta = lock(&d.tail).stamp(&mut cp, lineage);
        let (seq, context, full) = (cp.seq, cp.context.clone(), cp.change.is_full());
        let saved = match write {
            Write::Step => d.store.save_fenced(cp, d.owner.lease()).await,
            // boxed, as the drain above: the run's last write should not
            // make every step's save future (boxed, per checkpoint) large
            Write::Last { delete } => Box::pin(d.owner.finish(cp, delete)).await,
        };
        if saved.is_ok() {
            lock(&d.tail).advance(seq, context, full, delta, d.version, lineage);
        }
        (saved, started.map(|t| t.elapsed()).unwrap_or_default())
    };
    if saved.is_ok() {
        crate::metrics::checkpoint_written(d.pipeline, latency);
    }
    match &saved {
        Err(Error::Cancelled { .. }) => tracing::info!(
            run_id = d.key,
            ip,
            "the run was cancelled: it stops here, before its next stage"
        ),
        Err(Error::Paused { .. }) => tracing::info!(
            run_id = d.key,
            ip,
            "the run was paused: it stops here, before its next stage, until unpaused"
        ),
        _ => {}
    }
    if program.callbacks.is_empty() {
        return saved;
    }
    saved?;
    emit(&program.callbacks, "checkpoint", |c| {
        c.on_checkpoint(d.key, ip, status, latency)
    });
    Ok(())
}

/// The end of a top-level frame that returned `done`: a durable run
/// writes its completed checkpoint, or its failure checkpoint pointing at
/// the last checkpoint `top` passed.
async fn end(
    program: &Program,
    durable: Option<&Durable<'_>>,
    top: Top<'_>,
    done: std::result::Result<Context, Halt>,
) -> Result<Outcome> {
    match done {
        Ok(done) => {
            if let Some(d) = durable {
                let end = program.instrs.len();
                let cp = d.checkpoint(program, end, "", &done, RunStatus::Completed, None, 1);
                let delete = d.delete_completed;
                let lineage = done.lineage();
                Box::pin(save(program, d, cp, lineage, Write::Last { delete })).await?;
                // rule 29: a child's parent goes on now (boxed, and only
                // for a child: no allocation at the end of any other run)
                if crate::child::parent_of(d.run_id).is_some() {
                    Box::pin(child::wake_parent(d)).await;
                }
            }
            Ok(Outcome::Completed(done))
        }
        Err(Halt::Store(e)) => Err(e),
        // boxed: the failure's checkpoint is large, and this future is
        // part of every run's while its stages run (rule 24)
        Err(Halt::Failed(e)) => Box::pin(failed(program, durable, top, e)).await,
        Err(Halt::Parked(pending, refused)) => {
            Box::pin(park(program, durable, top, pending, refused)).await
        }
    }
}

/// The end of a top-level frame that failed with `e`: a durable run past a
/// checkpoint writes its failure checkpoint there.
async fn failed(
    program: &Program,
    durable: Option<&Durable<'_>>,
    top: Top<'_>,
    e: Error,
) -> Result<Outcome> {
    if let (Some(d), Some(last)) = (durable, top.last) {
        // rule 35: a final failure undoes what the run completed
        if e.is_terminal() && !program.compensators.is_empty() {
            let at = compensate::At {
                position: d.place(program, last.ip),
                step: last.step.to_string(),
                context: last.ctx.snapshot(),
            };
            let reason = e.message_with_causes();
            if Box::pin(compensate::begin(program, d, &at, reason, false))
                .await?
                .is_some()
            {
                return Err(e);
            }
        }
        let error = Some(e.message_with_causes());
        let mut cp = d.at_last(program, &last, RunStatus::Failed, error);
        // rule 35: no start, resume or worker runs it again
        cp.failed_for_good = e.is_terminal();
        // finished branches stay finished after a failure too
        cp.branches = top.records;
        cp.pending = top.pending.map(Box::new);
        let last = Write::Last { delete: false };
        match Box::pin(save(program, d, cp, Lineage::NONE, last)).await {
            // rule 29: a child's parent takes its failure now
            Ok(()) if crate::child::parent_of(d.run_id).is_some() => {
                Box::pin(child::wake_parent(d)).await;
            }
            Ok(()) => {}
            // the run was cancelled while the stage ran: that is
            // how it ends, whatever the stage did
            Err(stopped @ (Error::Cancelled { .. } | Error::Paused { .. })) => {
                return Err(stopped);
            }
            Err(store_err) => tracing::error!(
                run_id = d.key,
                error = %store_err.message_with_causes(),
                "could not save the failure checkpoint; the previous checkpoint stays in place"
            ),
        }
    }
    Err(e)
}

/// The one interpreter loop: runs a frame from `ip` until the end of the
/// program or the frame's `END_BRANCH`. `top` is the checkpoint hook of the
/// top-level frame; branch frames have none (a parallel block is covered by
/// its own checkpoint), and the compiler puts no `CHECKPOINT` in them.
///
/// A plain `fn` returning an `async move` block, not an `async fn`: an
/// `async fn` keeps its arguments twice in its state (as passed, and bound
/// again in its body), and this state is part of every run's while a stage
/// runs (rule 24).
#[allow(clippy::manual_async_fn)] // on purpose: see above
fn exec<'a>(
    program: &'a Arc<Program>,
    mut ip: usize,
    mut ctx: Context,
    mut scope: Scope,
    mut top: Option<&'a mut Top<'_>>,
) -> impl Future<Output = std::result::Result<Context, Halt>> + Send + 'a {
    async move {
        let mut frame = Frame::default();
        while let Some(instr) = program.instrs.get(ip) {
            ip = match instr {
                Instr::Checkpoint { step } => {
                    // a plain run's checkpoints do nothing: not even a
                    // future is made for them
                    if let Some(top) = top.as_deref_mut().filter(|t| t.durable.is_some()) {
                        top.checkpoint(program, ip, step, &mut ctx, &mut scope)
                            .await
                            .map_err(|e| match e {
                                // the run ends failed at this step (rule 30)
                                Error::DeadlineExceeded { .. } => Halt::Failed(e),
                                e => Halt::Store(e),
                            })?;
                    }
                    ip + 1
                }
                Instr::Emit { event, stage, call } => {
                    // nothing to do, and nothing called, without listeners
                    if !program.callbacks.is_empty()
                        || tracing::level_enabled!(tracing::Level::DEBUG)
                    {
                        emit_step(program, &mut frame, &scope, *event, *stage, *call);
                    }
                    ip + 1
                }
                Instr::Validate { stage, output } => {
                    validate(program, &mut frame, &scope, ip, *stage, *output, &ctx)?;
                    ip + 1
                }
                Instr::Call { stage } => {
                    ctx = if in_place(program, *stage) {
                        call_in_place(program, &mut frame, &scope, ip, *stage, ctx)?
                    } else {
                        call(program, &mut frame, &scope, ip, *stage, ctx).await?
                    };
                    ip + 1
                }
                Instr::Fork {
                    branches,
                    names,
                    join,
                    detached,
                } => {
                    // a block of a durable run records its branches (rule 19)
                    ctx = match top.as_deref_mut() {
                        Some(top) if !*detached && top.durable.is_some() && top.last.is_some() => {
                            top.fork_recorded(program, &scope, branches, names, ctx)
                                .await?
                        }
                        _ => fork(program, &scope, branches, names, *detached, ctx).await?,
                    };
                    join + 1
                }
                Instr::EndBranch => return Ok(ctx),
                Instr::Join => ip + 1,
                Instr::Route { by, routes } => route(program, &mut frame, &scope, by, routes)?,
                Instr::Jump { to } => *to,
                Instr::Sleep { sleep } => {
                    let top = durable_top(top.as_deref_mut())?;
                    top.sleep(program, *sleep, &ctx).await?;
                    ip + 1
                }
                Instr::Child { child } => {
                    let top = durable_top(top.as_deref_mut())?;
                    ctx = Box::pin(top.child(program, ip, *child, ctx)).await?;
                    ip + 1
                }
                Instr::Wait { wait, routed } => {
                    let top = durable_top(top.as_deref_mut())?;
                    let chosen;
                    (ctx, chosen) = Box::pin(top.wait(program, *wait, ctx)).await?;
                    if *routed {
                        frame.route = Some(chosen.into());
                    }
                    ip + 1
                }
            };
        }
        Ok(ctx)
    }
}

/// A branch of a parallel block: a frame of its own, boxed (a branch may
/// hold another parallel block).
fn branch(
    program: &Arc<Program>,
    ip: usize,
    ctx: Context,
    scope: Scope,
) -> BoxFuture<'_, Result<Context>> {
    Box::pin(async move {
        exec(program, ip, ctx, scope, None)
            .await
            .map_err(|halt| match halt {
                Halt::Failed(e) | Halt::Store(e) => e,
                // the compiler puts no sleep or wait in a branch
                Halt::Parked(..) => Error::Internal {
                    message: "a branch of a parallel block parked".to_owned(),
                },
            })
    })
}

/// `EMIT`: step events for the tracing log and the callbacks ([`exec`]
/// calls it only when there are callbacks or debug logs).
fn emit_step(
    program: &Program,
    frame: &mut Frame,
    scope: &Scope,
    event: Event,
    stage: usize,
    call: usize,
) {
    let name = program.stages[stage].name();
    match event {
        Event::StepStart => tracing::debug!(stage = name, ip = call, "step_start"),
        Event::StepEnd => tracing::debug!(stage = name, ip = call, "step_end"),
    }
    let cbs = &program.callbacks;
    if cbs.is_empty() {
        return;
    }
    let ev = StepEvent {
        run_id: &scope.run_id,
        stage: name,
        ip: call,
        attempt: scope.attempt,
    };
    match event {
        Event::StepStart => {
            frame.step_started = Some(Instant::now());
            emit(cbs, "step_start", |c| c.on_step_start(&ev));
        }
        Event::StepEnd => {
            let took = frame
                .step_started
                .take()
                .map(|t| t.elapsed())
                .unwrap_or_default();
            emit(cbs, "step_end", |c| c.on_step_end(&ev, took, None));
        }
    }
}

/// Closes a step that failed (in its call or its validation): a failed or
/// timed-out stage still ends, so callbacks can close what they opened.
fn end_failed_step(
    program: &Program,
    frame: &mut Frame,
    scope: &Scope,
    stage: &str,
    ip: usize,
    e: &Error,
) {
    let cbs = &program.callbacks;
    if !cbs.is_empty() {
        let took = frame
            .step_started
            .take()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        let ev = StepEvent {
            run_id: &scope.run_id,
            stage,
            ip,
            attempt: scope.attempt,
        };
        emit(cbs, "step_end", |c| c.on_step_end(&ev, took, Some(e)));
    }
}

/// `VALIDATE`: checks the context against the stage's declared input or
/// output type.
fn validate(
    program: &Program,
    frame: &mut Frame,
    scope: &Scope,
    ip: usize,
    stage: usize,
    output: bool,
    ctx: &Context,
) -> Result<()> {
    let stage = &program.stages[stage];
    let meta = stage.meta();
    let check = if output { meta.output } else { meta.input };
    let Err(message) = check.map_or(Ok(()), |validate| validate(ctx)) else {
        return Ok(());
    };
    let which = if output { "output" } else { "input" };
    let e = Error::Validation {
        stage: stage.name().to_owned(),
        message: format!("{which}: {message}"),
    };
    end_failed_step(program, frame, scope, stage.name(), ip, &e);
    Err(e)
}

/// `CALL`: runs the stage inside its span and `StageInfo`, through its
/// middleware, and returns the next context (a router's patch applied, its
/// route kept for the `ROUTE` after it). A stage run in place without
/// middleware is called by [`call_in_place`] instead, without a future.
///
/// Its future is part of a parked run's (rule 24): the context goes
/// straight into the stage's call (no `async` block holding it beside
/// that call), and is never borrowed here, so that its slot is free while
/// the stage runs.
async fn call(
    program: &Arc<Program>,
    frame: &mut Frame,
    scope: &Scope,
    ip: usize,
    index: usize,
    ctx: Context,
) -> std::result::Result<Context, Box<Error>> {
    use futures::future::Either;
    let stage = &program.stages[index];
    let (start, span) = prepare(program, frame, scope, ip, stage, &ctx);
    let chain = program.middleware.get(index).filter(|c| !c.is_empty());
    let sink = stage.meta().kind == StageKind::Stream && !program.callbacks.is_empty();
    let out = if chain.is_none() && !sink {
        // started here, inside its info and span: a stage that has ended
        // when called needs no future around it
        match with_info(&mut frame.info, span.as_ref(), || stage.start(ctx)) {
            Started::Done(out) => out,
            Started::Running(call) => WithInfo::new(&mut frame.info, span, call)
                .await
                .map_err(Box::new),
        }
    } else {
        let run = match chain {
            // boxed: a chain's future is twice a stage's, and a stage
            // without one should not carry (and move) its room on every call
            Some(chain) => Either::Left(Box::pin(Next::new(stage, chain).run_caught(ctx))),
            None => Either::Right(stage.call(ctx)),
        };
        let run = WithInfo::new(&mut frame.info, span, run);
        if sink {
            let sink = ChunkSink {
                callbacks: Arc::clone(&program.callbacks),
                run_id: Arc::clone(&scope.run_id),
            };
            CHUNK_SINK.scope(sink, run).await.map_err(Box::new)
        } else {
            run.await.map_err(Box::new)
        }
    };
    finish(program, frame, scope, ip, index, out, start)
}

/// Whether `CALL` of stage `index` is [`call_in_place`]'s: a stage run
/// in place (`#[stage]`'s `async fn` without `.await`), without middleware.
fn in_place(program: &Program, index: usize) -> bool {
    program.stages[index].in_place() && program.middleware.get(index).is_none_or(|c| c.is_empty())
}

/// [`call`] of a stage [run in place](in_place): it has ended when its
/// call function returns, so no future is made, here or around it.
#[inline(always)]
fn call_in_place(
    program: &Program,
    frame: &mut Frame,
    scope: &Scope,
    ip: usize,
    index: usize,
    ctx: Context,
) -> std::result::Result<Context, Box<Error>> {
    let stage = &program.stages[index];
    let (start, span) = prepare(program, frame, scope, ip, stage, &ctx);
    let out = match with_info(&mut frame.info, span.as_ref(), || stage.start(ctx)) {
        Started::Done(out) => out,
        // `ready_stage` finishes every call; a stage marked by hand could
        // not, and is stopped rather than left waiting unpolled
        Started::Running(_) => Err(Box::new(Error::Internal {
            message: format!(
                "stage `{}` is run in place, but its future waited",
                stage.name()
            ),
        })),
    };
    finish(program, frame, scope, ip, index, out, start)
}

/// What every stage call starts with: the frame's `StageInfo` pointed at
/// the stage, its span, and for a router the context it started from.
#[inline(always)]
fn prepare(
    program: &Program,
    frame: &mut Frame,
    scope: &Scope,
    ip: usize,
    stage: &crate::stage::Stage,
    ctx: &Context,
) -> (Option<Context>, Option<tracing::Span>) {
    let start = router_start(stage, ctx);
    // the frame's one `StageInfo`, moved into the call and back: no
    // clone of the run id per call
    let info = frame.info.get_or_insert_with(|| StageInfo {
        run_id: Arc::clone(&scope.run_id),
        stage: "",
        position: 0,
        attempt: 1,
        compensates: None,
    });
    info.stage = stage.name();
    info.position = if scope.by_ip {
        u32::try_from(ip).unwrap_or(u32::MAX)
    } else {
        program.position(ip)
    };
    info.attempt = scope.attempt;
    let span = tracing::info_span!(
        "fluxio.stage",
        run_id = &*scope.run_id,
        stage = stage.name(),
        ip,
        attempt = scope.attempt
    );
    (start, span_if_wanted(span))
}

/// The next context from what a stage call returned: its step ended with
/// the error if it failed, a router's patch applied to `start` and its
/// route kept for the `ROUTE` after it.
#[inline(always)]
fn finish(
    program: &Program,
    frame: &mut Frame,
    scope: &Scope,
    ip: usize,
    index: usize,
    out: Ended,
    start: Option<Context>,
) -> std::result::Result<Context, Box<Error>> {
    let stage = &program.stages[index];
    let out = out.inspect_err(|e| end_failed_step(program, frame, scope, stage.name(), ip, e))?;
    match (out, start) {
        (Output::Context(next), _) => Ok(next),
        (Output::Route(decision), Some(start)) => {
            let (chosen, next) = decision.apply(start);
            frame.route = Some(chosen.into());
            Ok(next)
        }
        (Output::Route(_), None) => Err(Box::new(Error::Internal {
            message: format!(
                "stage `{}` returned a `Route` but its `StageMeta` does not declare it a router",
                stage.name()
            ),
        })),
    }
}

/// For a router, the context it started from (an O(1) clone), to apply its
/// decision's patch to: a router returns a decision, not a context.
fn router_start(stage: &crate::stage::Stage, ctx: &Context) -> Option<Context> {
    stage.meta().router.then(|| ctx.clone())
}

/// `FORK`: runs the branches of a parallel block from forks of `ctx` and
/// merges them; a fire-and-forget block spawns them and goes on with `ctx`.
async fn fork(
    program: &Arc<Program>,
    scope: &Scope,
    branches: &[usize],
    names: &[Arc<str>],
    detached: bool,
    ctx: Context,
) -> Result<Context> {
    emit_branches(program, scope, names);
    if detached {
        for (start, name) in branches.iter().zip(names) {
            let program = Arc::clone(program);
            let (start, name, scope) = (*start, name.clone(), scope.clone());
            let forked = ctx.fork(name.clone());
            let span =
                tracing::info_span!("fluxio.branch", branch = &*name, fire_and_forget = true);
            tokio::spawn(
                async move {
                    if let Err(e) = branch(&program, start, forked, scope).await {
                        tracing::warn!(branch = &*name, error = %e.message_with_causes(), "fire-and-forget branch failed");
                    }
                }
                .instrument(span),
            );
        }
        return Ok(ctx);
    }
    let bound = program.max_parallel.map(tokio::sync::Semaphore::new);
    let runs = branches.iter().zip(names).map(|(start, name)| {
        let bound = bound.as_ref();
        let forked = ctx.fork(name.clone());
        async move {
            // at most `max_parallel` branches of this block at once
            let _turn = match bound {
                Some(b) => Some(b.acquire().await.map_err(|_| Error::Internal {
                    message: "a parallel block's bound was closed".to_owned(),
                })?),
                None => None,
            };
            branch(program, *start, forked, scope.clone()).await
        }
    });
    let results = try_join_all(runs).await?;
    Context::merge(&ctx, &results)
}

/// The `branch` callback, once per branch of a block about to run.
fn emit_branches(program: &Program, scope: &Scope, names: &[Arc<str>]) {
    for name in names {
        emit(&program.callbacks, "branch", |c| {
            c.on_branch(&scope.run_id, name)
        });
    }
}

/// `ROUTE`: the first instruction of the body the router chose.
fn route(
    program: &Program,
    frame: &mut Frame,
    scope: &Scope,
    router: &str,
    routes: &[(Arc<str>, usize)],
) -> Result<usize> {
    let Some(chosen) = frame.route.take() else {
        return Err(Error::Internal {
            message: format!("`ROUTE` after router `{router}` found no route chosen"),
        });
    };
    let Some((_, target)) = routes.iter().find(|(k, _)| **k == *chosen) else {
        return Err(Error::UnknownRoute {
            router: router.to_owned(),
            route: chosen.into(),
            available: routes.iter().map(|(k, _)| k.to_string()).collect(),
        });
    };
    tracing::debug!(router, route = %chosen, "route");
    emit(&program.callbacks, "route", |c| {
        c.on_route(&scope.run_id, router, &chosen)
    });
    Ok(*target)
}
