//! The interpreter's child step (contract rule 29): `CHILD` of the
//! top-level frame, the look at the child after the parent parked, and the
//! wake a child's end gives its parent.

use futures::future::BoxFuture;

use super::{Durable, Halt, Top};
use crate::child::{ChildState, child_run_id, parent_of, waited_child};
use crate::compile::Program;
use crate::context::Context;
use crate::error::Error;
use crate::store::{MAX_RUN_ID_LEN, Pending, RunStatus, check_run_id};

impl Top<'_> {
    /// `CHILD` (rule 29) at `ip`: a fresh attempt of the step starts the
    /// child (or attaches to the one stored under its id, retrying it when
    /// it failed); a parent woken at the step looks at it. A child that
    /// completed gives its result; one that failed fails the step (or goes
    /// under its failure key); otherwise the parent parks.
    pub(super) async fn child(
        &mut self,
        program: &Program,
        ip: usize,
        index: usize,
        ctx: Context,
    ) -> std::result::Result<Context, Halt> {
        let (d, child, now) = self
            .parking_step(&program.children, index, "child step")
            .await?;
        let runs = program.child_runs.get(index).ok_or_else(|| {
            Halt::Failed(Error::Internal {
                message: format!("{} has no pipeline", child.step_name()),
            })
        })?;
        let run_id = child_run_id(d.key, d.place(program, ip));
        let child_key = format!("{}/{run_id}", child.pipeline());
        // a parent's id too long for its child's fails the parent here,
        // for good, instead of every worker's attempt
        if child_key.len() > MAX_RUN_ID_LEN {
            return Err(Halt::Failed(Error::InvalidRunId {
                run_id: child_key.chars().take(64).collect(),
                reason: "a child run's key (`{child pipeline}/{parent key}#{position}`) is longer \
                         than 512 bytes: give the parent a shorter run id",
            }));
        }
        check_run_id(&run_id).map_err(Halt::Failed)?;
        let woken = self.pending.is_some() && d.resumed_parked;
        if child.each.is_some() {
            return Box::pin(self.fan_out(child, runs.as_ref(), &run_id, woken, now, ctx)).await;
        }
        let latest = if woken {
            runs.latest(&run_id).await.map_err(Halt::Store)?
        } else {
            let input = child.input_of(&ctx).map_err(Halt::Failed)?;
            let deadline = child_deadline(d, child, now);
            let (_, latest) = runs
                .submit(&run_id, input, deadline)
                .await
                .map_err(Halt::Store)?;
            if matches!(latest.status, RunStatus::Failed | RunStatus::NeedsAttention) {
                // a parent's new attempt retries the child that failed it
                runs.retry(&run_id).await.map_err(Halt::Store)?;
                tracing::info!(run_id = d.key, child = %child_key, "retried the failed child run");
                return Err(park_for(&child_key, child, now));
            }
            Some(latest)
        };
        let Some(latest) = latest else {
            self.pending = None;
            return Err(Halt::Failed(Error::ChildFailed {
                run_id: d.key.to_owned(),
                child: child_key,
                state: "missing".to_owned(),
                message: "nothing is stored under its key (was it deleted?)".to_owned(),
            }));
        };
        match ChildState::of(&child_key, &latest) {
            ChildState::Open => Err(park_for(&child_key, child, now)),
            ChildState::Completed(done) => {
                tracing::debug!(run_id = d.key, child = %child_key, "the child run completed");
                child.merge(ctx, &done).map_err(Halt::Failed)
            }
            ChildState::Failed(failure) => {
                // a new attempt of the parent starts this step afresh
                self.pending = None;
                match &child.failure {
                    Some(key) => ctx.set(key, &failure).map_err(Halt::Failed),
                    None => Err(Halt::Failed(Error::ChildFailed {
                        run_id: d.key.to_owned(),
                        child: child_key,
                        state: failure.state,
                        message: failure.error.unwrap_or_default(),
                    })),
                }
            }
        }
    }
}

impl Top<'_> {
    /// A fan-out `CHILD`: one child per item, ids `{run_id}.{i}`. A fresh
    /// attempt stores every child not stored yet (and retries the failed
    /// ones); the parent goes on once every child has ended, with their
    /// results in order.
    async fn fan_out(
        &mut self,
        child: &crate::child::Child,
        runs: &dyn crate::child::ChildRuns,
        run_id: &str,
        woken: bool,
        now: u64,
        ctx: Context,
    ) -> std::result::Result<Context, Halt> {
        use futures::{StreamExt as _, TryStreamExt as _};
        let d = self.durable.ok_or_else(|| {
            Halt::Failed(Error::Internal {
                message: "a child step in a run that is not durable".to_owned(),
            })
        })?;
        let Some(fan) = &child.each else {
            return Err(Halt::Failed(Error::Internal {
                message: "a fan-out without its list".to_owned(),
            }));
        };
        let items = crate::child::items(&ctx, child).map_err(Halt::Failed)?;
        let prefix = format!("{run_id}.");
        let ids: Vec<String> = (0..items.len()).map(|i| format!("{prefix}{i}")).collect();
        if let Some(too_long) = ids
            .last()
            .filter(|id| id.len() + child.pipeline().len() >= MAX_RUN_ID_LEN)
        {
            return Err(Halt::Failed(Error::InvalidRunId {
                run_id: too_long.chars().take(64).collect(),
                reason: "a child run's key (`{child pipeline}/{parent key}#{position}.{item}`) is \
                         longer than 512 bytes: give the parent a shorter run id",
            }));
        }
        let pending = || {
            let until = crate::clock::after(now, child.poll);
            Halt::Parked(
                crate::child::fan_pending(child.pipeline(), &prefix, ids.len(), until),
                None,
            )
        };
        if !woken {
            let deadline = child_deadline(d, child, now);
            let base = child.input_of(&ctx).map_err(Halt::Failed)?;
            // each child gets its item, not the whole list
            let base = Context::from(base).remove(&fan.list);
            let submits = ids.iter().zip(items).map(|(id, item)| {
                let input = base.clone().set_value(fan.item.clone(), item).snapshot();
                let submit: BoxFuture<'_, crate::Result<bool>> = Box::pin(async move {
                    let (_, latest) = runs.submit(id, input, deadline).await?;
                    if matches!(latest.status, RunStatus::Failed | RunStatus::NeedsAttention) {
                        runs.retry(id).await?;
                        return Ok(true);
                    }
                    Ok(matches!(ChildState::of(id, &latest), ChildState::Open))
                });
                submit
            });
            let submits: Vec<_> = submits.collect();
            let open: Vec<bool> = futures::stream::iter(submits)
                .buffered(FAN_OUT_AT_ONCE)
                .try_collect()
                .await
                .map_err(Halt::Store)?;
            if open.iter().any(|o| *o) {
                tracing::info!(
                    run_id = d.key,
                    children = ids.len(),
                    "started the children of a fan-out"
                );
                return Err(pending());
            }
        } else if !all_ended(runs, &prefix, &ids).await.map_err(Halt::Store)? {
            return Err(pending());
        }
        // every child has ended: their results, in order
        let loads: Vec<BoxFuture<'_, _>> = ids.iter().map(|id| runs.latest(id)).collect();
        let latest: Vec<Option<crate::Checkpoint>> = futures::stream::iter(loads)
            .buffered(FAN_OUT_AT_ONCE)
            .try_collect()
            .await
            .map_err(Halt::Store)?;
        let mut results = Vec::with_capacity(ids.len());
        let mut failures = Vec::new();
        for (id, cp) in ids.iter().zip(latest) {
            let key = format!("{}/{id}", child.pipeline());
            let state = match &cp {
                Some(cp) => ChildState::of(&key, cp),
                None => ChildState::Failed(crate::child::ChildFailure {
                    run: key.clone(),
                    state: "missing".to_owned(),
                    error: Some("nothing is stored under its key (was it deleted?)".to_owned()),
                }),
            };
            match state {
                ChildState::Completed(done) => {
                    results.push(crate::child::result_value(child, &done).map_err(Halt::Failed)?);
                }
                ChildState::Failed(failure) => {
                    results.push(crate::value::Value::Unit);
                    failures.push(failure);
                }
                // ended a moment ago, and handed back since: look again
                ChildState::Open => return Err(pending()),
            }
        }
        self.pending = None;
        match (&child.failure, failures.first()) {
            (None, Some(first)) => Err(Halt::Failed(Error::ChildFailed {
                run_id: d.key.to_owned(),
                child: first.run.clone(),
                state: first.state.clone(),
                message: format!(
                    "{} (one of {} failed children of {})",
                    first.error.clone().unwrap_or_default(),
                    failures.len(),
                    ids.len()
                ),
            })),
            (failure, _) => {
                let mut ctx = ctx.set_value(fan.into.clone(), crate::value::Value::Seq(results));
                if let Some(key) = failure {
                    ctx = ctx.set(key, &failures).map_err(Halt::Failed)?;
                }
                Ok(ctx)
            }
        }
    }
}

/// A child's deadline (rule 30): the earlier of the parent's and the
/// step's own, from `now`.
fn child_deadline(d: &Durable<'_>, child: &crate::child::Child, now: u64) -> Option<u64> {
    let own = child
        .deadline
        .map(|within| crate::clock::after(now, within));
    match (d.deadline_ms(), own) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether a child listed in `state` has ended.
fn ended(state: crate::store::RunState) -> bool {
    use crate::store::RunState;
    matches!(
        state,
        RunState::Completed | RunState::Failed | RunState::Cancelled | RunState::NeedsAttention
    )
}

/// How many children a fan-out stores, or reads, at once.
const FAN_OUT_AT_ONCE: usize = 16;

/// Whether every child of a fan-out (`ids`, all starting with `prefix`)
/// has ended: one listing where the store lists runs, else a load each.
async fn all_ended(
    runs: &dyn crate::child::ChildRuns,
    prefix: &str,
    ids: &[String],
) -> crate::Result<bool> {
    if let Some(listed) = runs.listed(prefix).await? {
        let done = listed.iter().filter(|r| ended(r.state)).count();
        return Ok(done >= ids.len());
    }
    for id in ids {
        let open = match runs.latest(id).await? {
            Some(cp) => matches!(ChildState::of(id, &cp), ChildState::Open),
            None => false,
        };
        if open {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The parent parks waiting for its child, looking at it again after the
/// step's poll.
fn park_for(child_key: &str, child: &crate::child::Child, now: u64) -> Halt {
    let until = crate::clock::after(now, child.poll);
    Halt::Parked(
        crate::child::pending(child_key, child.pipeline(), until),
        None,
    )
}

/// The child step's pipeline of the child stored under `child_key`.
fn runs_of<'p, 'k>(
    program: &'p Program,
    child_key: &'k str,
) -> Option<(&'p dyn crate::child::ChildRuns, &'k str)> {
    let (pipeline, run_id) = child_key.split_once('/')?;
    let index = program
        .children
        .iter()
        .position(|c| c.pipeline() == pipeline)?;
    Some((program.child_runs.get(index)?.as_ref(), run_id))
}

/// A parent cancelled while it parked waiting for its child (`pending`):
/// the child is cancelled too.
pub(super) async fn cancel_orphan(program: &Program, d: &Durable<'_>, pending: &Pending) {
    let Some(child_key) = waited_child(pending) else {
        return;
    };
    let Some((runs, _)) = runs_of(program, child_key) else {
        return;
    };
    match runs.cancel_key(child_key).await {
        Ok(()) => tracing::info!(
            run_id = d.key,
            child = child_key,
            "cancelled with its parent"
        ),
        Err(Error::RunFinished { .. } | Error::CheckpointNotFound { .. }) => {}
        Err(e) => {
            tracing::warn!(run_id = d.key, child = child_key, error = %e, "could not cancel the child run of a cancelled run")
        }
    }
}

/// After a parent parked waiting for its child (`pending`): a child that
/// ended meanwhile (before the parked write, so its wake found the parent
/// held) makes the parent due now. Best effort: the poll covers a failure.
pub(super) async fn recheck(program: &Program, d: &Durable<'_>, pending: &Pending) {
    let Some(child_key) = waited_child(pending) else {
        return;
    };
    let Some((runs, run_id)) = runs_of(program, child_key) else {
        return;
    };
    if let Some(prefix) = run_id.strip_suffix('*') {
        // a fan-out: when every child it stored has ended
        let ended = match runs.listed(prefix).await {
            Ok(Some(listed)) => !listed.is_empty() && listed.iter().all(|r| ended(r.state)),
            _ => false,
        };
        if ended {
            wake(d, d.key, child_key).await;
        }
        return;
    }
    let ended = match runs.latest(run_id).await {
        Ok(Some(cp)) => !matches!(ChildState::of(child_key, &cp), ChildState::Open),
        Ok(None) => true,
        Err(e) => {
            tracing::debug!(run_id = d.key, child = child_key, error = %e, "could not look at the child run");
            false
        }
    };
    if ended {
        wake(d, d.key, child_key).await;
    }
}

/// At the end of a run that is a child (its id is `{parent key}#{n}`): its
/// parent, when it waits for it in the same store, is due now.
pub(super) async fn wake_parent(d: &Durable<'_>) {
    if let Some(parent) = parent_of(d.run_id) {
        wake(d, parent, d.key).await;
    }
}

/// Makes `parent` due now in `d`'s store if it waits for `child_key`.
async fn wake(d: &Durable<'_>, parent: &str, child_key: &str) {
    let now = match d.clock.now_ms(Some(d.store)).await {
        Ok(now) => now,
        Err(e) => {
            tracing::debug!(run_id = parent, error = %e, "could not read the clock to wake a parent run");
            return;
        }
    };
    match crate::store::wake_waiting(d.store, parent, child_key, now).await {
        Ok(true) => tracing::debug!(run_id = parent, child = child_key, "woke the parent run"),
        Ok(false) => {}
        // held: its owner looks at the child after its next park
        Err(e) => {
            tracing::debug!(run_id = parent, child = child_key, error = %e, "did not wake the parent run")
        }
    }
}
