//! The interpreter: one loop over the instruction list.
//!
//! [`exec`] runs one frame (the top-level program, or one branch of a
//! parallel block) from an instruction pointer until the end of the program
//! or the frame's `END_BRANCH`. Parallel branches are frames of their own,
//! run concurrently by the `FORK` that starts them.
//!
//! Durable runs ([`Durable`]) save a checkpoint at every `CHECKPOINT` of the
//! top-level frame, a failure checkpoint when the frame fails, and a completed
//! checkpoint when it finishes.

use std::sync::Arc;
use std::time::Instant;

use futures::future::{BoxFuture, try_join_all};
use tracing::Instrument as _;

use crate::callback::{CHUNK_SINK, ChunkSink, StepEvent, emit};
use crate::compile::{Event, Instr, Program};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::middleware::Next;
use crate::stage::{Output, STAGE_INFO, StageInfo, StageKind};
use crate::store::{Checkpoint, CheckpointStore, Lease, RunStatus, now_ms};

/// What a durable run needs to write its checkpoints.
pub(crate) struct Durable<'a> {
    pub(crate) store: &'a dyn CheckpointStore,
    pub(crate) lease: &'a Lease,
    pub(crate) run_id: &'a str,
    pub(crate) version: &'a str,
    pub(crate) created_at_ms: u64,
    /// Where a resume starts and the attempt stored there: the first
    /// checkpoint at that ip is the next attempt of its stage.
    pub(crate) resumed: Option<(usize, u32)>,
}

impl Durable<'_> {
    #[allow(clippy::too_many_arguments)]
    fn checkpoint(
        &self,
        ip: usize,
        step: &str,
        ctx: &Context,
        status: RunStatus,
        error: Option<String>,
        attempt: u32,
    ) -> Checkpoint {
        Checkpoint {
            run_id: self.run_id.to_owned(),
            version: self.version.to_owned(),
            ip: u32::try_from(ip).unwrap_or(u32::MAX),
            step: step.to_owned(),
            context: ctx.snapshot(),
            status,
            error: error.is_some(),
            error_message: error,
            created_at_ms: self.created_at_ms,
            updated_at_ms: now_ms(),
            attempt,
        }
    }
}

/// The last checkpoint the top-level frame passed: where a failure points.
struct Last {
    ip: usize,
    step: Arc<str>,
    ctx: Context,
    attempt: u32,
}

/// State of one frame between instructions.
#[derive(Default)]
struct Frame {
    /// The route the last router chose, for the `ROUTE` after it.
    route: Option<String>,
    /// When the current stage's `EMIT step_start` ran (only with callbacks).
    step_started: Option<Instant>,
}

/// What a stage call is told about its run (see [`StageInfo`]).
#[derive(Clone)]
struct Scope {
    run_id: Arc<str>,
    attempt: u32,
}

/// Why the top-level frame stopped early.
enum Halt {
    /// A stage or the machinery failed after checkpoint `Last` (if any).
    Failed(Error),
    /// Saving a checkpoint failed: the store is in trouble, write nothing more.
    Store(Error),
}

/// Runs the whole program from `ip` (a resume point) with `ctx`, durably when
/// `durable` is given.
pub(crate) async fn run(
    program: &Arc<Program>,
    run_id: &str,
    ip: usize,
    ctx: Context,
    durable: Option<&Durable<'_>>,
) -> Result<Context> {
    let cbs = &program.callbacks;
    let started = Instant::now();
    if !cbs.is_empty() {
        let version = durable.map_or("", |d| d.version);
        emit(cbs, "pipeline_start", |c| {
            c.on_pipeline_start(run_id, version)
        });
    }
    let result = run_checkpointed(program, run_id, ip, ctx, durable).await;
    if !cbs.is_empty() {
        if let Err(e) = &result {
            emit(cbs, "error", |c| c.on_error(run_id, e));
        }
        let took = started.elapsed();
        emit(cbs, "pipeline_end", |c| {
            c.on_pipeline_end(run_id, took, result.as_ref().err())
        });
    }
    result
}

/// Saves `cp` fenced, telling the callbacks how long the store took.
async fn save(program: &Program, d: &Durable<'_>, cp: Checkpoint) -> Result<()> {
    if program.callbacks.is_empty() {
        return d.store.save_fenced(cp, d.lease).await;
    }
    let (ip, status, started) = (cp.ip as usize, cp.status, Instant::now());
    d.store.save_fenced(cp, d.lease).await?;
    let latency = started.elapsed();
    emit(&program.callbacks, "checkpoint", |c| {
        c.on_checkpoint(d.run_id, ip, status, latency)
    });
    Ok(())
}

async fn run_checkpointed(
    program: &Arc<Program>,
    run_id: &str,
    ip: usize,
    ctx: Context,
    durable: Option<&Durable<'_>>,
) -> Result<Context> {
    let mut last: Option<Last> = None;
    match top(program, run_id, ip, ctx, durable, &mut last).await {
        Ok(done) => {
            if let Some(d) = durable {
                let cp = d.checkpoint(
                    program.instrs.len(),
                    "",
                    &done,
                    RunStatus::Completed,
                    None,
                    1,
                );
                save(program, d, cp).await?;
            }
            Ok(done)
        }
        Err(Halt::Store(e)) => Err(e),
        Err(Halt::Failed(e)) => {
            if let (Some(d), Some(last)) = (durable, last) {
                let cp = d.checkpoint(
                    last.ip,
                    &last.step,
                    &last.ctx,
                    RunStatus::Failed,
                    Some(e.message_with_causes()),
                    last.attempt,
                );
                if let Err(store_err) = save(program, d, cp).await {
                    tracing::error!(
                        run_id = d.run_id,
                        error = %store_err,
                        "could not save the failure checkpoint; the previous checkpoint stays in place"
                    );
                }
            }
            Err(e)
        }
    }
}

/// The top-level frame: like [`exec`], plus checkpoints.
async fn top(
    program: &Arc<Program>,
    run_id: &str,
    mut ip: usize,
    mut ctx: Context,
    durable: Option<&Durable<'_>>,
    last: &mut Option<Last>,
) -> std::result::Result<Context, Halt> {
    let mut frame = Frame::default();
    let mut scope = Scope {
        run_id: Arc::from(run_id),
        attempt: 1,
    };
    while let Some(instr) = program.instrs.get(ip) {
        if let Instr::Checkpoint { step } = instr {
            scope.attempt = match durable.and_then(|d| d.resumed) {
                Some((at, attempt)) if at == ip => attempt.saturating_add(1),
                _ => 1,
            };
            if let Some(d) = durable {
                let cp = d.checkpoint(ip, step, &ctx, RunStatus::Running, None, scope.attempt);
                save(program, d, cp).await.map_err(Halt::Store)?;
            }
            *last = Some(Last {
                ip,
                step: step.clone(),
                ctx: ctx.clone(),
                attempt: scope.attempt,
            });
            ip += 1;
            continue;
        }
        let (next, next_ctx) = step(program, ip, ctx, &mut frame, &scope)
            .await
            .map_err(Halt::Failed)?;
        ip = next;
        ctx = next_ctx;
    }
    Ok(ctx)
}

/// Runs one frame from `ip` until the end of the program or `END_BRANCH`.
/// Checkpoints are not written here (branches are covered by their block's).
fn exec(
    program: &Arc<Program>,
    mut ip: usize,
    mut ctx: Context,
    scope: Scope,
) -> BoxFuture<'_, Result<Context>> {
    Box::pin(async move {
        let mut frame = Frame::default();
        while let Some(instr) = program.instrs.get(ip) {
            match instr {
                Instr::EndBranch => return Ok(ctx),
                Instr::Checkpoint { .. } => ip += 1,
                _ => (ip, ctx) = step(program, ip, ctx, &mut frame, &scope).await?,
            }
        }
        Ok(ctx)
    })
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

/// Executes the instruction at `ip` (anything but `CHECKPOINT` and
/// `END_BRANCH`) and returns the next `ip` and context.
async fn step(
    program: &Arc<Program>,
    ip: usize,
    ctx: Context,
    frame: &mut Frame,
    scope: &Scope,
) -> Result<(usize, Context)> {
    match &program.instrs[ip] {
        Instr::Checkpoint { .. } | Instr::EndBranch | Instr::Join => Ok((ip + 1, ctx)),
        Instr::Emit { event, stage } => {
            let name = program.stages[*stage].name();
            match event {
                Event::StepStart => tracing::debug!(stage = name, ip, "step_start"),
                Event::StepEnd => tracing::debug!(stage = name, ip, "step_end"),
            }
            let cbs = &program.callbacks;
            if !cbs.is_empty() {
                // the stage's CALL is at most two instructions away (a VALIDATE may sit between)
                let is_call = |i: &usize| matches!(program.instrs.get(*i), Some(Instr::Call { stage: s }) if s == stage);
                let call_ip = if *event == Event::StepStart {
                    (ip + 1..=ip + 2).find(is_call)
                } else {
                    (ip.saturating_sub(2)..ip).rev().find(is_call)
                }
                .unwrap_or(ip);
                let ev = StepEvent {
                    run_id: &scope.run_id,
                    stage: name,
                    ip: call_ip,
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
            Ok((ip + 1, ctx))
        }
        Instr::Validate { stage, output } => {
            let stage = &program.stages[*stage];
            let meta = stage.meta();
            let check = if *output { meta.output } else { meta.input };
            match check.map_or(Ok(()), |validate| validate(&ctx)) {
                Ok(()) => Ok((ip + 1, ctx)),
                Err(message) => {
                    let which = if *output { "output" } else { "input" };
                    let e = Error::Validation {
                        stage: stage.name().to_owned(),
                        message: format!("{which}: {message}"),
                    };
                    end_failed_step(program, frame, scope, stage.name(), ip, &e);
                    Err(e)
                }
            }
        }
        Instr::Call { stage: index } => {
            let stage = &program.stages[*index];
            // A router returns a decision, not a context: keep the context
            // it started from (an O(1) clone) to apply the patch to.
            let start = stage.meta().router.then(|| ctx.clone());
            let info = StageInfo {
                run_id: Arc::clone(&scope.run_id),
                stage: stage.name(),
                position: u32::try_from(ip).unwrap_or(u32::MAX),
                attempt: scope.attempt,
            };
            let span = tracing::info_span!(
                "fluxio.stage",
                run_id = &*scope.run_id,
                stage = stage.name(),
                ip,
                attempt = scope.attempt
            );
            let call = async {
                match program.middleware.get(*index) {
                    Some(chain) if !chain.is_empty() => {
                        Next::new(stage, chain).run_caught(ctx).await
                    }
                    _ => stage.call(ctx).await,
                }
            };
            let call = STAGE_INFO.scope(info, call).instrument(span);
            let out = if stage.meta().kind == StageKind::Stream && !program.callbacks.is_empty() {
                let sink = ChunkSink {
                    callbacks: Arc::clone(&program.callbacks),
                    run_id: Arc::clone(&scope.run_id),
                };
                CHUNK_SINK.scope(sink, call).await
            } else {
                call.await
            };
            let out = match out {
                Ok(out) => out,
                Err(e) => {
                    // close the step: a failed or timed-out stage still ends
                    let cbs = &program.callbacks;
                    if !cbs.is_empty() {
                        let took = frame
                            .step_started
                            .take()
                            .map(|t| t.elapsed())
                            .unwrap_or_default();
                        let ev = StepEvent {
                            run_id: &scope.run_id,
                            stage: stage.name(),
                            ip,
                            attempt: scope.attempt,
                        };
                        emit(cbs, "step_end", |c| c.on_step_end(&ev, took, Some(&e)));
                    }
                    return Err(e);
                }
            };
            match (out, start) {
                (Output::Context(next), _) => Ok((ip + 1, next)),
                (Output::Route(send), Some(start)) => {
                    let (chosen, next) = send.apply(start);
                    frame.route = Some(chosen);
                    Ok((ip + 1, next))
                }
                (Output::Route(_), None) => Err(Error::build(format!(
                    "stage `{}` returned a `Route` but is not declared a router",
                    stage.name()
                ))),
            }
        }
        Instr::Fork {
            branches,
            names,
            join,
            detached,
        } => {
            if *detached {
                for (start, name) in branches.iter().zip(names) {
                    emit(&program.callbacks, "branch", |c| {
                        c.on_branch(&scope.run_id, name)
                    });
                    let program = Arc::clone(program);
                    let branch = ctx.fork(name.clone());
                    let start = *start;
                    let name = name.clone();
                    let scope = scope.clone();
                    let span = tracing::info_span!(
                        "fluxio.branch",
                        branch = &*name,
                        fire_and_forget = true
                    );
                    tokio::spawn(
                        async move {
                            if let Err(e) = exec(&program, start, branch, scope).await {
                                tracing::warn!(branch = &*name, error = %e, "fire-and-forget branch failed");
                            }
                        }
                        .instrument(span),
                    );
                }
                return Ok((join + 1, ctx));
            }
            for name in names {
                emit(&program.callbacks, "branch", |c| {
                    c.on_branch(&scope.run_id, name)
                });
            }
            let runs = branches
                .iter()
                .zip(names)
                .map(|(start, name)| exec(program, *start, ctx.fork(name.clone()), scope.clone()));
            let results = try_join_all(runs).await?;
            let merged = Context::merge(&ctx, &results)?;
            Ok((join + 1, merged))
        }
        Instr::Route { router, routes } => {
            let router = program.stages[*router].name();
            let Some(chosen) = frame.route.take() else {
                return Err(Error::build(format!("router `{router}` produced no route")));
            };
            match routes.iter().find(|(k, _)| **k == *chosen) {
                Some((_, target)) => {
                    tracing::debug!(router, route = %chosen, "route");
                    emit(&program.callbacks, "route", |c| {
                        c.on_route(&scope.run_id, router, &chosen)
                    });
                    Ok((*target, ctx))
                }
                None => Err(Error::UnknownRoute {
                    router: router.to_owned(),
                    route: chosen,
                    available: routes.iter().map(|(k, _)| k.to_string()).collect(),
                }),
            }
        }
        Instr::Jump { to } => Ok((*to, ctx)),
    }
}
