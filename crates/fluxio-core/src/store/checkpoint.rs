//! The checkpoint record; its binary encoding is `checkpoint/codec.rs`.

pub use super::status::RunStatus;

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::context::Snapshot;

use crate::error::{Error, Result};

use crate::structure::Structure;

use super::branch::BranchRecord;

use super::journal::Change;

use super::waits::{Pending, Signal};

use crate::value::{check_entry, varint_len};

mod codec;

#[cfg(any(test, feature = "test-util"))]
pub(crate) use codec::checksum;

use codec::{decode_parts, frame, payload_size};

/// The state of one run, saved before every stage call.
///
/// It is a plain serde type (so it can be inspected as JSON, say) and has a
/// documented binary encoding, [`Checkpoint::to_bytes`], that byte-oriented
/// stores persist.
///
/// A run says it failed one way: `status` is [`RunStatus::Failed`], and
/// `error_message` says how. Build one with [`Checkpoint::new`] and, for the
/// other states, [`Checkpoint::failed`] or [`Checkpoint::completed`]; the
/// struct is `#[non_exhaustive]`, so new fields are not breaking changes.
///
/// ```
/// use fluxio_core::store::{Checkpoint, RunStatus};
/// use fluxio_core::Context;
///
/// let cp = Checkpoint::new("order-7", "0123456789ab", 3, "charge", Context::new().snapshot())
///     .failed("card declined");
/// assert_eq!(cp.status, RunStatus::Failed);
/// assert!(cp.is_failed());
/// assert_eq!(cp.error_message.as_deref(), Some("card declined"));
/// ```
///
/// Its `bincode` encoding and decoding are written by hand (the wire format
/// is the one the derived ones had): every string is read without trusting
/// its claimed length, so corrupt bytes claiming a 1 GiB string fail without
/// allocating it.
///
/// Two checkpoints are equal when all their fields but
/// [`earlier`](Checkpoint::earlier) are: a checkpoint is the same whether
/// it was read with its journal or without.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The name of the pipeline the run belongs to (contract rule 10); empty
    /// for an unnamed pipeline and for a format 1 checkpoint, which predates
    /// names. Stores keep the run under [`Checkpoint::key`].
    pub pipeline: String,
    /// The run this checkpoint belongs to, unique within its pipeline.
    pub run_id: String,
    /// The version of the pipeline that wrote it.
    pub version: String,
    /// Where to continue from: the [position](crate::compile::Program::position)
    /// of the `CHECKPOINT` instruction of the stage (or block) about to run,
    /// or of the program's end once completed. A position is an ip with the
    /// `VALIDATE` instructions left out, so it is the ip in a pipeline
    /// without schemas; releases before positions recorded the ip.
    pub ip: u32,
    /// The name of the stage at `ip` (empty once completed), for humans.
    pub step: String,
    /// The context the stage at `ip` starts from (the final context once completed).
    pub context: Snapshot,
    /// Running, failed, completed or cancelled: the one place a checkpoint
    /// says it failed.
    pub status: RunStatus,
    /// How the stage at `ip` failed, when `status` is [`RunStatus::Failed`].
    pub error_message: Option<String>,
    /// When the run started, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// When this checkpoint was written, in milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
    /// Which attempt of the stage at `ip` this is: 1 on the first run, one
    /// more on every resume that retries it (after a failure or a crash).
    pub attempt: u32,
    /// The shape and stage code hashes of the pipeline that wrote it
    /// (contract rule 13); `None` in a format 1 checkpoint.
    pub structure: Option<Arc<Structure>>,
    /// The branches of the parallel block at `ip` that finished, in branch
    /// order (contract rule 19): a resume rebuilds them from these records
    /// instead of running them again. Empty anywhere else, and in formats 1
    /// and 2, which predate them.
    pub branches: Vec<BranchRecord>,
    /// This checkpoint's number in its run's journal (contract rule 18):
    /// 0 for the run's first, one more for each checkpoint after it. Format
    /// 1 to 3 checkpoints, which kept no journal, read as 0.
    pub seq: u32,
    /// What this checkpoint writes: the whole context, or the keys that
    /// changed since checkpoint `seq - 1` of the run. A store that keeps
    /// the journal writes only those; see [`Checkpoint::entry_bytes`].
    pub change: Change,
    /// A store may drop the run's checkpoints numbered below the last full
    /// checkpoint at or before this one ([`cut_point`](super::cut_point)):
    /// the bound on a run's history depth. 0 keeps them all.
    pub keep_from: u32,
    /// What the run waits for (contract rules 25-26): set on the checkpoint
    /// a run writes when it sleeps or waits, and on every checkpoint at that
    /// step after it (a woken run that crashes keeps its wake time); `None`
    /// elsewhere. Written in format 5 (a checkpoint without it is written in
    /// format 4, which earlier builds read).
    pub pending: Option<Box<Pending>>,
    /// The run's deadline (contract rule 30), in milliseconds since the Unix
    /// epoch on the pipeline's clock: set by the start that began the run
    /// ([`StartOptions`](crate::StartOptions)) and carried by every
    /// checkpoint of the run. Past it the run stops before its next stage,
    /// or leaves its sleep or wait, with
    /// [`Error::DeadlineExceeded`](crate::Error::DeadlineExceeded). Written
    /// in format 6 (a run without one is written as before, which earlier
    /// builds read).
    pub deadline_ms: Option<u64>,
    /// The run's queue, key and priority (contract rule 31) when it was
    /// [enqueued](crate::Pipeline::enqueue), carried by every checkpoint of
    /// the run. Written in format 7 (a run without one is written as
    /// before, which earlier builds read).
    pub queue: Option<Box<crate::store::QueueEntry>>,
    /// Whether the run failed for good (rule 35): a stage returned a
    /// [`TerminalError`](crate::TerminalError). Set on the failure
    /// checkpoint; while the status is [`RunStatus::Failed`]
    /// ([`is_failed_for_good`](Self::is_failed_for_good)) no start, resume or
    /// recovery runs it again. Written in format 8 (a checkpoint without it
    /// is written as before, which earlier builds read).
    pub failed_for_good: bool,
    /// Where the run was forked from (contract rule 20), on the first
    /// checkpoint of a run [`Pipeline::fork_with`](crate::Pipeline::fork_with)
    /// started; `None` elsewhere. Written in format 8.
    pub forked_from: Option<Box<crate::store::ForkOrigin>>,
    /// The run's compensation (contract rule 35), on every checkpoint
    /// written from the moment a run that failed for good began to undo
    /// its completed stages; `None` elsewhere. Written in format 8.
    pub compensation: Option<Box<crate::store::Compensation>>,
    /// The run's mailbox (contract rule 26), when the store keeps it with
    /// the checkpoint: a store with the four required methods keeps it in
    /// the blob ([`Checkpoint::to_bytes`] writes it). Empty when loaded from
    /// a store that keeps it apart;
    /// [`CheckpointStore::signals`](super::CheckpointStore::signals) reads
    /// it from any store. Not compared by `==` (it belongs to the run, not
    /// to one checkpoint).
    pub signals: Vec<Signal>,
    /// The run's earlier checkpoints, oldest first, when this one was read
    /// with its journal: from a store that keeps the whole journal in one
    /// blob (which [`Checkpoint::to_bytes`] writes and
    /// [`Checkpoint::from_bytes`] reads), or built by
    /// [`appended`](super::appended). Empty when loaded from a store that
    /// keeps the journal itself; [`CheckpointStore::history`](super::CheckpointStore::history)
    /// reads the whole journal from any store.
    pub earlier: Vec<Checkpoint>,
}

impl PartialEq for Checkpoint {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.pipeline,
            &self.run_id,
            &self.version,
            self.ip,
            &self.step,
        ) == (
            &other.pipeline,
            &other.run_id,
            &other.version,
            other.ip,
            &other.step,
        ) && (&self.context, self.status, &self.error_message)
            == (&other.context, other.status, &other.error_message)
            && (self.created_at_ms, self.updated_at_ms, self.attempt)
                == (other.created_at_ms, other.updated_at_ms, other.attempt)
            && (&self.structure, &self.branches) == (&other.structure, &other.branches)
            && (self.seq, &self.change, self.keep_from)
                == (other.seq, &other.change, other.keep_from)
            && (&self.pending, self.deadline_ms) == (&other.pending, other.deadline_ms)
            && self.queue == other.queue
            && self.failed_for_good == other.failed_for_good
            && self.forked_from == other.forked_from
            && self.compensation == other.compensation
    }
}

/// The key a store keeps the run `run_id` of the pipeline named `pipeline`
/// under: `pipeline/run_id`, or `run_id` alone for an unnamed pipeline (and
/// a format 1 checkpoint). Pipeline names contain no `/`, so two pipelines'
/// keys never collide, whatever their run ids.
///
/// ```
/// use fluxio_core::store::run_key;
/// assert_eq!(run_key("orders", "42"), "orders/42");
/// assert_eq!(run_key("", "42"), "42");
/// ```
#[must_use]
pub fn run_key(pipeline: &str, run_id: &str) -> String {
    if pipeline.is_empty() {
        return run_id.to_owned();
    }
    // not `format!`: its machinery cost more than the rest of a save
    let mut key = String::with_capacity(pipeline.len() + 1 + run_id.len());
    key.push_str(pipeline);
    key.push('/');
    key.push_str(run_id);
    key
}

/// The first four bytes of every encoded checkpoint.
pub const MAGIC: [u8; 4] = *b"FXCP";

/// The newest format version this build writes and reads (it reads formats
/// 1 to 7 too). It writes format 8 only for a run that
/// [failed for good](Checkpoint::failed_for_good) or
/// [was forked](Checkpoint::forked_from), format 7 for a run of a
/// [queue](Checkpoint::queue), format 6 for a run with a
/// [deadline](Checkpoint::deadline_ms) or a paused one, format 5 for a run that sleeps or
/// waits (a checkpoint with [`pending`](Checkpoint::pending), or a blob
/// with a mailbox), and format 4 otherwise, so that an earlier build still
/// reads every run that does not use what it lacks, and refuses one that
/// does with an error naming the format instead of mistaking a wait for a
/// stage or running past a deadline.
pub const FORMAT_VERSION: u16 = 8;

/// The format version of a run of a queue that did not fail for good.
pub(crate) const QUEUE_FORMAT_VERSION: u16 = 7;

/// The format version of a run with a deadline, or paused, outside a queue.
pub(crate) const DEADLINE_FORMAT_VERSION: u16 = 6;

/// The format version of a run that sleeps or waits, without a deadline.
pub(crate) const WAITS_FORMAT_VERSION: u16 = 5;

/// The format version of a run that neither sleeps nor waits, without a
/// deadline.
pub(crate) const PLAIN_FORMAT_VERSION: u16 = 4;

/// The oldest format version this build reads.
pub const OLDEST_FORMAT_VERSION: u16 = 1;

pub use crate::value::MAX_PAYLOAD;

const HEADER: usize = 4 + 2 + 4 + 8;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_PAYLOAD>()
}

impl Checkpoint {
    /// A running checkpoint of `run_id` at `ip`, about to run `step` from
    /// `context`: attempt 1, created and updated now.
    #[must_use]
    pub fn new(
        run_id: impl Into<String>,
        version: impl Into<String>,
        ip: u32,
        step: impl Into<String>,
        context: Snapshot,
    ) -> Self {
        let now = now_ms();
        Self {
            pipeline: String::new(),
            run_id: run_id.into(),
            version: version.into(),
            ip,
            step: step.into(),
            context,
            status: RunStatus::Running,
            error_message: None,
            created_at_ms: now,
            updated_at_ms: now,
            attempt: 1,
            structure: None,
            branches: Vec::new(),
            seq: 0,
            change: Change::Full,
            keep_from: 0,
            pending: None,
            deadline_ms: None,
            queue: None,
            failed_for_good: false,
            forked_from: None,
            compensation: None,
            signals: Vec::new(),
            earlier: Vec::new(),
        }
    }

    /// The run's journal as far as this checkpoint holds it: the
    /// [`earlier`](Checkpoint::earlier) checkpoints, then this one (with no
    /// earlier ones of its own), oldest first.
    #[must_use]
    pub fn into_journal(mut self) -> Vec<Checkpoint> {
        let mut all = std::mem::take(&mut self.earlier);
        all.push(self);
        all
    }

    /// The same checkpoint, of a run of the pipeline named `pipeline`.
    #[must_use]
    pub fn in_pipeline(mut self, pipeline: impl Into<String>) -> Self {
        self.pipeline = pipeline.into();
        self
    }

    /// The key a store keeps this checkpoint under:
    /// [`run_key`]`(&self.pipeline, &self.run_id)`.
    #[must_use]
    pub fn key(&self) -> String {
        run_key(&self.pipeline, &self.run_id)
    }

    /// The [`key`](Checkpoint::key) of a checkpoint a store is asked to
    /// [`save`](crate::CheckpointStore::save) whole, once both are checked:
    /// the key ([`check_run_id`](super::check_run_id)) and the journal
    /// ([`check`](Checkpoint::check)).
    ///
    /// # Errors
    /// Theirs: [`Error::InvalidRunId`](crate::Error::InvalidRunId), or what
    /// [`check`](Checkpoint::check) refuses.
    pub fn checked_key(&self) -> Result<String> {
        let key = self.key();
        super::check_run_id(&key)?;
        self.check()?;
        Ok(key)
    }

    /// Whether `key` is this checkpoint's [`key`](Checkpoint::key), told
    /// without building it.
    ///
    /// ```
    /// use fluxio_core::{Checkpoint, Context};
    /// let cp = Checkpoint::new("42", "v1", 0, "charge", Context::new().snapshot()).in_pipeline("orders");
    /// assert!(cp.has_key("orders/42"));
    /// assert!(!cp.has_key("42") && !cp.has_key("orders/4") && !cp.has_key("orders42"));
    /// ```
    #[must_use]
    pub fn has_key(&self, key: &str) -> bool {
        if self.pipeline.is_empty() {
            return key == self.run_id;
        }
        key.strip_prefix(self.pipeline.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            == Some(self.run_id.as_str())
    }

    /// The same checkpoint, saying that the stage at `ip` failed with `message`.
    #[must_use]
    pub fn failed(mut self, message: impl Into<String>) -> Self {
        self.status = RunStatus::Failed;
        self.error_message = Some(message.into());
        self
    }

    /// The same checkpoint, saying that the run completed.
    #[must_use]
    pub fn completed(mut self) -> Self {
        self.status = RunStatus::Completed;
        self.error_message = None;
        self.pending = None;
        self
    }

    /// The same checkpoint, saying that the run sleeps or waits for
    /// `pending` (rules 25-26): [`RunStatus::Sleeping`] when it names no
    /// wait, else [`RunStatus::Waiting`].
    #[must_use]
    pub fn parked(mut self, pending: Pending) -> Self {
        self.status = if pending.is_sleep() {
            RunStatus::Sleeping
        } else {
            RunStatus::Waiting
        };
        self.error_message = None;
        self.pending = Some(Box::new(pending));
        self
    }

    /// The same checkpoint, saying that the run was cancelled (rule 14) and
    /// written now: the position, context, attempt and error message stay
    /// as they were; the branch records go (a cancelled run resumes no
    /// block), and so does what a sleeping or waiting run waited for.
    /// Stores write this in place of the stored checkpoint
    /// when they [cancel](super::CheckpointStore::cancel) a run; see
    /// [`cancelled_checkpoint`](super::cancelled_checkpoint).
    #[must_use]
    pub fn cancelled(mut self) -> Self {
        self.status = RunStatus::Cancelled;
        self.branches.clear();
        self.pending = None;
        self.updated_at_ms = now_ms();
        self
    }

    /// The same checkpoint, paused (contract rule 30) and written now: the
    /// position, context, attempt, branch records and what a sleeping or
    /// waiting run waits for stay as they were.
    #[must_use]
    pub fn paused(mut self) -> Self {
        self.status = RunStatus::Paused;
        self.updated_at_ms = now_ms();
        self
    }

    /// The same paused checkpoint unpaused (contract rule 30), written now:
    /// sleeping or waiting again for its [`pending`](Self::pending) step
    /// when it has one; otherwise sleeping until `due_ms`, so that it is
    /// due at once and continues at its step.
    #[must_use]
    pub fn unpaused(mut self, due_ms: u64) -> Self {
        let pending = self
            .pending
            .take()
            .unwrap_or_else(|| Box::new(Pending::sleep(due_ms)));
        self.status = if pending.is_sleep() {
            RunStatus::Sleeping
        } else {
            RunStatus::Waiting
        };
        self.pending = Some(pending);
        self.updated_at_ms = now_ms();
        self
    }

    /// The same checkpoint, saying that recovery gave up on the run
    /// (contract rule 22) and written now: the position, context, attempt
    /// and error message stay as they were.
    #[must_use]
    pub fn needing_attention(mut self) -> Self {
        self.status = RunStatus::NeedsAttention;
        self.updated_at_ms = now_ms();
        self
    }

    /// Whether the run failed at `ip` (`status` is [`RunStatus::Failed`]).
    #[must_use]
    pub fn is_failed(&self) -> bool {
        self.status == RunStatus::Failed
    }

    /// Whether the run failed for good (rule 35): failed, with a
    /// [`TerminalError`](crate::TerminalError).
    #[must_use]
    pub fn is_failed_for_good(&self) -> bool {
        self.failed_for_good && self.status == RunStatus::Failed
    }

    /// [`Error::FailedForGood`](crate::Error::FailedForGood) for this run.
    #[must_use]
    pub fn failed_for_good_error(&self) -> crate::Error {
        crate::Error::FailedForGood {
            run_id: self.key().to_string(),
            stage: self.step.clone(),
            message: self.error_message.clone().unwrap_or_default(),
        }
    }

    /// Whether the run waits (`status` is [`RunStatus::Waiting`]) for a
    /// signal named `name`: a signal for it makes the run due at once
    /// (contract rule 27).
    #[must_use]
    pub fn waits_for(&self, name: &str) -> bool {
        self.status == RunStatus::Waiting
            && self.pending.as_ref().is_some_and(|p| p.waits_for(name))
    }

    /// Whether the run was cancelled (`status` is [`RunStatus::Cancelled`]).
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.status == RunStatus::Cancelled
    }

    /// Encodes the checkpoint with its [`earlier`](Checkpoint::earlier)
    /// ones: the run's journal as this checkpoint holds it, in one blob.
    /// This is what a store with the four required methods keeps.
    ///
    /// Layout (all integers little endian):
    ///
    /// | bytes | content |
    /// |---|---|
    /// | 4 | magic `FXCP` |
    /// | 2 | format version (`4`) |
    /// | 4 | CRC-32 (IEEE) of the format version (its 2 bytes) and the payload |
    /// | 8 | payload length |
    /// | n | payload: the number of checkpoints, then each checkpoint, oldest first, its fields in bincode 2's `standard` configuration (varint integers, length-prefixed strings), each context value in its [wire format](crate::value#wire-format) |
    ///
    /// Each checkpoint of format 4 is, in order: `pipeline`, `run_id`,
    /// `version`, `seq`, `keep_from`, `ip`, `step`, `status` (0 running, 1
    /// failed, 2 completed, 3 cancelled), `error_message`, `created_at_ms`,
    /// `updated_at_ms`, `attempt`, `structure` (an option of the shape text
    /// and the list of stage names with their 32-byte hashes), `branches`
    /// (a count, then each [`BranchRecord`]: index, name, the written keys
    /// as a context's are written, the removed keys), and `change`: `0`
    /// then the whole context (the key count, then each key, in increasing
    /// byte order, and its value's encoding, copied as the context holds
    /// it), or `1` then the keys written since checkpoint `seq - 1` with
    /// their values (as a context) and the removed keys (a count, then
    /// each key, in increasing order). The first checkpoint of a blob is
    /// whole (whatever its [`change`](Checkpoint::change) says: its context
    /// is whole in memory), and each one after it is numbered one more than
    /// the one before. [`Checkpoint::entry_bytes`] writes one checkpoint alone in
    /// the same frame.
    ///
    /// Format 3 was one checkpoint with the context after `step`, no `seq`,
    /// `keep_from` or `change`; format 2 had no `branches`, with values in
    /// the tags 0 to 14 only (no packed sequences) and maps in `Value`'s
    /// order; format 1 had no `pipeline` and no `structure`, an `error`
    /// flag after `status`, and no cancelled status.
    /// [`Checkpoint::from_bytes`] reads all four.
    ///
    /// It encodes only what [`Checkpoint::from_bytes`] decodes: the checks of
    /// [`Checkpoint::check`] come first, and the bytes are written once,
    /// into a buffer of their exact size.
    ///
    /// # Errors
    /// As [`Checkpoint::check`].
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let entries: Vec<&Checkpoint> = self.earlier.iter().chain([self]).collect();
        frame(&self.key(), &entries, true, &self.signals)
    }

    /// Encodes this checkpoint alone (not its [`earlier`](Checkpoint::earlier)
    /// ones), in the frame of [`Checkpoint::to_bytes`], writing what its
    /// [`change`](Checkpoint::change) says: the whole context, or only the
    /// keys that changed. This is what a store that keeps the journal
    /// itself appends for each checkpoint; [`Checkpoint::from_entries`]
    /// reads the run back from the stored entries.
    ///
    /// ```
    /// use fluxio_core::store::{Change, Checkpoint};
    /// use fluxio_core::Context;
    /// # fn main() -> fluxio_core::Result<()> {
    /// let big = Context::new().set("blob", vec![7u8; 100_000])?;
    /// let first = Checkpoint::new("r", "v1", 0, "a", big.snapshot()).in_pipeline("p");
    /// let after = big.clone().set("n", 1)?;
    /// let mut second = Checkpoint::new("r", "v1", 2, "b", after.snapshot()).in_pipeline("p");
    /// second.seq = 1;
    /// second.change = Change::between(&big.snapshot(), &after.snapshot());
    ///
    /// let (a, b) = (first.entry_bytes()?, second.entry_bytes()?);
    /// assert!(a.len() > 100_000 && b.len() < 200, "the delta holds one small key");
    /// let back = Checkpoint::from_entries("p/r", [&a, &b])?;
    /// assert_eq!((back.seq, back.ip), (1, 2));
    /// assert_eq!(back.context, after.snapshot());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Checkpoint::check`].
    pub fn entry_bytes(&self) -> Result<Vec<u8>> {
        frame(&self.key(), &[self], false, &[])
    }

    /// Checks that [`Checkpoint::from_bytes`] would read this checkpoint
    /// (with its [`earlier`](Checkpoint::earlier) ones) back once encoded,
    /// without encoding it, and returns the length of its payload (counted,
    /// not written: O(keys), whatever the values' sizes).
    /// [`Checkpoint::to_bytes`] calls it; a store that keeps checkpoints as
    /// values may call it to refuse what a byte store refuses.
    ///
    /// ```
    /// use fluxio_core::store::Checkpoint;
    /// use fluxio_core::{Context, Error, Value};
    ///
    /// let deep = (0..200).fold(Value::Unit, |v, _| Value::Some(Box::new(v)));
    /// let ctx = Context::new().set_value("tree", deep);
    /// let cp = Checkpoint::new("r", "v1", 0, "a", ctx.snapshot());
    /// assert!(matches!(cp.check(), Err(Error::ValueTooDeep { ref key, .. }) if key == "tree"));
    /// ```
    ///
    /// # Errors
    /// [`Error::ValueTooDeep`] naming the key of a value nested deeper than
    /// [`MAX_DEPTH`](crate::value::MAX_DEPTH); [`Error::ValueTooLarge`]
    /// naming the key of a value whose key and encoding alone exceed
    /// [`MAX_PAYLOAD`]; [`Error::CheckpointTooLarge`] when the whole payload
    /// does. (Values set with [`Context::set`](crate::Context::set) were
    /// checked then; these catch values given as a [`Value`](crate::Value)
    /// with [`Context::set_value`](crate::Context::set_value).)
    /// [`Error::CorruptCheckpoint`] when the journal would not read back:
    /// it starts with a delta, its numbers do not follow each other, or a
    /// delta names a key its context does not hold (or removes one it does).
    pub fn check(&self) -> Result<u64> {
        let entries: Vec<&Checkpoint> = self.earlier.iter().chain([self]).collect();
        payload_size(&self.key(), &entries, true, &self.signals).map(|(size, _)| size)
    }

    /// [`check`](Self::check) of this checkpoint alone, as a store that
    /// keeps the journal appends it ([`entry_bytes`](Self::entry_bytes)):
    /// a delta's written values only, so O(keys written). What
    /// [`append`](super::append) asks of every checkpoint, so that a store
    /// that keeps values refuses what a store of bytes refuses.
    pub(crate) fn check_entry(&self) -> Result<u64> {
        payload_size(&self.key(), &[self], false, &[]).map(|(size, _)| size)
    }

    /// The payload length of this checkpoint alone, as [`check`](Self::check)
    /// counts it.
    fn entry_size(&self, whole: bool, format: u16) -> Result<u64> {
        if self.keep_from > self.seq {
            return Err(Error::CorruptCheckpoint {
                run_id: self.key(),
                reason: format!(
                    "checkpoint {} keeps the history from checkpoint {}, a later one",
                    self.seq, self.keep_from
                ),
                source: None,
            });
        }
        let string = |s: &str| (varint_len(s.len() as u64) + s.len()) as u64;
        let int = |v: u64| varint_len(v) as u64;
        let mut size = string(&self.pipeline)
            + string(&self.run_id)
            + string(&self.version)
            + int(self.seq.into())
            + int(self.keep_from.into())
            + int(self.ip.into())
            + string(&self.step)
            + 1 // the status
            + 1 + self.error_message.as_deref().map_or(0, string)
            + int(self.created_at_ms)
            + int(self.updated_at_ms)
            + int(self.attempt.into())
            + 1;
        let delta = !whole && !self.change.is_full();
        if let Some(structure) = self.structure.as_ref().filter(|_| !delta) {
            size += string(&structure.shape) + int(structure.stages.len() as u64);
            for stage in &structure.stages {
                size += string(&stage.name) + 32;
            }
        }
        size += int(self.branches.len() as u64);
        for record in &self.branches {
            size = size.saturating_add(record.size(MAX_PAYLOAD as u64)?);
        }
        size += 1; // the change's tag
        match &self.change {
            _ if whole => {
                size += int(self.context.len() as u64);
                for (key, value) in self.context.entries() {
                    size = size.saturating_add(check_entry(key, value, MAX_PAYLOAD as u64)?);
                }
            }
            Change::Full => {
                size += int(self.context.len() as u64);
                for (key, value) in self.context.entries() {
                    size = size.saturating_add(check_entry(key, value, MAX_PAYLOAD as u64)?);
                }
            }
            Change::Delta { written, removed } => {
                let bad = |reason: String| Error::CorruptCheckpoint {
                    run_id: self.key(),
                    reason: format!("checkpoint {}: {reason}", self.seq),
                    source: None,
                };
                if !written.is_sorted_by(|a, b| a < b) || !removed.is_sorted_by(|a, b| a < b) {
                    return Err(bad(
                        "its delta's keys are not in strictly increasing order".into()
                    ));
                }
                size += int(written.len() as u64) + int(removed.len() as u64);
                for key in written {
                    let value = self.context.encoded(key).ok_or_else(|| {
                        bad(format!(
                            "its delta writes `{key}`, which its context does not hold"
                        ))
                    })?;
                    size = size.saturating_add(check_entry(key, value, MAX_PAYLOAD as u64)?);
                }
                for key in removed {
                    if self.context.encoded(key).is_some() {
                        return Err(bad(format!(
                            "its delta removes `{key}`, which its context holds"
                        )));
                    }
                    size += string(key);
                }
            }
        }
        if format >= DEADLINE_FORMAT_VERSION {
            size += 1 + self.deadline_ms.map_or(0, |ms| varint_len(ms) as u64);
        }
        if format >= QUEUE_FORMAT_VERSION {
            size += 1;
            if let Some(entry) = &self.queue {
                let key = entry.key.as_deref().map_or(0, string);
                size += string(&entry.queue) + 1 + key + 2;
            }
        }
        if format >= FORMAT_VERSION {
            size += 2; // failed for good, the fork's option tag
            if let Some(origin) = &self.forked_from {
                let list = |keys: &[String]| {
                    varint_len(keys.len() as u64) as u64
                        + keys.iter().map(|k| string(k)).sum::<u64>()
                };
                size += string(&origin.run)
                    + string(&origin.step)
                    + list(&origin.set)
                    + list(&origin.removed);
            }
            size += 1; // the compensation's option tag
            if let Some(c) = &self.compensation {
                size += string(&c.reason)
                    + varint_len(c.steps.len() as u64) as u64
                    + varint_len(c.next.into()) as u64;
                for step in &c.steps {
                    size += varint_len(step.position.into()) as u64
                        + string(&step.stage)
                        + string(&step.compensator);
                }
            }
        }
        if format >= WAITS_FORMAT_VERSION {
            size += 1;
            if let Some(pending) = &self.pending {
                size += 1 + self.pending_until_size(pending) + int(pending.waits.len() as u64);
                for wait in &pending.waits {
                    size += string(&wait.name) + string(&wait.payload);
                }
            }
        }
        Ok(size)
    }

    /// The size of a pending step's `until` option.
    fn pending_until_size(&self, pending: &Pending) -> u64 {
        pending.until_ms.map_or(0, |ms| varint_len(ms) as u64)
    }

    /// Decodes bytes written by [`Checkpoint::to_bytes`] (format 4, or
    /// formats 1 to 3 of earlier builds), stored under the key `run_id`
    /// (see [`Checkpoint::key`]): the latest checkpoint, with the earlier
    /// ones of the blob in [`earlier`](Checkpoint::earlier).
    ///
    /// A format 3 or 4 context value is checked, not built: its bytes must
    /// be the canonical encoding within the limits `set` enforces (known
    /// tags, valid UTF-8, shortest varints, map keys in order, at most
    /// [`MAX_DEPTH`](crate::value::MAX_DEPTH) levels), and are then copied
    /// as they are. Format 1 and 2 values are decoded as before and
    /// re-encoded.
    ///
    /// Never panics, and allocates in proportion to `bytes`, whatever lengths
    /// the bytes claim: a truncated, bit-flipped or foreign payload, one in
    /// another format version, or one whose key is not `run_id`, is an
    /// [`Error::CorruptCheckpoint`] naming `run_id` and what was wrong (for
    /// another format, both version numbers). The checksum
    /// guards against accidents, not against crafted bytes; those are
    /// decoded just as safely.
    ///
    /// ```
    /// use fluxio_core::store::Checkpoint;
    /// let err = Checkpoint::from_bytes("run-1", b"{\"json\": true}").unwrap_err();
    /// assert!(err.to_string().contains("run-1"));
    /// ```
    ///
    /// # Errors
    /// As above.
    pub fn from_bytes(run_id: &str, bytes: &[u8]) -> Result<Checkpoint> {
        let (mut journal, mailbox) = decode_parts(run_id, [bytes], true)?;
        let mut latest = journal.pop().ok_or_else(|| Error::CorruptCheckpoint {
            run_id: run_id.to_owned(),
            reason: "it holds no checkpoint".to_owned(),
            source: None,
        })?;
        latest.earlier = journal;
        latest.signals = mailbox;
        Ok(latest)
    }

    /// The latest checkpoint of the run stored under `run_id` as `parts`,
    /// oldest first: what [`Checkpoint::entry_bytes`] (or
    /// [`Checkpoint::to_bytes`]) wrote for each of its checkpoints, from a
    /// whole one on. Each delta is applied to the context before it, so
    /// the result holds the whole context; [`earlier`](Checkpoint::earlier)
    /// stays empty. Decoded as safely as [`Checkpoint::from_bytes`].
    ///
    /// # Errors
    /// [`Error::CorruptCheckpoint`] naming `run_id` when a part does not
    /// decode, the first is a delta, the numbers do not follow each other,
    /// or there are no parts.
    pub fn from_entries<B: AsRef<[u8]>>(
        run_id: &str,
        parts: impl IntoIterator<Item = B>,
    ) -> Result<Checkpoint> {
        decode_parts(run_id, parts, false)?
            .0
            .pop()
            .ok_or_else(|| Error::CorruptCheckpoint {
                run_id: run_id.to_owned(),
                reason: "the store holds no checkpoint for it".to_owned(),
                source: None,
            })
    }

    /// Every checkpoint of the run stored under `run_id` as `parts` (as for
    /// [`Checkpoint::from_entries`]), oldest first, each with its whole
    /// context (the contexts share their unchanged parts).
    ///
    /// # Errors
    /// As [`Checkpoint::from_entries`], except that no parts is an empty
    /// journal.
    pub fn journal_from_entries<B: AsRef<[u8]>>(
        run_id: &str,
        parts: impl IntoIterator<Item = B>,
    ) -> Result<Vec<Checkpoint>> {
        decode_parts(run_id, parts, true).map(|(journal, _)| journal)
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::codec::Format1;
    use super::*;
    use crate::store::{Payload, WaitName};
    use crate::structure::StageCode;
    use crate::{Context, Value};

    fn checkpoint(i: u64, ctx: &Context) -> Checkpoint {
        let structure = Structure {
            shape: format!("[s{i}]"),
            stages: (0..i % 4)
                .map(|j| StageCode {
                    name: "ß".repeat(j as usize),
                    hash: [j as u8; 32],
                })
                .collect(),
        };
        let mut cp = Checkpoint {
            pipeline: "p".repeat((i % 3) as usize),
            run_id: "r".repeat(1 + (i % 300) as usize),
            version: "0123456789ab".into(),
            ip: (i * 77_777) as u32,
            step: "ü".repeat((i % 5) as usize),
            context: ctx.snapshot(),
            status: [
                RunStatus::Running,
                RunStatus::Failed,
                RunStatus::Completed,
                RunStatus::Cancelled,
                RunStatus::NeedsAttention,
            ][(i % 5) as usize],
            error_message: (i % 2 == 0).then(|| "e".repeat((i % 400) as usize)),
            created_at_ms: i << (i % 60),
            updated_at_ms: u64::MAX - i,
            attempt: (i % 70_000) as u32,
            structure: (i % 5 != 0).then(|| Arc::new(structure)),
            // branch records, in running, failed and needs-attention
            // checkpoints only
            branches: if matches!(i % 5, 0 | 1 | 4) && i % 3 == 0 {
                let base = context(i + 1).clear_written();
                (0..(i % 7) as u32)
                    .map(|b| {
                        let done = base
                            .fork(format!("b{b}"))
                            .set_value(format!("k{b}"), Value::U64(i))
                            .remove("absent");
                        BranchRecord::of(b * 2, &format!("b{b}"), &done)
                    })
                    .collect()
            } else {
                Vec::new()
            },
            seq: (i % 7) as u32,
            change: Change::Full,
            keep_from: ((i % 3) as u32).min((i % 7) as u32),
            pending: None,
            deadline_ms: None,
            queue: None,
            failed_for_good: false,
            forked_from: None,
            compensation: None,
            signals: Vec::new(),
            earlier: Vec::new(),
        };
        // sleeping and waiting runs (format 5), and a mailbox in the blob
        match i % 11 {
            3 => {
                cp.branches.clear();
                cp = cp.parked(Pending::sleep(i * 1_000));
            }
            7 => {
                cp.branches.clear();
                let waits = (0..=i % 3)
                    .map(|w| WaitName::new(format!("wait-{w}"), "app::Approval"))
                    .collect();
                cp = cp.parked(Pending::wait(waits, (i % 2 == 0).then_some(u64::MAX - i)));
            }
            _ => {}
        }
        // runs with a deadline (format 6), parked or not
        if i % 4 == 1 {
            cp.deadline_ms = Some(if i % 8 == 1 { i } else { u64::MAX - i });
        }
        // runs of a queue (format 7), with a key or without
        if i % 6 == 2 {
            let key = (i % 12 == 2).then(|| format!("tenant-{i}"));
            let mut entry = crate::store::QueueEntry::new("emails", key, (i % 256) as u8);
            entry.queued = i % 4 == 0;
            cp.queue = Some(Box::new(entry));
        }
        // failed for good, forked (format 8)
        if i % 10 == 3 {
            cp.failed_for_good = true;
        }
        if i % 14 == 4 {
            let mut origin = crate::store::ForkOrigin::new(format!("orders/o-{i}"), "charge");
            origin.set = (0..i % 3).map(|k| format!("k{k}")).collect();
            origin.removed = vec!["coupon".to_owned()];
            cp.forked_from = Some(Box::new(origin));
        }
        if i % 9 == 6 {
            let steps = (0..i % 4)
                .map(|k| crate::store::CompensationStep::new(k as u32 * 7, format!("s{k}"), "undo"))
                .collect();
            let mut c = crate::store::Compensation::new(format!("declined {i}"), steps);
            c.next = (i % 3) as u32;
            cp.compensation = Some(Box::new(c));
        }
        if i % 13 == 5 {
            let payload = Payload::new(&("ok", i)).expect("encodes");
            cp.signals = vec![
                Signal::new("a", payload, "test").expect("a name").at(i),
                Signal::closed("b", i + 1),
            ];
        }
        cp
    }

    fn context(i: u64) -> Context {
        let mut ctx = Context::new();
        for k in 0..i % 6 {
            let key = format!("key-{k}");
            let n = ((i * 31 + k * 7) % 40) as usize;
            let value = match (i + k) % 5 {
                0 => Value::Seq(vec![Value::I64(-(n as i64) << 40); n]),
                1 => Value::Bytes(vec![3; n * 9]),
                2 => Value::Map(
                    (0..n as u64)
                        .map(|j| (Value::U128(u128::from(j) << 70), Value::Char('ß')))
                        .collect(),
                ),
                3 => Value::Some(Box::new(Value::String("ø".repeat(n)))),
                _ => Value::Enum {
                    variant: "V".into(),
                    value: Box::new(Value::Seq(vec![Value::F64(1.5); n])),
                },
            };
            ctx = ctx.set_value(key, value);
        }
        ctx
    }

    /// A format 1 payload of run `r`, version `v`, ip 1, step `s`, an empty
    /// context, `status`, the error flag `flag` and `error`, times 0 and
    /// attempt 1.
    fn format1(status: RunStatus, flag: bool, error: Option<&str>) -> Vec<u8> {
        let fields = (
            "r",
            "v",
            1u32,
            "s",
            Context::new().snapshot(),
            status,
            flag,
            error,
            0u64,
            0u64,
            1u32,
        );
        bincode::encode_to_vec(&fields, config()).expect("encode")
    }

    #[test]
    fn an_error_flag_that_disagrees_with_the_status_is_refused() {
        for (status, flag) in [(RunStatus::Running, true), (RunStatus::Failed, false)] {
            let payload = format1(status, flag, None);
            let err = bincode::decode_from_slice::<Format1, _>(&payload, config())
                .err()
                .expect("a flag that disagrees is corrupt");
            assert!(err.to_string().contains("error flag"), "{err}");
        }
        let payload = format1(RunStatus::Failed, true, Some("boom"));
        let (Format1(back), _) =
            bincode::decode_from_slice::<Format1, _>(&payload, config()).expect("decode");
        assert!(back.is_failed() && back.pipeline.is_empty() && back.structure.is_none());
        assert_eq!(back.error_message.as_deref(), Some("boom"));
    }

    #[test]
    fn rule14_format_2_writes_cancelled_as_status_3_and_format_1_has_none() {
        let ctx = Context::new();
        let cp = Checkpoint::new("r", "v", 1, "s", ctx.snapshot())
            .failed("boom")
            .cancelled();
        assert_eq!(
            (cp.status, cp.error_message.as_deref()),
            (RunStatus::Cancelled, Some("boom")),
            "a cancel keeps the error message"
        );
        assert!(cp.is_cancelled() && !cp.is_failed());
        let bytes = cp.to_bytes().expect("encodes");
        // pipeline "", run id "r", version "v", ip 1, step "s", empty context
        // count 1, pipeline "", run id "r", version "v", seq 0, keep_from 0, ip 1, step "s"
        let status_at = HEADER + 1 + 1 + 2 + 2 + 1 + 1 + 1 + 2;
        assert_eq!(bytes[status_at], 3, "the status byte");
        assert_eq!(Checkpoint::from_bytes("r", &bytes).expect("decodes"), cp);

        let payload = format1(RunStatus::Cancelled, false, None);
        let err = bincode::decode_from_slice::<Format1, _>(&payload, config())
            .err()
            .expect("format 1 has no cancelled status");
        assert!(err.to_string().contains("no cancelled status"), "{err}");
    }

    #[test]
    fn check_counts_the_payload_exactly_and_every_checkpoint_decodes_again() {
        for i in 0..600 {
            let cp = checkpoint(i, &context(i));
            let size = cp.check().expect("within the limits");
            let bytes = cp.to_bytes().expect("encodes");
            assert_eq!(bytes.len() as u64, HEADER as u64 + size, "checkpoint {i}");
            assert_eq!(bytes.capacity(), bytes.len(), "written once, in place");
            let back = Checkpoint::from_bytes(&cp.key(), &bytes).expect("decodes");
            assert_eq!(back, cp);
            assert_eq!(back.signals, cp.signals, "the mailbox of checkpoint {i}");
            let format = u16::from_le_bytes([bytes[4], bytes[5]]);
            let waits = cp.pending.is_some() || !cp.signals.is_empty();
            let wanted = match (cp.deadline_ms, waits) {
                _ if cp.failed_for_good
                    || cp.forked_from.is_some()
                    || cp.compensation.is_some() =>
                {
                    8
                }
                _ if cp.queue.is_some() => 7,
                (Some(_), _) => 6,
                (None, true) => 5,
                (None, false) => 4,
            };
            assert_eq!(format, wanted, "checkpoint {i}");
            assert_eq!(back.deadline_ms, cp.deadline_ms, "checkpoint {i}");
            assert_eq!(back.queue, cp.queue, "checkpoint {i}");
            assert_eq!(back.forked_from, cp.forked_from, "checkpoint {i}");
            assert_eq!(back.compensation, cp.compensation, "checkpoint {i}");
            assert_eq!(back.failed_for_good, cp.failed_for_good, "checkpoint {i}");
            assert_eq!(
                back.to_bytes().expect("re-encodes"),
                bytes,
                "checkpoint {i}"
            );
        }
    }

    #[test]
    fn rule17_a_checkpoint_past_max_payload_or_max_depth_is_refused_before_writing() {
        let deep = (0..=crate::value::MAX_DEPTH).fold(Value::Unit, |v, _| Value::Some(Box::new(v)));
        let cp = Checkpoint::new(
            "r",
            "v",
            0,
            "s",
            Context::new().set_value("deep", deep).snapshot(),
        );
        assert!(matches!(cp.to_bytes(), Err(Error::ValueTooDeep { ref key, .. }) if key == "deep"));
        // Two values that fit alone, but not together (the entries share
        // their bytes: no 1 GiB is allocated twice).
        let half = Context::new().set_value("a", Value::Bytes(vec![1; MAX_PAYLOAD / 2]));
        let a = half.encoded("a").cloned().expect("set");
        let both = half.set_encoded("b".to_owned(), a);
        let cp = Checkpoint::new("r", "v", 0, "s", both.snapshot());
        match cp.to_bytes() {
            Err(Error::CheckpointTooLarge {
                run_id,
                size,
                limit,
            }) => {
                assert_eq!(run_id, "r");
                assert_eq!(limit, MAX_PAYLOAD as u64);
                assert!(size > limit && size < limit + 100, "{size}");
            }
            other => panic!("{other:?}"),
        }
    }
}
