//! What stores keep of runs that wait (contract rules 25-27): what a
//! sleeping or waiting run waits for ([`Pending`]), the signals sent to a
//! run ([`Signal`], its mailbox), how a wait is decided ([`Take`],
//! [`Decision`]) and the runs that are due ([`DueRun`]).
//!
//! Every store decides a signal and a wait with the functions here
//! ([`deliver`], [`decide`]) over the run's mailbox, so that each answers
//! alike; a store only makes each call atomic with the run's other writes.

use serde::{Deserialize, Serialize};

use super::{Checkpoint, RunStatus};
use crate::error::{Error, Result};
use crate::value::{EncodedValue, Value};

/// The largest signal payload accepted, in bytes of its encoding (16 MiB):
/// a signal carries a decision or a webhook's body, not a file (put those
/// in a store of their own and signal their address).
pub const MAX_SIGNAL_PAYLOAD: usize = 16 << 20;

/// The latest wake time or deadline: 9999-12-31T23:59:59.999Z, in
/// milliseconds since the Unix epoch. Later ones are read as this one, on
/// every store.
pub const MAX_UNTIL_MS: u64 = 253_402_300_799_999;

/// The prefix of the wait name a parent waiting for its child run shows
/// (contract rule 29: `child:billing/orders/42#3`); no signal may use it.
pub const CHILD_WAIT_PREFIX: &str = "child:";

/// The longest wait name accepted, in bytes.
pub const MAX_WAIT_NAME_LEN: usize = 128;

/// What a sleeping or waiting run waits for: set when the run reaches the
/// sleep or the wait, and carried by every checkpoint written at that step
/// (so a run woken and then crashed resumes with the same wake time).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Pending {
    /// When the run is due without a signal, in milliseconds since the
    /// Unix epoch on the pipeline's clock: a sleep's wake time, a wait's
    /// deadline; `None` for a wait without a deadline.
    pub until_ms: Option<u64>,
    /// The names the run waits for, each with its payload's type (for
    /// people: `fluxio runs show`); empty for a sleep.
    pub waits: Vec<WaitName>,
}

/// One name a waiting run can be signalled on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WaitName {
    /// The wait's name, what a signal names.
    pub name: String,
    /// The Rust type its payload is read as (`std::any::type_name`).
    pub payload: String,
}

impl WaitName {
    /// The wait `name`, its payload read as the type named `payload`.
    #[must_use]
    pub fn new(name: impl Into<String>, payload: impl Into<String>) -> Self {
        WaitName {
            name: name.into(),
            payload: payload.into(),
        }
    }
}

impl Pending {
    /// A sleep until `until_ms`.
    #[must_use]
    pub fn sleep(until_ms: u64) -> Self {
        Pending {
            until_ms: Some(until_ms),
            waits: Vec::new(),
        }
    }

    /// A wait for one of `waits`, until `deadline_ms` when there is one.
    #[must_use]
    pub fn wait(waits: Vec<WaitName>, deadline_ms: Option<u64>) -> Self {
        Pending {
            until_ms: deadline_ms,
            waits,
        }
    }

    /// Whether this is a sleep (no names to signal).
    #[must_use]
    pub fn is_sleep(&self) -> bool {
        self.waits.is_empty()
    }

    /// Whether `name` is one of the names waited for.
    #[must_use]
    pub fn waits_for(&self, name: &str) -> bool {
        self.waits.iter().any(|w| w.name == name)
    }

    /// When a run waiting for this with `mailbox` is due: at once (`0`,
    /// before any wake time, whatever the clocks say) when its mailbox
    /// holds an entry for a name it waits for (a signal delivered, or a
    /// wait already decided by a worker that stopped before its next
    /// checkpoint), else at its wake time or deadline; `None` when only a
    /// signal can wake it. What every store's due-index holds (rule 27).
    #[must_use]
    pub fn due_ms(&self, mailbox: &[Signal]) -> Option<u64> {
        if mailbox.iter().any(|s| self.waits_for(&s.name)) {
            Some(0)
        } else {
            self.until_ms
        }
    }
}

/// A signal payload: a value in fluxio's [wire format](crate::value#wire-format),
/// readable without the receiver's types (the CLI shows it) and read back
/// as the wait's type when the run takes it.
#[derive(Clone, PartialEq, Eq)]
pub struct Payload(EncodedValue);

impl Payload {
    /// `value` encoded, within [`MAX_SIGNAL_PAYLOAD`].
    ///
    /// ```
    /// use fluxio_core::store::Payload;
    /// let p = Payload::new(&("approved", 42u32))?;
    /// assert_eq!(p.deserialize::<(String, u32)>()?, ("approved".to_owned(), 42));
    /// # Ok::<(), fluxio_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ValueTooLarge`] or [`Error::ValueTooDeep`] naming
    /// `signal payload`; [`Error::Serialize`] when `value` does not
    /// serialize.
    pub fn new<T: Serialize + ?Sized>(value: &T) -> Result<Payload> {
        crate::value::encode_within("signal payload", value, MAX_SIGNAL_PAYLOAD as u64).map(Payload)
    }

    /// A [`Value`] (the CLI's JSON, read without the receiver's types).
    ///
    /// # Errors
    /// As [`Payload::new`].
    pub fn from_value(value: &Value) -> Result<Payload> {
        Payload::new(value)
    }

    /// Stored bytes, checked to be one canonical value within the limits.
    ///
    /// # Errors
    /// [`Error::CorruptCheckpoint`] naming `key` (the run) when they are not.
    pub fn from_stored(key: &str, bytes: &[u8]) -> Result<Payload> {
        if bytes.len() > MAX_SIGNAL_PAYLOAD {
            return Err(corrupt(key, "a signal payload over the limit".to_owned()));
        }
        EncodedValue::from_stored(bytes)
            .map(Payload)
            .map_err(|e| corrupt(key, format!("a signal payload does not decode: {e}")))
    }

    /// The encoding, as stores keep it.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        self.0.bytes()
    }

    /// The value, read without types.
    #[must_use]
    pub fn value(&self) -> Value {
        self.0.decode()
    }

    /// The value read as `T`.
    ///
    /// # Errors
    /// [`Error::WrongType`] naming `signal payload` and `T`.
    pub fn deserialize<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        self.0.deserialize().map_err(|source| Error::WrongType {
            key: "signal payload".to_owned(),
            expected: std::any::type_name::<T>(),
            found: self.0.kind(),
            source,
        })
    }

    pub(crate) fn encoded(&self) -> &EncodedValue {
        &self.0
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.decode().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        Ok(Payload(EncodedValue::from_value(&value)))
    }
}

/// Where a signal stands in its run's mailbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum SignalState {
    /// Sent, and not taken yet: the run takes it at its wait.
    Delivered,
    /// Taken by the run's wait, which continued with it.
    Consumed,
    /// No signal was taken for this name, and none will be: its wait timed
    /// out, or another name of the same wait was taken first. A signal
    /// sent to it is refused ([`Error::WaitClosed`]).
    Closed,
}

impl SignalState {
    /// `delivered`, `consumed` or `closed`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SignalState::Delivered => "delivered",
            SignalState::Consumed => "consumed",
            SignalState::Closed => "closed",
        }
    }

    /// The state of [`as_str`](Self::as_str)'s name.
    #[must_use]
    pub fn parse(s: &str) -> Option<SignalState> {
        [
            SignalState::Delivered,
            SignalState::Consumed,
            SignalState::Closed,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
    }
}

/// One entry of a run's mailbox: a signal for one wait name (rule 26).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Signal {
    /// The wait name it is for.
    pub name: String,
    /// What it carries (a closed entry carries unit).
    pub payload: Payload,
    /// When it was sent (or closed), in milliseconds since the Unix epoch.
    pub sent_at_ms: u64,
    /// Who sent it, as the sender said (empty when it did not).
    pub sender: String,
    /// Where it stands.
    pub state: SignalState,
}

impl Signal {
    /// A signal for the wait `name` carrying `payload`, sent now by
    /// `sender` (any label; empty for none).
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming `wait` for an empty name, one over
    /// [`MAX_WAIT_NAME_LEN`] bytes or with control characters.
    pub fn new(name: &str, payload: Payload, sender: &str) -> Result<Signal> {
        check_wait_name(name)?;
        Ok(Signal {
            name: name.to_owned(),
            payload,
            sent_at_ms: super::now_ms(),
            sender: sender.chars().take(200).collect(),
            state: SignalState::Delivered,
        })
    }

    /// The same signal, sent at `ms`.
    #[must_use]
    pub fn at(mut self, ms: u64) -> Self {
        self.sent_at_ms = ms;
        self
    }

    /// A closed entry for `name` (see [`SignalState::Closed`]), at `ms`.
    #[must_use]
    pub fn closed(name: &str, ms: u64) -> Signal {
        Signal {
            name: name.to_owned(),
            payload: Payload(EncodedValue::from_value(&Value::Unit)),
            sent_at_ms: ms,
            sender: String::new(),
            state: SignalState::Closed,
        }
    }
}

/// Checks a wait name: 1 to [`MAX_WAIT_NAME_LEN`] bytes, no control
/// characters.
///
/// # Errors
/// [`Error::InvalidSetting`] naming `wait`.
pub fn check_wait_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_WAIT_NAME_LEN {
        "it is longer than 128 bytes"
    } else if name.chars().any(char::is_control) {
        "it contains control characters"
    } else if name.starts_with(CHILD_WAIT_PREFIX) {
        "names starting with `child:` are a parent's wait for its child run"
    } else {
        return Ok(());
    };
    let shown: String = name.chars().take(64).collect();
    Err(Error::InvalidSetting {
        setting: "wait",
        message: format!("wait name {shown:?} is refused: {reason}"),
    })
}

/// How a stored signal was taken: [`CheckpointStore::send_signal`](super::CheckpointStore::send_signal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// It is stored: the run takes it at its wait (at once, when the run
    /// is waiting for it: it is due now).
    Delivered,
    /// The same payload was sent for this name before: nothing changed.
    Duplicate,
}

/// What the store decides for a wait: [`CheckpointStore::take_signal`](super::CheckpointStore::take_signal).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Take {
    /// The wait's names.
    pub waits: Vec<String>,
    /// Whether its deadline has passed: with no signal for it, it times out.
    pub expired: bool,
    /// A name whose taken signal the run refused (its payload is not the
    /// wait's type): it is removed, and the wait is open again, before the
    /// store decides.
    pub refuse: Option<String>,
    /// When it is decided, in milliseconds since the Unix epoch (the
    /// pipeline's clock): the time of the closed entries it writes.
    pub now_ms: u64,
}

impl Take {
    /// The wait on `waits`, past its deadline when `expired`, refusing the
    /// signal taken for `refuse` when there is one, decided at time 0 (see
    /// [`at`](Self::at)).
    #[must_use]
    pub fn new(waits: Vec<String>, expired: bool, refuse: Option<String>) -> Self {
        Take {
            waits,
            expired,
            refuse,
            now_ms: 0,
        }
    }

    /// The same, decided at `now_ms`.
    #[must_use]
    pub fn at(mut self, now_ms: u64) -> Self {
        self.now_ms = now_ms;
        self
    }
}

/// How a wait was decided: a signal, a timeout, or not yet.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// The wait continues with this signal (now consumed).
    Signal(Signal),
    /// The wait timed out: its names are closed.
    TimedOut,
    /// No signal, and the deadline has not passed: the run waits.
    Open,
}

/// What `signal` does to the mailbox of the run stored as `latest`
/// (`None`: nothing stored under `key`): the entry to store, or the
/// answer when nothing changes. Every store decides a signal with it.
///
/// # Errors
/// [`Error::CheckpointNotFound`] for no run; [`Error::RunFinished`] for a
/// completed or cancelled one; [`Error::SignalConflict`] for a name
/// delivered with another payload; [`Error::WaitClosed`] for a name whose
/// wait was decided without it.
pub fn deliver(
    key: &str,
    latest: Option<&Checkpoint>,
    mailbox: &[Signal],
    signal: &Signal,
) -> Result<Option<Delivery>> {
    let Some(latest) = latest else {
        return Err(Error::CheckpointNotFound {
            run_id: key.to_owned(),
        });
    };
    if matches!(latest.status, RunStatus::Completed | RunStatus::Cancelled) {
        return Err(Error::RunFinished {
            run_id: key.to_owned(),
            status: latest.status,
        });
    }
    match mailbox.iter().find(|s| s.name == signal.name) {
        None => Ok(None),
        Some(stored) if stored.state == SignalState::Closed => Err(Error::WaitClosed {
            run_id: key.to_owned(),
            wait: signal.name.clone(),
        }),
        Some(stored) if stored.payload == signal.payload => Ok(Some(Delivery::Duplicate)),
        Some(_) => Err(Error::SignalConflict {
            run_id: key.to_owned(),
            wait: signal.name.clone(),
        }),
    }
}

/// Decides `take` over `mailbox`, changing it as the decision
/// says; idempotent (a wait decided before is decided the same way again).
/// Every store decides a wait with it, atomically with the run's writes.
///
/// In order: `refuse`'s entry goes, and so do the closed entries of the
/// other names (the wait is open again); a consumed entry of the wait is
/// its decision; all names closed is a timeout; the earliest delivered
/// entry is taken (consumed, the other names closed); an expired wait
/// closes its names; otherwise it is open.
pub fn decide(mailbox: &mut Vec<Signal>, take: &Take) -> Decision {
    let ours = |s: &Signal| take.waits.contains(&s.name);
    if let Some(refused) = &take.refuse {
        mailbox.retain(|s| !(s.name == *refused || (ours(s) && s.state == SignalState::Closed)));
    }
    if let Some(taken) = mailbox
        .iter()
        .find(|s| ours(s) && s.state == SignalState::Consumed)
    {
        return Decision::Signal(taken.clone());
    }
    let closed = take.waits.iter().all(|w| {
        mailbox
            .iter()
            .any(|s| s.name == *w && s.state == SignalState::Closed)
    });
    if closed && !take.waits.is_empty() {
        return Decision::TimedOut;
    }
    let first = mailbox
        .iter()
        .enumerate()
        .filter(|(_, s)| ours(s) && s.state == SignalState::Delivered)
        .min_by_key(|(i, s)| (s.sent_at_ms, *i))
        .map(|(i, _)| i);
    let decision = match first {
        Some(i) => {
            mailbox[i].state = SignalState::Consumed;
            Decision::Signal(mailbox[i].clone())
        }
        None if take.expired => Decision::TimedOut,
        None => return Decision::Open,
    };
    for name in &take.waits {
        if !mailbox.iter().any(|s| s.name == *name) {
            mailbox.push(Signal::closed(name, take.now_ms));
        }
    }
    decision
}

/// Which due runs a worker asks for: [`CheckpointStore::due_runs`](super::CheckpointStore::due_runs).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DueFilter {
    /// Runs due at or before this instant (milliseconds since the Unix
    /// epoch, the workers' clock).
    pub before_ms: u64,
    /// Only runs of these pipelines (empty: every pipeline).
    pub pipelines: Vec<String>,
    /// Only runs written by these versions (empty: any version): a worker
    /// asks for the runs it can continue.
    pub versions: Vec<String>,
    /// At most this many, earliest due first (1 to
    /// [`MAX_LIST_LIMIT`](super::MAX_LIST_LIMIT)).
    pub limit: usize,
}

impl DueFilter {
    /// Runs due by `before_ms`, of every pipeline, at most 100.
    #[must_use]
    pub fn new(before_ms: u64) -> Self {
        DueFilter {
            before_ms,
            pipelines: Vec::new(),
            versions: Vec::new(),
            limit: 100,
        }
    }

    /// Only runs of `pipeline` (call again for more).
    #[must_use]
    pub fn pipeline(mut self, pipeline: impl Into<String>) -> Self {
        self.pipelines.push(pipeline.into());
        self
    }

    /// Only runs written by `version` (call again for more).
    #[must_use]
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.versions.push(version.into());
        self
    }

    /// At most `runs`.
    #[must_use]
    pub fn limit(mut self, runs: usize) -> Self {
        self.limit = runs;
        self
    }

    /// Whether a run of `pipeline` written by `version`, due at `due_ms`,
    /// passes.
    #[must_use]
    pub fn matches(&self, pipeline: &str, version: &str, due_ms: u64) -> bool {
        let any = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
        due_ms <= self.before_ms && any(&self.pipelines, pipeline) && any(&self.versions, version)
    }
}

/// A run that is due: its wake time or deadline passed, or a signal it
/// waits for was delivered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DueRun {
    /// The run's store key (`pipeline/run_id`).
    pub key: String,
    /// Its pipeline's name.
    pub pipeline: String,
    /// Its run id.
    pub run_id: String,
    /// The version that wrote it.
    pub version: String,
    /// When it became due, in milliseconds since the Unix epoch.
    pub due_ms: u64,
}

impl DueRun {
    /// The due run stored as `cp` under `key`, due at `due_ms`.
    #[must_use]
    pub fn of(key: &str, cp: &Checkpoint, due_ms: u64) -> DueRun {
        DueRun {
            key: key.to_owned(),
            pipeline: cp.pipeline.clone(),
            run_id: cp.run_id.clone(),
            version: cp.version.clone(),
            due_ms,
        }
    }
}

/// A due run a worker claimed with
/// [`CheckpointStore::claim_due`](super::CheckpointStore::claim_due): its
/// lease is taken, for the caller to continue the run under it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Claimed {
    /// The run, as [`due_runs`](super::CheckpointStore::due_runs) lists it.
    pub run: DueRun,
    /// Its lease, taken for the claim's time-to-live.
    pub lease: super::Lease,
}

impl Claimed {
    /// `run`, claimed under `lease`.
    #[must_use]
    pub fn new(run: DueRun, lease: super::Lease) -> Self {
        Claimed { run, lease }
    }
}

/// What a store tells its [watchers](super::CheckpointStore::watch).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunEvent {
    /// The run's store key; empty for "look at everything" (events were
    /// missed).
    pub key: String,
    /// What happened.
    pub kind: RunEventKind,
}

impl RunEvent {
    /// `kind` happened to the run under `key`.
    #[must_use]
    pub fn new(key: impl Into<String>, kind: RunEventKind) -> Self {
        RunEvent {
            key: key.into(),
            kind,
        }
    }
}

/// What happened to a run, for its [watchers](super::CheckpointStore::watch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunEventKind {
    /// It may be due (a signal for it was delivered, or it parked).
    Due,
    /// It ended: completed, failed, cancelled or gave up.
    Ended,
}

/// A store's stream of [`RunEvent`]s: [`CheckpointStore::watch`](super::CheckpointStore::watch).
pub struct RunEvents(pub(crate) std::pin::Pin<Box<dyn futures::Stream<Item = RunEvent> + Send>>);

impl RunEvents {
    /// Wraps a store's stream of events.
    pub fn new(events: impl futures::Stream<Item = RunEvent> + Send + 'static) -> Self {
        RunEvents(Box::pin(events))
    }

    /// The events of an in-process broadcast of a store's wake-ups (what
    /// a store that tells only its own process keeps: `InMemoryStore`,
    /// SQLite): missed ones (the receiver lagged) come as one "look at
    /// everything" event (an empty key); the stream ends when the sender,
    /// the store, is dropped.
    pub fn broadcast(rx: tokio::sync::broadcast::Receiver<RunEvent>) -> Self {
        use tokio::sync::broadcast::error::RecvError;
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            match rx.recv().await {
                Ok(event) => Some((event, rx)),
                Err(RecvError::Lagged(_)) => Some((RunEvent::new("", RunEventKind::Due), rx)),
                Err(RecvError::Closed) => None,
            }
        });
        RunEvents::new(stream)
    }

    /// The next event; `None` once the store stopped telling (its
    /// connection is gone: subscribe again).
    pub async fn next(&mut self) -> Option<RunEvent> {
        futures::StreamExt::next(&mut self.0).await
    }
}

impl std::fmt::Debug for RunEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunEvents")
    }
}

fn corrupt(key: &str, reason: String) -> Error {
    Error::CorruptCheckpoint {
        run_id: key.to_owned(),
        reason,
        source: None,
    }
}
