//! The interpreter's steps that park a run (contract rules 25-26): `SLEEP`
//! and `WAIT` of the top-level frame, and the end of a frame that parked.

use super::{Durable, Halt, Top, Write, save};
use crate::compile::Program;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::outcome::Outcome;
use crate::store::{Decision, Pending, RunStatus, Take};
use crate::waiting::OnTimeout;

/// The top-level frame of a durable run, which alone runs sleeps and waits
/// (the compiler puts none in a branch, and refuses them without a store).
pub(super) fn durable_top<'t, 'a>(
    top: Option<&'t mut Top<'a>>,
) -> std::result::Result<&'t mut Top<'a>, Halt> {
    match top {
        Some(top) if top.durable.is_some() && top.last.is_some() => Ok(top),
        _ => Err(Halt::Failed(Error::Internal {
            message: "a sleep, wait or child step outside a durable run's top-level sequence"
                .to_owned(),
        })),
    }
}

impl<'a> Top<'a> {
    /// What `SLEEP` and `WAIT` start from: the run's durable part (only a
    /// durable run has them), its step `index` of `steps` (the program's
    /// `what`s), and the time on the run's clock.
    pub(super) async fn parking_step<'s, T>(
        &self,
        steps: &'s [T],
        index: usize,
        what: &str,
    ) -> std::result::Result<(&'a Durable<'a>, &'s T, u64), Halt> {
        let d = self.durable.ok_or_else(|| Halt::Failed(not_durable()))?;
        let step = steps
            .get(index)
            .ok_or_else(|| Halt::Failed(no_such(what)))?;
        // a woken run's first sleep or wait reads the time its worker
        // claimed it at: a round trip fewer, and due by it
        let now = match self.pending.is_some().then_some(d.woken_at).flatten() {
            Some(now) => now,
            None => d.clock.now_ms(Some(d.store)).await.map_err(Halt::Store)?,
        };
        Ok((d, step, now))
    }

    /// `SLEEP` (rule 25): goes on when the wake time (fixed when the run
    /// first reached the sleep) has passed, else parks the run.
    pub(super) async fn sleep(
        &mut self,
        program: &Program,
        index: usize,
        ctx: &Context,
    ) -> std::result::Result<(), Halt> {
        let (d, sleep, now) = self.parking_step(&program.sleeps, index, "sleep").await?;
        let until = match self.pending.as_ref().and_then(|p| p.until_ms) {
            Some(until) => until,
            None => sleep.until().resolve(now, ctx)?,
        };
        if until <= now {
            tracing::debug!(
                run_id = d.key,
                until_ms = until,
                "a sleep that is due: the run goes on"
            );
            return Ok(());
        }
        Err(Halt::Parked(Pending::sleep(until), None))
    }

    /// `WAIT` (rule 26): asks the store to decide the wait (a signal
    /// delivered, the deadline passed, or neither), atomically with the
    /// signals sent to the run. A signal's payload goes into its key; a
    /// payload that is not the wait's type is refused (the wait opens
    /// again, and the run parks saying why); a timeout takes the wait's
    /// timeout outcome; otherwise the run parks. Returns the context and
    /// the outcome's name (the name signalled, or `"timeout"`), for a
    /// routing block after the wait.
    pub(super) async fn wait(
        &mut self,
        program: &Program,
        index: usize,
        mut ctx: Context,
    ) -> std::result::Result<(Context, String), Halt> {
        let (d, wait, now) = self.parking_step(&program.waits, index, "wait").await?;
        let deadline = match &self.pending {
            Some(pending) => pending.until_ms,
            None => match wait.deadline_until() {
                Some(until) => Some(until.resolve(now, &ctx)?),
                None => None,
            },
        };
        let waits = wait.names().into_iter().map(str::to_owned).collect();
        let expired = deadline.is_some_and(|at| at <= now);
        let mut take = Take::new(waits, expired, None).at(now);
        let mut refused = None;
        loop {
            let decided = d
                .store
                .take_signal(d.key, &take, d.owner.lease())
                .await
                .map_err(Halt::Store)?;
            match decided {
                Decision::Signal(signal) => {
                    let Some(slot) = wait.slot(&signal.name) else {
                        return Err(Halt::Failed(no_such("wait name")));
                    };
                    match slot.payload.refusal(&signal.payload) {
                        None => {
                            ctx =
                                ctx.set_encoded(slot.key.clone(), signal.payload.encoded().clone());
                            tracing::debug!(run_id = d.key, wait = %signal.name, "a wait took its signal");
                            return Ok((ctx, signal.name));
                        }
                        Some(why) => {
                            let why = format!("signal `{}` refused: {why}", signal.name);
                            tracing::warn!(run_id = d.key, wait = %signal.name, "{why}; the wait is open again");
                            refused = Some(why);
                            take.refuse = Some(signal.name);
                        }
                    }
                }
                Decision::TimedOut => {
                    tracing::debug!(run_id = d.key, wait = %wait.step_name(), "a wait timed out");
                    return match &wait.timeout {
                        Some(OnTimeout::Route) => Ok((ctx, "timeout".to_owned())),
                        Some(OnTimeout::Value(value)) => {
                            let key = wait
                                .slots
                                .first()
                                .map(|s| s.key.clone())
                                .unwrap_or_default();
                            Ok((
                                ctx.set_encoded(key, value.encoded().clone()),
                                "timeout".to_owned(),
                            ))
                        }
                        Some(OnTimeout::Fail) | None => Err(Halt::Failed(Error::WaitTimedOut {
                            run_id: d.key.to_owned(),
                            wait: wait.names().join("|"),
                        })),
                    };
                }
                _ => return Err(Halt::Parked(wait.pending(deadline), refused)),
            }
        }
    }
}

fn not_durable() -> Error {
    Error::Internal {
        message: "a sleep or wait in a run that is not durable".to_owned(),
    }
}

fn no_such(what: &str) -> Error {
    Error::Internal {
        message: format!("an instruction names a {what} the program does not have"),
    }
}

/// The end of a top-level frame that reached a sleep or a wait that is not
/// due (rules 25-26): the run's checkpoint at that step again, sleeping or
/// waiting for `pending` (and saying why a signal was refused), written as
/// the run's last write, which gives its lease back.
pub(super) async fn park(
    program: &Program,
    durable: Option<&Durable<'_>>,
    top: Top<'_>,
    pending: Pending,
    refused: Option<String>,
) -> Result<Outcome> {
    let (Some(d), Some(last)) = (durable, top.last) else {
        return Err(Error::Internal {
            message: "a sleep or wait outside a durable run's checkpoint".to_owned(),
        });
    };
    // rule 30: a run with a deadline is due by it, whatever it waits for
    let mut pending = pending;
    if let Some(deadline) = d.deadline_ms() {
        pending.until_ms = Some(
            pending
                .until_ms
                .map_or(deadline, |until| until.min(deadline)),
        );
    }
    let mut cp = d
        .at_last(program, &last, RunStatus::Running, None)
        .parked(pending.clone());
    cp.error_message = refused;
    let lineage = last.ctx.lineage();
    let saved = Box::pin(save(program, d, cp, lineage, Write::Last { delete: false })).await;
    if let Err(Error::Cancelled { .. }) = &saved {
        // rule 29: cancelled before it parked, so the cancel did not see
        // the child it was about to wait for
        Box::pin(super::child::cancel_orphan(program, d, &pending)).await;
    }
    saved?;
    // rule 29: a child that ended before this write could not wake it
    Box::pin(super::child::recheck(program, d, &pending)).await;
    tracing::info!(
        run_id = d.key,
        step = &*last.step,
        until_ms = pending.until_ms,
        "the run parked: it continues when it is due"
    );
    Ok(Outcome::parked(d.key, &pending, last.ctx))
}
