//! Run ownership.
//!
//! A durable run holds its run id through an [`Ownership`]: the lease, the
//! task that renews it, and a [`LeaseTicket`] of its pipeline's
//! [`LeaseTracker`]. The ownership is shared (reference-counted) with the
//! blocking stage bodies still running for the run ([`KeepLease`], rule 16):
//! the lease is given back when the run and every such body have let go,
//! never while a stage body started for the run is still executing.
//! Dropped runs give it back from a background task whose ticket
//! [`Pipeline::shutdown`](crate::Pipeline::shutdown) waits for (rule 15).
//!
//! For stores with only the four required methods, this module also holds
//! the in-process defaults: the lease table, and the cancel marks (rule 14),
//! both keyed by the store's type and the run's key.

use std::any::TypeId;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, Notify, OwnedMutexGuard};

use super::renew::{Renewal, Renewals};
use super::{Checkpoint, CheckpointStore, cancelled_checkpoint, check_run_id};

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
    fn handle(&self) -> Lease {
        Lease::new(self.run_id.clone(), self.token)
    }
}

/// A durable run's ownership of its run id: acquired once, renewed on a timer
/// (every third of the time-to-live, never per stage), released once at the
/// end.
///
/// Shared with the run's blocking stage bodies ([`keep`](Self::keep)): the
/// lease is renewed and held until the run *and* every body still running
/// for it have let go. Whoever lets go last gives it back: the run itself
/// with [`release`](Self::release), awaited; a dropped run or a body that
/// outlived its run from a background task counted by the pipeline's
/// [`LeaseTracker`], so that `Pipeline::shutdown` can wait for it.
pub(crate) struct Ownership {
    held: Arc<Held>,
}

/// What an [`Ownership`] and its [`KeepLease`]s share.
struct Held {
    store: Arc<dyn CheckpointStore>,
    /// `None` once given back.
    lease: Option<Lease>,
    /// Its place among the pipeline's renewals (rule 24: no task per run).
    renewal: Option<Renewal>,
    /// Counts this lease in its pipeline's tracker until it is given back.
    ticket: Option<LeaseTicket>,
    /// Set once [`Ownership::finish`] gave the lease back with the run's
    /// last checkpoint: releasing it again would be a wasted round trip.
    given_back: AtomicBool,
    /// How many blocking stage bodies hold the lease ([`KeepLease::body`]).
    bodies: AtomicUsize,
}

/// Keeps a run's lease held (and renewed) while a blocking stage body runs,
/// even after the run itself returned or was dropped (rule 16).
#[derive(Clone)]
pub(crate) struct KeepLease {
    held: Arc<Held>,
}

impl KeepLease {
    /// What a blocking stage body holds while it runs: the lease, counted
    /// as held by a body, so that the run's end leaves the release to it.
    pub(crate) fn body(&self) -> BodyLease {
        self.held.bodies.fetch_add(1, Ordering::AcqRel);
        BodyLease { keep: self.clone() }
    }
}

/// A blocking stage body's hold on its run's lease: [`KeepLease::body`].
pub(crate) struct BodyLease {
    keep: KeepLease,
}

impl Drop for BodyLease {
    fn drop(&mut self) {
        self.keep.held.bodies.fetch_sub(1, Ordering::AcqRel);
    }
}

impl fmt::Debug for KeepLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeepLease")
            .field("lease", &self.held.lease)
            .finish()
    }
}

impl Ownership {
    /// Takes `run_id` for a run of the pipeline whose leases `tracker` counts.
    ///
    /// # Errors
    /// [`Error::ShutDown`] when the pipeline was shut down (checked, and the
    /// lease counted, before the store is asked, so a shutdown never misses
    /// a lease taken while it waits); the store's errors, e.g.
    /// [`Error::RunIdInUse`].
    pub(crate) async fn acquire(
        store: &Arc<dyn CheckpointStore>,
        run_id: &str,
        ttl: Duration,
        tracker: &LeaseTracker,
    ) -> Result<Self> {
        let ticket = tracker.enter(run_id)?;
        let lease = store.acquire_lease(run_id, ttl).await?;
        Ok(Self::held(store, lease, ttl, tracker, ticket))
    }

    /// Takes the run id of `first` and writes `first`, the run's first
    /// checkpoint, in one call ([`CheckpointStore::begin_run`]); with
    /// [`Begin::IfAbsent`] the second value says whether it was written
    /// (`false`: a run is stored, and the lease is held all the same).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and the errors of the first write.
    pub(crate) async fn begin(
        store: &Arc<dyn CheckpointStore>,
        first: Checkpoint,
        ttl: Duration,
        tracker: &LeaseTracker,
        begin: Begin,
    ) -> Result<(Self, bool)> {
        let ticket = tracker.enter(&first.key())?;
        let begun = store.begin_run(first, ttl, begin).await?;
        let owner = Self::held(store, begun.lease, ttl, tracker, ticket);
        Ok((owner, begun.started))
    }

    fn held(
        store: &Arc<dyn CheckpointStore>,
        lease: Lease,
        ttl: Duration,
        tracker: &LeaseTracker,
        ticket: LeaseTicket,
    ) -> Self {
        let renewal = tracker.inner.renewals.add(store, lease.handle(), ttl);
        Ownership {
            held: Arc::new(Held {
                store: Arc::clone(store),
                lease: Some(lease),
                renewal: Some(renewal),
                ticket: Some(ticket),
                given_back: AtomicBool::new(false),
                bodies: AtomicUsize::new(0),
            }),
        }
    }

    /// Writes the run's last checkpoint `last` and gives the lease back in
    /// one call ([`CheckpointStore::finish_run`]), deleting the run after
    /// the write when `delete`. While a blocking stage body of the run is
    /// still running (rule 16) the lease stays held: `last` is written
    /// (and the run deleted) with fenced calls, and the body gives the lease
    /// back when it returns.
    ///
    /// # Errors
    /// The errors of the writes; the lease is given back all the same.
    pub(crate) async fn finish(&self, last: Checkpoint, delete: bool) -> Result<()> {
        let held = &self.held;
        let lease = self.lease();
        if held.bodies.load(Ordering::Acquire) > 0 || held.given_back.load(Ordering::Acquire) {
            let key = last.key();
            held.store.save_fenced(last, lease).await?;
            if delete {
                held.store.delete_fenced(&key, lease).await?;
            }
            return Ok(());
        }
        held.given_back.store(true, Ordering::Release);
        // renewals stop first: a renewal arriving after the release would
        // be refused, and logged as a lost lease
        if let Some(renewal) = &held.renewal {
            renewal.stop();
        }
        held.store.finish_run(last, lease.handle(), delete).await
    }

    /// The held lease.
    pub(crate) fn lease(&self) -> &Lease {
        // Only `Held::release` and `Held::drop` take it out, and both run
        // once no `Ownership` or `KeepLease` refers to it any more.
        self.held
            .lease
            .as_ref()
            .unwrap_or_else(|| unreachable!("the lease is held until release"))
    }

    /// A holder for a blocking stage body: the lease stays held, and
    /// renewed, until it is dropped too.
    pub(crate) fn keep(&self) -> KeepLease {
        KeepLease {
            held: Arc::clone(&self.held),
        }
    }

    /// Gives the lease back, awaiting the store (unless
    /// [`finish`](Self::finish) did); or, while a blocking stage
    /// body of the run still runs, leaves that to the body (it gives the
    /// lease back in the background when it returns).
    pub(crate) async fn release(self) {
        match Arc::try_unwrap(self.held) {
            Ok(mut held) => held.release().await,
            Err(shared) => {
                if let Some(lease) = &shared.lease {
                    tracing::debug!(
                        run_id = lease.run_id(),
                        token = lease.token(),
                        "a blocking stage body of the run is still running; it keeps the lease until it returns"
                    );
                }
            }
        }
    }
}

impl Held {
    async fn release(&mut self) {
        self.renewal.take();
        let ticket = self.ticket.take();
        if let Some(lease) = self.lease.take() {
            if !*self.given_back.get_mut() {
                give_back(Arc::clone(&self.store), lease).await;
            }
        }
        drop(ticket);
    }
}

impl Drop for Held {
    /// The last holder let go without [`Ownership::release`]: the run was
    /// dropped, or a blocking body outlived it. The lease is given back by a
    /// task on the current runtime that holds the ticket until the store
    /// answers; without a runtime (or when the runtime drops the task before
    /// it runs) the lease lapses after its time-to-live.
    fn drop(&mut self) {
        self.renewal.take();
        let ticket = self.ticket.take();
        let given_back = *self.given_back.get_mut();
        if let Some(lease) = self.lease.take().filter(|_| !given_back) {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let store = Arc::clone(&self.store);
                rt.spawn(async move {
                    give_back(store, lease).await;
                    drop(ticket);
                });
            }
        }
    }
}

async fn give_back(store: Arc<dyn CheckpointStore>, lease: Lease) {
    let (run_id, token) = (lease.run_id().to_owned(), lease.token());
    if let Err(e) = store.release_lease(lease).await {
        tracing::warn!(run_id, token, error = %e.message_with_causes(), "could not release the run's lease; it will expire");
    }
}

/// Counts the leases a pipeline's runs hold or are giving back, and refuses
/// new ones once the pipeline is shut down. Shared by every clone of one
/// built pipeline.
#[derive(Clone, Default)]
pub(crate) struct LeaseTracker {
    inner: Arc<TrackerInner>,
}

#[derive(Default)]
struct TrackerInner {
    state: Mutex<TrackerState>,
    /// Renews the leases counted here, from one task.
    renewals: Arc<Renewals>,
    /// Woken when the count drops to zero.
    idle: Notify,
}

#[derive(Default)]
struct TrackerState {
    held: usize,
    closed: bool,
}

impl fmt::Debug for LeaseTracker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("LeaseTracker")
            .field("held", &state.held)
            .field("closed", &state.closed)
            .finish()
    }
}

impl LeaseTracker {
    fn state(&self) -> std::sync::MutexGuard<'_, TrackerState> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one more lease, unless the pipeline is shut down.
    ///
    /// # Errors
    /// [`Error::ShutDown`] naming `run_id`.
    pub(crate) fn enter(&self, run_id: &str) -> Result<LeaseTicket> {
        let mut state = self.state();
        if state.closed {
            return Err(Error::ShutDown {
                run_id: run_id.to_owned(),
            });
        }
        state.held += 1;
        Ok(LeaseTicket {
            inner: Arc::clone(&self.inner),
        })
    }

    /// [`Error::ShutDown`] once the pipeline is shut down (for runs that take
    /// no lease).
    pub(crate) fn check_open(&self, run_id: &str) -> Result<()> {
        if self.state().closed {
            return Err(Error::ShutDown {
                run_id: run_id.to_owned(),
            });
        }
        Ok(())
    }

    /// Refuses every lease from now on.
    pub(crate) fn close(&self) {
        self.state().closed = true;
    }

    /// How many leases are held or being given back.
    pub(crate) fn held(&self) -> usize {
        self.state().held
    }

    /// Returns once no lease is held or being given back.
    pub(crate) async fn all_released(&self) {
        loop {
            let idle = self.inner.idle.notified();
            tokio::pin!(idle);
            // registered before the count is read: a ticket dropped in
            // between still wakes this waiter
            idle.as_mut().enable();
            if self.held() == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// One lease counted by a [`LeaseTracker`], until dropped.
pub(crate) struct LeaseTicket {
    inner: Arc<TrackerInner>,
}

impl Drop for LeaseTicket {
    fn drop(&mut self) {
        let idle = {
            let mut state = self
                .inner
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            state.held = state.held.saturating_sub(1);
            state.held == 0
        };
        if idle {
            self.inner.idle.notify_waiters();
        }
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

/// The default `cancel`: under the run's lock, loads the checkpoint, saves
/// its cancelled version and marks the run. The mark is set before the
/// save: should the save fail or its future be dropped, the default
/// `save_fenced` finds the mark, sees that the stored checkpoint is not
/// cancelled, and clears it.
pub(crate) async fn cancel_local<S: CheckpointStore + ?Sized>(
    store: &S,
    store_type: TypeId,
    run_id: &str,
) -> Result<()> {
    check_run_id(run_id)?;
    let mut mark = MarkGuard::lock(store_type, run_id).await;
    let cancelled = cancelled_checkpoint(run_id, store.load(run_id).await?)?;
    mark.set(true);
    store.save(cancelled).await
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
        if stored.as_ref().is_some_and(Checkpoint::is_cancelled) {
            return Err(Error::Cancelled { run_id: key });
        }
        mark.set(false);
    }
    let cancelled = checkpoint.is_cancelled();
    store.save(super::appended(stored, checkpoint)?).await?;
    mark.set(cancelled);
    Ok(())
}

/// The default `delete_fenced`: deletes, then clears the run's mark.
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
