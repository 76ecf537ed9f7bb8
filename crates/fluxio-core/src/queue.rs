//! Queues (contract rule 31): runs handed to the workers with
//! [`Pipeline::enqueue`](crate::Pipeline::enqueue), started only when they
//! fit the queue's limits.
//!
//! A [`Queue`] is declared on a pipeline
//! ([`PipelineBuilder::queue`](crate::PipelineBuilder::queue)) with up to
//! three limits: runs at once across every worker
//! ([`concurrency`](Queue::concurrency)), runs at once per key
//! ([`per_key`](Queue::per_key), the key given at
//! [enqueue](Enqueue::key)), and starts per period ([`rate`](Queue::rate)).
//! Every run of the pipeline a [`RecoveryWorker`](crate::recovery::RecoveryWorker)
//! starts or continues counts against them: an enqueued run, one woken
//! from a sleep or a wait, one recovered after a crash.
//!
//! # How a limit holds
//!
//! Each limit is a set of leases in the store, on keys no run has
//! (`%{queue}/slot/{i}`, `%{queue}/key/{i}/{key}`, `%{queue}/rate/{i}`):
//! taking a slot is [`acquire_lease`](crate::store::CheckpointStore::acquire_lease),
//! which the store decides atomically, so two workers never hold one slot.
//! A running run's slots are renewed with its own lease and given back when
//! it parks (a sleeping or waiting run holds none), ends, or fails; a
//! crashed worker's slots lapse with its leases. A rate token is a lease
//! taken for the period and never given back, so at most `runs` start in
//! any window of that length.
//!
//! A worker takes the queue's slot and rate token first and then claims
//! that many due runs of the pipeline, so a full queue costs a few lease
//! attempts per poll and no write. A claimed run whose key is at its limit
//! gives its slot back and is due again [`KEY_RETRY`] later. Runs start in
//! priority order (a higher [priority](Enqueue::priority) is due earlier,
//! [`PRIORITY_STEP`] per level), then roughly in the order they were
//! enqueued. A `start` or `invoke` of the pipeline's run in the caller's
//! process takes no slot: the caller chose to run it now.
//!
//! ```
//! use std::time::Duration;
//! use fluxio_core::queue::Queue;
//!
//! let emails = Queue::new("emails")
//!     .concurrency(3)
//!     .per_key(1)
//!     .rate(10, Duration::from_secs(1));
//! assert_eq!(emails.name(), "emails");
//! assert_eq!(emails.limits(), (Some(3), Some(1), Some((10, Duration::from_secs(1)))));
//! ```

use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::interpret::renew::Renewal;
use crate::store::{CheckpointStore, Lease, MAX_LEASE_TTL, MIN_LEASE_TTL};

/// The most slots a limit may have (each is a lease in the store).
pub const MAX_QUEUE_SLOTS: usize = 10_000;

/// The longest key a run may be enqueued under, in bytes.
pub const MAX_QUEUE_KEY_LEN: usize = 256;

/// How much earlier each level of [priority](Enqueue::priority) puts a
/// queued run in the due-index: a run of priority 1 starts before every
/// run of priority 0 enqueued up to an hour after it.
pub const PRIORITY_STEP: Duration = Duration::from_secs(3_600);

/// How long a claimed run whose key is at its limit waits before it is
/// due again.
pub const KEY_RETRY: Duration = Duration::from_secs(1);

/// How many slots of one limit a worker tries in one pass (from a random
/// one on): a queue with more is never over its limit, only sometimes
/// slower to find its last free slot.
const PROBE: usize = 64;

/// A queue's declaration (contract rule 31): its name and limits. Declare
/// it alike on every worker; pipelines that declare a queue of one name
/// share its limits. See the [module](self) for how the limits hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queue {
    name: String,
    concurrency: Option<usize>,
    per_key: Option<usize>,
    rate: Option<(usize, Duration)>,
}

impl Queue {
    /// A queue named `name` (1 to 64 ASCII letters, digits, `_`, `-` or
    /// `.`, checked by [`PipelineBuilder::build`](crate::PipelineBuilder::build)),
    /// with no limit yet.
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        Queue {
            name: name.into(),
            concurrency: None,
            per_key: None,
            rate: None,
        }
    }

    /// At most `runs` of the queue's runs run at once, across every
    /// worker (1 to [`MAX_QUEUE_SLOTS`]).
    #[must_use]
    pub fn concurrency(mut self, runs: usize) -> Self {
        self.concurrency = Some(runs);
        self
    }

    /// At most `runs` of the queue's runs of one [key](Enqueue::key) run
    /// at once (1 to [`MAX_QUEUE_SLOTS`]). A run enqueued without a key
    /// counts only against the queue's other limits.
    #[must_use]
    pub fn per_key(mut self, runs: usize) -> Self {
        self.per_key = Some(runs);
        self
    }

    /// At most `runs` of the queue's runs start in any window of length
    /// `per` (`runs` from 1 to [`MAX_QUEUE_SLOTS`], `per` from 3 ms to 365
    /// days).
    #[must_use]
    pub fn rate(mut self, runs: usize, per: Duration) -> Self {
        self.rate = Some((runs, per));
        self
    }

    /// The queue's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its limits: runs at once, runs at once per key, starts per period.
    #[must_use]
    pub fn limits(&self) -> (Option<usize>, Option<usize>, Option<(usize, Duration)>) {
        (self.concurrency, self.per_key, self.rate)
    }

    /// Checks the declaration, naming the queue and what is wrong.
    pub(crate) fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::build(format!("queue `{}`: {what}", self.name)));
        if crate::store::check_pipeline_name(&self.name).is_err() {
            return bad(
                "a queue's name is 1 to 64 ASCII letters, digits, `_`, `-` or `.`".to_owned(),
            );
        }
        let slots = |what: &str, n: usize| {
            if (1..=MAX_QUEUE_SLOTS).contains(&n) {
                Ok(())
            } else {
                bad(format!(
                    "{what} {n} is out of range: 1 to {MAX_QUEUE_SLOTS} (each is a lease in the \
                     store)"
                ))
            }
        };
        if let Some(n) = self.concurrency {
            slots("concurrency", n)?;
        }
        if let Some(n) = self.per_key {
            slots("per-key concurrency", n)?;
        }
        if let Some((n, per)) = self.rate {
            slots("a rate of", n)?;
            if !(MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&per) {
                return bad(format!(
                    "a rate's period of {per:?} is out of range: {MIN_LEASE_TTL:?} to 365 days"
                ));
            }
        }
        Ok(())
    }

    fn slot_key(&self, i: usize) -> String {
        format!("%{}/slot/{i}", self.name)
    }

    fn key_slot(&self, i: usize, key: &str) -> String {
        format!("%{}/key/{i}/{key}", self.name)
    }

    fn token_key(&self, i: usize) -> String {
        format!("%{}/rate/{i}", self.name)
    }

    /// Takes up to `want` of the queue's slots and rate tokens, one of
    /// each per [`Slots`], for runs about to be claimed: fewer when the
    /// queue is fuller, none when it is full or its rate is spent.
    pub(crate) async fn take(
        self: &Arc<Self>,
        store: &Arc<dyn CheckpointStore>,
        want: usize,
        (ttl, renew): (Duration, &(dyn Fn(&Lease) -> Renewal + Sync)),
    ) -> Result<Vec<Slots>> {
        let mut taken = Vec::new();
        let globals: Vec<Option<Lease>> = match self.concurrency {
            None => (0..want).map(|_| None).collect(),
            Some(n) => probe(store, n, want, ttl, |i| self.slot_key(i))
                .await?
                .into_iter()
                .map(Some)
                .collect(),
        };
        let mut tokens = match self.rate {
            None => (0..globals.len()).map(|_| None).collect(),
            Some((n, per)) if !globals.is_empty() => {
                probe(store, n, globals.len(), per, |i| self.token_key(i))
                    .await?
                    .into_iter()
                    .map(Some)
                    .collect()
            }
            Some(_) => Vec::new(),
        }
        .into_iter();
        for global in globals {
            match tokens.next() {
                Some(token) => taken.push(Slots {
                    queue: Arc::clone(self),
                    store: Arc::clone(store),
                    ttl,
                    global: global.map(|lease| {
                        let renewal = renew(&lease);
                        (lease, renewal)
                    }),
                    key: None,
                    token,
                    started: false,
                }),
                // out of tokens: the slot goes back
                None => {
                    if let Some(lease) = global {
                        release(store.as_ref(), lease).await;
                    }
                }
            }
        }
        Ok(taken)
    }
}

/// Takes up to `want` of the `n` leases `key(i)` for `ttl`, trying at
/// most [`PROBE`] (or `want` more) of them from a random one on.
async fn probe(
    store: &Arc<dyn CheckpointStore>,
    n: usize,
    want: usize,
    ttl: Duration,
    key: impl Fn(usize) -> String,
) -> Result<Vec<Lease>> {
    let start = random() % n as u64;
    let tries = n.min(PROBE.saturating_add(want));
    let mut got = Vec::new();
    for t in 0..tries {
        if got.len() >= want {
            break;
        }
        let i = usize::try_from((start + t as u64) % n as u64).unwrap_or(0);
        match store.acquire_lease(&key(i), ttl).await {
            Ok(lease) => got.push(lease),
            Err(Error::RunIdInUse { .. }) => {}
            Err(e) => {
                for lease in got {
                    release(store.as_ref(), lease).await;
                }
                return Err(e);
            }
        }
    }
    Ok(got)
}

fn random() -> u64 {
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

async fn release(store: &dyn CheckpointStore, lease: Lease) {
    let key = lease.run_id().to_owned();
    if let Err(e) = store.release_lease(lease).await {
        tracing::debug!(slot = %key, error = %e, "giving a queue's slot back failed");
    }
}

/// The slots one run of a queue holds (or is about to): the queue's slot,
/// its key's, and a rate token, each a lease. Given back with
/// [`give_back`](Self::give_back) once the run parks, ends or is left.
pub(crate) struct Slots {
    queue: Arc<Queue>,
    store: Arc<dyn CheckpointStore>,
    ttl: Duration,
    global: Option<(Lease, Renewal)>,
    key: Option<(Lease, Renewal)>,
    token: Option<Lease>,
    /// The run started: its rate token is spent.
    started: bool,
}

impl Slots {
    /// Takes the slot of the key the run `entry` was enqueued under (when
    /// the queue limits keys, and the run has one): `false` when its key
    /// is at its limit.
    pub(crate) async fn admit(
        &mut self,
        entry: Option<&crate::store::QueueEntry>,
        renew: &(dyn Fn(&Lease) -> Renewal + Sync),
    ) -> Result<bool> {
        let (Some(n), Some(key)) = (
            self.queue.per_key,
            entry
                .filter(|e| e.queue == self.queue.name)
                .and_then(|e| e.key.as_deref()),
        ) else {
            return Ok(true);
        };
        let queue = Arc::clone(&self.queue);
        let got = probe(&self.store, n, 1, self.ttl, |i| queue.key_slot(i, key)).await?;
        Ok(match got.into_iter().next() {
            Some(lease) => {
                let renewal = renew(&lease);
                self.key = Some((lease, renewal));
                true
            }
            None => false,
        })
    }

    /// The run starts: its rate token is spent.
    pub(crate) fn start(&mut self) {
        self.started = true;
    }

    /// Gives the slots back (and the rate token, unless the run started).
    pub(crate) async fn give_back(self) {
        for (lease, renewal) in [self.global, self.key].into_iter().flatten() {
            renewal.stop();
            release(self.store.as_ref(), lease).await;
        }
        if let (Some(token), false) = (self.token, self.started) {
            release(self.store.as_ref(), token).await;
        }
    }
}

/// How a run is enqueued (contract rule 31): its key and priority, and
/// the options of its start (a deadline, rule 30).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Enqueue {
    pub(crate) key: Option<String>,
    pub(crate) priority: u8,
    pub(crate) start: crate::StartOptions,
}

impl Enqueue {
    /// No key, priority 0, no deadline.
    #[must_use]
    pub fn new() -> Self {
        Enqueue::default()
    }

    /// The run counts against `key`'s own limit ([`Queue::per_key`]): a
    /// tenant, a user, an API account. 1 to [`MAX_QUEUE_KEY_LEN`] bytes,
    /// no control characters.
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Higher starts first (default 0); see [`PRIORITY_STEP`].
    #[must_use]
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// The start's options: a deadline (rule 30) counts from the enqueue.
    #[must_use]
    pub fn options(mut self, start: crate::StartOptions) -> Self {
        self.start = start;
        self
    }

    /// Checks the key, naming it.
    pub(crate) fn check(&self, queue: &str) -> Result<()> {
        let Some(key) = &self.key else {
            return Ok(());
        };
        let problem = if key.is_empty() {
            "it is empty"
        } else if key.len() > MAX_QUEUE_KEY_LEN {
            "it is longer than 256 bytes"
        } else if key.chars().any(char::is_control) {
            "it holds a control character"
        } else {
            return Ok(());
        };
        Err(Error::InvalidSetting {
            setting: "key",
            message: format!(
                "queue `{queue}`: key {:?}: {problem}",
                key.chars().take(64).collect::<String>()
            ),
        })
    }
}

/// What [`Pipeline::enqueue`](crate::Pipeline::enqueue) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Enqueued {
    /// The run is stored, queued.
    Queued,
    /// A run of that id was stored already (queued, running or ended): it
    /// is left as it is (de-duplication by id).
    Exists,
}

/// When a queued run of `priority` enqueued (or retried) at `now_ms` is
/// due: earlier by [`PRIORITY_STEP`] per level.
pub(crate) fn due_at(now_ms: u64, priority: u8) -> u64 {
    let step = u64::try_from(PRIORITY_STEP.as_millis()).unwrap_or(u64::MAX);
    now_ms.saturating_sub(step.saturating_mul(u64::from(priority)))
}

/// The runs of one queue and key that are not finished (contract rule
/// 31), as [`queue_counts`] finds them: what `fluxio queues` shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct QueueCount {
    /// The queue's name.
    pub queue: String,
    /// The key; `None` for runs enqueued without one.
    pub key: Option<String>,
    /// Queued: not started yet.
    pub queued: u64,
    /// Running, or abandoned by a worker that stopped (holding, or about
    /// to be recovered into, a slot).
    pub running: u64,
    /// Started, then parked in a sleep or a wait (holding no slot).
    pub waiting: u64,
}

/// The unfinished runs of every queue in `store` (of `pipeline`'s runs
/// only, when given), counted by queue and key, sorted by both: it lists
/// the running, abandoned, sleeping and waiting runs and reads each one's
/// latest checkpoint, at most `most` of them. Returns the counts and how
/// many runs it read; when that is `most`, there may be more.
///
/// # Errors
/// [`Error::Unsupported`] from a store that cannot list runs; the store's.
pub async fn queue_counts(
    store: &dyn CheckpointStore,
    pipeline: Option<&str>,
    most: usize,
) -> Result<(Vec<QueueCount>, usize)> {
    use crate::store::{RunFilter, RunState, RunStatus};
    let mut counts: std::collections::BTreeMap<(String, Option<String>), QueueCount> =
        std::collections::BTreeMap::new();
    let mut read = 0;
    'states: for state in [
        RunState::Running,
        RunState::Abandoned,
        RunState::Sleeping,
        RunState::Waiting,
    ] {
        let mut filter = RunFilter::new()
            .state(state)
            .limit(crate::store::MAX_LIST_LIMIT);
        if let Some(p) = pipeline {
            filter = filter.pipeline(p);
        }
        loop {
            let page = store.list_runs(&filter).await?;
            for run in &page.runs {
                if read >= most {
                    break 'states;
                }
                read += 1;
                let Some(cp) = store.load(&run.key).await? else {
                    continue;
                };
                let Some(entry) = cp.queue else { continue };
                let count = counts
                    .entry((entry.queue.clone(), entry.key.clone()))
                    .or_insert_with(|| QueueCount {
                        queue: entry.queue.clone(),
                        key: entry.key.clone(),
                        ..QueueCount::default()
                    });
                match cp.status {
                    RunStatus::Sleeping if entry.queued => count.queued += 1,
                    RunStatus::Running | RunStatus::Failed => count.running += 1,
                    _ => count.waiting += 1,
                }
            }
            match page.next {
                Some(next) => filter = filter.after(next),
                None => break,
            }
        }
    }
    Ok((counts.into_values().collect(), read))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule31_bad_limits_are_refused_naming_the_queue_and_the_value() {
        let err = |q: Queue| q.check().expect_err("refused").to_string();
        let zero = err(Queue::new("emails").concurrency(0));
        assert!(
            zero.contains("emails") && zero.contains("concurrency 0"),
            "{zero}"
        );
        let huge = err(Queue::new("emails").per_key(usize::MAX));
        assert!(huge.contains(&usize::MAX.to_string()), "{huge}");
        let rate = err(Queue::new("emails").rate(0, Duration::ZERO));
        assert!(rate.contains("a rate of 0"), "{rate}");
        let period = err(Queue::new("emails").rate(5, Duration::ZERO));
        assert!(period.contains("period"), "{period}");
        let name = err(Queue::new("e/mails"));
        assert!(name.contains("e/mails"), "{name}");
        Queue::new("emails")
            .concurrency(MAX_QUEUE_SLOTS)
            .per_key(1)
            .rate(1, Duration::from_secs(365 * 24 * 3600))
            .check()
            .expect("the largest limits are accepted");
    }

    #[test]
    fn rule31_bad_keys_are_refused_naming_the_key() {
        let err = |k: &str| Enqueue::new().key(k).check("q").expect_err(k).to_string();
        assert!(err("").contains("empty"));
        assert!(err(&"k".repeat(300)).contains("longer"));
        assert!(err("a\nb").contains("control"));
        Enqueue::new()
            .key("tenant-7")
            .check("q")
            .expect("a plain key");
    }

    #[test]
    fn rule31_a_higher_priority_is_due_earlier_and_never_wraps() {
        assert!(due_at(10_000_000, 1) < due_at(10_000_000, 0));
        assert_eq!(due_at(5, 255), 0);
    }
}
