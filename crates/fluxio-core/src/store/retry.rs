//! Handing runs back to the recovery workers, and taking them away
//! (contract rule 22): what an operator's `fluxio runs retry` and a worker
//! that gives up on a run write.

use std::time::Duration;

use super::{Change, Checkpoint, CheckpointStore, Lease, RunStatus};
use crate::error::{Error, Result};

/// How long [`retry_run`] holds a run's lease while it writes: long enough
/// for one write on a slow store, short enough that a worker is not kept
/// waiting if the operator's process dies holding it.
const RETRY_LEASE_TTL: Duration = Duration::from_secs(30);

/// The checkpoint written after `latest` that changes only what the caller
/// sets on it: the next number, no keys changed, nothing cut.
pub(crate) fn successor(mut latest: Checkpoint) -> Checkpoint {
    latest.earlier = Vec::new();
    latest.seq = latest.seq.saturating_add(1);
    latest.change = Change::none();
    latest.keep_from = 0;
    latest
}

/// Hands the failed run stored under `key` (`pipeline/run_id`), or one
/// recovery gave up on ([`RunStatus::NeedsAttention`]), back to the
/// recovery workers (contract rule 22): its journal gains a checkpoint that
/// says running, at the same stage and context, with the attempt count
/// started over (a worker's resume runs attempt 1) and the error cleared
/// (the history keeps it). No worker holds it, so it lists as
/// [abandoned](super::RunState::Abandoned) and the next worker that holds
/// its pipeline resumes it. A run that is already abandoned is returned as
/// it is. Returns the run's checkpoint afterwards.
///
/// It takes the run's lease for the write, so it never races the run's
/// owner or a worker.
///
/// ```
/// use fluxio_core::store::{retry_run, Checkpoint, CheckpointStore, InMemoryStore, RunStatus};
/// use fluxio_core::Context;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fluxio_core::Result<()> {
/// let store = InMemoryStore::new();
/// let failed = Checkpoint::new("o-1", "v1", 2, "charge", Context::new().snapshot())
///     .in_pipeline("orders")
///     .failed("card declined");
/// store.save(failed).await?;
/// let retried = retry_run(&store, "orders/o-1").await?;
/// assert_eq!((retried.status, retried.attempt, retried.seq), (RunStatus::Running, 0, 1));
/// assert_eq!(store.history("orders/o-1").await?.len(), 2);
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::CheckpointNotFound`] naming `key` when nothing is stored;
/// [`Error::RunFinished`] when the run completed or was cancelled;
/// [`Error::RunIdInUse`] while a worker holds the run (it is running);
/// [`Error::InvalidRunId`] for a malformed key; the store's errors.
pub async fn retry_run<S: CheckpointStore + ?Sized>(store: &S, key: &str) -> Result<Checkpoint> {
    super::check_run_id(key)?;
    let lease = store.acquire_lease(key, RETRY_LEASE_TTL).await?;
    let written = retry_locked(store, key, &lease, None).await;
    let released = store.release_lease(lease).await;
    let checkpoint = written?;
    released?;
    Ok(checkpoint)
}

/// Deletes the run stored under `key` (`pipeline/run_id`) and its history
/// under the run's lease: taken, a fenced delete, released, so no worker is
/// running it meanwhile. What `fluxio runs delete` and the console's delete
/// do.
///
/// ```
/// use fluxio_core::store::{delete_run, Checkpoint, CheckpointStore, InMemoryStore};
/// use fluxio_core::Context;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fluxio_core::Result<()> {
/// let store = InMemoryStore::new();
/// store.save(Checkpoint::new("o-1", "v1", 0, "charge", Context::new().snapshot()).in_pipeline("orders")).await?;
/// delete_run(&store, "orders/o-1").await?;
/// assert!(store.load("orders/o-1").await?.is_none());
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::RunIdInUse`] while a worker holds the run (cancel it first);
/// [`Error::InvalidRunId`] for a malformed key; the store's errors.
pub async fn delete_run<S: CheckpointStore + ?Sized>(store: &S, key: &str) -> Result<()> {
    super::check_run_id(key)?;
    let lease = store.acquire_lease(key, RETRY_LEASE_TTL).await?;
    let deleted = store.delete_fenced(key, &lease).await;
    let released = store.release_lease(lease).await;
    deleted?;
    released
}

/// [`retry_run`], but the run is due at `now_ms` (sleeping until then at
/// its step) instead of abandoned: the next worker of its pipeline that
/// asks for due runs continues it (what a parent's new attempt does to the
/// child that failed it, rule 29).
pub(crate) async fn requeue_run(
    store: &dyn CheckpointStore,
    key: &str,
    now_ms: u64,
) -> Result<Checkpoint> {
    let lease = store.acquire_lease(key, RETRY_LEASE_TTL).await?;
    let written = retry_locked(store, key, &lease, Some(now_ms)).await;
    let released = store.release_lease(lease).await;
    let checkpoint = written?;
    released?;
    Ok(checkpoint)
}

/// Makes the run stored under `key` due at `now_ms` when it is waiting
/// for the child run `child_key` (rule 29: what a child's end does to its
/// parent); `false`, writing nothing, when it is not.
///
/// # Errors
/// [`Error::RunIdInUse`] while a worker holds the run; the store's errors.
pub(crate) async fn wake_waiting(
    store: &dyn CheckpointStore,
    key: &str,
    child_key: &str,
    now_ms: u64,
) -> Result<bool> {
    super::check_run_id(key)?;
    let lease = store.acquire_lease(key, RETRY_LEASE_TTL).await?;
    let written = async {
        let Some(latest) = store.load(key).await? else {
            return Ok(false);
        };
        let waits = latest.status == RunStatus::Waiting
            && latest
                .pending
                .as_ref()
                .is_some_and(|p| p.until_ms.is_none_or(|until| until > now_ms))
            && open_child(&latest).is_some_and(|waited| match waited.strip_suffix('*') {
                // a fan-out's children
                Some(prefix) => child_key.starts_with(prefix),
                None => waited == child_key,
            });
        if !waits {
            // not its parent, or due already
            return Ok(false);
        }
        let next = woken(key, latest, now_ms)?;
        store.save_fenced(next, &lease).await?;
        Ok(true)
    }
    .await;
    let released = store.release_lease(lease).await;
    let woke = written?;
    released?;
    Ok(woke)
}

async fn retry_locked<S: CheckpointStore + ?Sized>(
    store: &S,
    key: &str,
    lease: &Lease,
    due_ms: Option<u64>,
) -> Result<Checkpoint> {
    let Some(latest) = store.load(key).await? else {
        return Err(Error::CheckpointNotFound {
            run_id: key.to_owned(),
        });
    };
    match latest.status {
        RunStatus::Running => Ok(latest),
        // an operator unpauses a paused run (rule 30)
        RunStatus::Paused => Err(Error::Paused {
            run_id: key.to_owned(),
        }),
        RunStatus::Failed | RunStatus::NeedsAttention => {
            let mut next = successor(latest);
            next.status = RunStatus::Running;
            if let Some(due) = due_ms {
                next = next.parked(super::Pending::sleep(due));
            }
            next.error_message = None;
            // an operator's retry runs a final failure (rule 35) again too:
            // a compensation that finished is over, and the failed stage
            // runs again; one that did not goes on at its next compensator
            next.failed_for_good = false;
            if next.compensation.as_ref().is_some_and(|c| c.is_done()) {
                next.compensation = None;
            }
            // a woken run's resume does not count an attempt: it runs 1
            next.attempt = u32::from(due_ms.is_some());
            next.updated_at_ms = super::now_ms();
            store.save_fenced(next.clone(), lease).await?;
            Ok(next)
        }
        status => Err(Error::RunFinished {
            run_id: key.to_owned(),
            status,
        }),
    }
}

/// Marks the run `latest` belongs to as needing attention (rule 22), under
/// `lease`, its owner's: the checkpoint after `latest`, at the same stage,
/// context and attempt, says [`RunStatus::NeedsAttention`].
pub(crate) async fn mark_needs_attention(
    store: &dyn CheckpointStore,
    latest: Checkpoint,
    lease: &Lease,
) -> Result<Checkpoint> {
    let next = successor(latest).needing_attention();
    store.save_fenced(next.clone(), lease).await?;
    Ok(next)
}

/// Wakes the sleeping or waiting run stored under `key` now (an
/// operator's "now", contract rules 25-26): its journal gains a checkpoint
/// at the same step whose wake time or deadline is `now_ms`, so it is due
/// at once, and the next worker that holds its pipeline continues it (a
/// wait then takes its timeout outcome, unless a signal came first).
/// [`Pipeline::wake`](crate::Pipeline::wake) does this and continues the
/// run itself. Returns the run's checkpoint afterwards.
///
/// Like [`retry_run`], it takes the run's lease for the write.
///
/// # Errors
/// [`Error::NotParked`] when the run is not sleeping or waiting, or waits
/// without a deadline (only a signal can wake it: it has no timeout
/// outcome); [`Error::CheckpointNotFound`] when nothing is stored;
/// [`Error::RunIdInUse`] while a worker holds the run; the store's errors.
pub async fn wake_run<S: CheckpointStore + ?Sized>(
    store: &S,
    key: &str,
    now_ms: u64,
) -> Result<Checkpoint> {
    super::check_run_id(key)?;
    let lease = store.acquire_lease(key, RETRY_LEASE_TTL).await?;
    let written = async {
        let Some(latest) = store.load(key).await? else {
            return Err(Error::CheckpointNotFound {
                run_id: key.to_owned(),
            });
        };
        let next = woken(key, latest, now_ms)?;
        store.save_fenced(next.clone(), &lease).await?;
        Ok(next)
    }
    .await;
    let released = store.release_lease(lease).await;
    let checkpoint = written?;
    released?;
    Ok(checkpoint)
}

/// The checkpoint after `latest` (of `key`) that makes its sleep or wait
/// due at `now_ms`.
///
/// # Errors
/// [`Error::NotParked`] as for [`wake_run`].
pub(crate) fn woken(key: &str, latest: Checkpoint, now_ms: u64) -> Result<Checkpoint> {
    let not = |reason: String| Error::NotParked {
        run_id: key.to_owned(),
        reason,
    };
    let pending = match (&latest.status, &latest.pending) {
        (status, Some(pending)) if status.is_pending() => pending.clone(),
        (status, _) => {
            let _ = status;
            return Err(not(format!(
                "it is {}, not sleeping or waiting",
                super::RunSummary::of(key, &latest, None).state
            )));
        }
    };
    if pending.until_ms.is_none() {
        let names: Vec<&str> = pending.waits.iter().map(|w| w.name.as_str()).collect();
        return Err(not(format!(
            "it waits for {} without a deadline, so only a signal wakes it",
            names.join(" or ")
        )));
    }
    let mut next = successor(latest);
    let mut pending = pending;
    pending.until_ms = Some(now_ms.min(pending.until_ms.unwrap_or(now_ms)));
    next.pending = Some(pending);
    next.updated_at_ms = super::now_ms();
    Ok(next)
}

/// The child run the run stored as `latest` waits for (contract rule 29),
/// as its store key, when it waits for one.
#[must_use]
pub fn open_child(latest: &Checkpoint) -> Option<String> {
    let pending = latest.pending.as_ref()?;
    pending
        .waits
        .iter()
        .find_map(|w| w.name.strip_prefix(super::CHILD_WAIT_PREFIX))
        .map(str::to_owned)
}

/// Cancels the run stored under `key` (as [`CheckpointStore::cancel`]),
/// then the child run it waits for (contract rule 29), and that child's,
/// in the same store. Returns the keys of the children it cancelled (a
/// child that ended meanwhile is left as it is). What `fluxio runs cancel`
/// does; [`Pipeline::cancel`](crate::Pipeline::cancel) does the same, and
/// reaches children in other stores through the child pipelines it
/// registered.
///
/// # Errors
/// As [`CheckpointStore::cancel`] for `key`; the store's errors for a
/// child.
pub async fn cancel_with_children<S: CheckpointStore + ?Sized>(
    store: &S,
    key: &str,
) -> Result<Vec<String>> {
    cancel_tree(store, key, super::Mark::Cancel).await
}

/// [`cancel_with_children`], the run under `key` marked with `mark` (a
/// child whose parent another store holds: [`Mark::CancelWithParent`](super::Mark::CancelWithParent)).
pub(crate) async fn cancel_tree<S: CheckpointStore + ?Sized>(
    store: &S,
    key: &str,
    mark: super::Mark,
) -> Result<Vec<String>> {
    let mut open: Vec<String> = store
        .load(key)
        .await?
        .as_ref()
        .and_then(open_child)
        .into_iter()
        .collect();
    match mark {
        // `cancel`, as ever: a store that overrides only it still works
        super::Mark::Cancel => store.cancel(key).await?,
        mark => store.mark(key, mark).await?,
    }
    let mut cancelled = Vec::new();
    while let Some(key) = open.pop() {
        if let Some(pattern) = key.strip_suffix('*') {
            // a fan-out's children: the runs of its pipeline whose id
            // starts with the pattern (none on a store that does not list)
            let (pipeline, prefix) = pattern.split_once('/').unwrap_or(("", pattern));
            let mut filter = super::RunFilter::new()
                .pipeline(pipeline)
                .id_prefix(prefix)
                .limit(super::MAX_LIST_LIMIT);
            loop {
                let page = match store.list_runs(&filter).await {
                    Ok(page) => page,
                    Err(Error::Unsupported { .. }) => break,
                    Err(e) => return Err(e),
                };
                open.extend(page.runs.into_iter().map(|r| r.key));
                match page.next {
                    Some(next) => filter = filter.after(next),
                    None => break,
                }
            }
            continue;
        }
        let child = store.load(&key).await?.as_ref().and_then(open_child);
        // its history says why (rule 29)
        match store.mark(&key, super::Mark::CancelWithParent).await {
            Ok(()) => {
                cancelled.push(key);
                open.extend(child);
            }
            Err(Error::RunFinished { .. } | Error::CheckpointNotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    cancelled.sort();
    Ok(cancelled)
}
