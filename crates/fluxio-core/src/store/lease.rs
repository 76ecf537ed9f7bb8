//! What a backend implements and uses for run ownership: [`Lease`] and
//! the one-call [`Begin`]/[`Begun`] of a run's start (contract rule 24).
//!
//! For stores with only the four required methods, this module also holds
//! the in-process defaults: the lease table, and the cancel marks (rule 14),
//! both keyed by the store's type and the run's key. How a running pipeline
//! holds, renews and gives back its leases is the interpreter's side:
//! `interpret/ownership.rs` and `interpret/renew.rs`.

use std::any::TypeId;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use super::{Checkpoint, CheckpointStore, check_run_id};

use crate::error::{Error, Result};

/// Ownership of a run id, held by the run that executes it.
///
/// `token` is a fencing token: it grows with every acquisition of the same
/// run id, so a store can refuse writes from an owner that lost its lease.
pub struct Lease {
    run_id: String,
    token: u64,
    _local: Option<LocalLease>,
}

/// What [`CheckpointStore::begin_run`] does with a run already stored
/// under the key of the run it begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Begin {
    /// Replace it: the new run starts fresh
    /// ([`Pipeline::invoke`](crate::Pipeline::invoke)).
    Replace,
    /// Keep it and write nothing: the caller holds the lease and decides
    /// what to do with the stored run
    /// ([`Pipeline::start`](crate::Pipeline::start)).
    IfAbsent,
}

/// What [`CheckpointStore::begin_run`] did: it took `lease`, and wrote the
/// first checkpoint when `started` (always for [`Begin::Replace`]; for
/// [`Begin::IfAbsent`] only when nothing was stored).
#[derive(Debug)]
#[non_exhaustive]
pub struct Begun {
    /// The run's lease, held by the caller from now on.
    pub lease: Lease,
    /// Whether the first checkpoint was written.
    pub started: bool,
}

impl Begun {
    /// A begun run: `lease` taken, the first checkpoint written when
    /// `started`. For stores that override
    /// [`begin_run`](CheckpointStore::begin_run).
    #[must_use]
    pub fn new(lease: Lease, started: bool) -> Self {
        Begun { lease, started }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("run_id", &self.run_id)
            .field("token", &self.token)
            .finish()
    }
}

impl Lease {
    /// A lease on `run_id` with fencing `token`, for stores that keep leases
    /// themselves.
    #[must_use]
    pub fn new(run_id: impl Into<String>, token: u64) -> Self {
        Lease {
            run_id: run_id.into(),
            token,
            _local: None,
        }
    }

    /// The run id this lease owns.
    #[must_use]
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The fencing token.
    #[must_use]
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The same run id and token, without the in-process guard (for the
    /// renewal task; dropping it frees nothing).
    pub(crate) fn handle(&self) -> Lease {
        Lease::new(self.run_id.clone(), self.token)
    }
}

/// The in-process table is keyed by the store's type and the run id: clones
/// of one store (an `Arc` inside, the usual shape) live at different
/// addresses but share their checkpoints, so an address would not do.
type Key = (TypeId, String);

fn table() -> &'static Mutex<HashSet<Key>> {
    static TABLE: OnceLock<Mutex<HashSet<Key>>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default)
}

/// Removes its entry from the in-process table when dropped, so a run whose
/// future is dropped mid-way (cancelled) frees its run id.
struct LocalLease(Key);

impl Drop for LocalLease {
    fn drop(&mut self) {
        table()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.0);
    }
}

pub(crate) fn acquire_local(store: TypeId, run_id: &str) -> Result<Lease> {
    static TOKENS: AtomicU64 = AtomicU64::new(1);
    let key = (store, run_id.to_owned());
    let inserted = table()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key.clone());
    if !inserted {
        return Err(Error::RunIdInUse {
            run_id: run_id.to_owned(),
        });
    }
    Ok(Lease {
        run_id: run_id.to_owned(),
        token: TOKENS.fetch_add(1, Ordering::Relaxed),
        _local: Some(LocalLease(key)),
    })
}

// ---- the in-process cancel marks of a four-method store (rule 14) ----------

/// One run's entry: whether a cancel marked it, read and written only under
/// its lock, which the cancel and the fenced writes of the run take in turn.
type Mark = Arc<AsyncMutex<bool>>;

/// The marks, keyed like the lease table. An entry lives while it is marked
/// or someone holds or waits for its lock.
fn marks() -> &'static Mutex<HashMap<Key, Mark>> {
    static MARKS: OnceLock<Mutex<HashMap<Key, Mark>>> = OnceLock::new();
    MARKS.get_or_init(Mutex::default)
}

/// The lock of one run's mark, held across the store calls of a default
/// `cancel`, `save_fenced` or `delete_fenced`: within one process they never
/// interleave for one run, so a fenced save lands before a cancel or is
/// refused after it. Different runs never wait for each other.
struct MarkGuard {
    key: Key,
    /// Our reference to the entry, until dropped (also when the future is
    /// dropped while waiting for the lock).
    mark: Option<Mark>,
    held: Option<OwnedMutexGuard<bool>>,
}

impl MarkGuard {
    async fn lock(store: TypeId, run_id: &str) -> MarkGuard {
        let key = (store, run_id.to_owned());
        let mark = Arc::clone(
            marks()
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(key.clone())
                .or_default(),
        );
        let mut guard = MarkGuard {
            key,
            mark: Some(Arc::clone(&mark)),
            held: None,
        };
        guard.held = Some(mark.lock_owned().await);
        guard
    }

    fn is_marked(&self) -> bool {
        self.held.as_deref().copied().unwrap_or(false)
    }

    fn set(&mut self, marked: bool) {
        if let Some(held) = self.held.as_mut() {
            **held = marked;
        }
    }
}

impl Drop for MarkGuard {
    fn drop(&mut self) {
        self.held = None;
        self.mark = None;
        let mut marks = marks().lock().unwrap_or_else(PoisonError::into_inner);
        // Others clone the entry only under this mutex: with no other
        // reference, nobody holds or waits for its lock, and an unmarked
        // entry can go.
        let unused = marks.get(&self.key).is_some_and(|mark| {
            Arc::strong_count(mark) == 1 && mark.try_lock().is_ok_and(|marked| !*marked)
        });
        if unused {
            marks.remove(&self.key);
        }
    }
}

/// The default `mark`: under the run's lock, loads the checkpoint, saves
/// its [marked](super::marked_checkpoint) version and marks the run when
/// that is cancelled or paused (clears the mark when unpaused). The mark
/// is set before the save: should the save fail or its future be dropped,
/// the default `save_fenced` finds the mark, sees that the stored
/// checkpoint is neither cancelled nor paused, and clears it.
pub(crate) async fn mark_local<S: CheckpointStore + ?Sized>(
    store: &S,
    store_type: TypeId,
    run_id: &str,
    how: super::Mark,
) -> Result<()> {
    check_run_id(run_id)?;
    let mut mark = MarkGuard::lock(store_type, run_id).await;
    let marked = super::marked_checkpoint(run_id, store.load(run_id).await?, how)?;
    let fences = marked.status.fences_owner();
    if fences {
        mark.set(true);
    }
    store.save(marked).await?;
    mark.set(fences);
    Ok(())
}

/// The default `save_fenced`: refuses a run that is marked and whose stored
/// checkpoint is still cancelled (a plain `save` or `delete` may have
/// replaced or removed it since: then the mark goes), and otherwise saves
/// the stored blob with `checkpoint` appended to its journal: one load and
/// one save.
pub(crate) async fn save_local<S: CheckpointStore + ?Sized>(
    store: &S,
    store_type: TypeId,
    checkpoint: Checkpoint,
) -> Result<()> {
    let key = checkpoint.key();
    let mut mark = MarkGuard::lock(store_type, &key).await;
    let stored = store.load(&key).await?;
    if mark.is_marked() {
        let refused = stored
            .as_ref()
            .and_then(|cp| super::fenced_refusal(&key, cp.status));
        if let Some(refused) = refused {
            return Err(refused);
        }
        mark.set(false);
    }
    let fences = checkpoint.status.fences_owner();
    store.save(super::appended(stored, checkpoint)?).await?;
    mark.set(fences);
    Ok(())
}

/// The default `delete_fenced`: deletes, then clears the run's mark.
/// [`CheckpointStore::send_signal`]'s default: the mailbox in the run's
/// blob, changed under the run's mark lock (which the default fenced writes
/// and cancels take too).
pub(crate) async fn signal_local<S: CheckpointStore + ?Sized>(
    store: &S,
    store_type: TypeId,
    key: &str,
    signal: super::Signal,
) -> Result<super::Delivery> {
    check_run_id(key)?;
    let _mark = MarkGuard::lock(store_type, key).await;
    let stored = store.load(key).await?;
    let mailbox = stored.as_ref().map_or(&[][..], |cp| cp.signals.as_slice());
    if let Some(answer) = super::deliver(key, stored.as_ref(), mailbox, &signal)? {
        return Ok(answer);
    }
    let Some(mut latest) = stored else {
        return Err(Error::CheckpointNotFound {
            run_id: key.to_owned(),
        });
    };
    latest.signals.push(signal);
    store.save(latest).await?;
    Ok(super::Delivery::Delivered)
}

/// [`CheckpointStore::take_signal`]'s default: [`decide`](super::decide)
/// over the blob's mailbox under the run's mark lock, saved when it changed.
pub(crate) async fn take_local<S: CheckpointStore + ?Sized>(
    store: &S,
    store_type: TypeId,
    key: &str,
    take: &super::Take,
) -> Result<super::Decision> {
    let _mark = MarkGuard::lock(store_type, key).await;
    let Some(mut latest) = store.load(key).await? else {
        return Err(Error::CheckpointNotFound {
            run_id: key.to_owned(),
        });
    };
    let before = latest.signals.clone();
    let decision = super::decide(&mut latest.signals, take);
    if latest.signals != before {
        store.save(latest).await?;
    }
    Ok(decision)
}

pub(crate) async fn delete_local<S: CheckpointStore + ?Sized>(
    store: &S,
    store_type: TypeId,
    run_id: &str,
) -> Result<()> {
    let mut mark = MarkGuard::lock(store_type, run_id).await;
    store.delete(run_id).await?;
    mark.set(false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Unique;

    #[tokio::test]
    async fn a_mark_entry_lives_while_marked_or_locked() {
        let ty = TypeId::of::<Unique>();
        let count = || {
            marks()
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .keys()
                .filter(|(t, _)| *t == ty)
                .count()
        };
        let mut first = MarkGuard::lock(ty, "r").await;
        assert_eq!(count(), 1);
        let waiting = tokio::spawn(async move {
            let guard = MarkGuard::lock(ty, "r").await;
            guard.is_marked()
        });
        tokio::task::yield_now().await;
        first.set(true);
        drop(first);
        assert!(waiting.await.expect("no panic"), "the mark was seen");
        assert_eq!(count(), 1, "a marked entry stays");
        let mut again = MarkGuard::lock(ty, "r").await;
        again.set(false);
        drop(again);
        assert_eq!(count(), 0, "an unmarked, unused entry goes");

        // a lock whose future is dropped while it waits leaves nothing
        let held = MarkGuard::lock(ty, "s").await;
        let dropped = tokio::time::timeout(
            std::time::Duration::from_millis(10),
            MarkGuard::lock(ty, "s"),
        )
        .await;
        assert!(dropped.is_err(), "it waited");
        drop(held);
        assert_eq!(count(), 0);
    }
}
