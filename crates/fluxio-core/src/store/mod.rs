//! Checkpoint stores: where durable runs keep their state.
//!
//! A store implements exactly four required methods: [`save`](CheckpointStore::save),
//! [`load`](CheckpointStore::load), [`delete`](CheckpointStore::delete) and
//! [`exists`](CheckpointStore::exists). Run ownership (who may execute a run
//! id right now) is five *provided* methods with an in-process default, so a
//! four-method store works unchanged in one process; a shared store (Redis,
//! Postgres) overrides them to make ownership hold across processes:
//!
//! - [`acquire_lease`](CheckpointStore::acquire_lease) once per run: exactly
//!   one winner, a fencing token that grows with every acquisition;
//! - [`renew_lease`](CheckpointStore::renew_lease) on a timer while the run is
//!   alive (every third of the lease's time-to-live), never per stage;
//! - [`save_fenced`](CheckpointStore::save_fenced) /
//!   [`delete_fenced`](CheckpointStore::delete_fenced) for every checkpoint
//!   write: refused with [`Error::LeaseLost`](crate::Error::LeaseLost) once
//!   the lease expired or was taken over, so a paused worker that wakes up
//!   cannot overwrite the new owner's checkpoint;
//! - [`release_lease`](CheckpointStore::release_lease) once at the end.
//!
//! A run whose worker died keeps its lease until it expires; then any
//! worker can resume it.
//!
//! A sixth provided method, [`cancel`](CheckpointStore::cancel), lets any
//! process cancel a run (contract rule 14): the stored checkpoint becomes
//! [`RunStatus::Cancelled`], and the owner's next fenced write is refused
//! with [`Error::Cancelled`](crate::Error::Cancelled), so it stops before its
//! next stage without asking the store anything more per stage. Its default
//! works within one process, like the default leases; the shared stores
//! override it.
//!
//! # Implementing a custom store
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//! use fluxio_core::store::{Checkpoint, CheckpointStore};
//! use fluxio_core::Result;
//!
//! #[derive(Debug, Default)]
//! struct MyStore(Mutex<HashMap<String, Vec<u8>>>);
//!
//! #[async_trait::async_trait]
//! impl CheckpointStore for MyStore {
//!     async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
//!         let bytes = checkpoint.to_bytes()?;
//!         self.0.lock().unwrap().insert(checkpoint.key(), bytes);
//!         Ok(())
//!     }
//!     async fn load(&self, key: &str) -> Result<Option<Checkpoint>> {
//!         let bytes = self.0.lock().unwrap().get(key).cloned();
//!         bytes.map(|b| Checkpoint::from_bytes(key, &b)).transpose()
//!     }
//!     async fn delete(&self, key: &str) -> Result<()> {
//!         self.0.lock().unwrap().remove(key);
//!         Ok(())
//!     }
//!     async fn exists(&self, key: &str) -> Result<bool> {
//!         Ok(self.0.lock().unwrap().contains_key(key))
//!     }
//! }
//! ```

mod branch;
mod checkpoint;
mod compensation;
#[cfg(feature = "test-util")]
pub mod conformance;
pub(crate) mod error_kind;
mod forked;
mod journal;
mod lease;
mod list;
mod memory;
mod queued;
mod redact;
mod retry;
pub(crate) mod status;
mod waits;

use std::any::TypeId;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

pub use branch::BranchRecord;
#[cfg(test)]
pub(crate) use checkpoint::checksum as checkpoint_checksum;
pub(crate) use checkpoint::now_ms;
pub use checkpoint::{
    Checkpoint, FORMAT_VERSION, MAGIC, MAX_PAYLOAD, OLDEST_FORMAT_VERSION, RunStatus, run_key,
};
pub use compensation::{Compensation, CompensationStep};
pub use error_kind::StoreErrorKind;
pub use forked::ForkOrigin;
pub use journal::{COMPACT_EVERY, Change, append, appended, cut_point, missing_predecessor};
pub use lease::{Begin, Begun, Lease};
pub use list::{
    MAX_LIST_LIMIT, RunCount, RunFilter, RunPage, RunState, RunSummary, count_by_listing,
    parent_of, prefix_end, run_id_of, tally,
};
pub use memory::InMemoryStore;
pub use queued::QueueEntry;
pub use redact::RedactedUrl;
pub(crate) use retry::{cancel_tree, requeue_run, wake_waiting, woken};
pub use retry::{cancel_with_children, delete_run, open_child, retry_run, wake_run};
pub(crate) use retry::{mark_needs_attention, successor};
pub use waits::{
    CHILD_WAIT_PREFIX, Claimed, Decision, Delivery, DueFilter, DueRun, MAX_SIGNAL_PAYLOAD,
    MAX_UNTIL_MS, MAX_WAIT_NAME_LEN, Payload, Pending, RunEvent, RunEventKind, RunEvents, Signal,
    SignalState, Take, WaitName, check_wait_name, decide, deliver,
};

use crate::error::Result;

/// The shortest lease time-to-live a run or a store accepts (3 ms): the
/// shortest that a run can renew.
///
/// A run renews its lease every third of the ttl, from a tokio timer, whose
/// resolution is 1 ms: a renewal due after `ttl / 3` fires up to 1 ms late.
/// At 3 ms the renewal period is one timer tick and the renewal, however
/// late its tick, is sent by `ttl / 3 + 1 ms = 2 ttl / 3`, with a third of
/// the ttl left to reach the store. Below it the period is less than a tick
/// (the renewal is sent a whole tick after it was due), and at 1 ms it is
/// never sent before the lease lapses: every run would be `LeaseLost`.
/// Real stores need the ttl to cover their round trips as well: keep it
/// well above this.
pub const MIN_LEASE_TTL: Duration = Duration::from_millis(3);

/// The longest lease time-to-live a run or a store accepts (365 days): far
/// past any real stage, and small enough for every store's clock arithmetic
/// (`Instant`, Postgres timestamps, Redis `PX`) to stay in range.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Checks a lease time-to-live against [`MIN_LEASE_TTL`]..=[`MAX_LEASE_TTL`].
/// `PipelineBuilder::build` and every built-in store's `acquire_lease` and
/// `renew_lease` call it, so an out-of-range ttl has one outcome everywhere.
///
/// ```
/// use std::time::Duration;
/// use fluxio_core::store::check_lease_ttl;
///
/// assert!(check_lease_ttl(Duration::from_secs(30)).is_ok());
/// assert!(check_lease_ttl(Duration::ZERO).is_err());
/// assert!(check_lease_ttl(Duration::MAX).is_err());
/// ```
///
/// # Errors
/// [`Error::InvalidSetting`](crate::Error::InvalidSetting) naming `lease_ttl`.
pub fn check_lease_ttl(ttl: Duration) -> Result<()> {
    if (MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&ttl) {
        return Ok(());
    }
    Err(crate::Error::InvalidSetting {
        setting: "lease_ttl",
        message: format!(
            "{ttl:?} is out of range: a lease lasts from {MIN_LEASE_TTL:?} (the shortest a run \
             can renew, every third of it) to 365 days"
        ),
    })
}

/// The longest pipeline name [`PipelineBuilder::name`](crate::PipelineBuilder::name) accepts, in bytes.
pub const MAX_PIPELINE_NAME_LEN: usize = 64;

/// A pipeline name: 1 to [`MAX_PIPELINE_NAME_LEN`] ASCII letters, digits,
/// `_`, `-` or `.` (no `/`, so `name/run_id` keys cannot collide).
pub(crate) fn check_pipeline_name(name: &str) -> Result<()> {
    let problem = if name.is_empty() {
        "it is empty".to_owned()
    } else if name.len() > MAX_PIPELINE_NAME_LEN {
        format!("it is longer than {MAX_PIPELINE_NAME_LEN} bytes")
    } else if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        format!("{c:?} is not an ASCII letter, digit, `_`, `-` or `.`")
    } else {
        return Ok(());
    };
    let shown: String = name.chars().take(MAX_PIPELINE_NAME_LEN).collect();
    Err(crate::Error::InvalidSetting {
        setting: "name",
        message: format!("pipeline name {shown:?}: {problem}"),
    })
}

/// The longest run id accepted, in bytes.
pub const MAX_RUN_ID_LEN: usize = 512;

/// Checks a run id: not empty, at most [`MAX_RUN_ID_LEN`] bytes, no control
/// characters (so no NUL, which Postgres text cannot hold). Every `Pipeline`
/// method that takes a run id calls it, and so do the built-in stores, so a
/// bad id is the same typed error everywhere. The error shows at most the
/// first 64 characters of the id.
///
/// ```
/// use fluxio_core::store::check_run_id;
///
/// assert!(check_run_id("order-42").is_ok());
/// assert!(check_run_id("").is_err());
/// assert!(check_run_id("a\0b").is_err());
/// let long = "x".repeat(10_000);
/// let err = check_run_id(&long).unwrap_err().to_string();
/// assert!(err.len() < 200, "{err}");
/// ```
///
/// # Errors
/// [`Error::InvalidRunId`](crate::Error::InvalidRunId) saying why.
pub fn check_run_id(run_id: &str) -> Result<()> {
    let reason = if run_id.is_empty() {
        "it is empty"
    } else if run_id.len() > MAX_RUN_ID_LEN {
        "it is longer than 512 bytes"
    } else if !run_id.bytes().all(|b| (0x20..0x7f).contains(&b))
        && run_id.chars().any(char::is_control)
    {
        "it contains control characters"
    } else {
        return Ok(());
    };
    let mut shown: String = run_id.chars().take(64).collect();
    if shown.len() < run_id.len() {
        shown.push_str("...");
    }
    Err(crate::Error::InvalidRunId {
        run_id: shown,
        reason,
    })
}

/// What a [cancel](CheckpointStore::cancel) of `run_id` appends to the run
/// whose latest checkpoint is `stored`: the next checkpoint of its journal,
/// the same as `stored` but [`RunStatus::Cancelled`], written now
/// ([`Checkpoint::cancelled`]), with an empty [`Change`] and the journal so
/// far in [`earlier`](Checkpoint::earlier) (what a one-blob store saves;
/// a store that keeps the journal appends
/// [`entry_bytes`](Checkpoint::entry_bytes)). Every store decides with it,
/// so a cancel answers alike everywhere.
///
/// ```
/// use fluxio_core::store::{Checkpoint, RunStatus, cancelled_checkpoint};
/// use fluxio_core::{Context, Error};
///
/// let running = Checkpoint::new("7", "0123456789ab", 3, "charge", Context::new().snapshot())
///     .in_pipeline("orders");
/// let cancelled = cancelled_checkpoint("orders/7", Some(running))?;
/// assert_eq!((cancelled.status, cancelled.ip, cancelled.seq), (RunStatus::Cancelled, 3, 1));
/// assert_eq!(cancelled.earlier.len(), 1);
///
/// let again = cancelled_checkpoint("orders/7", Some(cancelled));
/// assert!(matches!(again, Err(Error::RunFinished { status: RunStatus::Cancelled, .. })));
/// assert!(matches!(
///     cancelled_checkpoint("orders/8", None),
///     Err(Error::CheckpointNotFound { .. })
/// ));
/// # Ok::<(), Error>(())
/// ```
///
/// # Errors
/// [`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound) naming
/// `run_id` when nothing is stored;
/// [`Error::RunFinished`](crate::Error::RunFinished) when the run completed
/// or was cancelled already.
pub fn cancelled_checkpoint(run_id: &str, stored: Option<Checkpoint>) -> Result<Checkpoint> {
    marked_checkpoint(run_id, stored, Mark::Cancel)
}

/// What [`CheckpointStore::mark`] does to a run: cancel it (rule 14),
/// pause it or unpause it (rule 30).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mark {
    /// Cancel the run: [`cancelled_checkpoint`].
    Cancel,
    /// Cancel a child run because its parent was cancelled (contract rule
    /// 29): as [`Cancel`](Mark::Cancel), its checkpoint's error saying so
    /// and naming the parent.
    CancelWithParent,
    /// Pause the run: it stops before its next stage and stays until
    /// unpaused ([`RunStatus::Paused`]).
    Pause,
    /// Unpause the run: a sleep or wait it was paused in goes on as it
    /// was; any other run is due at `now_ms` (milliseconds since the Unix
    /// epoch on the pipeline's clock), at the step it was paused at.
    Unpause {
        /// When an unpaused run that was not sleeping or waiting is due.
        now_ms: u64,
    },
}

/// The checkpoint that `mark` appends to the run stored under `run_id`
/// whose latest checkpoint (with its journal in
/// [`earlier`](Checkpoint::earlier), for a one-blob store) is `stored`:
/// the same step and context, numbered next, with no keys changed, written
/// now, and
///
/// - [`Mark::Cancel`]: [`RunStatus::Cancelled`], without branch records or
///   a pending step; refused for a completed or cancelled run;
/// - [`Mark::Pause`]: [`RunStatus::Paused`], keeping branch records and
///   what a sleeping or waiting run waits for; refused for a completed or
///   cancelled run (a paused run is paused again: nothing changes but the
///   number);
/// - [`Mark::Unpause`]: a paused run that waits for something (it has a
///   [`pending`](Checkpoint::pending) step) sleeping or waiting again for
///   it; any other [sleeping](RunStatus::Sleeping) until `now_ms`, so that
///   it is due at once and a worker continues it at its step; refused for
///   a run that is not paused.
///
/// Every store decides with it, so a mark answers alike everywhere; the
/// store appends the checkpoint atomically with the run's fenced writes,
/// which it refuses while the run's latest checkpoint is cancelled or
/// paused ([`RunStatus::fences_owner`]).
///
/// ```
/// use fluxio_core::store::{marked_checkpoint, Checkpoint, Mark, RunStatus};
/// use fluxio_core::{Context, Error};
///
/// let running = Checkpoint::new("7", "0123456789ab", 3, "charge", Context::new().snapshot())
///     .in_pipeline("orders");
/// let paused = marked_checkpoint("orders/7", Some(running), Mark::Pause)?;
/// assert_eq!((paused.status, paused.ip, paused.seq), (RunStatus::Paused, 3, 1));
/// let due = marked_checkpoint("orders/7", Some(paused), Mark::Unpause { now_ms: 5 })?;
/// assert_eq!((due.status, due.pending.as_ref().and_then(|p| p.until_ms)), (RunStatus::Sleeping, Some(5)));
/// assert!(matches!(
///     marked_checkpoint("orders/7", Some(due), Mark::Unpause { now_ms: 6 }),
///     Err(Error::NotPaused { .. })
/// ));
/// # Ok::<(), Error>(())
/// ```
///
/// # Errors
/// [`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound) naming
/// `run_id` when nothing is stored;
/// [`Error::RunFinished`](crate::Error::RunFinished) for a cancel or pause
/// of a completed or cancelled run;
/// [`Error::NotPaused`](crate::Error::NotPaused) for an unpause of a run
/// that is not paused.
pub fn marked_checkpoint(
    run_id: &str,
    stored: Option<Checkpoint>,
    mark: Mark,
) -> Result<Checkpoint> {
    let Some(checkpoint) = stored else {
        return Err(crate::Error::CheckpointNotFound {
            run_id: run_id.to_owned(),
        });
    };
    let status = checkpoint.status;
    let refused = match mark {
        Mark::Cancel | Mark::CancelWithParent | Mark::Pause => {
            matches!(status, RunStatus::Completed | RunStatus::Cancelled)
        }
        .then(|| crate::Error::RunFinished {
            run_id: run_id.to_owned(),
            status,
        }),
        Mark::Unpause { .. } => (status != RunStatus::Paused).then(|| crate::Error::NotPaused {
            run_id: run_id.to_owned(),
            status,
        }),
    };
    if let Some(refused) = refused {
        return Err(refused);
    }
    let mut journal = checkpoint.into_journal();
    let mut next = journal
        .last()
        .cloned()
        .ok_or_else(|| crate::Error::Internal {
            message: "a journal is empty".to_owned(),
        })?;
    next = match mark {
        Mark::Cancel => next.cancelled(),
        Mark::CancelWithParent => {
            let mut cancelled = next.cancelled();
            let parent = parent_of(run_id_of(run_id)).unwrap_or("its parent");
            cancelled.error_message = Some(format!("cancelled with its parent `{parent}`"));
            cancelled
        }
        Mark::Pause => next.paused(),
        Mark::Unpause { now_ms } => next.unpaused(now_ms),
    };
    next.seq = next.seq.saturating_add(1);
    next.change = Change::none();
    next.keep_from = 0;
    journal.shrink_to_fit();
    next.earlier = journal;
    Ok(next)
}

/// The error a fenced write of the run `run_id` gets when its stored
/// checkpoint says `status`: [`Error::Cancelled`](crate::Error::Cancelled)
/// or [`Error::Paused`](crate::Error::Paused) ([`RunStatus::fences_owner`]);
/// `None` for any other status. Every store refuses with it.
#[must_use]
pub fn fenced_refusal(run_id: &str, status: RunStatus) -> Option<crate::Error> {
    let run_id = run_id.to_owned();
    match status {
        RunStatus::Cancelled => Some(crate::Error::Cancelled { run_id }),
        RunStatus::Paused => Some(crate::Error::Paused { run_id }),
        _ => None,
    }
}

/// [`CheckpointStore::begin_run`]'s default, one call after another:
/// [`acquire_lease`](CheckpointStore::acquire_lease), then
/// [`delete_fenced`](CheckpointStore::delete_fenced) ([`Begin::Replace`])
/// or [`exists`](CheckpointStore::exists) ([`Begin::IfAbsent`]), then
/// [`save_fenced`](CheckpointStore::save_fenced); the lease is released
/// when a call after the first fails. For a store that wraps another and
/// overrides `begin_run` only in some cases.
///
/// # Errors
/// As [`CheckpointStore::begin_run`].
pub async fn begin_run_stepwise<S: CheckpointStore + ?Sized>(
    store: &S,
    first: Checkpoint,
    ttl: Duration,
    begin: Begin,
) -> Result<Begun> {
    let key = first.key();
    let lease = store.acquire_lease(&key, ttl).await?;
    let written = async {
        match begin {
            Begin::Replace => store.delete_fenced(&key, &lease).await?,
            Begin::IfAbsent => {
                if store.exists(&key).await? {
                    return Ok(false);
                }
            }
        }
        store.save_fenced(first, &lease).await.map(|()| true)
    }
    .await;
    match written {
        Ok(started) => Ok(Begun { lease, started }),
        Err(e) => {
            // the caller never sees the lease: give it back now
            if let Err(release) = store.release_lease(lease).await {
                tracing::warn!(run_id = %key, error = %release, "could not release the lease of a run that did not begin; it will expire");
            }
            Err(e)
        }
    }
}

/// [`CheckpointStore::finish_run`]'s default, one call after another:
/// [`save_fenced`](CheckpointStore::save_fenced), then
/// [`delete_fenced`](CheckpointStore::delete_fenced) when `delete`, then
/// [`release_lease`](CheckpointStore::release_lease) whatever the writes
/// returned.
///
/// # Errors
/// As [`CheckpointStore::finish_run`].
pub async fn finish_run_stepwise<S: CheckpointStore + ?Sized>(
    store: &S,
    last: Checkpoint,
    lease: Lease,
    delete: bool,
) -> Result<()> {
    let key = last.key();
    let mut written = store.save_fenced(last, &lease).await;
    if written.is_ok() && delete {
        written = store.delete_fenced(&key, &lease).await;
    }
    if let Err(release) = store.release_lease(lease).await {
        tracing::warn!(run_id = %key, error = %release, "could not release the run's lease; it will expire");
    }
    written
}

/// Where checkpoints live. Dyn-compatible: pipelines hold an
/// `Arc<dyn CheckpointStore>`.
///
/// Errors of the backend are returned as [`Error::Store`](crate::Error::Store)
/// (keeping the backend's error as the source); undecodable bytes as
/// [`Error::CorruptCheckpoint`](crate::Error::CorruptCheckpoint).
///
/// # Keys
/// A store addresses runs by key: [`run_key`]`(pipeline, run_id)`, which is
/// `pipeline/run_id` for a named pipeline (contract rule 10) and the bare run
/// id for an unnamed one. Every `key` argument below is such a key, and
/// `save` keeps a checkpoint under [`Checkpoint::key`]: a store that does
/// that keeps the runs of two pipelines apart without knowing about
/// pipelines.
///
/// # Cancel safety
/// The interpreter may drop a call's future (when the caller drops the run).
/// Each required method must leave the store either before or after the
/// operation, never half-way: a single write or delete per call does that.
#[async_trait::async_trait]
pub trait CheckpointStore: Debug + Send + Sync + 'static {
    /// Stores `checkpoint` under its key, `checkpoint.key()`, replacing the
    /// run stored there: the run is then `checkpoint` with its
    /// [`earlier`](Checkpoint::earlier) ones. Atomic: a concurrent `load`
    /// sees the old or the new run. A store of bytes keeps
    /// [`Checkpoint::to_bytes`], which holds them all.
    async fn save(&self, checkpoint: Checkpoint) -> Result<()>;

    /// The checkpoint stored for `key`, or `None`.
    async fn load(&self, key: &str) -> Result<Option<Checkpoint>>;

    /// Removes the checkpoint of `key`. Deleting a missing key is not an error.
    async fn delete(&self, key: &str) -> Result<()>;

    /// Whether a checkpoint is stored for `key`.
    async fn exists(&self, key: &str) -> Result<bool>;

    /// Every checkpoint of the run under `key` the store still keeps, oldest
    /// first, each with its whole context (contract rule 20); empty when
    /// nothing is stored. The last one is what [`load`](Self::load)
    /// returns.
    ///
    /// The default reads the one blob `load` returns: a store with the four
    /// required methods keeps the run's journal in it (the default
    /// [`save_fenced`](Self::save_fenced) appends each checkpoint to it).
    /// A store that keeps the journal itself overrides this.
    async fn history(&self, key: &str) -> Result<Vec<Checkpoint>> {
        Ok(self
            .load(key)
            .await?
            .map(Checkpoint::into_journal)
            .unwrap_or_default())
    }

    /// A page of the runs the store keeps that pass `filter`, in key order
    /// (contract rule 21), with each run's state: a running run whose lease
    /// no worker holds is [`RunState::Abandoned`].
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) by default: a store
    /// with only the four required methods has no index of its runs.
    /// `InMemoryStore` lists them.
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage> {
        let _ = filter;
        Err(crate::Error::Unsupported {
            operation: "list runs",
            store: std::any::type_name::<Self>(),
        })
    }

    /// How many runs pass `filter` (its `limit` and `after` aside), per
    /// pipeline and state (contract rule 21): one [`RunCount`] per pipeline
    /// and state that has runs, sorted by pipeline, then by the state's
    /// place in [`RunState::ALL`] ([`tally`]). It agrees with
    /// [`list_runs`](Self::list_runs): the runs a listing would return are
    /// the runs counted.
    ///
    /// The default ([`count_by_listing`]) pages through `list_runs` and so
    /// reads every run counted; the SQL stores and `InMemoryStore` count in
    /// place.
    ///
    /// # Errors
    /// As [`list_runs`](Self::list_runs).
    async fn count_runs(&self, filter: &RunFilter) -> Result<Vec<RunCount>> {
        count_by_listing(self, filter).await
    }

    /// Takes ownership of the run under `key`, for `ttl` unless renewed.
    ///
    /// Exactly one of any number of concurrent callers wins. The lease's
    /// [`token`](Lease::token) is a fencing token: it is greater than the
    /// token of every earlier lease on the same run id.
    ///
    /// The default is an in-process lock table keyed by this store's *type*
    /// and the run id: race-free between the tasks and threads of one
    /// process however the store is cloned or shared (clones of a store are
    /// one store), but not across processes, and it never expires. Two
    /// unrelated stores of the same type in one process therefore exclude
    /// each other's run ids too. A store that several processes share
    /// overrides the five ownership methods with a lease kept in the store.
    ///
    /// # Errors
    /// [`Error::RunIdInUse`](crate::Error::RunIdInUse) when another run holds
    /// an unexpired lease on `key`;
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) when `ttl` is
    /// outside [`MIN_LEASE_TTL`]..=[`MAX_LEASE_TTL`].
    async fn acquire_lease(&self, key: &str, ttl: Duration) -> Result<Lease> {
        check_lease_ttl(ttl)?;
        lease::acquire_local(std::any::TypeId::of::<Self>(), key)
    }

    /// Extends `lease` to `ttl` from now.
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) when the lease expired
    /// or another lease replaced it. The default never expires.
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        let _ = lease;
        check_lease_ttl(ttl)
    }

    /// Gives `lease` up, so the run id can be taken at once. Releasing a
    /// lease that was lost is not an error (it changes nothing).
    async fn release_lease(&self, lease: Lease) -> Result<()> {
        drop(lease);
        Ok(())
    }

    /// Appends `checkpoint` to the run's journal as [`append`] does (it
    /// replaces the checkpoints numbered [`seq`](Checkpoint::seq) or later;
    /// a [`Change::Delta`] needs checkpoint `seq - 1` stored), but only
    /// while `lease` is the run's current, unexpired lease, and the stored
    /// checkpoint is not cancelled ([`cancel`](Self::cancel)), atomically
    /// with those checks. A store that keeps the journal writes
    /// [`Checkpoint::entry_bytes`]: only what changed.
    ///
    /// # Errors
    /// [`Error::Cancelled`](crate::Error::Cancelled) when the stored
    /// checkpoint is cancelled, whatever the lease;
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) when the lease is not
    /// current; [`missing_predecessor`]'s error for a delta whose
    /// predecessor is not stored. The stored run is then left as it was.
    /// The default (in-process leases, which cannot be lost) refuses only a
    /// cancelled run, as [`cancel`](Self::cancel)'s default marked it; for
    /// any other run it loads the stored blob, appends ([`appended`]) and
    /// saves it, so the journal lives in the one blob.
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        let _ = lease;
        lease::save_local(self, TypeId::of::<Self>(), checkpoint).await
    }

    /// [`delete`](Self::delete), but only while `lease` is the run's current,
    /// unexpired lease. A cancelled run is deleted like any other, cancel
    /// and all: a run saved under its key afterwards is a new run.
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) as for
    /// [`save_fenced`](Self::save_fenced).
    async fn delete_fenced(&self, key: &str, lease: &Lease) -> Result<()> {
        let _ = lease;
        lease::delete_local(self, TypeId::of::<Self>(), key).await
    }

    /// Starts a run in one step (contract rule 24): takes the lease on
    /// `first`'s key for `ttl` as [`acquire_lease`](Self::acquire_lease)
    /// does, then, under that lease, either replaces whatever run is stored
    /// under the key with `first` ([`Begin::Replace`], what
    /// [`Pipeline::invoke`](crate::Pipeline::invoke) asks), or writes
    /// `first` only when nothing is stored there ([`Begin::IfAbsent`], what
    /// [`Pipeline::start`](crate::Pipeline::start) asks) and otherwise
    /// leaves the stored run as it is. `first` is a run's first checkpoint
    /// (`seq` 0, the whole context).
    ///
    /// The default, [`begin_run_stepwise`], makes the calls one by one
    /// (acquire, delete or exists, fenced save), and releases the lease when
    /// a later call fails. A
    /// store that can do all three in one round trip (a script, a
    /// transaction) overrides it: a durable run then makes one round trip
    /// where it made three.
    ///
    /// # Errors
    /// Those of [`acquire_lease`](Self::acquire_lease),
    /// [`delete_fenced`](Self::delete_fenced) and
    /// [`save_fenced`](Self::save_fenced). On an error the lease is not
    /// held (an override that cannot tell, after a lost connection, leaves
    /// it to expire).
    ///
    /// # Cancel safety
    /// Dropping the future may leave the lease taken, to expire after `ttl`
    /// (the default in-process lease is given back when dropped).
    async fn begin_run(&self, first: Checkpoint, ttl: Duration, begin: Begin) -> Result<Begun> {
        begin_run_stepwise(self, first, ttl, begin).await
    }

    /// Ends a run in one step (contract rule 24): appends `last` (its
    /// completed, failed or cancelled checkpoint) as
    /// [`save_fenced`](Self::save_fenced) does, then, when `delete` is set,
    /// deletes the run as [`delete_fenced`](Self::delete_fenced) does (a
    /// pipeline that [deletes completed runs](crate::PipelineBuilder::delete_completed)),
    /// and gives `lease` back as [`release_lease`](Self::release_lease)
    /// does, whatever the writes returned.
    ///
    /// The default, [`finish_run_stepwise`], makes the calls one by one; a
    /// store that can do them in one round trip overrides it.
    ///
    /// # Errors
    /// Those of `save_fenced` and `delete_fenced`: the stored run is then as
    /// those leave it, and the lease is given back all the same (a failed
    /// release is logged, and the lease expires).
    async fn finish_run(&self, last: Checkpoint, lease: Lease, delete: bool) -> Result<()> {
        finish_run_stepwise(self, last, lease, delete).await
    }

    /// Cancels the run under `key` (contract rule 14), whoever owns it: the
    /// stored checkpoint becomes the one [`cancelled_checkpoint`] makes of
    /// it ([`RunStatus::Cancelled`]; its position, context, attempt and
    /// error message kept), and from then on every
    /// [`save_fenced`](Self::save_fenced) for the run is refused with
    /// [`Error::Cancelled`](crate::Error::Cancelled), leaving it so. The
    /// run's owner, if it is still executing, learns of it from the fenced
    /// write of its next checkpoint and stops there.
    ///
    /// A run that is running (its lease live or lapsed) or failed can be
    /// cancelled. [`delete`](Self::delete) and
    /// [`delete_fenced`](Self::delete_fenced) remove a cancelled run entirely,
    /// and a plain [`save`](Self::save) replaces it, as any checkpoint: the
    /// run is cancelled exactly while its stored checkpoint says so.
    ///
    /// Atomic with respect to `save_fenced`: a fenced save either lands
    /// before the cancel (which then cancels that checkpoint) or is refused.
    ///
    /// The default, for a store with only the four required methods, works
    /// within one process, like the default leases: it loads the checkpoint,
    /// saves its cancelled version, and marks the run in an in-process
    /// table keyed by this store's *type* and `key`, which the default
    /// `save_fenced` consults; a per-key lock in the same table makes the
    /// cancel and the fenced saves of the run take turns. Another process
    /// sees the cancelled checkpoint (a resume refuses it) but not the mark:
    /// an owner in another process is not stopped. It is
    /// [`mark`](Self::mark) with [`Mark::Cancel`]: a store that overrides
    /// `save_fenced` must override `mark`, atomically with it, as
    /// `InMemoryStore`, `SqliteStore`, `RedisStore`, `PostgresStore` and
    /// `MySqlStore` do.
    ///
    /// # Errors
    /// [`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound) when
    /// nothing is stored for `key`;
    /// [`Error::RunFinished`](crate::Error::RunFinished) when the run
    /// completed or was cancelled already (nothing changes);
    /// [`Error::InvalidRunId`](crate::Error::InvalidRunId) for a malformed
    /// run id; the store's errors.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the run cancelled or not, never half-way.
    async fn cancel(&self, key: &str) -> Result<()> {
        self.mark(key, Mark::Cancel).await
    }

    /// Cancels (rule 14), pauses or unpauses (rule 30) the run under `key`
    /// from any process, whoever owns it: appends
    /// [`marked_checkpoint`]`(key, latest, mark)` atomically with respect
    /// to the run's fenced writes, which the store refuses from then on
    /// while the run's latest checkpoint is cancelled or paused (with
    /// [`fenced_refusal`]: a fenced write either lands before the mark, which
    /// then marks that checkpoint, or is refused). A paused run is out of
    /// the due-index, and an unpaused one back in it, in the same write.
    ///
    /// The default, for a store with only the four required methods, works
    /// within one process as [`cancel`](Self::cancel) says.
    ///
    /// # Errors
    /// [`marked_checkpoint`]'s: [`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound),
    /// [`Error::RunFinished`](crate::Error::RunFinished),
    /// [`Error::NotPaused`](crate::Error::NotPaused);
    /// [`Error::InvalidRunId`](crate::Error::InvalidRunId) for a malformed
    /// run id; the store's errors.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the run marked or not, never half-way.
    async fn mark(&self, key: &str, mark: Mark) -> Result<()> {
        lease::mark_local(self, TypeId::of::<Self>(), key, mark).await
    }

    /// Stores `signal` in the mailbox of the run under `key` (contract rule
    /// 26), from any process, whoever owns the run, atomically with the
    /// run's other writes, as [`deliver`] decides: a new name is stored
    /// ([`Delivery::Delivered`]; when the run waits for it, it is due now,
    /// in the due-index and to [`watch`](Self::watch)ers); the same payload
    /// again changes nothing ([`Delivery::Duplicate`]).
    ///
    /// The default, for a store with only the four required methods, keeps
    /// the mailbox in the run's blob ([`Checkpoint::signals`]): it loads the
    /// run, adds the signal and saves it, taking turns with the fenced
    /// writes and cancels of this process as [`cancel`](Self::cancel)'s
    /// default does (and, like it, not with another process's). A store
    /// that overrides [`save_fenced`](Self::save_fenced) must override this
    /// and [`take_signal`](Self::take_signal) too.
    ///
    /// # Errors
    /// [`deliver`]'s: [`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound),
    /// [`Error::RunFinished`](crate::Error::RunFinished),
    /// [`Error::SignalConflict`](crate::Error::SignalConflict),
    /// [`Error::WaitClosed`](crate::Error::WaitClosed); the store's.
    async fn send_signal(&self, key: &str, signal: Signal) -> Result<Delivery> {
        lease::signal_local(self, TypeId::of::<Self>(), key, signal).await
    }

    /// Decides the wait `take` of the run under `key` (contract rule 26),
    /// while `lease` is the run's current lease, as [`decide`] does,
    /// atomically with [`send_signal`](Self::send_signal): a
    /// signal and a deadline racing have exactly one winner, and a wait
    /// decided before is decided the same way again (a worker that crashed
    /// after taking a signal takes it again).
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) when `lease` is not
    /// current (the default's in-process leases cannot be lost);
    /// [`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound); the
    /// store's.
    async fn take_signal(&self, key: &str, take: &Take, lease: &Lease) -> Result<Decision> {
        let _ = lease;
        lease::take_local(self, TypeId::of::<Self>(), key, take).await
    }

    /// The mailbox of the run under `key`: every signal sent to it, and
    /// every name closed, in the order they came; empty when nothing is
    /// stored. The default reads the run's blob
    /// ([`Checkpoint::signals`]).
    async fn signals(&self, key: &str) -> Result<Vec<Signal>> {
        Ok(self
            .load(key)
            .await?
            .map(|cp| cp.signals)
            .unwrap_or_default())
    }

    /// The runs that are due (contract rule 27), earliest first: sleeping
    /// runs whose wake time passed, waiting runs whose deadline passed or
    /// that were signalled a name they wait for ([`Pending::due_ms`]),
    /// each with no worker holding its lease. A store keeps these in a
    /// due-index written with the checkpoint, so this reads no run it
    /// does not return.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) by default: a store
    /// with only the four required methods has no index. Its sleeping and
    /// waiting runs continue when someone resumes or wakes them.
    async fn due_runs(&self, filter: &DueFilter) -> Result<Vec<DueRun>> {
        let _ = filter;
        Err(crate::Error::Unsupported {
            operation: "list due runs",
            store: std::any::type_name::<Self>(),
        })
    }

    /// Claims the runs due as `filter` says (contract rule 27): takes the
    /// lease of each for `ttl`, as [`acquire_lease`](Self::acquire_lease)
    /// does, and returns them with their leases, earliest due first. Two
    /// workers claiming at once get different runs, so a worker wakes what
    /// it claims without racing another for the leases.
    ///
    /// The default lists the due runs ([`due_runs`](Self::due_runs)) and
    /// takes their leases one by one, leaving out the runs another caller
    /// took meanwhile; a store with a due-index overrides it with one
    /// atomic step (Postgres `FOR UPDATE SKIP LOCKED`, a Redis script).
    /// When the store fails after some leases were taken, those runs are
    /// returned (the error is logged); the error only when none was.
    ///
    /// # Errors
    /// [`due_runs`](Self::due_runs)' ([`Error::Unsupported`](crate::Error::Unsupported)
    /// for a store with no index); an invalid `ttl`; the store's.
    ///
    /// # Cancel safety
    /// Dropping the future may leave runs claimed that nobody continues:
    /// their leases lapse after `ttl`, and they are due again.
    async fn claim_due(&self, filter: &DueFilter, ttl: Duration) -> Result<Vec<Claimed>> {
        let mut claimed = Vec::new();
        for run in self.due_runs(filter).await? {
            match self.acquire_lease(&run.key, ttl).await {
                Ok(lease) => claimed.push(Claimed::new(run, lease)),
                Err(crate::Error::RunIdInUse { .. }) => {}
                Err(e) if claimed.is_empty() => return Err(e),
                Err(e) => {
                    tracing::warn!(run = %run.key, error = %e, "claiming due runs stopped early");
                    break;
                }
            }
        }
        Ok(claimed)
    }

    /// Sets when the run whose lease `lease` is becomes due for recovery
    /// (contract rule 27: the recovery worker's backoff): from `due_ms`
    /// on (at most [`MAX_UNTIL_MS`]), the due-index holds it, so a worker
    /// claims it then ([`claim_due`](Self::claim_due)) and decides it with
    /// its [`RecoveryPolicy`](crate::recovery::RecoveryPolicy); `None` takes
    /// it out. Only a running (abandoned) or failed run is set: any other
    /// is left as it is, since its own checkpoint says when it is due. The
    /// run's next write (a checkpoint, a cancel, a delete) clears it.
    /// Fenced, as [`save_fenced`](Self::save_fenced) is.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) by default (a store
    /// with no due-index: its worker finds such runs by listing them);
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) when `lease` is not
    /// current, [`Error::Cancelled`](crate::Error::Cancelled),
    /// [`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound); the
    /// store's.
    async fn set_due(&self, lease: &Lease, due_ms: Option<u64>) -> Result<()> {
        let _ = (lease, due_ms);
        Err(crate::Error::Unsupported {
            operation: "set a run's due time",
            store: std::any::type_name::<Self>(),
        })
    }

    /// The store's clock, in milliseconds since the Unix epoch, where it
    /// has one that every process using it shares (the database server's);
    /// `None` by default (the [clock](crate::clock::Clock) then reads the
    /// process's).
    async fn clock_ms(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// A subscription to the store's wake-ups: a run became due (signalled,
    /// or parked) or ended, told as soon as the store knows, from any
    /// process that writes to it where the store can (Postgres
    /// `LISTEN/NOTIFY`, Redis pub/sub). Workers and
    /// [`Pipeline::wait_for`](crate::Pipeline::wait_for) listen to it
    /// beside their slower poll; the due-index stays the truth, so a missed
    /// event costs only latency. `None` by default (no wake-ups).
    async fn watch(&self) -> Result<Option<RunEvents>> {
        Ok(None)
    }
}

#[async_trait::async_trait]
impl<S: CheckpointStore + ?Sized> CheckpointStore for Arc<S> {
    async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
        (**self).save(checkpoint).await
    }
    async fn load(&self, key: &str) -> Result<Option<Checkpoint>> {
        (**self).load(key).await
    }
    async fn delete(&self, key: &str) -> Result<()> {
        (**self).delete(key).await
    }
    async fn exists(&self, key: &str) -> Result<bool> {
        (**self).exists(key).await
    }
    async fn history(&self, key: &str) -> Result<Vec<Checkpoint>> {
        (**self).history(key).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage> {
        (**self).list_runs(filter).await
    }
    async fn count_runs(&self, filter: &RunFilter) -> Result<Vec<RunCount>> {
        (**self).count_runs(filter).await
    }
    async fn acquire_lease(&self, key: &str, ttl: Duration) -> Result<Lease> {
        (**self).acquire_lease(key, ttl).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        (**self).renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: Lease) -> Result<()> {
        (**self).release_lease(lease).await
    }
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        (**self).save_fenced(checkpoint, lease).await
    }
    async fn delete_fenced(&self, key: &str, lease: &Lease) -> Result<()> {
        (**self).delete_fenced(key, lease).await
    }
    async fn begin_run(&self, first: Checkpoint, ttl: Duration, begin: Begin) -> Result<Begun> {
        (**self).begin_run(first, ttl, begin).await
    }
    async fn finish_run(&self, last: Checkpoint, lease: Lease, delete: bool) -> Result<()> {
        (**self).finish_run(last, lease, delete).await
    }
    async fn cancel(&self, key: &str) -> Result<()> {
        (**self).cancel(key).await
    }
    async fn mark(&self, key: &str, mark: Mark) -> Result<()> {
        (**self).mark(key, mark).await
    }
    async fn send_signal(&self, key: &str, signal: Signal) -> Result<Delivery> {
        (**self).send_signal(key, signal).await
    }
    async fn take_signal(&self, key: &str, take: &Take, lease: &Lease) -> Result<Decision> {
        (**self).take_signal(key, take, lease).await
    }
    async fn signals(&self, key: &str) -> Result<Vec<Signal>> {
        (**self).signals(key).await
    }
    async fn due_runs(&self, filter: &DueFilter) -> Result<Vec<DueRun>> {
        (**self).due_runs(filter).await
    }
    async fn claim_due(&self, filter: &DueFilter, ttl: Duration) -> Result<Vec<Claimed>> {
        (**self).claim_due(filter, ttl).await
    }
    async fn set_due(&self, lease: &Lease, due_ms: Option<u64>) -> Result<()> {
        (**self).set_due(lease, due_ms).await
    }
    async fn clock_ms(&self) -> Result<Option<u64>> {
        (**self).clock_ms().await
    }
    async fn watch(&self) -> Result<Option<RunEvents>> {
        (**self).watch().await
    }
}
