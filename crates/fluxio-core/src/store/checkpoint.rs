//! The checkpoint record and its binary encoding.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use bincode::de::{Decode, Decoder};
use bincode::enc::{Encode, Encoder};
use bincode::error::{AllowedEnumVariants, DecodeError, EncodeError};
use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::context::Snapshot;
use crate::error::{BoxError, Error, Result};
use crate::structure::{StageCode, Structure};

use super::branch::{BranchRecord, decode_records};
use super::journal::Change;
use crate::value::{
    Cursor, EncodedValue, WireError, check_entry, decode_legacy, decode_string, validate,
    varint_len,
};

/// Where a run stands.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    bincode::Encode,
    bincode::Decode,
)]
#[non_exhaustive]
pub enum RunStatus {
    /// The run is (or was, when it crashed) executing the stage at `ip`.
    Running,
    /// The stage at `ip` failed; `error_message` says how. A resume retries it.
    Failed,
    /// The run finished; the snapshot is its final context.
    Completed,
    /// The run was cancelled (contract rule 14): `ip`, the context, the
    /// attempt and any `error_message` are those of the checkpoint it was
    /// cancelled at. It never runs again under this run id: resume and
    /// replay refuse it, and fenced writes of its owner are refused, until
    /// the run is deleted (a fresh `invoke` deletes it).
    Cancelled,
    /// Recovery gave up on the run at `ip` (contract rule 22): recovery
    /// workers tried it as many times as their policy allows
    /// ([`attempt`](Checkpoint::attempt) says how many) and now leave it
    /// alone. `error_message` is the last failure, when there was one. An
    /// operator's [`retry_run`](super::retry_run) hands it back to the
    /// workers; an explicit resume retries it like a failed run.
    NeedsAttention,
}

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
/// The format version this build writes (and the newest it reads; it reads
/// formats 1 and 2 too).
pub const FORMAT_VERSION: u16 = 4;
/// The oldest format version this build reads.
pub const OLDEST_FORMAT_VERSION: u16 = 1;
/// The largest checkpoint payload this build writes and decodes (1 GiB):
/// [`Checkpoint::to_bytes`] refuses a larger checkpoint, and a context value
/// whose key and encoding alone take more (see
/// [the limits](crate::value#limits)) is refused when it is set.
pub const MAX_PAYLOAD: usize = 1 << 30;
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
        self
    }

    /// The same checkpoint, saying that the run was cancelled (rule 14) and
    /// written now: the position, context, attempt and error message stay
    /// as they were; the branch records go (a cancelled run resumes no block). Stores write this in place of the stored checkpoint
    /// when they [cancel](super::CheckpointStore::cancel) a run; see
    /// [`cancelled_checkpoint`](super::cancelled_checkpoint).
    #[must_use]
    pub fn cancelled(mut self) -> Self {
        self.status = RunStatus::Cancelled;
        self.branches.clear();
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
        frame(&self.key(), &entries, true)
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
        frame(&self.key(), &[self], false)
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
        payload_size(&self.key(), &entries, true)
    }

    /// [`check`](Self::check) of this checkpoint alone, as a store that
    /// keeps the journal appends it ([`entry_bytes`](Self::entry_bytes)):
    /// a delta's written values only, so O(keys written). What
    /// [`append`](super::append) asks of every checkpoint, so that a store
    /// that keeps values refuses what a store of bytes refuses.
    pub(crate) fn check_entry(&self) -> Result<u64> {
        payload_size(&self.key(), &[self], false)
    }

    /// The payload length of this checkpoint alone, as [`check`](Self::check)
    /// counts it.
    fn entry_size(&self, whole: bool) -> Result<u64> {
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
        Ok(size)
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
        let mut journal = decode_parts(run_id, [bytes], true)?;
        let mut latest = journal.pop().ok_or_else(|| Error::CorruptCheckpoint {
            run_id: run_id.to_owned(),
            reason: "it holds no checkpoint".to_owned(),
            source: None,
        })?;
        latest.earlier = journal;
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
        decode_parts(run_id, parts, true)
    }
}

/// The payload length of `entries` encoded as one blob, checking that the
/// blob would decode: it starts with a whole checkpoint and its numbers
/// follow each other.
/// With `head_whole`, the first is written whole whatever its change says
/// (its context is whole in memory), as [`Checkpoint::to_bytes`] does.
fn payload_size(key: &str, entries: &[&Checkpoint], head_whole: bool) -> Result<u64> {
    let mut size = varint_len(entries.len() as u64) as u64;
    for (i, entry) in entries.iter().enumerate() {
        let follows = match i.checked_sub(1) {
            None => true,
            Some(before) => entries[before].seq.checked_add(1) == Some(entry.seq),
        };
        let delta = !(entry.change.is_full() || (head_whole && i == 0));
        let same_code = i.checked_sub(1).is_none_or(|before| {
            (&entries[before].version, &entries[before].structure)
                == (&entry.version, &entry.structure)
        });
        if delta && !same_code {
            return Err(Error::CorruptCheckpoint {
                run_id: key.to_owned(),
                reason: format!(
                    "checkpoint {} is a delta written by other code than the checkpoint \
                     before it (a change of version is written whole)",
                    entry.seq
                ),
                source: None,
            });
        }
        if !follows {
            return Err(Error::CorruptCheckpoint {
                run_id: key.to_owned(),
                reason: format!(
                    "its journal does not read back: checkpoint {} does not follow checkpoint {}",
                    entry.seq,
                    entries[i - 1].seq
                ),
                source: None,
            });
        }
        size = size.saturating_add(entry.entry_size(head_whole && i == 0)?);
    }
    if size > MAX_PAYLOAD as u64 {
        return Err(Error::CheckpointTooLarge {
            run_id: key.to_owned(),
            size,
            limit: MAX_PAYLOAD as u64,
        });
    }
    Ok(size)
}

/// `entries` in one frame (see [`Checkpoint::to_bytes`]), written once into
/// a buffer of the exact size.
fn frame(key: &str, entries: &[&Checkpoint], head_whole: bool) -> Result<Vec<u8>> {
    let size = payload_size(key, entries, head_whole)?;
    let mut out = Vec::with_capacity(HEADER + size as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // the CRC, below
    out.extend_from_slice(&size.to_le_bytes());
    let encoded = bincode::encode_into_std_write(
        Blob(entries, head_whole),
        &mut out,
        bincode::config::standard(),
    );
    encoded.map_err(|e| Error::Internal {
        message: format!("encoding a checkpoint into memory failed: {e}"),
    })?;
    if out.len() != HEADER + size as usize {
        return Err(Error::Internal {
            message: format!(
                "checkpoint of run `{key}`: {} payload bytes written, {size} counted",
                out.len() - HEADER
            ),
        });
    }
    let crc = checksum(FORMAT_VERSION, &out[HEADER..]);
    out[6..10].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// The header's checks: the payload of `bytes` and its format version.
fn unframe<'b>(run_id: &str, bytes: &'b [u8]) -> Result<(u16, &'b [u8])> {
    let corrupt = |reason: String| Error::CorruptCheckpoint {
        run_id: run_id.to_owned(),
        reason,
        source: None,
    };
    let magic = bytes.len() >= MAGIC.len() && bytes[..MAGIC.len()] == MAGIC;
    // The version first: another format may have another header.
    if magic && bytes.len() >= 6 {
        let format = u16::from_le_bytes([bytes[4], bytes[5]]);
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&format) {
            let age = if format > FORMAT_VERSION {
                "newer"
            } else {
                "older"
            };
            return Err(corrupt(format!(
                "written in checkpoint format {format} ({age} than the formats \
                 this build reads: format {OLDEST_FORMAT_VERSION} to format {FORMAT_VERSION})"
            )));
        }
    }
    if bytes.len() < HEADER {
        return Err(corrupt(format!(
            "{} bytes is shorter than the {HEADER}-byte header",
            bytes.len()
        )));
    }
    if !magic {
        return Err(corrupt(
            "not a fluxio checkpoint (bad magic bytes)".to_owned(),
        ));
    }
    let (header, payload) = bytes.split_at(HEADER);
    let crc = u32::from_le_bytes([header[6], header[7], header[8], header[9]]);
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&header[10..18]);
    let len = u64::from_le_bytes(len_bytes);
    if len != payload.len() as u64 {
        return Err(corrupt(format!(
            "header says {len} payload bytes, found {}",
            payload.len()
        )));
    }
    if payload.len() > MAX_PAYLOAD {
        return Err(corrupt(format!(
            "payload of {} bytes exceeds the {MAX_PAYLOAD}-byte limit",
            payload.len()
        )));
    }
    let format = u16::from_le_bytes([header[4], header[5]]);
    if checksum(format, payload) != crc {
        return Err(corrupt("checksum mismatch".to_owned()));
    }
    Ok((format, payload))
}

/// The checkpoints of `parts` (see [`Checkpoint::from_entries`]), folded:
/// all of them when `keep` is set, else only the latest.
fn decode_parts<B: AsRef<[u8]>>(
    run_id: &str,
    parts: impl IntoIterator<Item = B>,
    keep: bool,
) -> Result<Vec<Checkpoint>> {
    let corrupt = |reason: String| Error::CorruptCheckpoint {
        run_id: run_id.to_owned(),
        reason,
        source: None,
    };
    let mut journal: Vec<Checkpoint> = Vec::new();
    for part in parts {
        let (format, payload) = unframe(run_id, part.as_ref())?;
        // Allocation stays proportional to `payload`: strings and byte buffers
        // are copied only once their bytes are known to be there, containers
        // pre-allocate at most a few hundred slots, and values nest at most
        // `MAX_DEPTH` deep (see `decode_v4`, `Format2`, and `crate::value`).
        let decoded = match format {
            FORMAT_VERSION => {
                decode_v4(payload, journal.last()).map_err(|e| undecodable_v3(run_id, e))?
            }
            3 => vec![decode_v3(payload).map_err(|e| undecodable_v3(run_id, e))?],
            _ => {
                let decoded = if format == 1 {
                    bincode::decode_from_slice(payload, config())
                        .map(|(Format1(cp), used)| (cp, used))
                } else {
                    bincode::decode_from_slice(payload, config())
                        .map(|(Format2(cp), used)| (cp, used))
                };
                let (cp, used) = decoded.map_err(|e| undecodable(run_id, e))?;
                if used != payload.len() {
                    return Err(corrupt(format!("{} trailing bytes", payload.len() - used)));
                }
                vec![cp]
            }
        };
        for cp in decoded {
            if cp.key() != run_id {
                return Err(corrupt(format!("it belongs to run `{}`", cp.key())));
            }
            if !cp.change.is_full() && journal.last().is_none() {
                return Err(corrupt(format!(
                    "checkpoint {} is a delta with no checkpoint before it",
                    cp.seq
                )));
            }
            if !keep {
                journal.clear();
            }
            journal.push(cp);
        }
    }
    Ok(journal)
}

/// [`Error::CorruptCheckpoint`] for a payload the decoder refused. A message
/// fluxio's own decoders wrote (a value nested past `MAX_DEPTH`, a duplicate
/// key) is the reason itself; an error of bincode's (the bytes end early, an
/// invalid tag or UTF-8) is kept as the source.
#[cold]
fn undecodable(run_id: &str, e: DecodeError) -> Error {
    let (reason, source) = match e {
        DecodeError::OtherString(own) => (format!("cannot decode: {own}"), None),
        DecodeError::Other(own) => (format!("cannot decode: {own}"), None),
        e => (
            "cannot decode the payload".to_owned(),
            Some(Box::new(e) as BoxError),
        ),
    };
    Error::CorruptCheckpoint {
        run_id: run_id.to_owned(),
        reason,
        source,
    }
}

/// The header's CRC-32 (IEEE) of a `format` checkpoint's `payload`: from
/// format 3 on it covers the format version too, so that a damaged version
/// number (3 read as 2, say: the two payloads look alike) is a checksum
/// mismatch; formats 1 and 2 covered the payload only.
pub(crate) fn checksum(format: u16, payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    if format >= 3 {
        crc.update(&format.to_le_bytes());
    }
    crc.update(payload);
    crc.finalize()
}

/// [`Error::CorruptCheckpoint`] for a format 3 payload the decoder refused,
/// as [`undecodable`] says it: what the value module found wrong (a value
/// nested past `MAX_DEPTH`, keys out of order...) is the reason; bytes that
/// end early or an unknown tag are the source.
#[cold]
fn undecodable_v3(run_id: &str, e: WireError) -> Error {
    let (reason, source) = match e {
        WireError::Invalid(_) | WireError::TooDeep => (format!("cannot decode: {e}"), None),
        WireError::End | WireError::Tag(_) => (
            "cannot decode the payload".to_owned(),
            Some(Box::new(e) as BoxError),
        ),
    };
    Error::CorruptCheckpoint {
        run_id: run_id.to_owned(),
        reason,
        source,
    }
}

/// The context of a format 1 or 2 checkpoint: a `u64` count, then key and
/// value pairs, with the keys read by [`decode_string`] and the values by
/// the decoder of those formats, then encoded as a context holds them.
fn decode_snapshot<D: Decoder>(decoder: &mut D) -> Result<Snapshot, DecodeError> {
    let len = u64::decode(decoder)?;
    let mut entries = BTreeMap::new();
    for _ in 0..len {
        let key = decode_string(decoder)?;
        let value = decode_legacy(decoder)?;
        if entries.contains_key(&key) {
            return Err(DecodeError::Other("duplicate key in context snapshot"));
        }
        entries.insert(key, EncodedValue::from_value(&value));
    }
    Ok(Snapshot::from_sorted(entries.into_iter().collect()))
}

/// `Option<String>` in bincode's wire format (a `0`/`1` byte, then the string).
fn decode_opt_string<D: Decoder>(decoder: &mut D) -> Result<Option<String>, DecodeError> {
    match u8::decode(decoder)? {
        0 => Ok(None),
        1 => decode_string(decoder).map(Some),
        found => Err(DecodeError::UnexpectedVariant {
            type_name: "Option<String>",
            allowed: &AllowedEnumVariants::Range { min: 0, max: 1 },
            found: u32::from(found),
        }),
    }
}

/// A format 4 payload: the number of checkpoints, then each (see
/// [`Checkpoint::to_bytes`]).
struct Blob<'a>(&'a [&'a Checkpoint], bool);

impl Encode for Blob<'_> {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> std::result::Result<(), EncodeError> {
        (self.0.len() as u64).encode(encoder)?;
        for (i, cp) in self.0.iter().enumerate() {
            encode_entry(cp, self.1 && i == 0, encoder)?;
        }
        Ok(())
    }
}

/// One checkpoint of format 4, field by field (see [`Checkpoint::to_bytes`]).
fn encode_entry<E: Encoder>(
    cp: &Checkpoint,
    whole: bool,
    encoder: &mut E,
) -> std::result::Result<(), EncodeError> {
    cp.pipeline.encode(encoder)?;
    cp.run_id.encode(encoder)?;
    cp.version.encode(encoder)?;
    cp.seq.encode(encoder)?;
    cp.keep_from.encode(encoder)?;
    cp.ip.encode(encoder)?;
    cp.step.encode(encoder)?;
    cp.status.encode(encoder)?;
    cp.error_message.encode(encoder)?;
    cp.created_at_ms.encode(encoder)?;
    cp.updated_at_ms.encode(encoder)?;
    cp.attempt.encode(encoder)?;
    let delta = !whole && !cp.change.is_full();
    match &cp.structure {
        // a delta has the structure of the checkpoint before it
        _ if delta => 2u8.encode(encoder)?,
        None => 0u8.encode(encoder)?,
        Some(structure) => {
            1u8.encode(encoder)?;
            structure.shape.encode(encoder)?;
            (structure.stages.len() as u64).encode(encoder)?;
            for stage in &structure.stages {
                stage.name.encode(encoder)?;
                stage.hash.encode(encoder)?;
            }
        }
    }
    (cp.branches.len() as u64).encode(encoder)?;
    for record in &cp.branches {
        record.encode(encoder)?;
    }
    match &cp.change {
        _ if whole => {
            0u8.encode(encoder)?;
            cp.context.encode(encoder)?;
        }
        Change::Full => {
            0u8.encode(encoder)?;
            cp.context.encode(encoder)?;
        }
        Change::Delta { written, removed } => {
            1u8.encode(encoder)?;
            // `entry_size` checked that the context holds every written key
            let values: Vec<(String, EncodedValue)> = written
                .iter()
                .filter_map(|k| cp.context.encoded(k).map(|v| (k.clone(), v.clone())))
                .collect();
            Snapshot::from_sorted(values).encode(encoder)?;
            (removed.len() as u64).encode(encoder)?;
            for key in removed {
                key.encode(encoder)?;
            }
        }
    }
    Ok(())
}

/// A format 2 checkpoint: format 3's fields, its values in the tags 0 to
/// 14. Read without bincode's `String` decoder, which allocates the claimed
/// length before reading (see `value::decode_string`).
struct Format2(Checkpoint);

impl<C> Decode<C> for Format2 {
    fn decode<D: Decoder<Context = C>>(decoder: &mut D) -> std::result::Result<Self, DecodeError> {
        Ok(Format2(Checkpoint {
            pipeline: decode_string(decoder)?,
            run_id: decode_string(decoder)?,
            version: decode_string(decoder)?,
            ip: u32::decode(decoder)?,
            step: decode_string(decoder)?,
            context: decode_snapshot(decoder)?,
            status: RunStatus::decode(decoder)?,
            error_message: decode_opt_string(decoder)?,
            created_at_ms: u64::decode(decoder)?,
            updated_at_ms: u64::decode(decoder)?,
            attempt: u32::decode(decoder)?,
            structure: decode_structure(decoder)?,
            branches: Vec::new(),
            seq: 0,
            change: Change::Full,
            keep_from: 0,
            earlier: Vec::new(),
        }))
    }
}

/// A format 3 payload (see [`Checkpoint::to_bytes`]), read with the value
/// module's bounds-checked [`Cursor`]: every context value is validated
/// (`value::validate`) and its bytes copied, no `Value` built.
fn decode_v3(payload: &[u8]) -> std::result::Result<Checkpoint, WireError> {
    let mut c = Cursor::new(payload);
    let string = |c: &mut Cursor<'_>| c.str().map(str::to_owned);
    let pipeline = string(&mut c)?;
    let run_id = string(&mut c)?;
    let version = string(&mut c)?;
    let ip = c.varint_u32()?;
    let step = string(&mut c)?;
    let context = snapshot_v3(&mut c)?;
    let status = decode_status(&mut c)?;
    let error_message = match c.byte()? {
        0 => None,
        1 => Some(string(&mut c)?),
        _ => return Err(WireError::Invalid("an option tag other than 0 or 1")),
    };
    let created_at_ms = c.varint()?;
    let updated_at_ms = c.varint()?;
    let attempt = c.varint_u32()?;
    let structure = decode_structure_v3(&mut c)?;
    let branches = decode_records(&mut c)?;
    if !branches.is_empty()
        && !matches!(
            status,
            RunStatus::Running | RunStatus::Failed | RunStatus::NeedsAttention
        )
    {
        return Err(WireError::Invalid(
            "branch records in a checkpoint that is not running, failed or needing attention",
        ));
    }
    if c.remaining() != 0 {
        return Err(WireError::Invalid("trailing bytes after the checkpoint"));
    }
    Ok(Checkpoint {
        pipeline,
        run_id,
        version,
        ip,
        step,
        context,
        status,
        error_message,
        created_at_ms,
        updated_at_ms,
        attempt,
        structure,
        branches,
        seq: 0,
        change: Change::Full,
        keep_from: 0,
        earlier: Vec::new(),
    })
}

/// A format 4 payload (see [`Checkpoint::to_bytes`]): its checkpoints,
/// each delta applied to the context before it (`before`, the last
/// checkpoint of an earlier part, for the first).
fn decode_v4(
    payload: &[u8],
    mut before: Option<&Checkpoint>,
) -> std::result::Result<Vec<Checkpoint>, WireError> {
    let mut c = Cursor::new(payload);
    let count = c.len(16)?;
    let mut out: Vec<Checkpoint> = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let cp = decode_entry(&mut c, out.last().or(before))?;
        out.push(cp);
        before = None;
    }
    if c.remaining() != 0 {
        return Err(WireError::Invalid("trailing bytes after the checkpoints"));
    }
    Ok(out)
}

/// One checkpoint of format 4, on top of `before`.
fn decode_entry(
    c: &mut Cursor<'_>,
    before: Option<&Checkpoint>,
) -> std::result::Result<Checkpoint, WireError> {
    let string = |c: &mut Cursor<'_>| c.str().map(str::to_owned);
    let pipeline = string(c)?;
    let run_id = string(c)?;
    let version = string(c)?;
    let seq = c.varint_u32()?;
    let keep_from = c.varint_u32()?;
    if keep_from > seq {
        return Err(WireError::Invalid("a checkpoint kept from a later one"));
    }
    if let Some(before) = before {
        if before.seq.checked_add(1) != Some(seq) {
            return Err(WireError::Invalid(
                "checkpoints whose numbers do not follow each other",
            ));
        }
    }
    let ip = c.varint_u32()?;
    let step = string(c)?;
    let status = decode_status(c)?;
    let error_message = match c.byte()? {
        0 => None,
        1 => Some(string(c)?),
        _ => return Err(WireError::Invalid("an option tag other than 0 or 1")),
    };
    let created_at_ms = c.varint()?;
    let updated_at_ms = c.varint()?;
    let attempt = c.varint_u32()?;
    // 2: a delta's, the structure of the checkpoint before it (checked below)
    let structure_tag = c.byte()?;
    let structure = match structure_tag {
        2 => before.and_then(|b| b.structure.clone()),
        tag => structure_body(c, tag)?,
    };
    let branches = decode_records(c)?;
    if !branches.is_empty()
        && !matches!(
            status,
            RunStatus::Running | RunStatus::Failed | RunStatus::NeedsAttention
        )
    {
        return Err(WireError::Invalid(
            "branch records in a checkpoint that is not running, failed or needing attention",
        ));
    }
    let (context, change) = match c.byte()? {
        0 => (snapshot_v3(c)?, Change::Full),
        1 => {
            let Some(before) = before else {
                return Err(WireError::Invalid("a delta with no checkpoint before it"));
            };
            let (written, removed) = super::branch::writes_and_removals(c)?;
            if removed
                .iter()
                .any(|key| before.context.encoded(key).is_none())
            {
                return Err(WireError::Invalid(
                    "a delta removes a key the context does not hold",
                ));
            }
            let context = before.context.apply(&written, &removed);
            let written = written.entries().map(|(k, _)| k.to_owned()).collect();
            (context, Change::Delta { written, removed })
        }
        _ => return Err(WireError::Invalid("a change tag other than 0 or 1")),
    };
    let same_code = before.is_some_and(|b| b.version == version);
    let delta = !change.is_full();
    if (structure_tag == 2) != delta || (delta && !same_code) {
        return Err(WireError::Invalid(
            "a delta with a structure of its own, of another version than the checkpoint \
             before it, or a whole checkpoint without its structure",
        ));
    }
    Ok(Checkpoint {
        pipeline,
        run_id,
        version,
        ip,
        step,
        context,
        status,
        error_message,
        created_at_ms,
        updated_at_ms,
        attempt,
        structure,
        branches,
        seq,
        change,
        keep_from,
        earlier: Vec::new(),
    })
}

fn decode_status(c: &mut Cursor<'_>) -> std::result::Result<RunStatus, WireError> {
    Ok(match c.varint_u32()? {
        0 => RunStatus::Running,
        1 => RunStatus::Failed,
        2 => RunStatus::Completed,
        3 => RunStatus::Cancelled,
        4 => RunStatus::NeedsAttention,
        _ => return Err(WireError::Invalid("an unknown run status")),
    })
}

fn decode_structure_v3(
    c: &mut Cursor<'_>,
) -> std::result::Result<Option<Arc<Structure>>, WireError> {
    let tag = c.byte()?;
    structure_body(c, tag)
}

/// The structure option after its tag `tag` (0 or 1).
fn structure_body(
    c: &mut Cursor<'_>,
    tag: u8,
) -> std::result::Result<Option<Arc<Structure>>, WireError> {
    Ok(match tag {
        0 => None,
        1 => {
            let shape = c.str()?.to_owned();
            let n = c.len(33)?;
            let mut stages = Vec::with_capacity(n);
            for _ in 0..n {
                let name = c.str()?.to_owned();
                let mut hash = [0u8; 32];
                hash.copy_from_slice(c.take(32)?);
                stages.push(StageCode { name, hash });
            }
            Some(Arc::new(Structure { shape, stages }))
        }
        _ => return Err(WireError::Invalid("an option tag other than 0 or 1")),
    })
}

/// A context as format 3 writes it: the key count, then each key, in
/// strictly increasing order, and its value's encoding, validated and
/// copied (no `Value` built). Branch records hold their writes the same way.
pub(crate) fn snapshot_v3(c: &mut Cursor<'_>) -> std::result::Result<Snapshot, WireError> {
    let count = c.len(2)?;
    let mut entries: Vec<(String, EncodedValue)> = Vec::new();
    for _ in 0..count {
        let key = c.str()?;
        if entries.last().is_some_and(|(last, _)| last.as_str() >= key) {
            return Err(WireError::Invalid("context keys out of order or repeated"));
        }
        let start = c.pos();
        let depth = validate(c)?;
        let bytes = c.since(start);
        entries.push((
            key.to_owned(),
            EncodedValue::from_valid(bytes.into(), depth),
        ));
    }
    Ok(Snapshot::from_sorted(entries))
}

/// An option of a [`Structure`]: a `0`/`1` byte, the shape, the stage count
/// and each stage's name and hash. The count is not trusted for the
/// allocation: stages are pushed as they are read.
fn decode_structure<D: Decoder>(
    decoder: &mut D,
) -> std::result::Result<Option<Arc<Structure>>, DecodeError> {
    match u8::decode(decoder)? {
        0 => return Ok(None),
        1 => {}
        found => {
            return Err(DecodeError::UnexpectedVariant {
                type_name: "Option<Structure>",
                allowed: &AllowedEnumVariants::Range { min: 0, max: 1 },
                found: u32::from(found),
            });
        }
    }
    let mut structure = Structure {
        shape: decode_string(decoder)?,
        stages: Vec::new(),
    };
    let count = u64::decode(decoder)?;
    for _ in 0..count {
        structure.stages.push(StageCode {
            name: decode_string(decoder)?,
            hash: <[u8; 32]>::decode(decoder)?,
        });
    }
    Ok(Some(Arc::new(structure)))
}

/// A format 1 checkpoint: no pipeline name and no structure, and an `error`
/// flag after the status. A flag that disagrees with the status, and the
/// cancelled status (format 2 added it), are corrupt: no build of fluxio
/// wrote them.
struct Format1(Checkpoint);

impl<C> Decode<C> for Format1 {
    fn decode<D: Decoder<Context = C>>(decoder: &mut D) -> std::result::Result<Self, DecodeError> {
        let run_id = decode_string(decoder)?;
        let version = decode_string(decoder)?;
        let ip = u32::decode(decoder)?;
        let step = decode_string(decoder)?;
        let context = decode_snapshot(decoder)?;
        let status = RunStatus::decode(decoder)?;
        if status == RunStatus::Cancelled {
            return Err(DecodeError::Other("format 1 has no cancelled status"));
        }
        if status == RunStatus::NeedsAttention {
            return Err(DecodeError::Other("format 1 has no needs-attention status"));
        }
        if bool::decode(decoder)? != (status == RunStatus::Failed) {
            return Err(DecodeError::Other(
                "the error flag disagrees with the status",
            ));
        }
        Ok(Format1(Checkpoint {
            pipeline: String::new(),
            run_id,
            version,
            ip,
            step,
            context,
            status,
            error_message: decode_opt_string(decoder)?,
            created_at_ms: u64::decode(decoder)?,
            updated_at_ms: u64::decode(decoder)?,
            attempt: u32::decode(decoder)?,
            structure: None,
            branches: Vec::new(),
            seq: 0,
            change: Change::Full,
            keep_from: 0,
            earlier: Vec::new(),
        }))
    }
}

bincode::impl_borrow_decode!(Format1);
bincode::impl_borrow_decode!(Format2);

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
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
        Checkpoint {
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
            earlier: Vec::new(),
        }
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

    #[test]
    fn an_error_flag_that_disagrees_with_the_status_is_refused() {
        let ctx = Context::new();
        for (status, flag) in [(RunStatus::Running, true), (RunStatus::Failed, false)] {
            let fields = (
                "r",
                "v",
                1u32,
                "s",
                ctx.snapshot(),
                status,
                flag,
                None::<String>,
                0u64,
                0u64,
                1u32,
            );
            let payload = bincode::encode_to_vec(&fields, config()).expect("encode");
            let err = bincode::decode_from_slice::<Format1, _>(&payload, config())
                .err()
                .expect("a flag that disagrees is corrupt");
            assert!(err.to_string().contains("error flag"), "{err}");
        }
        let fields = (
            "r",
            "v",
            1u32,
            "s",
            ctx.snapshot(),
            RunStatus::Failed,
            true,
            Some("boom"),
            0u64,
            0u64,
            1u32,
        );
        let payload = bincode::encode_to_vec(&fields, config()).expect("encode");
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

        let fields = (
            "r",
            "v",
            1u32,
            "s",
            ctx.snapshot(),
            RunStatus::Cancelled,
            false,
            None::<String>,
            0u64,
            0u64,
            1u32,
        );
        let payload = bincode::encode_to_vec(&fields, config()).expect("encode");
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
