//! Compensation (contract rule 35): when a run fails for good, the
//! compensators of the stages it completed since its last pivot run in
//! reverse order, each a durable step.
//!
//! What completed is read from the run's journal ([`plan`]): the top-level
//! checkpoints the run passed, each step completed when a later one
//! follows it, its stages' output being that later checkpoint's context;
//! in a parallel block (completed or not) a branch finished when its
//! record is kept, its output being the record applied to the block's
//! context. So a compensation planned again after a crash, on this
//! process or another, is the same one.
//!
//! Every checkpoint written meanwhile ([`run`]) stays at the step the run
//! stopped at, with its context, and carries the [`Compensation`]: which
//! compensator runs next. Each is written before its compensator runs, so
//! a crash runs again at most the compensator that was running (at least
//! once, under its own idempotency key); one that completed is never run
//! again. The last says failed for good with every compensator done, or
//! needs attention at the compensator that failed.

use crate::compile::{Instr, Program};
use crate::context::{Context, Lineage, Snapshot};
use crate::error::{Error, Result};
use crate::stage::{StageInfo, WithInfo, span_if_wanted};
use crate::store::{Checkpoint, Compensation, CompensationStep, RunStatus};

use super::{Durable, Write, new_checkpoint, save};

/// Where a compensating run stopped: the step its checkpoints stay at.
pub(crate) struct At {
    /// The step's position (what its checkpoints record as `ip`).
    pub(crate) position: u32,
    pub(crate) step: String,
    /// The run's context there.
    pub(crate) context: Snapshot,
}

impl At {
    /// Where the stored checkpoint `cp` stands.
    pub(crate) fn of(cp: &Checkpoint) -> At {
        At {
            position: cp.ip,
            step: cp.step.clone(),
            context: cp.context.clone(),
        }
    }
}

/// A compensator to run: its step, its stage's index in the program, and
/// the context its stage produced.
pub(crate) struct Planned {
    step: CompensationStep,
    stage: usize,
    ctx: Context,
}

/// The stage calls of the step whose top-level checkpoint is at `ip`, in
/// layout order: each stage's index, its call's ip, and its branch when it
/// is in a parallel block (fire-and-forget blocks are skipped: nothing
/// records that they completed).
fn calls(program: &Program, ip: usize) -> Vec<(usize, usize, Option<u32>)> {
    let mut out = Vec::new();
    let mut block: Option<(&[usize], usize)> = None;
    let mut skip_until = 0;
    for (j, instr) in program.instrs.iter().enumerate().skip(ip + 1) {
        match instr {
            Instr::Checkpoint { .. } => break,
            Instr::Fork { join, detached, .. } if *detached => {
                skip_until = skip_until.max(*join);
            }
            Instr::Fork { branches, join, .. } if block.is_none() => {
                block = Some((branches, *join));
            }
            Instr::Call { stage } if j >= skip_until => {
                let branch = block.filter(|(_, join)| j < *join).map(|(starts, _)| {
                    let n = starts.iter().filter(|s| **s <= j).count();
                    u32::try_from(n.saturating_sub(1)).unwrap_or(u32::MAX)
                });
                out.push((*stage, j, branch));
            }
            _ => {}
        }
    }
    out
}

/// The compensators to run for the run `key` whose journal is `journal`,
/// in the order they run: those of the stages it completed since its last
/// completed pivot, last completed first, each with the context its stage
/// produced (see the module docs). `by_ip`: the run numbers its
/// checkpoints by ip ([`Durable::by_ip`]).
///
/// # Errors
/// [`Error::CorruptCheckpoint`] when the journal was cut (its first
/// checkpoint is not the run's first), or a checkpoint's position is not a
/// step of `program`.
pub(crate) fn plan(
    program: &Program,
    by_ip: bool,
    key: &str,
    journal: &[Checkpoint],
) -> Result<Vec<Planned>> {
    let corrupt = |reason: String| Error::CorruptCheckpoint {
        run_id: key.to_owned(),
        reason,
        source: None,
    };
    if let Some(first) = journal.first().filter(|cp| cp.seq > 0) {
        return Err(corrupt(format!(
            "its journal starts at checkpoint {}: compensation needs every step the run \
             completed, and the ones before it were cut",
            first.seq
        )));
    }
    // the top-level checkpoints the run passed, the latest of each step;
    // a replay from an earlier step starts over from it, and a finished
    // compensation undid everything before it
    let mut visits: Vec<&Checkpoint> = Vec::new();
    for cp in journal {
        if let Some(c) = &cp.compensation {
            if c.is_done() {
                visits.clear();
            }
            continue;
        }
        if !matches!(
            cp.status,
            RunStatus::Running | RunStatus::Sleeping | RunStatus::Waiting | RunStatus::Paused
        ) {
            continue;
        }
        while visits.last().is_some_and(|v| v.ip >= cp.ip) {
            visits.pop();
        }
        visits.push(cp);
    }
    let mut planned = Vec::new();
    for (i, visit) in visits.iter().enumerate() {
        let ip = if by_ip {
            Some(visit.ip as usize).filter(|ip| program.is_resume_point(*ip))
        } else {
            program.resume_point_at(visit.ip)
        }
        .ok_or_else(|| {
            corrupt(format!(
                "position {} (step `{}`) is not a step of pipeline version {}",
                visit.ip, visit.step, program.version
            ))
        })?;
        // what the step produced, when it completed
        let after = visits.get(i + 1).map(|next| &next.context);
        let before = visit.context.to_context();
        let mut pivot = false;
        for (stage, call, branch) in calls(program, ip) {
            let record = branch.and_then(|b| visit.branches.iter().find(|r| r.branch == b));
            let ctx = match (record, after) {
                (Some(record), _) => record.replay(&before),
                (None, Some(after)) => after.to_context(),
                // did not complete: nothing to undo
                (None, None) => continue,
            };
            pivot |= program.stages[stage].meta().pivot;
            if let Some(Some(c)) = program.compensators.get(stage) {
                let position = if by_ip {
                    u32::try_from(call).unwrap_or(u32::MAX)
                } else {
                    program.position(call)
                };
                let name = program.stages[stage].name();
                planned.push(Planned {
                    step: CompensationStep::new(position, name, c.name()),
                    stage,
                    ctx,
                });
            }
        }
        // a point of no return: nothing at or before it is undone
        if pivot {
            planned.clear();
        }
    }
    planned.reverse();
    Ok(planned)
}

/// Starts the compensation of the run `d` stopped at `at`, for `reason`,
/// planned from its journal. `None` when it completed nothing to
/// compensate, unless `always` (an operator's [`compensate`](crate::Pipeline::compensate)):
/// then the run still ends failed for good, with nothing compensated.
///
/// # Errors
/// As [`run`]; a journal that cannot be planned from
/// ([`Error::CorruptCheckpoint`]) leaves the run needing attention.
pub(crate) async fn begin(
    program: &Program,
    d: &Durable<'_>,
    at: &At,
    reason: String,
    always: bool,
) -> Result<Option<Compensation>> {
    // `build()` admits compensators in `Durability::Sync` only: every
    // step's checkpoint is in the journal before the next step starts
    let journal = d.store.history(d.key).await?;
    let planned = match plan(program, d.by_ip, d.key, &journal) {
        Ok(planned) => planned,
        Err(e) => {
            let mut cp = checkpoint(d, at, None, RunStatus::NeedsAttention, 1);
            cp.error_message = Some(format!(
                "{reason}; its compensation could not start: {}",
                e.message_with_causes()
            ));
            last(program, d, cp).await?;
            return Err(e);
        }
    };
    if planned.is_empty() && !always {
        return Ok(None);
    }
    let steps = planned.iter().map(|p| p.step.clone()).collect();
    let comp = Compensation::new(reason, steps);
    run(program, d, at, comp, planned, 1).await.map(Some)
}

/// Goes on with the compensation the stored checkpoint `stored` carries,
/// at its next compensator (its next attempt, when it was the one that
/// failed or was running when the run stopped).
///
/// # Errors
/// As [`run`]; [`Error::CorruptCheckpoint`] when the journal now plans
/// other compensators than the stored compensation (the code changed).
pub(crate) async fn resume(
    program: &Program,
    d: &Durable<'_>,
    stored: &Checkpoint,
) -> Result<Compensation> {
    let Some(comp) = stored.compensation.as_deref().cloned() else {
        return Err(Error::Internal {
            message: format!("run `{}` resumed as compensating, but it is not", d.key),
        });
    };
    let journal = d.store.history(d.key).await?;
    let planned = plan(program, d.by_ip, d.key, &journal)?;
    let steps: Vec<CompensationStep> = planned.iter().map(|p| p.step.clone()).collect();
    if steps != comp.steps {
        let names = |s: &[CompensationStep]| {
            s.iter()
                .map(|s| s.compensator.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(Error::CorruptCheckpoint {
            run_id: d.key.to_owned(),
            reason: format!(
                "its compensation runs [{}], but pipeline version {} plans [{}] from its journal",
                names(&comp.steps),
                program.version,
                names(&steps)
            ),
            source: None,
        });
    }
    run(
        program,
        d,
        &At::of(stored),
        comp,
        planned,
        stored.attempt.saturating_add(1),
    )
    .await
}

/// A checkpoint of the compensating run at `at`: `comp` (if any) says how
/// far it got; no branch records and nothing pending (a run that is undone
/// and then retried runs its step whole).
fn checkpoint(
    d: &Durable<'_>,
    at: &At,
    comp: Option<&Compensation>,
    status: RunStatus,
    attempt: u32,
) -> Checkpoint {
    let meta = [d.pipeline, d.run_id, d.version];
    let mut cp = new_checkpoint(
        meta,
        d.structure,
        d.created_at_ms,
        at.position,
        &at.step,
        at.context.clone(),
    );
    cp.status = status;
    cp.attempt = attempt;
    cp.deadline_ms = d.deadline_ms();
    cp.queue.clone_from(&d.queue);
    cp.compensation = comp.cloned().map(Box::new);
    cp
}

/// Runs the compensators of `comp` from its next one (its `attempt`), each
/// after a checkpoint that says it runs, then ends the run failed for good
/// with all of them done. Returns the finished compensation.
///
/// # Errors
/// [`Error::CompensationFailed`] when a compensator fails (the run is
/// saved needing attention at it); [`Error::Cancelled`] or
/// [`Error::Paused`] when the run was cancelled or paused meanwhile (it
/// stops before the next compensator); a store's error.
async fn run(
    program: &Program,
    d: &Durable<'_>,
    at: &At,
    mut comp: Compensation,
    planned: Vec<Planned>,
    mut attempt: u32,
) -> Result<Compensation> {
    while let Some(p) = planned.get(comp.next as usize) {
        let cp = checkpoint(d, at, Some(&comp), RunStatus::Running, attempt);
        Box::pin(save(program, d, cp, Lineage::NONE, Write::Step)).await?;
        let stage = program.stages[p.stage].name();
        let Some(Some(compensator)) = program.compensators.get(p.stage) else {
            return Err(Error::Internal {
                message: format!("stage `{stage}` was planned a compensator it does not have"),
            });
        };
        tracing::info!(
            run_id = d.key,
            stage,
            compensator = compensator.name(),
            attempt,
            "compensating"
        );
        let mut info = Some(StageInfo {
            run_id: d.key.into(),
            stage: compensator.name(),
            position: p.step.position,
            attempt,
            compensates: Some(stage),
        });
        let span = span_if_wanted(tracing::info_span!(
            "fluxio.compensate",
            run_id = d.key,
            stage,
            compensator = compensator.name(),
            attempt
        ));
        let called = WithInfo::new(&mut info, span, compensator.call(p.ctx.clone())).await;
        if let Err(e) = called {
            let message = e.message_with_causes();
            let mut cp = checkpoint(d, at, Some(&comp), RunStatus::NeedsAttention, attempt);
            cp.error_message = Some(format!(
                "compensator `{}` of stage `{stage}` failed: {message}",
                compensator.name()
            ));
            last(program, d, cp).await?;
            return Err(Error::CompensationFailed {
                run_id: d.key.to_owned(),
                stage: stage.to_owned(),
                compensator: compensator.name().to_owned(),
                message,
            });
        }
        comp.next = comp.next.saturating_add(1);
        attempt = 1;
    }
    let mut cp = checkpoint(d, at, Some(&comp), RunStatus::Failed, attempt);
    cp.failed_for_good = true;
    cp.error_message = Some(comp.reason.clone());
    last(program, d, cp).await?;
    // rule 29: a child's parent takes its failure now
    if crate::child::parent_of(d.run_id).is_some() {
        Box::pin(super::child::wake_parent(d)).await;
    }
    Ok(comp)
}

/// Writes `cp` as the run's last checkpoint: its lease goes back with it.
async fn last(program: &Program, d: &Durable<'_>, cp: Checkpoint) -> Result<()> {
    let last = Write::Last { delete: false };
    Box::pin(save(program, d, cp, Lineage::NONE, last)).await
}
