//! The in-memory store.

use std::collections::HashMap as StdMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The store's maps: run keys hashed with foldhash (seeded per map), not
/// SipHash, which took more of a checkpoint write than the write.
type HashMap<K, V> = StdMap<K, V, foldhash::fast::RandomState>;

use super::{
    Checkpoint, CheckpointStore, Decision, Delivery, DueFilter, DueRun, Lease, Mark, RunEvent,
    RunEventKind, RunEvents, RunFilter, RunPage, RunStatus, RunSummary, Signal, Take, append,
    fenced_refusal, marked_checkpoint,
};
use crate::error::{Error, Result};

/// A process-local checkpoint store: the default.
///
/// Checkpoints are kept as values, not bytes: each run's journal is a list
/// of its checkpoints, and a save appends one in O(1) whatever the
/// context's size, because the context snapshot shares structure with the
/// live context (and with the run's earlier checkpoints). Nothing survives the process; use it for tests and
/// single-process services.
///
/// Leases have the same semantics as in the shared stores: they expire after
/// their time-to-live unless renewed (measured with tokio's clock, so tests
/// can pause time), tokens grow with every acquisition of a run id, and fenced
/// writes with a lost lease are refused. So are fenced writes of a run whose
/// stored checkpoint is cancelled ([`cancel`](CheckpointStore::cancel)
/// rewrites it under the same mutex as every other write).
///
/// The maps sit behind mutexes that are never held across an `.await`, so
/// every method is atomic and cancel safe.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fluxio_core::Result<()> {
/// use std::time::Duration;
/// use fluxio_core::store::{CheckpointStore, InMemoryStore};
/// let store = InMemoryStore::new();
/// assert!(!store.exists("run-1").await?);
/// let lease = store.acquire_lease("run-1", Duration::from_secs(30)).await?;
/// assert!(store.acquire_lease("run-1", Duration::from_secs(30)).await.is_err());
/// store.release_lease(lease).await?;
/// assert!(store.acquire_lease("run-1", Duration::from_secs(30)).await.is_ok());
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct InMemoryStore {
    map: Mutex<HashMap<String, Vec<Checkpoint>>>,
    leases: Mutex<HashMap<String, LeaseState>>,
    /// Each run's mailbox (rule 26), locked after `map`.
    mailboxes: Mutex<HashMap<String, Vec<Signal>>>,
    /// The recovery due times set ([`CheckpointStore::set_due`]), locked
    /// after `mailboxes`: each holds while the run's latest checkpoint is
    /// the one it was set on.
    recoveries: Mutex<HashMap<String, Recovery>>,
    /// Keep at most this many completed runs per pipeline (`None`: all).
    keep_completed: Option<usize>,
    /// The store's wake-ups, made when first watched.
    events: std::sync::OnceLock<tokio::sync::broadcast::Sender<RunEvent>>,
}

/// The lease of one run id. Kept after release, so tokens keep growing.
#[derive(Debug)]
struct LeaseState {
    token: u64,
    /// `None` once released.
    expires: Option<Instant>,
}

impl LeaseState {
    fn held_at(&self, now: Instant) -> bool {
        self.expires.is_some_and(|e| e > now)
    }
}

/// A recovery due time, set on the checkpoint numbered `seq` written at
/// `written_ms`: any later write of the run replaces that checkpoint, and
/// so clears it.
#[derive(Debug, Clone, Copy)]
struct Recovery {
    seq: u32,
    written_ms: u64,
    due_ms: u64,
}

impl Recovery {
    /// When the run whose latest checkpoint is `cp` is due by this.
    fn due_for(&self, cp: &Checkpoint) -> Option<u64> {
        (cp.seq == self.seq && cp.updated_at_ms == self.written_ms).then_some(self.due_ms)
    }
}

/// `now + ttl`, without the overflow panic of `Instant + Duration`: a ttl
/// past the clock's range (only possible for a caller that skipped
/// [`check_lease_ttl`](super::check_lease_ttl)) means "never expires".
fn expiry(now: Instant, ttl: Duration) -> Instant {
    now.checked_add(ttl)
        .or_else(|| now.checked_add(super::MAX_LEASE_TTL))
        .unwrap_or(now)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl InMemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps at most the `n` newest completed runs of each pipeline
    /// (contract rule 20's keep-the-last-N retention): when a run
    /// completes, the pipeline's older completed runs beyond `n` are
    /// deleted, each whole. Running, failed and cancelled runs are never
    /// touched. `InMemoryStore::new()` keeps every run.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// use fluxio_core::store::{Checkpoint, CheckpointStore, InMemoryStore};
    /// use fluxio_core::Context;
    ///
    /// let store = InMemoryStore::new().keep_completed(2);
    /// for (i, run) in ["a", "b", "c"].into_iter().enumerate() {
    ///     let mut done = Checkpoint::new(run, "v1", 9, "", Context::new().snapshot())
    ///         .in_pipeline("orders")
    ///         .completed();
    ///     done.updated_at_ms = i as u64;
    ///     store.save(done).await?;
    /// }
    /// assert!(!store.exists("orders/a").await?, "the oldest went");
    /// assert!(store.exists("orders/b").await? && store.exists("orders/c").await?);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn keep_completed(mut self, n: usize) -> Self {
        self.keep_completed = Some(n);
        self
    }

    /// Number of stored checkpoints.
    #[must_use]
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    /// Whether no checkpoint is stored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        lock(&self.map).is_empty()
    }

    /// Runs `f` on the checkpoint map while `lease` is current and, for a
    /// save, the stored checkpoint is not cancelled or paused (refused before the
    /// lease is looked at, as in every store); both maps stay locked
    /// meanwhile, so the checks and the write are one step.
    fn fenced(
        &self,
        key: &str,
        lease: &Lease,
        save: bool,
        f: impl FnOnce(&mut HashMap<String, Vec<Checkpoint>>) -> Result<()>,
    ) -> Result<()> {
        let leases = lock(&self.leases);
        let mut map = lock(&self.map);
        if save {
            if let Some(refused) = latest(&map, key).and_then(|cp| fenced_refusal(key, cp.status)) {
                return Err(refused);
            }
        }
        let current = lease.run_id() == key
            && leases
                .get(key)
                .is_some_and(|l| l.token == lease.token() && l.held_at(Instant::now()));
        if !current {
            return Err(Error::LeaseLost {
                run_id: lease.run_id().to_owned(),
                token: lease.token(),
            });
        }
        f(&mut map)
    }
}

/// The pipeline of a run's key: what comes before its first `/` (empty for
/// an unnamed pipeline's bare run id).
fn pipeline_of(key: &str) -> &str {
    key.split_once('/').map_or("", |(pipeline, _)| pipeline)
}

/// After `key` completed: drops the oldest completed runs of its pipeline
/// beyond `keep`, with their mailboxes.
fn trim_completed(
    map: &mut HashMap<String, Vec<Checkpoint>>,
    mailboxes: &mut HashMap<String, Vec<Signal>>,
    key: &str,
    keep: Option<usize>,
) {
    let Some(keep) = keep else { return };
    if !latest(map, key).is_some_and(|cp| cp.status == super::RunStatus::Completed) {
        return;
    }
    let pipeline = pipeline_of(key);
    let mut completed: Vec<(u64, String)> = map
        .iter()
        .filter(|(k, _)| pipeline_of(k) == pipeline)
        .filter_map(|(k, journal)| journal.last().map(|cp| (k, cp)))
        .filter(|(_, cp)| cp.status == super::RunStatus::Completed)
        .map(|(k, cp)| (cp.updated_at_ms, k.clone()))
        .collect();
    if completed.len() <= keep {
        return;
    }
    completed.sort();
    for (_, old) in &completed[..completed.len() - keep] {
        map.remove(old);
        mailboxes.remove(old);
    }
}

fn latest<'m>(map: &'m HashMap<String, Vec<Checkpoint>>, key: &str) -> Option<&'m Checkpoint> {
    map.get(key).and_then(|journal| journal.last())
}

impl InMemoryStore {
    /// Tells the watchers (if any) that `kind` happened to `key`.
    fn tell(&self, key: &str, kind: RunEventKind) {
        if let Some(events) = self.events.get() {
            // no receiver: nobody to tell
            let _ = events.send(RunEvent::new(key, kind));
        }
    }

    /// Tells the watchers what the run under `key`, now stored as
    /// `status`, became: due (it parked) or ended.
    fn tell_status(&self, key: &str, status: RunStatus) {
        match status {
            RunStatus::Sleeping | RunStatus::Waiting => self.tell(key, RunEventKind::Due),
            RunStatus::Completed
            | RunStatus::Failed
            | RunStatus::Cancelled
            | RunStatus::NeedsAttention => self.tell(key, RunEventKind::Ended),
            _ => {}
        }
    }
}

#[async_trait::async_trait]
impl CheckpointStore for InMemoryStore {
    async fn save(&self, mut checkpoint: Checkpoint) -> Result<()> {
        let key = checkpoint.checked_key()?;
        let status = checkpoint.status;
        let signals = std::mem::take(&mut checkpoint.signals);
        {
            let mut map = lock(&self.map);
            map.insert(key.clone(), checkpoint.into_journal());
            let mut mailboxes = lock(&self.mailboxes);
            if signals.is_empty() {
                mailboxes.remove(&key);
            } else {
                mailboxes.insert(key.clone(), signals);
            }
            trim_completed(&mut map, &mut mailboxes, &key, self.keep_completed);
        }
        self.tell_status(&key, status);
        Ok(())
    }

    async fn load(&self, key: &str) -> Result<Option<Checkpoint>> {
        crate::store::check_run_id(key)?;
        Ok(latest(&lock(&self.map), key).cloned())
    }

    async fn delete(&self, key: &str) -> Result<()> {
        crate::store::check_run_id(key)?;
        let mut map = lock(&self.map);
        map.remove(key);
        lock(&self.mailboxes).remove(key);
        lock(&self.recoveries).remove(key);
        Ok(())
    }

    async fn exists(&self, key: &str) -> Result<bool> {
        crate::store::check_run_id(key)?;
        Ok(lock(&self.map).contains_key(key))
    }

    async fn history(&self, key: &str) -> Result<Vec<Checkpoint>> {
        crate::store::check_run_id(key)?;
        Ok(lock(&self.map).get(key).cloned().unwrap_or_default())
    }

    /// Scans every run (the store is a map in memory): fine for tests and
    /// one process, not an index.
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage> {
        let limit = filter.page_size()?;
        let now = Instant::now();
        let wall = super::now_ms();
        let leases = lock(&self.leases);
        let map = lock(&self.map);
        let mut keys: Vec<&String> = map
            .keys()
            .filter(|k| filter.after.as_ref().is_none_or(|after| *k > after))
            .collect();
        keys.sort();
        let mut page = RunPage::default();
        for key in keys {
            let Some(cp) = latest(&map, key) else {
                continue;
            };
            let lease = leases
                .get(key.as_str())
                .and_then(|l| l.expires.filter(|e| *e > now))
                .map(|e| {
                    wall.saturating_add(
                        u64::try_from(e.duration_since(now).as_millis()).unwrap_or(u64::MAX),
                    )
                });
            let summary = RunSummary::of(key, cp, lease);
            if !filter.matches(key, cp, summary.state) {
                continue;
            }
            if page.runs.len() == limit {
                page.next = page.runs.last().map(|r| r.key.clone());
                break;
            }
            page.runs.push(summary);
        }
        Ok(page)
    }

    async fn acquire_lease(&self, key: &str, ttl: Duration) -> Result<Lease> {
        crate::store::check_run_id(key)?;
        super::check_lease_ttl(ttl)?;
        let now = Instant::now();
        let expires = expiry(now, ttl);
        let mut leases = lock(&self.leases);
        let state = leases.entry(key.to_owned()).or_insert(LeaseState {
            token: 0,
            expires: None,
        });
        if state.held_at(now) {
            return Err(Error::RunIdInUse {
                run_id: key.to_owned(),
            });
        }
        state.token += 1;
        state.expires = Some(expires);
        Ok(Lease::new(key, state.token))
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        super::check_lease_ttl(ttl)?;
        let now = Instant::now();
        let expires = expiry(now, ttl);
        let mut leases = lock(&self.leases);
        match leases.get_mut(lease.run_id()) {
            Some(state) if state.token == lease.token() && state.held_at(now) => {
                state.expires = Some(expires);
                Ok(())
            }
            _ => Err(Error::LeaseLost {
                run_id: lease.run_id().to_owned(),
                token: lease.token(),
            }),
        }
    }

    async fn release_lease(&self, lease: Lease) -> Result<()> {
        if let Some(state) = lock(&self.leases).get_mut(lease.run_id()) {
            if state.token == lease.token() {
                state.expires = None;
            }
        }
        Ok(())
    }

    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        let status = checkpoint.status;
        self.append_fenced(checkpoint, lease)?;
        self.tell_status(lease.run_id(), status);
        Ok(())
    }

    async fn delete_fenced(&self, key: &str, lease: &Lease) -> Result<()> {
        self.fenced(key, lease, false, |map| {
            map.remove(key);
            lock(&self.mailboxes).remove(key);
            lock(&self.recoveries).remove(key);
            Ok(())
        })
    }

    /// Rewrites the checkpoint under the map's mutex, which every fenced
    /// write holds while it checks the stored status.
    async fn mark(&self, key: &str, mark: Mark) -> Result<()> {
        crate::store::check_run_id(key)?;
        let status = {
            let mut map = lock(&self.map);
            let marked = marked_checkpoint(key, latest(&map, key).cloned(), mark)?;
            let status = marked.status;
            append(map.entry(key.to_owned()).or_default(), marked)?;
            status
        };
        self.tell_status(key, status);
        Ok(())
    }

    async fn send_signal(&self, key: &str, signal: Signal) -> Result<Delivery> {
        crate::store::check_run_id(key)?;
        let due = {
            let map = lock(&self.map);
            let mut mailboxes = lock(&self.mailboxes);
            let stored = latest(&map, key);
            let mailbox = mailboxes.get(key).map_or(&[][..], Vec::as_slice);
            if let Some(answer) = super::deliver(key, stored, mailbox, &signal)? {
                return Ok(answer);
            }
            let due = stored.is_some_and(|cp| cp.waits_for(&signal.name));
            mailboxes.entry(key.to_owned()).or_default().push(signal);
            due
        };
        if due {
            self.tell(key, RunEventKind::Due);
        }
        Ok(Delivery::Delivered)
    }

    async fn take_signal(&self, key: &str, take: &Take, lease: &Lease) -> Result<Decision> {
        let mut decision = Decision::Open;
        // refused for a cancelled run, as a fenced save is
        self.fenced(key, lease, true, |map| {
            if !map.contains_key(key) {
                return Err(Error::CheckpointNotFound {
                    run_id: key.to_owned(),
                });
            }
            let mut mailboxes = lock(&self.mailboxes);
            let mailbox = mailboxes.entry(key.to_owned()).or_default();
            decision = super::decide(mailbox, take);
            if mailbox.is_empty() {
                mailboxes.remove(key);
            }
            Ok(())
        })?;
        Ok(decision)
    }

    async fn signals(&self, key: &str) -> Result<Vec<Signal>> {
        crate::store::check_run_id(key)?;
        Ok(lock(&self.mailboxes).get(key).cloned().unwrap_or_default())
    }

    /// Scans every run, as [`list_runs`](CheckpointStore::list_runs) does.
    async fn due_runs(&self, filter: &DueFilter) -> Result<Vec<DueRun>> {
        let limit = RunFilter::new().limit(filter.limit).page_size()?;
        let now = Instant::now();
        let leases = lock(&self.leases);
        let map = lock(&self.map);
        let mailboxes = lock(&self.mailboxes);
        let recoveries = lock(&self.recoveries);
        let mut due: Vec<DueRun> = map
            .iter()
            .filter_map(|(key, journal)| {
                let cp = journal.last()?;
                let at = if cp.status.is_pending() {
                    let mailbox = mailboxes.get(key).map_or(&[][..], Vec::as_slice);
                    cp.pending.as_ref()?.due_ms(mailbox)?
                } else {
                    recoveries.get(key)?.due_for(cp)?
                };
                let held = leases.get(key).is_some_and(|l| l.held_at(now));
                (!held && filter.matches(&cp.pipeline, &cp.version, at))
                    .then(|| DueRun::of(key, cp, at))
            })
            .collect();
        due.sort_by(|a, b| (a.due_ms, &a.key).cmp(&(b.due_ms, &b.key)));
        due.truncate(limit);
        Ok(due)
    }

    async fn set_due(&self, lease: &Lease, due_ms: Option<u64>) -> Result<()> {
        let key = lease.run_id();
        self.fenced(key, lease, true, |map| {
            let cp = latest(map, key).ok_or_else(|| Error::CheckpointNotFound {
                run_id: key.to_owned(),
            })?;
            if !matches!(cp.status, RunStatus::Running | RunStatus::Failed) {
                return Ok(());
            }
            let recovery = due_ms.map(|at| Recovery {
                seq: cp.seq,
                written_ms: cp.updated_at_ms,
                due_ms: at.min(super::MAX_UNTIL_MS),
            });
            let mut recoveries = lock(&self.recoveries);
            match recovery {
                Some(recovery) => recoveries.insert(key.to_owned(), recovery),
                None => recoveries.remove(key),
            };
            Ok(())
        })
    }

    async fn watch(&self) -> Result<Option<RunEvents>> {
        let events = self
            .events
            .get_or_init(|| tokio::sync::broadcast::channel(1024).0);
        Ok(Some(RunEvents::broadcast(events.subscribe())))
    }
}

impl InMemoryStore {
    /// [`save_fenced`](CheckpointStore::save_fenced)'s write.
    fn append_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        // the lease names the run it fences: a checkpoint of another run is
        // refused as written by a stale owner, as `fenced` refuses it
        let key = lease.run_id();
        if !checkpoint.has_key(key) {
            return Err(Error::LeaseLost {
                run_id: key.to_owned(),
                token: lease.token(),
            });
        }
        self.fenced(key, lease, true, |map| {
            // the run's key is allocated once, by its first write
            if !map.contains_key(key) {
                map.insert(key.to_owned(), Vec::new());
            }
            let journal = map.get_mut(key).ok_or_else(|| Error::Internal {
                message: format!("the journal of `{key}` went missing under its lock"),
            })?;
            let fresh = journal.is_empty() || checkpoint.seq == 0;
            if let Err(e) = append(journal, checkpoint) {
                map.retain(|_, journal| !journal.is_empty());
                return Err(e);
            }
            let mut mailboxes = lock(&self.mailboxes);
            if fresh {
                // a fresh run under the key: none of the old run's signals
                mailboxes.remove(key);
            }
            trim_completed(map, &mut mailboxes, key, self.keep_completed);
            Ok(())
        })
    }
}
