//! Run ownership, the running side of a lease.
//!
//! A durable run holds its run id through an [`Ownership`]: the lease, its
//! place in the pipeline's renewals ([`super::renew`]), and a [`LeaseTicket`]
//! of its pipeline's [`LeaseTracker`]. The ownership is shared
//! (reference-counted) with the blocking stage bodies still running for the
//! run ([`KeepLease`], rule 16): the lease is given back when the run and
//! every such body have let go, never while a stage body started for the run
//! is still executing. Dropped runs give it back from a background task
//! whose ticket [`Pipeline::shutdown`](crate::Pipeline::shutdown) waits for
//! (rule 15).
//!
//! What a store implements and uses (the [`Lease`] itself, the trait's
//! in-process default leases) stays in [`crate::store`].

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use super::renew::{Renewal, Renewals};
use crate::error::{Error, Result};
use crate::store::{Begin, Checkpoint, CheckpointStore, Lease};

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

    /// Holds `lease`, which the caller took already, for a run of the
    /// pipeline whose leases `tracker` counts.
    ///
    /// # Errors
    /// [`Error::ShutDown`] when the pipeline was shut down: the lease is
    /// given back first.
    pub(crate) async fn adopt(
        store: &Arc<dyn CheckpointStore>,
        lease: Lease,
        ttl: Duration,
        tracker: &LeaseTracker,
    ) -> Result<Self> {
        match tracker.enter(lease.run_id()) {
            Ok(ticket) => Ok(Self::held(store, lease, ttl, tracker, ticket)),
            Err(e) => {
                if let Err(released) = store.release_lease(lease).await {
                    tracing::warn!(error = %released, "giving back a claimed lease failed");
                }
                Err(e)
            }
        }
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

impl LeaseTracker {
    /// Renews `lease`, which is not a run's (a queue's slot, rule 31),
    /// with the runs' leases until the returned [`Renewal`] is dropped.
    pub(crate) fn renew(
        &self,
        store: &Arc<dyn CheckpointStore>,
        lease: &Lease,
        ttl: Duration,
    ) -> Renewal {
        self.inner.renewals.add(store, lease.handle(), ttl)
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
