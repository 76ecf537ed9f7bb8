//! The worker a service runs beside its pipelines: it continues the runs
//! that are due (contract rule 27) and finishes what dead workers left
//! (contract rule 22).
//!
//! A [`RecoveryWorker`] holds one or more pipelines (several versions of
//! one name too) and does two things, a bounded number of runs at a time:
//!
//! - **Due runs.** A sleeping run whose wake time passed, and a waiting run
//!   that was signalled or whose deadline passed, is *due*: the store keeps
//!   it in its due-index ([`CheckpointStore::due_runs`]).
//!   The worker asks for the runs due now, and for the earliest due next,
//!   every [`due_poll`](RecoveryWorkerBuilder::due_poll) (250 ms by
//!   default), at once when its store tells of a signal or a parked run
//!   ([`CheckpointStore::watch`]), and when
//!   a manual [clock](crate::clock::Clock) it runs on is advanced; it sleeps
//!   until the earliest otherwise. Each due run is claimed through its lease
//!   and continued exactly once across workers; a worker killed while it
//!   continues one leaves it due (or abandoned), for the next.
//! - **Abandoned runs.** A worker that crashed, was killed or lost its
//!   network mid-run leaves its runs *abandoned*: running, with nobody
//!   holding their lease. At start and then on an
//!   [interval](RecoveryWorkerBuilder::interval), the worker lists the
//!   abandoned runs of its pipelines (and, when its [`RecoveryPolicy`] says
//!   so, the failed ones) and resumes them.
//!
//! - **Exactly one worker resumes a run.** A run is claimed through its
//!   lease, the one a resume takes anyway; holding it, the worker reads the
//!   run again and resumes it only if it still needs recovering, so a run
//!   another worker finished or retried since it was listed is left alone.
//! - **Backoff.** A run is recovered no sooner than
//!   [`backoff`](RecoveryPolicy::backoff) after its last write, doubling
//!   with each attempt of its stage up to a ceiling, so a run that keeps
//!   failing does not keep a worker busy. A run listed before its backoff
//!   ended, or that failed again when the worker resumed it, is not left
//!   for a later sweep: holding its lease, the worker writes when it is
//!   due into the store's due-index
//!   ([`CheckpointStore::set_due`], on the pipeline's
//!   [clock](crate::clock::Clock), so a test clock's advance fires it), and
//!   a worker claims it then as it claims a due sleep. A store without a
//!   due-index leaves it to the sweep after its backoff.
//! - **Giving up.** A run whose stage already had
//!   [`max_attempts`](RecoveryPolicy::max_attempts) attempts is not resumed
//!   again: it is marked [`RunStatus::NeedsAttention`]
//!   and waits for an operator (`fluxio runs retry`, or
//!   [`retry_run`](crate::store::retry_run)). Crashes count too: each resume
//!   writes its attempt before the stage runs, so a run that kills its
//!   worker every time is caught.
//! - **Other versions are left alone.** A run whose version none of the
//!   worker's pipelines runs (nor [holds](crate::Pipeline::hold)) is
//!   reported ([`RecoveryEvent::NotHeld`], and a `tracing` warning) once per
//!   worker, not touched: a worker of the next deploy finishes it.
//! - **Shutdown.** [`WorkerHandle::shutdown`] stops taking runs, waits for
//!   the ones in flight for a grace period, then drops the rest (a resume
//!   repeats the stage they were in); their leases go back to the store.
//!
//! ```
//! use std::time::Duration;
//! use fluxio_core::recovery::{RecoveryPolicy, RecoveryWorker};
//! use fluxio_core::InMemoryStore;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> fluxio_core::Result<()> {
//! # // `fluxio::pipeline![...]` builds real ones; this one is empty
//! let orders = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
//!     .name("orders")
//!     .store(InMemoryStore::new())
//!     .build()?;
//! let worker = RecoveryWorker::builder()
//!     .pipeline(orders)
//!     .interval(Duration::from_secs(30))
//!     .concurrency(16)
//!     .policy(RecoveryPolicy::new().max_attempts(5).retry_failed(true))
//!     .build()?;
//! // in a service: runs beside it until shutdown
//! let handle = worker.clone().spawn()?;
//! handle.shutdown(Duration::from_secs(10)).await?;
//! // or one pass over what is there now
//! let sweep = worker.run_once().await?;
//! assert_eq!(sweep.resumed, 0);
//! # Ok(()) }
//! ```

mod handle;
mod policy;
mod queued;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

pub use handle::WorkerHandle;
pub use policy::RecoveryPolicy;

use crate::error::{Error, Result};
use crate::pipeline::{Claim, Pipeline, Recovered};
use crate::store::{
    CheckpointStore, Claimed, DueFilter, DueRun, Lease, MAX_LIST_LIMIT, RunFilter, RunState,
    RunStatus, RunSummary,
};
use handle::Wakeups;
use policy::Found;

/// What a worker did, for [`RecoveryWorkerBuilder::on_event`] (each is also
/// logged with `tracing`).
#[derive(Debug)]
#[non_exhaustive]
pub enum RecoveryEvent {
    /// The run `key` was resumed and completed.
    Recovered {
        /// The run's store key (`pipeline/run_id`).
        key: String,
    },
    /// The run `key` was resumed and failed again (or was cancelled
    /// meanwhile): `error` says how.
    Failed {
        /// The run's store key.
        key: String,
        /// How the resume ended.
        error: Arc<Error>,
    },
    /// The run `key` had `attempts` attempts of its stage: it was marked
    /// needs-attention instead of being resumed again.
    GaveUp {
        /// The run's store key.
        key: String,
        /// The attempts its stage had.
        attempts: u32,
        /// Its last failure, when it failed (rather than crashed).
        error_message: Option<String>,
    },
    /// The run `key` was written by `version`, which none of the worker's
    /// pipelines runs: it was left alone.
    NotHeld {
        /// The run's store key.
        key: String,
        /// The version that wrote it.
        version: String,
    },
    /// The due run `key` (rule 27) was continued: it ran to its end, or
    /// to its next sleep or wait (`completed` says which), or failed
    /// (`error`).
    Woken {
        /// The run's store key.
        key: String,
        /// It completed (else it parked again, or failed).
        completed: bool,
        /// How it failed, when it did.
        error: Option<Arc<Error>>,
    },
    /// Listing, claiming or marking runs of `pipeline` failed: the worker
    /// tries again at its next sweep.
    StoreFailed {
        /// The pipeline whose runs were being recovered.
        pipeline: String,
        /// The store's error.
        error: Arc<Error>,
    },
}

type EventSink = Arc<dyn Fn(&RecoveryEvent) + Send + Sync>;

/// What one sweep found and did: [`RecoveryWorker::run_once`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sweep {
    /// Runs listed as abandoned (or failed, by policy) that this worker
    /// holds the version of.
    pub found: usize,
    /// Runs resumed that completed.
    pub resumed: usize,
    /// Runs resumed that failed again.
    pub failed: usize,
    /// Runs marked needs-attention.
    pub gave_up: usize,
    /// Runs not yet due (backoff), taken by another worker, or finished
    /// since they were listed.
    pub left: usize,
    /// Runs found before their backoff ended whose recovery time was
    /// written into the store's due-index
    /// ([`CheckpointStore::set_due`]): a worker claims each then.
    pub deferred: usize,
    /// Runs of versions this worker does not hold.
    pub not_held: usize,
    /// Due runs (rule 27) continued: woken from a sleep or a wait.
    pub woken: usize,
}

/// The most runs a [`RecoveryWorker`] resumes at once
/// ([`RecoveryWorkerBuilder::concurrency`]).
pub const MAX_CONCURRENCY: usize = 100_000;

/// Configures a [`RecoveryWorker`]: [`RecoveryWorker::builder`].
#[must_use]
pub struct RecoveryWorkerBuilder {
    pipelines: Vec<Pipeline>,
    policy: RecoveryPolicy,
    interval: Duration,
    concurrency: usize,
    page: usize,
    due_poll: Duration,
    on_event: Option<EventSink>,
}

impl fmt::Debug for RecoveryWorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecoveryWorkerBuilder")
            .field("pipelines", &self.pipelines.len())
            .field("policy", &self.policy)
            .field("interval", &self.interval)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

impl RecoveryWorkerBuilder {
    /// Recover the runs of `pipeline` (named and durable). Add several
    /// versions of one pipeline to recover the runs of each; a run goes to
    /// the pipeline whose version wrote it, or that [holds](Pipeline::hold)
    /// it.
    pub fn pipeline(mut self, pipeline: Pipeline) -> Self {
        self.pipelines.push(pipeline);
        self
    }

    /// The recovery policy (default [`RecoveryPolicy::new`]).
    pub fn policy(mut self, policy: RecoveryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How long a spawned worker waits between sweeps (default 10 s;
    /// at least 1 ms).
    pub fn interval(mut self, every: Duration) -> Self {
        self.interval = every.max(Duration::from_millis(1));
        self
    }

    /// How often a spawned worker asks its stores for due runs when nothing
    /// told it of one (default 250 ms; at least 1 ms): the safety net under
    /// the stores' wake-ups, and the latency of a signal on a store that
    /// tells none.
    pub fn due_poll(mut self, every: Duration) -> Self {
        self.due_poll = every.max(Duration::from_millis(1));
        self
    }

    /// At most `runs` resumed at once by this worker (default 8; 1 to
    /// [`MAX_CONCURRENCY`]: [`build`](Self::build) refuses anything else
    /// with [`Error::InvalidSetting`] naming `concurrency`).
    pub fn concurrency(mut self, runs: usize) -> Self {
        self.concurrency = runs;
        self
    }

    /// Calls `sink` with every [`RecoveryEvent`], from the task that caused
    /// it: keep it quick.
    pub fn on_event(mut self, sink: impl Fn(&RecoveryEvent) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(sink));
        self
    }

    /// The worker.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] (setting `"pipelines"`) when no pipeline
    /// was added, or one has no store or no name; naming `concurrency` when
    /// it is not in 1..=[`MAX_CONCURRENCY`], and `max_attempts` when the
    /// policy's is 0.
    pub fn build(self) -> Result<RecoveryWorker> {
        if !(1..=MAX_CONCURRENCY).contains(&self.concurrency) {
            return Err(Error::InvalidSetting {
                setting: "concurrency",
                message: format!(
                    "{} runs at once is out of range: a worker resumes 1 to {MAX_CONCURRENCY} \
                     runs at once",
                    self.concurrency
                ),
            });
        }
        if self.policy.max_attempts == 0 {
            return Err(Error::InvalidSetting {
                setting: "max_attempts",
                message: "a policy of 0 attempts would give up on every run before resuming it: \
                          give `RecoveryPolicy::max_attempts` 1 or more"
                    .to_owned(),
            });
        }
        let invalid = |message: String| Error::InvalidSetting {
            setting: "pipelines",
            message,
        };
        if self.pipelines.is_empty() {
            return Err(invalid(
                "a recovery worker needs at least one pipeline: add it with `.pipeline(p)`"
                    .to_owned(),
            ));
        }
        for p in &self.pipelines {
            if p.store().is_none() {
                return Err(invalid(format!(
                    "pipeline {:?} (version {}) keeps no checkpoints, so it has no runs to recover: \
                     give it a store",
                    p.name(),
                    p.version()
                )));
            }
        }
        Ok(RecoveryWorker {
            inner: Arc::new(Inner {
                pipelines: self.pipelines,
                policy: self.policy,
                interval: self.interval,
                page: self.page,
                concurrency: self.concurrency,
                due_poll: self.due_poll,
                permits: Arc::new(Semaphore::new(self.concurrency)),
                on_event: self.on_event,
                in_flight: Mutex::new(HashSet::new()),
                reported: Mutex::new(HashSet::new()),
                deferred: Mutex::new(HashMap::new()),
                unindexed: AtomicBool::new(false),
                freed: tokio::sync::Notify::new(),
            }),
        })
    }
}

/// Resumes the abandoned runs of the pipelines it holds: see the
/// [module docs](self). Cheap to clone; clones share their state.
#[derive(Clone)]
pub struct RecoveryWorker {
    inner: Arc<Inner>,
}

impl fmt::Debug for RecoveryWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecoveryWorker")
            .field("pipelines", &self.inner.pipelines)
            .field("policy", &self.inner.policy)
            .field("interval", &self.inner.interval)
            .finish_non_exhaustive()
    }
}

struct Inner {
    pipelines: Vec<Pipeline>,
    policy: RecoveryPolicy,
    interval: Duration,
    page: usize,
    /// How many runs it continues at once (its `permits`).
    concurrency: usize,
    due_poll: Duration,
    permits: Arc<Semaphore>,
    on_event: Option<EventSink>,
    /// Runs this worker is recovering now (keys).
    in_flight: Mutex<HashSet<String>>,
    /// Runs reported as [`RecoveryEvent::NotHeld`] already (keys).
    reported: Mutex<HashSet<String>>,
    /// Runs this worker deferred (key: attempt and last write), so that
    /// the next sweep does not write the same recovery time again.
    deferred: Mutex<HashMap<String, (u32, u64)>>,
    /// Set once a store had no due-index to defer a run into: runs not
    /// yet due are then left for a later sweep, as listed.
    unindexed: AtomicBool,
    /// Told when a run of a queue gave its slots back (rule 31): the
    /// worker looks for the queue's next run at once.
    freed: tokio::sync::Notify,
}

/// The most deferred runs a worker remembers (then it forgets them all,
/// and writes their recovery times again once).
const DEFERRED_KEPT: usize = 10_000;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One recovery's outcome, as a sweep counts it.
#[derive(Clone, Copy)]
enum Outcome {
    Resumed,
    Failed,
    GaveUp,
    Left,
    Woken,
    Deferred,
}

impl RecoveryWorker {
    /// A worker with no pipelines yet.
    pub fn builder() -> RecoveryWorkerBuilder {
        RecoveryWorkerBuilder {
            pipelines: Vec::new(),
            policy: RecoveryPolicy::default(),
            interval: Duration::from_secs(10),
            concurrency: 8,
            page: 500,
            due_poll: Duration::from_millis(250),
            on_event: None,
        }
    }

    /// One sweep: continues the runs that are due now (rule 27), lists the
    /// runs due for recovery now and recovers them (at most the worker's
    /// concurrency at once), and returns when all are done. With a manual
    /// [clock](crate::clock::Clock), a test advances it and calls this:
    /// what the advance made due is continued, deterministically.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when a pipeline's store cannot list runs (a
    /// store with only the four required methods). A store that fails is reported ([`RecoveryEvent::StoreFailed`]) and
    /// counted out, not returned: the next sweep tries again.
    pub async fn run_once(&self) -> Result<Sweep> {
        let mut tasks = JoinSet::new();
        let (_keep, stop) = watch::channel(false);
        let mut due = Sweep::default();
        self.wake_due(&mut due, &mut tasks, &stop).await;
        let mut sweep = self.sweep(&mut tasks, &stop).await?;
        sweep.not_held += due.not_held;
        while let Some(done) = tasks.join_next().await {
            if let Ok(outcome) = done {
                count(&mut sweep, outcome);
            }
        }
        Ok(sweep)
    }

    /// Runs the worker on the current tokio runtime: a sweep now, then one
    /// every [interval](RecoveryWorkerBuilder::interval), until
    /// [`WorkerHandle::shutdown`].
    ///
    /// # Errors
    /// [`Error::NoRuntime`] outside a tokio runtime.
    pub fn spawn(self) -> Result<WorkerHandle> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime {
            operation: "RecoveryWorker::spawn".to_owned(),
        })?;
        let (stop_tx, stop) = watch::channel(false);
        let task = runtime.spawn(async move { self.run(stop).await });
        Ok(WorkerHandle {
            stop: stop_tx,
            task,
        })
    }

    async fn run(self, mut stop: watch::Receiver<bool>) -> JoinSet<Outcome> {
        let mut tasks = JoinSet::new();
        let mut wakeups = self.subscribe().await;
        // a manual clock's advances, told to this worker for as long as
        // it runs (one receiver: an advance during a sweep is not missed)
        let mut moved = self
            .inner
            .pipelines
            .first()
            .and_then(|p| p.clock().subscribe());
        let mut next_sweep = tokio::time::Instant::now();
        loop {
            if *stop.borrow() {
                break;
            }
            let now = tokio::time::Instant::now();
            let mut sweep = Sweep::default();
            if now >= next_sweep {
                match self.sweep(&mut tasks, &stop).await {
                    Ok(done) => sweep = done,
                    Err(e) => {
                        tracing::warn!(error = %e, "recovery worker stops");
                        break;
                    }
                }
                next_sweep = now + self.inner.interval;
            }
            let next_due = self.wake_due(&mut sweep, &mut tasks, &stop).await;
            if sweep.found + sweep.woken > 0 {
                tracing::debug!(?sweep, "worker sweep");
            }
            while tasks.try_join_next().is_some() {}
            let mut until = (now + self.inner.due_poll).min(next_sweep);
            if let Some(due) = next_due {
                until = until.min(due);
            }
            let advanced = async {
                let told = match moved.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => false,
                };
                if !told {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                () = wakeups.next_due() => {}
                () = self.inner.freed.notified() => {}
                () = advanced => {}
                _ = stop.changed() => break,
            }
        }
        tasks
    }

    /// The wake-ups of the worker's stores, merged.
    async fn subscribe(&self) -> Wakeups {
        let mut streams = Vec::new();
        for store in self.stores() {
            match store.watch().await {
                Ok(Some(events)) => streams.push(events.0),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "a store's wake-ups are not available; polling")
                }
            }
        }
        Wakeups(if streams.is_empty() {
            None
        } else {
            Some(futures::stream::select_all(streams))
        })
    }

    /// Each store of the worker's pipelines once.
    fn stores(&self) -> Vec<Arc<dyn CheckpointStore>> {
        self.store_groups().into_iter().map(|g| g.store).collect()
    }

    /// The worker's pipelines by store: each store once, with the clock
    /// and lease time-to-live of its first pipeline, and the names and
    /// versions of the pipelines on it.
    fn store_groups(&self) -> Vec<Group> {
        let mut groups: Vec<Group> = Vec::new();
        for p in &self.inner.pipelines {
            let Some(store) = p.store() else { continue };
            let same = |s: &Arc<dyn CheckpointStore>| {
                std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(store))
            };
            let group = match groups.iter_mut().position(|g| same(&g.store)) {
                Some(i) => &mut groups[i],
                None => {
                    groups.push(Group {
                        store: Arc::clone(store),
                        clock: p.clock().clone(),
                        ttl: p.lease_ttl(),
                        names: Vec::new(),
                        versions: Vec::new(),
                        schedules: Vec::new(),
                        queued: Vec::new(),
                    });
                    groups
                        .last_mut()
                        .unwrap_or_else(|| unreachable!("just pushed"))
                }
            };
            if !group.names.iter().any(|n| n == p.name()) {
                group.names.push(p.name().to_owned());
                if p.queue().is_some() {
                    group.queued.push(p.clone());
                }
                group
                    .schedules
                    .push(format!("{}{}", crate::schedule::SCHEDULE_MARK, p.name()));
            }
            for version in p.versions() {
                if !group.versions.iter().any(|v| v == version) {
                    group.versions.push(version.to_owned());
                }
            }
        }
        groups
    }

    /// Continues the runs due now on every store (rule 27), claiming as
    /// many at once as the worker has free slots, and returns when the
    /// earliest run not yet due is due (within the next poll), so the
    /// caller can sleep until then.
    async fn wake_due(
        &self,
        sweep: &mut Sweep,
        tasks: &mut JoinSet<Outcome>,
        stop: &watch::Receiver<bool>,
    ) -> Option<tokio::time::Instant> {
        let mut next: Option<u64> = None;
        let mut earliest_now = u64::MAX;
        for group in self.store_groups() {
            let store = group.store.as_ref();
            let failed = |e: Error| {
                self.emit(&RecoveryEvent::StoreFailed {
                    pipeline: group.names.join(","),
                    error: Arc::new(e),
                });
            };
            let now = match group.clock.now_ms(Some(store)).await {
                Ok(now) => now,
                Err(e) => {
                    failed(e);
                    continue;
                }
            };
            earliest_now = earliest_now.min(now);
            // a queue's runs are claimed as its slots allow (rule 31)
            for pipeline in &group.queued {
                self.claim_queued(&group, pipeline, now, (tasks, stop))
                    .await?;
            }
            let mut filter = DueFilter::new(now);
            filter.pipelines = (group.names.iter())
                .filter(|n| !group.queued.iter().any(|p| p.name() == n.as_str()))
                .cloned()
                .collect();
            filter.versions.clone_from(&group.versions);
            // and the pipelines' schedules (rule 32)
            filter.pipelines.extend(group.schedules.iter().cloned());
            filter
                .versions
                .push(crate::schedule::SCHEDULE_VERSION.to_owned());
            // claim while runs are due and the worker has room: the first
            // claim at once, the next ones (a backlog) once half the slots
            // are free again, so that each claims several runs
            let mut least = 1;
            loop {
                let mut permits = self.free_slots(stop, least).await?;
                least = self.inner.concurrency.div_ceil(2);
                let room = permits.num_permits().min(MAX_LIST_LIMIT);
                let claimed = match store
                    .claim_due(&filter.clone().limit(room), group.ttl)
                    .await
                {
                    Ok(claimed) => claimed,
                    // a store with the four required methods keeps no index
                    Err(Error::Unsupported { .. }) => break,
                    Err(e) => {
                        failed(e);
                        break;
                    }
                };
                let full = claimed.len() >= room;
                for claim in claimed {
                    let Some(permit) = permits.split(1) else {
                        break;
                    };
                    self.continue_claimed(&group.store, claim, (now, permit), sweep, tasks);
                }
                if !full || *stop.borrow() {
                    break;
                }
            }
            // when the next run is due
            let ahead = crate::clock::after(now, self.inner.due_poll);
            filter.before_ms = ahead;
            match store.due_runs(&filter.limit(1)).await {
                Ok(due) => {
                    if let Some(at) = due.first().map(|run| run.due_ms) {
                        next = Some(next.map_or(at, |n| n.min(at)));
                    }
                }
                Err(Error::Unsupported { .. }) => {}
                Err(e) => failed(e),
            }
        }
        // the wall clock's instant of the earliest due next (a manual
        // clock's advance wakes the worker instead)
        next.map(|at| {
            let wait = at.saturating_sub(earliest_now);
            tokio::time::Instant::now() + Duration::from_millis(wait)
        })
    }

    /// All the worker's free slots, at least `least` (waiting for them
    /// while fewer are free); `None` once `stop`.
    async fn free_slots(
        &self,
        stop: &watch::Receiver<bool>,
        least: usize,
    ) -> Option<OwnedSemaphorePermit> {
        let permits = &self.inner.permits;
        let mut stop = stop.clone();
        let least = u32::try_from(least.clamp(1, self.inner.concurrency)).unwrap_or(1);
        let mut first = tokio::select! {
            permit = Arc::clone(permits).acquire_many_owned(least) => permit.ok()?,
            _ = stop.wait_for(|stopped| *stopped) => return None,
        };
        let more = permits.available_permits();
        if more > 0 {
            if let Ok(extra) = Arc::clone(permits).try_acquire_many_owned(more as u32) {
                first.merge(extra);
            }
        }
        Some(first)
    }

    /// Continues the due run `claim` (due at `now` or before), claimed
    /// with its lease, holding `permit` until it ends.
    fn continue_claimed(
        &self,
        store: &Arc<dyn CheckpointStore>,
        claim: Claimed,
        (now, permit): (u64, OwnedSemaphorePermit),
        sweep: &mut Sweep,
        tasks: &mut JoinSet<Outcome>,
    ) {
        let Claimed { run, lease } = claim;
        if let Some(name) = run.pipeline.strip_prefix(crate::schedule::SCHEDULE_MARK) {
            let name = name.to_owned();
            self.fire_claimed(store, &name, run, lease, permit, tasks);
            return;
        }
        let Some(pipeline) = self.held(&run.key, &run.pipeline, &run.version, sweep) else {
            // claimed by the versions held, so not here; the lease goes
            // back all the same
            let store = Arc::clone(store);
            tasks.spawn(async move {
                if let Err(e) = store.release_lease(lease).await {
                    tracing::warn!(error = %e, "giving back a claimed lease failed");
                }
                drop(permit);
                Outcome::Left
            });
            return;
        };
        lock(&self.inner.in_flight).insert(run.key.clone());
        let (worker, pipeline) = (self.clone(), pipeline.clone());
        tasks.spawn(async move {
            let outcome = worker.wake(&pipeline, &run, (lease, now), None).await;
            lock(&worker.inner.in_flight).remove(&run.key);
            drop(permit);
            outcome
        });
    }

    /// Fires the due schedule `run` of the pipeline `name` (rule 32),
    /// claimed with `lease`, holding `permit` until it is done.
    fn fire_claimed(
        &self,
        store: &Arc<dyn CheckpointStore>,
        name: &str,
        run: DueRun,
        lease: Lease,
        permit: OwnedSemaphorePermit,
        tasks: &mut JoinSet<Outcome>,
    ) {
        let pipeline = self
            .inner
            .pipelines
            .iter()
            .find(|p| p.name() == name)
            .cloned();
        let (worker, store) = (self.clone(), Arc::clone(store));
        tasks.spawn(async move {
            let now = match pipeline.as_ref() {
                Some(p) => p.clock().now_ms(Some(store.as_ref())).await.unwrap_or(0),
                None => 0,
            };
            let fired = match pipeline {
                Some(p) => crate::schedule::fire(&p, &run, lease, now).await,
                None => store.release_lease(lease).await.map(|()| 0),
            };
            drop(permit);
            match fired {
                Ok(n) => {
                    tracing::debug!(schedule = %run.key, runs = n, "fired a schedule");
                    Outcome::Woken
                }
                Err(e) => worker.store_failed(&run.key, &run.pipeline, "firing a schedule", e),
            }
        });
    }

    /// The worker's pipeline for run `key` of `pipeline` at `version`;
    /// none held: counted as not held, and the run reported
    /// ([`RecoveryEvent::NotHeld`]) the first time.
    fn held(
        &self,
        key: &str,
        pipeline: &str,
        version: &str,
        sweep: &mut Sweep,
    ) -> Option<&Pipeline> {
        let held = self.pipeline_for(pipeline, version);
        if held.is_none() {
            sweep.not_held += 1;
            self.not_held(key, version);
        }
        held
    }

    /// Runs `task`, the worker's task on run `key` (which it holds in
    /// flight), on `tasks` once a permit is free, holding the permit until
    /// it ends; the key leaves the in-flight set then. `false`, the key
    /// left at once, when the worker stops first.
    async fn start(
        &self,
        key: &str,
        stop: &watch::Receiver<bool>,
        tasks: &mut JoinSet<Outcome>,
        task: impl Future<Output = Outcome> + Send + 'static,
    ) -> bool {
        let mut stop = stop.clone();
        let permit = tokio::select! {
            permit = Arc::clone(&self.inner.permits).acquire_owned() => permit.ok(),
            _ = stop.wait_for(|stopped| *stopped) => None,
        };
        let Some(permit) = permit else {
            lock(&self.inner.in_flight).remove(key);
            return false;
        };
        let (worker, key) = (self.clone(), key.to_owned());
        tasks.spawn(async move {
            let outcome = task.await;
            lock(&worker.inner.in_flight).remove(&key);
            drop(permit);
            outcome
        });
        true
    }

    /// Continues the due run `run`, claimed with `lease` as due at `now`:
    /// a parked run if it is still parked and due (another worker may have
    /// continued it since); a run due for recovery (its backoff in the
    /// due-index passed) as the policy decides.
    async fn wake(
        &self,
        pipeline: &Pipeline,
        run: &DueRun,
        (lease, now): (Lease, u64),
        slots: Option<&mut crate::queue::Slots>,
    ) -> Outcome {
        let policy = self.inner.policy;
        let mut parked = true;
        let claimed = pipeline
            .recover_claimed(
                (&run.run_id, lease, now),
                slots,
                |cp| {
                    parked = cp.status.is_pending();
                    match (&cp.status, &cp.pending) {
                        (RunStatus::Sleeping, Some(p))
                            if p.until_ms.is_some_and(|at| at <= now) =>
                        {
                            Claim::Resume
                        }
                        // signalled, or past its deadline: its wait decides
                        (RunStatus::Waiting, Some(_)) => Claim::Resume,
                        (RunStatus::Running | RunStatus::Failed, _) => {
                            policy.decide(cp, pipeline, Found::Due { clock_ms: now })
                        }
                        _ => Claim::Leave,
                    }
                },
                policy
                    .retry_failed
                    .then_some(|cp: &crate::store::Checkpoint, clock_ms| {
                        policy.retry_at(cp, pipeline, clock_ms)
                    }),
            )
            .await;
        if !parked {
            return self.recovered(&run.key, &run.pipeline, claimed);
        }
        match claimed {
            Ok(Recovered::Resumed(result)) => {
                let (completed, error) = match result {
                    Ok(outcome) => (outcome.is_completed(), None),
                    Err(e) => {
                        tracing::warn!(run = %run.key, error = %e, "a woken run failed");
                        (false, Some(Arc::new(e)))
                    }
                };
                tracing::debug!(run = %run.key, completed, "woke a due run");
                self.emit(&RecoveryEvent::Woken {
                    key: run.key.clone(),
                    completed,
                    error,
                });
                Outcome::Woken
            }
            Ok(Recovered::GaveUp(_) | Recovered::Left | Recovered::Deferred(_))
            | Err(Error::RunIdInUse { .. } | Error::ShutDown { .. }) => Outcome::Left,
            Err(e) => self.store_failed(&run.key, &run.pipeline, "waking a due run", e),
        }
    }

    /// Lists what is due and starts a recovery task for each run (waiting
    /// for a permit when `concurrency` are running), until `stop`.
    async fn sweep(
        &self,
        tasks: &mut JoinSet<Outcome>,
        stop: &watch::Receiver<bool>,
    ) -> Result<Sweep> {
        let mut sweep = Sweep::default();
        self.report_unheld_due(&mut sweep).await;
        let mut names: Vec<&str> = self.inner.pipelines.iter().map(Pipeline::name).collect();
        names.dedup();
        names.sort_unstable();
        names.dedup();
        let mut states = vec![RunState::Abandoned];
        if self.inner.policy.retry_failed {
            states.push(RunState::Failed);
        }
        for name in names {
            let Some(store) = self
                .inner
                .pipelines
                .iter()
                .find(|p| p.name() == name)
                .and_then(Pipeline::store)
            else {
                continue;
            };
            for state in &states {
                let mut filter = RunFilter::new()
                    .pipeline(name)
                    .state(*state)
                    .limit(self.inner.page);
                loop {
                    let page = match store.list_runs(&filter).await {
                        Ok(page) => page,
                        // a store that cannot list cannot be recovered from
                        Err(e @ Error::Unsupported { .. }) => return Err(e),
                        Err(e) => {
                            self.emit(&RecoveryEvent::StoreFailed {
                                pipeline: name.to_owned(),
                                error: Arc::new(e),
                            });
                            break;
                        }
                    };
                    for run in page.runs {
                        if *stop.borrow() {
                            return Ok(sweep);
                        }
                        self.consider(run, &mut sweep, tasks, stop).await?;
                    }
                    match page.next {
                        Some(next) => filter = filter.after(next),
                        None => break,
                    }
                }
            }
        }
        Ok(sweep)
    }

    /// Reports the due runs of the worker's pipelines written by versions
    /// it does not hold ([`RecoveryEvent::NotHeld`]): the worker claims
    /// only the runs it can continue, so after a deploy that dropped a
    /// version its parked runs would otherwise stay parked unsaid.
    async fn report_unheld_due(&self, sweep: &mut Sweep) {
        for group in self.store_groups() {
            let store = group.store.as_ref();
            let Ok(now) = group.clock.now_ms(Some(store)).await else {
                continue;
            };
            let mut filter = DueFilter::new(now).limit(self.inner.page);
            filter.pipelines = group.names;
            let Ok(due) = store.due_runs(&filter).await else {
                continue;
            };
            for run in due {
                if !group.versions.contains(&run.version) {
                    self.held(&run.key, &run.pipeline, &run.version, sweep);
                }
            }
        }
    }

    /// Starts recovering `run` if it is due and held.
    async fn consider(
        &self,
        run: RunSummary,
        sweep: &mut Sweep,
        tasks: &mut JoinSet<Outcome>,
        stop: &watch::Receiver<bool>,
    ) -> Result<()> {
        let inner = &self.inner;
        let Some(pipeline) = self.held(&run.key, &run.pipeline, &run.version, sweep) else {
            return Ok(());
        };
        sweep.found += 1;
        let now = crate::store::now_ms();
        let give_up = run.attempt >= inner.policy.max_attempts;
        let due = inner.policy.due_at(run.attempt, run.updated_at_ms) <= now;
        // not due: its recovery time goes into the due-index, once
        let deferred = || {
            inner.unindexed.load(Ordering::Relaxed)
                || lock(&inner.deferred).get(&run.key) == Some(&(run.attempt, run.updated_at_ms))
        };
        if !give_up && !due && deferred() {
            sweep.left += 1;
            return Ok(());
        }
        if !lock(&inner.in_flight).insert(run.key.clone()) {
            sweep.left += 1;
            return Ok(());
        }
        let (worker, pipeline, key) = (self.clone(), pipeline.clone(), run.key.clone());
        let task = async move { worker.recover(&pipeline, &run).await };
        if !self.start(&key, stop, tasks, task).await {
            // stopping: this run stays for the next worker
            sweep.left += 1;
        }
        Ok(())
    }

    /// Recovers the listed `run`: resumed when its backoff ended, its
    /// recovery time written into the due-index when not, given up on
    /// after its attempts, as the policy decides holding its lease.
    async fn recover(&self, pipeline: &Pipeline, run: &RunSummary) -> Outcome {
        let policy = self.inner.policy;
        let store = pipeline.store().map(|s| &**s);
        let clock_ms = match pipeline.clock().now_ms(store).await {
            Ok(now) => now,
            Err(e) => return self.store_failed(&run.key, &run.pipeline, "reading the clock", e),
        };
        // a run of a queue resumes in one of its slots (rule 31)
        let mut slots = match self.queue_slot(pipeline).await {
            Ok(Some(slots)) => slots,
            Ok(None) => return Outcome::Left,
            Err(e) => return self.store_failed(&run.key, &run.pipeline, "taking a slot", e),
        };
        let claimed = pipeline
            .recover(
                (&run.run_id, slots.as_mut()),
                |cp| {
                    let wall_ms = crate::store::now_ms();
                    policy.decide(cp, pipeline, Found::Listed { wall_ms, clock_ms })
                },
                policy
                    .retry_failed
                    .then_some(|cp: &crate::store::Checkpoint, clock_ms| {
                        policy.retry_at(cp, pipeline, clock_ms)
                    }),
            )
            .await;
        if let Some(slots) = slots {
            slots.give_back().await;
            self.inner.freed.notify_one();
        }
        if matches!(claimed, Ok(Recovered::Deferred(_))) {
            let mut deferred = lock(&self.inner.deferred);
            if deferred.len() >= DEFERRED_KEPT {
                deferred.clear();
            }
            deferred.insert(run.key.clone(), (run.attempt, run.updated_at_ms));
        }
        self.recovered(&run.key, &run.pipeline, claimed)
    }

    /// What a recovery of run `key` of `pipeline` that ended as `claimed`
    /// comes to: logged, told and counted.
    fn recovered(&self, key: &str, pipeline: &str, claimed: Result<Recovered>) -> Outcome {
        match claimed {
            Ok(Recovered::Resumed(Ok(_))) => {
                tracing::info!(run = %key, "recovered a run");
                crate::metrics::recovered(pipeline);
                self.emit(&RecoveryEvent::Recovered {
                    key: key.to_owned(),
                });
                Outcome::Resumed
            }
            Ok(Recovered::Resumed(Err(e))) => {
                tracing::warn!(run = %key, error = %e, "a recovered run failed again");
                self.emit(&RecoveryEvent::Failed {
                    key: key.to_owned(),
                    error: Arc::new(e),
                });
                Outcome::Failed
            }
            Ok(Recovered::GaveUp(cp)) => {
                tracing::warn!(
                    run = %key,
                    attempts = cp.attempt,
                    error = cp.error_message.as_deref().unwrap_or("(it crashed)"),
                    "recovery gave up on a run: it needs attention"
                );
                crate::metrics::gave_up(pipeline);
                self.emit(&RecoveryEvent::GaveUp {
                    key: key.to_owned(),
                    attempts: cp.attempt,
                    error_message: cp.error_message,
                });
                Outcome::GaveUp
            }
            Ok(Recovered::Deferred(due_ms)) => {
                tracing::debug!(run = %key, due_ms, "a run's recovery waits in the due-index");
                Outcome::Deferred
            }
            // taken by another worker, or this pipeline was shut down
            Ok(Recovered::Left) | Err(Error::RunIdInUse { .. } | Error::ShutDown { .. }) => {
                Outcome::Left
            }
            // no due-index: runs not yet due wait for a later sweep
            Err(Error::Unsupported { .. }) => {
                self.inner.unindexed.store(true, Ordering::Relaxed);
                Outcome::Left
            }
            Err(e) => self.store_failed(key, pipeline, "recovering a run", e),
        }
    }

    /// What `doing` run `key` of `pipeline` that failed with `e` (a store
    /// error) comes to: logged and told, the run left for a later sweep.
    fn store_failed(&self, key: &str, pipeline: &str, doing: &str, e: Error) -> Outcome {
        tracing::warn!(run = %key, error = %e, "{doing} failed");
        self.emit(&RecoveryEvent::StoreFailed {
            pipeline: pipeline.to_owned(),
            error: Arc::new(e),
        });
        Outcome::Left
    }

    /// The pipeline that runs `version` of `name`: the one whose version it
    /// is, else one that holds it.
    /// Reports run `key`, written by `version`, which no pipeline of this
    /// worker holds ([`RecoveryEvent::NotHeld`]), the first time.
    fn not_held(&self, key: &str, version: &str) {
        if lock(&self.inner.reported).insert(key.to_owned()) {
            self.emit(&RecoveryEvent::NotHeld {
                key: key.to_owned(),
                version: version.to_owned(),
            });
        }
    }

    fn pipeline_for(&self, name: &str, version: &str) -> Option<&Pipeline> {
        let named = || self.inner.pipelines.iter().filter(|p| p.name() == name);
        named()
            .find(|p| p.version() == version)
            .or_else(|| named().find(|p| p.runs_version(version)))
    }

    fn emit(&self, event: &RecoveryEvent) {
        if let RecoveryEvent::NotHeld { key, version } = event {
            tracing::warn!(
                run = %key,
                %version,
                "a run of a version this worker does not hold was left alone"
            );
        }
        if let Some(sink) = &self.inner.on_event {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink(event)));
            if caught.is_err() {
                tracing::error!("a recovery event callback panicked");
            }
        }
    }
}

/// The worker's pipelines on one store ([`RecoveryWorker::store_groups`]).
struct Group {
    store: Arc<dyn CheckpointStore>,
    clock: crate::clock::Clock,
    ttl: Duration,
    names: Vec<String>,
    versions: Vec<String>,
    /// The pipelines' schedules' names (`~orders`, rule 32).
    schedules: Vec<String>,
    /// The pipelines with a queue (rule 31), whose runs are claimed apart.
    queued: Vec<Pipeline>,
}

fn count(sweep: &mut Sweep, outcome: Outcome) {
    match outcome {
        Outcome::Woken => sweep.woken += 1,
        Outcome::Deferred => sweep.deferred += 1,
        Outcome::Resumed => sweep.resumed += 1,
        Outcome::Failed => sweep.failed += 1,
        Outcome::GaveUp => sweep.gave_up += 1,
        Outcome::Left => sweep.left += 1,
    }
}
