//! Durability modes (contract rule 24): when a durable run's checkpoints
//! are written, chosen per pipeline with
//! [`PipelineBuilder::durability`](crate::PipelineBuilder::durability).
//!
//! | mode | a checkpoint before a stage | after a crash | store round trips of a 10-stage run |
//! |---|---|---|---|
//! | [`Sync`](Durability::Sync) (default) | durable before the stage starts | the stage that was running runs again | 11 |
//! | [`Async`](Durability::Async) | sent in the background, without waiting | every stage since the last *acknowledged* checkpoint runs again | 2 to 11 (writes coalesce) |
//! | [`Exit`](Durability::Exit) | not written | the run starts over from its first stage (`start` it again) | 2 or 3 |
//!
//! In every mode:
//! - a run's lease is taken (fencing, rule 6) before its first stage runs,
//!   and every write is fenced by it;
//! - stage bodies run at least once;
//! - the run's last checkpoint (completed, failed) is durable before
//!   `invoke`, `start` or `resume` returns: no completion or failure a caller
//!   was told of is lost;
//! - [`Async`](Durability::Async): every checkpoint sent is acknowledged (or
//!   its error returned) before the run returns, fails or ends cancelled.
//!
//! What the faster modes give up (and, in both, a run's
//! [history](crate::Pipeline::history) holds only the checkpoints written:
//! fewer steps to replay or fork from):
//! - `Async`: a crash re-runs more (see the table), and a cancel
//!   (rule 14) reaches the run only as the store's refusal of one of its
//!   writes: the run starts no stage once that refusal is back (its next
//!   checkpoint returns [`Error::Cancelled`]), but the stages that start
//!   before it is back still run. Those are the stages that start within
//!   about `async_flush` and one write's round trip of the end of the
//!   stage running at the cancel; with quick stages and the default
//!   flush, often all the remaining ones, and the refused write is the
//!   run's last (its completion, never stored). The first
//!   checkpoint is still written before the first stage (with the lease,
//!   in one call), so a crashed run can always be found, listed and
//!   recovered. Writes go out one at a time: a checkpoint waits
//!   [`async_flush`](crate::PipelineBuilder::async_flush) (default
//!   [`DEFAULT_ASYNC_FLUSH`], 2 ms) and any write in flight before it is
//!   sent, and a newer checkpoint made meanwhile replaces it. So a run of
//!   quick stages writes its first and last checkpoints only, and a stage
//!   that runs for longer than that has the checkpoint before it written
//!   while it runs.
//! - `Exit`: while a run goes on, nothing of it is stored: a crashed run
//!   is not listed and cannot be resumed or recovered (`start` runs it
//!   again from the beginning), and a cancel of a running run finds nothing
//!   stored until the run ends (the run's last write is then refused). For
//!   short runs whose stages are cheap to repeat.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::context::Lineage;
use crate::error::{Error, Result};
use crate::interpret::ownership::KeepLease;
use crate::interpret::tail::Tail;
use crate::store::{Checkpoint, CheckpointStore, Lease};

/// How long an [`Async`](Durability::Async) checkpoint waits before it is
/// sent, by default: a newer one made meanwhile replaces it.
pub const DEFAULT_ASYNC_FLUSH: Duration = Duration::from_millis(2);

/// The longest [`async_flush`](crate::PipelineBuilder::async_flush): one hour.
pub const MAX_ASYNC_FLUSH: Duration = Duration::from_secs(3600);

/// When a durable run's checkpoints are written (contract rule 24); see the
/// [module](self) for what each mode keeps and gives up.
///
/// ```
/// use fluxio_core::Durability;
/// # fn demo(p: fluxio_core::PipelineBuilder) -> fluxio_core::Result<fluxio_core::Pipeline> {
/// let pipeline = p.durability(Durability::Async).build()?;
/// # Ok(pipeline) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Durability {
    /// Every checkpoint is durable before its stage starts (rules 1-9).
    #[default]
    Sync,
    /// Checkpoints before stages are written in the background, one at a
    /// time, each after a short wait in which a newer one replaces it; all
    /// are acknowledged before the run ends.
    Async,
    /// Only the run's end is written: failure, cancel, completion.
    Exit,
}

impl Durability {
    /// The mode's name: `sync`, `async` or `exit`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
            Durability::Exit => "exit",
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Durability {
    type Err = Error;

    /// Parses `sync`, `async` or `exit` (any case).
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "sync" => Ok(Durability::Sync),
            "async" => Ok(Durability::Async),
            "exit" => Ok(Durability::Exit),
            _ => Err(Error::InvalidSetting {
                setting: "durability",
                message: format!("{s:?} is not one of sync, async, exit"),
            }),
        }
    }
}

/// An `Async` run's background writer: the checkpoint waiting to be sent,
/// the write in flight (on a task of its own while there is one), and the
/// first error a write met.
pub(crate) struct AsyncWriter {
    /// What the writing task shares with the run.
    shared: Arc<Shared>,
    /// The run's lease, held by a writing task until its write returns: a
    /// run dropped mid-write gives its lease back only after it (a write
    /// landing after another owner took the run over could otherwise land
    /// on a store whose leases cannot be lost).
    keep: KeepLease,
}

struct Shared {
    state: Mutex<State>,
    /// Woken when the writing task ends.
    idle: Notify,
    /// Wakes the writing task from its flush wait: the run is ending.
    wake: Notify,
    store: Arc<dyn CheckpointStore>,
    /// The run id and fencing token (the lease itself stays with the run).
    lease: Lease,
    tail: Arc<Mutex<Tail>>,
    version: String,
    /// How long a checkpoint waits before it is sent, so that newer ones
    /// made meanwhile replace it ([`PipelineBuilder::async_flush`](crate::PipelineBuilder::async_flush)).
    flush: Duration,
}

#[derive(Default)]
struct State {
    /// The newest checkpoint not yet sent, and its context's lineage.
    pending: Option<(Checkpoint, Lineage)>,
    /// A task is sending (or about to send) `pending`.
    writing: bool,
    /// The first refused or failed write: the run stops with it.
    failed: Option<Error>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl AsyncWriter {
    pub(crate) fn new(
        store: Arc<dyn CheckpointStore>,
        lease: Lease,
        tail: Arc<Mutex<Tail>>,
        version: &str,
        flush: Duration,
        keep: KeepLease,
    ) -> Self {
        let shared = Shared {
            state: Mutex::default(),
            idle: Notify::new(),
            wake: Notify::new(),
            store,
            lease,
            tail,
            version: version.to_owned(),
            flush,
        };
        AsyncWriter {
            shared: Arc::new(shared),
            keep,
        }
    }

    /// Hands `cp` over to be written in the background (replacing one
    /// still waiting).
    ///
    /// # Errors
    /// The error an earlier background write met ([`Error::Cancelled`],
    /// [`Error::LeaseLost`], a store error): the run stops with it.
    pub(crate) fn submit(&self, cp: Checkpoint, lineage: Lineage) -> Result<()> {
        let mut state = self.shared.state();
        if let Some(e) = state.failed.take() {
            return Err(e);
        }
        state.pending = Some((cp, lineage));
        if !state.writing {
            state.writing = true;
            drop(state);
            let task = write_pending(Arc::clone(&self.shared), self.keep.clone());
            // durable runs check for a runtime before they start
            tokio::spawn(task);
        }
        Ok(())
    }

    /// Drops the checkpoint still waiting (the run's last one replaces
    /// it) and waits for the write in flight.
    ///
    /// # Errors
    /// The error a background write met.
    pub(crate) async fn drain(&self) -> Result<()> {
        loop {
            let idle = self.shared.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            {
                let mut state = self.shared.state();
                state.pending = None;
                if !state.writing {
                    return state.failed.take().map_or(Ok(()), Err);
                }
            }
            // a task waiting to flush has nothing left to send: it ends
            self.shared.wake.notify_one();
            idle.await;
        }
    }
}

impl Drop for AsyncWriter {
    /// A run dropped mid-way: nothing more is sent (a write in flight
    /// finishes on its own).
    fn drop(&mut self) {
        self.shared.state().pending = None;
    }
}

/// Sends the pending checkpoint, and the next one made meanwhile, until
/// there is none or a write fails.
async fn write_pending(shared: Arc<Shared>, keep: KeepLease) {
    let Shared {
        store,
        lease,
        tail,
        version,
        flush,
        ..
    } = &*shared;
    let lock = || tail.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if !flush.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(*flush) => {}
                () = shared.wake.notified() => {}
            }
        }
        let (mut cp, lineage) = {
            let mut state = shared.state();
            let Some(cp) = state.pending.take() else {
                // under the lock: a checkpoint submitted from now on
                // starts another task
                state.writing = false;
                break;
            };
            cp
        };
        let delta = lock().stamp(&mut cp, lineage);
        let (seq, context, full) = (cp.seq, cp.context.clone(), cp.change.is_full());
        match store.save_fenced(cp, lease).await {
            Ok(()) => lock().advance(seq, context, full, delta, version, lineage),
            Err(e) => {
                let mut state = shared.state();
                state.pending = None;
                state.failed = Some(e);
                state.writing = false;
                break;
            }
        }
    }
    shared.idle.notify_waiters();
    drop(keep);
}
