//! Lease renewal for all of a pipeline's runs from one task (rule 24).
//!
//! A durable run registers its lease here when it takes it and leaves when
//! it gives it back. One task per pipeline (started with the first lease,
//! ended with the last) sleeps until the earliest renewal is due and renews
//! every lease that is due then, at most [`AT_ONCE`] at a time. A run
//! therefore costs an entry in a map, not a task of its own: ten thousand
//! parked runs are ten thousand entries and one timer.
//!
//! Each lease is renewed every third of its time-to-live, as before: two
//! renewals can fail (a slow store, a busy runtime) before it lapses. A
//! renewal refused with [`Error::LeaseLost`] ends that lease's entry (the
//! run learns of it from its next fenced write); any other error is retried
//! at the next period.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::Error;
use crate::store::{CheckpointStore, Lease};

/// How many renewals one pass sends at once.
const AT_ONCE: usize = 64;

/// The leases one pipeline's runs hold, and the task that renews them.
#[derive(Default)]
pub(crate) struct Renewals {
    state: Mutex<State>,
    /// Woken when a lease is added that is due before the task's timer.
    added: Notify,
}

#[derive(Default)]
struct State {
    next_id: u64,
    entries: HashMap<u64, Entry>,
    /// The renewing task, while there are leases to renew.
    task: Option<JoinHandle<()>>,
}

struct Entry {
    store: Arc<dyn CheckpointStore>,
    /// The run id and token, without the in-process guard.
    lease: Arc<Lease>,
    ttl: Duration,
    due: Instant,
}

/// A lease's place in [`Renewals`]: dropping it stops the renewals.
pub(crate) struct Renewal {
    id: u64,
    renewals: Weak<Renewals>,
}

impl Renewal {
    /// Stops the renewals now (dropping it does too).
    pub(crate) fn stop(&self) {
        if let Some(renewals) = self.renewals.upgrade() {
            renewals.state().entries.remove(&self.id);
        }
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        self.stop();
    }
}

fn period(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(1))
}

impl Renewals {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Renews `lease` (a handle: run id and token) every third of `ttl`
    /// until the returned [`Renewal`] is dropped. Needs a tokio runtime
    /// (durable runs check for one before they take a lease).
    pub(crate) fn add(
        self: &Arc<Self>,
        store: &Arc<dyn CheckpointStore>,
        lease: Lease,
        ttl: Duration,
    ) -> Renewal {
        let mut state = self.state();
        let id = state.next_id;
        state.next_id = state.next_id.wrapping_add(1);
        state.entries.insert(
            id,
            Entry {
                store: Arc::clone(store),
                lease: Arc::new(lease),
                ttl,
                due: Instant::now() + period(ttl),
            },
        );
        // a task whose runtime was shut down is finished: start another
        let running = state.task.as_ref().is_some_and(|t| !t.is_finished());
        if running {
            drop(state);
            self.added.notify_one();
        } else if let Ok(rt) = tokio::runtime::Handle::try_current() {
            state.task = Some(rt.spawn(run(Arc::downgrade(self))));
        }
        Renewal {
            id,
            renewals: Arc::downgrade(self),
        }
    }

    /// How many leases are being renewed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.state().entries.len()
    }
}

/// The renewing task: ends when its pipeline is gone or holds no lease.
async fn run(renewals: Weak<Renewals>) {
    loop {
        let (due_now, next) = {
            let Some(r) = renewals.upgrade() else { return };
            let mut state = r.state();
            if state.entries.is_empty() {
                // under the lock: a lease added after this starts a new task
                state.task = None;
                return;
            }
            let now = Instant::now();
            let due_now: Vec<Due> = state
                .entries
                .iter()
                .filter(|(_, e)| e.due <= now)
                .map(|(id, e)| (*id, Arc::clone(&e.store), Arc::clone(&e.lease), e.ttl))
                .collect();
            for (id, _, _, ttl) in &due_now {
                if let Some(e) = state.entries.get_mut(id) {
                    e.due = now + period(*ttl);
                }
            }
            let next = state.entries.values().map(|e| e.due).min();
            (due_now, next)
        };
        if !due_now.is_empty() {
            // at most AT_ONCE in flight; boxed, so the task's future is
            // `Send` whatever the store's future is made of
            let mut waiting = due_now.into_iter();
            let mut in_flight: FuturesUnordered<BoxFuture<'static, Renewed>> =
                waiting.by_ref().take(AT_ONCE).map(renew).collect();
            let mut outcomes = Vec::new();
            while let Some(renewed) = in_flight.next().await {
                outcomes.push(renewed);
                in_flight.extend(waiting.next().map(renew));
            }
            let Some(r) = renewals.upgrade() else { return };
            let mut state = r.state();
            for (id, lease, renewed) in outcomes {
                // a lease given back during the pass is no news
                if !state.entries.contains_key(&id) {
                    continue;
                }
                match renewed {
                    Ok(()) => {}
                    Err(Error::LeaseLost { .. }) => {
                        tracing::warn!(
                            run_id = lease.run_id(),
                            token = lease.token(),
                            "the run lost its lease"
                        );
                        state.entries.remove(&id);
                    }
                    Err(e) => {
                        tracing::warn!(run_id = lease.run_id(), error = %e, "could not renew the run's lease; retrying");
                    }
                }
            }
            continue;
        }
        let Some(next) = next else { continue };
        let added = {
            let Some(r) = renewals.upgrade() else { return };
            // a lease added from now on wakes the task, so it is not missed
            let r2 = Arc::clone(&r);
            async move { r2.added.notified().await }
        };
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = added => {}
        }
    }
}

type Due = (u64, Arc<dyn CheckpointStore>, Arc<Lease>, Duration);

type Renewed = (u64, Arc<Lease>, crate::Result<()>);

fn renew((id, store, lease, ttl): Due) -> BoxFuture<'static, Renewed> {
    Box::pin(async move {
        let renewed = store.renew_lease(&lease, ttl).await;
        (id, lease, renewed)
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::store::InMemoryStore;

    /// An in-memory store that counts renewals and can refuse them.
    #[derive(Debug, Default)]
    struct Counting {
        inner: InMemoryStore,
        renewals: AtomicUsize,
        lose: std::sync::Mutex<Option<String>>,
    }

    #[async_trait::async_trait]
    impl CheckpointStore for Counting {
        async fn save(&self, cp: crate::Checkpoint) -> crate::Result<()> {
            self.inner.save(cp).await
        }
        async fn load(&self, run_id: &str) -> crate::Result<Option<crate::Checkpoint>> {
            self.inner.load(run_id).await
        }
        async fn delete(&self, run_id: &str) -> crate::Result<()> {
            self.inner.delete(run_id).await
        }
        async fn exists(&self, run_id: &str) -> crate::Result<bool> {
            self.inner.exists(run_id).await
        }
        async fn renew_lease(&self, lease: &Lease, _ttl: Duration) -> crate::Result<()> {
            self.renewals.fetch_add(1, Ordering::SeqCst);
            let lost = self.lose.lock().unwrap_or_else(PoisonError::into_inner);
            if lost.as_deref() == Some(lease.run_id()) {
                return Err(Error::LeaseLost {
                    run_id: lease.run_id().to_owned(),
                    token: lease.token(),
                });
            }
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rule24_one_task_renews_every_lease_a_third_of_its_ttl_apart() {
        let counting = Arc::new(Counting::default());
        let store: Arc<dyn CheckpointStore> = counting.clone();
        let renewals = Arc::new(Renewals::default());
        let ttl = Duration::from_secs(3);
        let held: Vec<Renewal> = (0..1000)
            .map(|i| renewals.add(&store, Lease::new(format!("run-{i}"), 1), ttl))
            .collect();
        assert_eq!(renewals.len(), 1000);
        let task_alive = || {
            renewals
                .state()
                .task
                .as_ref()
                .is_some_and(|t| !t.is_finished())
        };
        assert!(task_alive(), "one task renews them");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            counting.renewals.load(Ordering::SeqCst),
            0,
            "none is due yet"
        );
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            counting.renewals.load(Ordering::SeqCst),
            1000,
            "each once after ttl/3"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(counting.renewals.load(Ordering::SeqCst), 2000);

        // a lost lease leaves the renewals; the others go on
        *counting.lose.lock().unwrap_or_else(PoisonError::into_inner) = Some("run-7".into());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(renewals.len(), 999);
        drop(held);
        assert_eq!(renewals.len(), 0, "a dropped renewal stops at once");
        let before = counting.renewals.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(counting.renewals.load(Ordering::SeqCst), before);
        assert!(!task_alive(), "the task ends with the last lease");

        // and a new lease starts it again
        let again = renewals.add(&store, Lease::new("again", 2), ttl);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(counting.renewals.load(Ordering::SeqCst), before + 1);
        drop(again);
    }

    #[tokio::test(start_paused = true)]
    async fn rule24_a_lease_added_while_the_task_sleeps_is_renewed_on_time() {
        let counting = Arc::new(Counting::default());
        let store: Arc<dyn CheckpointStore> = counting.clone();
        let renewals = Arc::new(Renewals::default());
        // a long lease puts the task to sleep for 20 s ...
        let _long = renewals.add(&store, Lease::new("long", 1), Duration::from_secs(60));
        tokio::time::sleep(Duration::from_millis(10)).await;
        // ... and a short one must still be renewed after 1 s
        let _short = renewals.add(&store, Lease::new("short", 1), Duration::from_secs(3));
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(counting.renewals.load(Ordering::SeqCst), 1);
    }
}
