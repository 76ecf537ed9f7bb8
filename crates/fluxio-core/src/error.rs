//! The one error type of fluxio.

use std::time::Duration;

use crate::store::error_kind::StoreErrorKind;
use crate::store::status::RunStatus;
use crate::structure::changes::Changes;

mod terminal;

pub use terminal::TerminalError;
pub(crate) use terminal::is_terminal;

/// A boxed error as returned by a stage: any `std::error::Error + Send + Sync + 'static`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with fluxio's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything fluxio itself can fail with.
///
/// A stage's own error is never converted: it arrives as the `source` of
/// [`Error::Stage`], and [`Error::stage_error`] downcasts it back to the
/// stage's error type.
///
/// ```
/// use fluxio_core::Error;
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("payment declined")]
/// struct Declined;
///
/// let err = Error::Stage { stage: "charge".into(), source: Box::new(Declined) };
/// assert!(err.stage_error::<Declined>().is_some());
/// assert_eq!(err.to_string(), "stage `charge` failed: payment declined");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pipeline is malformed: found when it is built.
    #[error("invalid pipeline: {message}")]
    Build {
        /// What is wrong, naming the stage, route or key.
        message: String,
    },

    /// Two parallel branches wrote the same keys.
    #[error(
        "merge conflict: {} written by more than one of the branches {}",
        quoted(keys),
        quoted(branches)
    )]
    MergeConflict {
        /// The keys written by more than one branch.
        keys: Vec<String>,
        /// The branches that wrote them.
        branches: Vec<String>,
    },

    /// No checkpoint is stored for the run id (resume, replay, diff).
    #[error("no checkpoint found for run `{run_id}`")]
    CheckpointNotFound {
        /// The run id that was looked up.
        run_id: String,
    },

    /// The stored checkpoint was written by another version of the pipeline.
    /// Nothing was executed and the checkpoint is untouched. The message
    /// says what changed (when the checkpoint records it) and what to do.
    #[error(
        "checkpoint of run `{run_id}` was written by pipeline version {checkpoint_version}, \
         but this pipeline is version {pipeline_version}{}",
        version_advice(changes.as_deref())
    )]
    CheckpointVersion {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// The version stored in the checkpoint.
        checkpoint_version: String,
        /// The version of the pipeline asked to resume it.
        pipeline_version: String,
        /// What differs between the two, when the checkpoint records its
        /// structure (format 2 and later); `None` for older checkpoints.
        changes: Option<Box<Changes>>,
    },

    /// Another invoke, resume or replay holds this run id right now.
    #[error("run id `{run_id}` is in use by another run")]
    RunIdInUse {
        /// The contested run id.
        run_id: String,
    },

    /// The run lost ownership of its run id: its lease expired (the worker
    /// was paused or cut off past the lease's time-to-live) and another
    /// worker may own the run now. The store refused the write; this run stops.
    #[error("run `{run_id}` lost its lease (fencing token {token}); another worker may own it now")]
    LeaseLost {
        /// The run id.
        run_id: String,
        /// The fencing token this run held.
        token: u64,
    },

    /// The run was cancelled (contract rule 14), by
    /// [`Pipeline::cancel`](crate::Pipeline::cancel) or
    /// [`CheckpointStore::cancel`](crate::store::CheckpointStore::cancel), in
    /// this process or another. Its owner gets it from the checkpoint write
    /// before its next stage (the write is refused and nothing more runs),
    /// and `resume` and `replay` get it without running anything. The stored
    /// checkpoint says [`RunStatus::Cancelled`]; only a fresh `invoke` of
    /// the run id (which deletes it) runs it again.
    #[error("run `{run_id}` was cancelled")]
    Cancelled {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
    },

    /// The run was deleted from the store while it ran (a plain
    /// [`CheckpointStore::delete`](crate::store::CheckpointStore::delete),
    /// such as `fluxio runs delete --force`): its owner's next checkpoint
    /// holds only the keys changed since one the store no longer keeps, so
    /// the store refused it and nothing was written (contract rule 18). The
    /// run stops; a fresh `invoke` starts the run id again.
    #[error(
        "run `{run_id}` was deleted while it ran: checkpoint {seq} follows checkpoint {}, \
         which the store no longer holds; nothing was written",
        seq.saturating_sub(1)
    )]
    RunDeleted {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// The number of the refused checkpoint ([`Checkpoint::seq`](crate::store::Checkpoint::seq)).
        seq: u32,
    },

    /// A cancel found the run already finished: completed, or cancelled
    /// before. Nothing was changed.
    #[error("run `{run_id}` {}; nothing was changed", finished(*status))]
    RunFinished {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// How it finished: [`RunStatus::Completed`] or
        /// [`RunStatus::Cancelled`].
        status: RunStatus,
    },

    /// A run id that cannot be used (empty, too long, or with control characters).
    #[error("invalid run id {run_id:?}: {reason}")]
    InvalidRunId {
        /// The rejected run id.
        run_id: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A strict read found no value under the key.
    #[error("missing context key `{key}` (expected {expected})")]
    MissingKey {
        /// The key that was read.
        key: String,
        /// The type the caller asked for.
        expected: &'static str,
    },

    /// A strict read found a value of another type under the key. The
    /// message names the key and both types; `source` says which field or
    /// value did not fit.
    #[error("context key `{key}` holds {found}, expected {expected}")]
    WrongType {
        /// The key that was read.
        key: String,
        /// The type the caller asked for.
        expected: &'static str,
        /// The kind of value that is stored ([`Value::kind`](crate::Value::kind)).
        found: &'static str,
        /// The deserializer's error, e.g. `invalid type: string "x", expected u64`.
        #[source]
        source: crate::value::ValueError,
    },

    /// A value could not be converted into a context value (its `Serialize`
    /// impl failed), or, when no other error says why, a context value of a
    /// checkpoint could not be encoded.
    #[error("cannot store context key `{key}`")]
    Serialize {
        /// The key being written (for a checkpoint whose failing value is
        /// not found, `(checkpoint of run `...`)`).
        key: String,
        /// The serializer's error: a [`ValueError`](crate::value::ValueError)
        /// from the value's `Serialize` impl, or the checkpoint encoder's
        /// error.
        #[source]
        source: BoxError,
    },

    /// A router returned a route the routing block does not have.
    #[error(
        "router `{router}` chose unknown route `{route}`; available routes: {}",
        quoted(available)
    )]
    UnknownRoute {
        /// The router stage.
        router: String,
        /// The route it returned.
        route: String,
        /// The routes of the block.
        available: Vec<String>,
    },

    /// `run_step` or `replay` named a step the pipeline does not have.
    #[error("unknown step `{step}`; steps: {}", quoted(available))]
    UnknownStep {
        /// The requested step.
        step: String,
        /// The stage names of the pipeline.
        available: Vec<String>,
    },

    /// `replay`, `fork` or `diff` named a step (a stage name or a step
    /// number) that the run's kept history does not hold: the run never
    /// reached it, or a history depth bound cut it.
    #[error("run `{run_id}` has no checkpoint before step `{step}` in its history")]
    StepNotInHistory {
        /// The run's store key.
        run_id: String,
        /// The step asked for.
        step: String,
    },

    /// A stage's declared input or output did not match the context.
    #[error("validation failed for stage `{stage}`: {message}")]
    Validation {
        /// The stage.
        stage: String,
        /// `input: ` or `output: `, then the missing or mistyped field with
        /// its path, as the stage's [`Validator`](crate::stage::Validator)
        /// reported it (a validator returns text, so there is no error to
        /// keep as a source).
        message: String,
    },

    /// A circuit breaker is open and the stage was not called.
    #[error("circuit open for stage `{stage}`")]
    CircuitOpen {
        /// The stage.
        stage: String,
    },

    /// A stage did not finish within its timeout.
    #[error("stage `{stage}` timed out after {timeout:?}")]
    StageTimeout {
        /// The stage.
        stage: String,
        /// The timeout it exceeded.
        timeout: Duration,
    },

    /// A stage returned an error; `source` is that error, unchanged.
    #[error("stage `{stage}` failed: {}", display_or_debug(&**source))]
    Stage {
        /// The stage.
        stage: String,
        /// The stage's own error.
        #[source]
        source: BoxError,
    },

    /// A stage panicked.
    #[error("stage `{stage}` panicked: {message}")]
    StagePanic {
        /// The stage.
        stage: String,
        /// The panic payload, when it was a string.
        message: String,
    },

    /// The checkpoint store failed.
    #[error("checkpoint store ({backend}) failed: {}", display_or_debug(&**source))]
    Store {
        /// The backend, e.g. `"memory"`, `"redis"`.
        backend: &'static str,
        /// Whether the store timed out, could not be reached, or failed
        /// otherwise, as the backend classified its error (also
        /// [`Error::store_error_kind`]).
        kind: StoreErrorKind,
        /// The backend's error.
        #[source]
        source: BoxError,
    },

    /// A setting is out of range or malformed (a duration, a size, a
    /// schema name); names the setting and what it accepts.
    #[error("invalid setting `{setting}`: {message}")]
    InvalidSetting {
        /// The setting, e.g. `"lease_ttl"`, `"cool_down"`.
        setting: &'static str,
        /// What is wrong and what is accepted.
        message: String,
    },

    /// A context value is larger than a checkpoint may hold (its key and
    /// encoding past [`MAX_PAYLOAD`](crate::store::MAX_PAYLOAD)): refused
    /// when it is set, as soon as the writer gets there, so no checkpoint is
    /// ever written that cannot be read back (contract rule 17).
    #[error(
        "context key `{key}` holds a value of at least {size} bytes encoded; the limit is {limit}"
    )]
    ValueTooLarge {
        /// The key being written.
        key: String,
        /// The bytes the key and the value take encoded: exact when the
        /// whole value was counted (a checkpoint's check), at least this
        /// many when the writer stopped early (a sequence, string or byte
        /// buffer of known length is refused before it is copied).
        size: u64,
        /// The limit it exceeds, in bytes.
        limit: u64,
    },

    /// A context value nests deeper than a checkpoint may hold
    /// ([`MAX_DEPTH`](crate::value::MAX_DEPTH)): refused when it is set, on
    /// every store alike, and by a checkpoint's encoder and decoder.
    #[error("context key `{key}` holds a value nested deeper than {limit} levels")]
    ValueTooDeep {
        /// The key being written.
        key: String,
        /// The deepest nesting allowed.
        limit: u32,
    },

    /// A durable run was started outside a tokio runtime (it needs one for
    /// its lease renewal timer).
    #[error(
        "{operation} needs a tokio runtime: call it from within `#[tokio::main]` or a `Runtime::block_on`"
    )]
    NoRuntime {
        /// What was called, e.g. `"invoke of run `order-1`"`.
        operation: String,
    },

    /// A stored checkpoint could not be decoded: truncated, corrupted, or
    /// written by another format. The stored bytes are left in place.
    #[error("corrupt checkpoint for run `{run_id}`: {reason}")]
    CorruptCheckpoint {
        /// The run id the checkpoint was stored under.
        run_id: String,
        /// What was wrong with it, in fluxio's words: the header, the
        /// checksum, the format version, the run id it belongs to, a limit
        /// of fluxio's own decoder, or `cannot decode the payload` when the
        /// decoder's error is the `source`.
        reason: String,
        /// The payload decoder's error, when it refused the bytes (e.g. they
        /// end early or hold an invalid tag); `None` when `reason` says it all.
        #[source]
        source: Option<BoxError>,
    },

    /// The store cannot do this: a store with only the four required
    /// methods cannot list runs (contract rule 21), say. Everything else
    /// keeps working.
    #[error(
        "the `{store}` store cannot {operation}: it implements only the methods that need no index of runs"
    )]
    Unsupported {
        /// What was asked, e.g. `"list runs"`.
        operation: &'static str,
        /// The store's type.
        store: &'static str,
    },

    /// A fluxio bug: the interpreter met a state the compiler or `#[stage]`
    /// should have made impossible. Please report it.
    #[error("internal error (a bug in fluxio, please report it): {message}")]
    Internal {
        /// What was inconsistent.
        message: String,
    },

    /// A checkpoint is larger than the checkpoint decoder reads back
    /// ([`MAX_PAYLOAD`](crate::store::MAX_PAYLOAD)), though each of its
    /// values fits: refused when it is saved, never written.
    #[error("checkpoint of run `{run_id}` takes {size} bytes; the limit is {limit}")]
    CheckpointTooLarge {
        /// The run id.
        run_id: String,
        /// The checkpoint's size, as the decoder counts it.
        size: u64,
        /// The limit it exceeds.
        limit: u64,
    },

    /// A value could not be put into or read back from one of fluxio's
    /// byte encodings outside a checkpoint (a cache key's digest, a cache
    /// entry's bytes). `source` is the encoder's own error.
    #[error("cannot {what}: {source}")]
    Encoding {
        /// What was being done, e.g. `"decode a cache entry"`.
        what: &'static str,
        /// The encoder's or decoder's error.
        #[source]
        source: BoxError,
    },

    /// The pipeline was shut down ([`Pipeline::shutdown`](crate::Pipeline::shutdown)):
    /// it starts no run any more, and this one was not started.
    #[error("the pipeline is shut down: run `{run_id}` was not started")]
    ShutDown {
        /// The run id of the refused run.
        run_id: String,
    },

    /// [`Pipeline::shutdown`](crate::Pipeline::shutdown) waited as long as
    /// it was allowed to and some of the pipeline's runs still hold their
    /// leases (runs still executing, or blocking stage bodies still
    /// running); those leases lapse after their time-to-live if the process
    /// exits now.
    #[error(
        "shutdown waited {waited:?}, and {held} lease(s) of the pipeline's runs are still held"
    )]
    ShutdownTimeout {
        /// How long shutdown waited.
        waited: Duration,
        /// How many leases were still held or being given back.
        held: usize,
    },

    /// An operation that reads or writes checkpoints (resume, replay, diff,
    /// checkpoint, exists, cancel) was called on a pipeline built without a
    /// store.
    #[error(
        "`{operation}` needs a durable pipeline and this one is not durable: \
         build it with `.store(...)` or `.durable(true)`"
    )]
    NotDurable {
        /// The [`Pipeline`](crate::Pipeline) method called, e.g. `"resume"`.
        operation: &'static str,
    },

    /// A signal for a wait that was delivered before with another payload
    /// (contract rule 26): the first one stands, nothing was changed. The
    /// same payload again is accepted (once).
    #[error(
        "run `{run_id}`: wait `{wait}` was signalled before with another payload; \
         the first signal stands"
    )]
    SignalConflict {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// The wait's name.
        wait: String,
    },

    /// A signal for a wait that was decided without it (contract rule 26):
    /// its deadline passed, or another name of the same wait was signalled
    /// first. Nothing was changed.
    #[error("run `{run_id}`: wait `{wait}` is closed (it timed out, or another signal decided it)")]
    WaitClosed {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// The wait's name.
        wait: String,
    },

    /// A signal for a name the run's pipeline has no wait for.
    #[error(
        "run `{run_id}` has no wait named `{wait}`; its waits: {}",
        quoted(available)
    )]
    UnknownWait {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// The name signalled.
        wait: String,
        /// The pipeline's wait names.
        available: Vec<String>,
    },

    /// A child run (contract rule 29) failed, was cancelled, or recovery
    /// gave up on it, and its step names no key for the failure. The parent
    /// is failed at the child step; retrying it retries the child.
    #[error("run `{run_id}`: child run `{child}` {state}: {message}")]
    ChildFailed {
        /// The parent, as its store key.
        run_id: String,
        /// The child, as its store key (`billing/orders/42@3`).
        child: String,
        /// How it ended: `failed`, `cancelled`, `needs-attention`, or
        /// `missing` (nothing stored under its key).
        state: String,
        /// Its error message.
        message: String,
    },

    /// A wait's deadline passed without a signal, and the pipeline chose to
    /// fail then (contract rule 26). The run is failed at the wait.
    #[error("run `{run_id}`: wait `{wait}` timed out")]
    WaitTimedOut {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// The wait's name (several joined by `|`).
        wait: String,
    },

    /// The run was paused (contract rule 30) while this call ran it: it
    /// stopped before its next stage and gave its lease back; it continues
    /// once unpaused. Also what a resume or start of a paused run returns.
    #[error("run `{run_id}` is paused")]
    Paused {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
    },

    /// An unpause of a run that is not paused (contract rule 30).
    #[error("run `{run_id}` is not paused: it is {}", status_word(status))]
    NotPaused {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// What it is.
        status: RunStatus,
    },

    /// The run's deadline passed (contract rule 30): the run stopped before
    /// its next stage, or left its sleep or wait, and is failed there. It
    /// is final: a resume stops again at once, and recovery workers give
    /// the run up ([`RunStatus::NeedsAttention`]) instead of retrying it.
    #[error(
        "run `{run_id}`: its deadline, {}, passed before step `{step}`",
        rfc3339_ms(*deadline_ms)
    )]
    DeadlineExceeded {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// The step it stopped before.
        step: String,
        /// The deadline, in milliseconds since the Unix epoch on the
        /// pipeline's clock.
        deadline_ms: u64,
    },

    /// A signal's payload is not its wait's type (contract rule 26): it was
    /// not stored (or, sent without the receiver's types, it was refused
    /// when the run took it), and the wait can be signalled again.
    #[error("run `{run_id}`: signal `{wait}` refused: {reason}")]
    SignalRefused {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// The wait's name.
        wait: String,
        /// Why: the type expected and what the payload's reading said.
        reason: String,
    },

    /// [`Pipeline::wake`](crate::Pipeline::wake) of a run that is not
    /// sleeping or waiting, or waits without a deadline (only a signal
    /// wakes it).
    #[error("run `{run_id}` cannot be woken: {reason}")]
    NotParked {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// Why.
        reason: String,
    },

    /// A run that sleeps or waits (contract rules 25-26) was asked for its
    /// result, which it does not have yet: see
    /// [`Outcome`](crate::Outcome).
    #[error("run `{run_id}` is {} and has no result yet", if *waiting { "waiting" } else { "sleeping" })]
    NotFinished {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// Waiting (for a signal), not sleeping.
        waiting: bool,
    },

    /// The run failed for good (rule 35): a stage returned a
    /// [`TerminalError`]. `start` and `resume` return this instead of running
    /// it again; the first call returned the stage's error itself. `fork` it
    /// with a corrected context, or `replay` it from a step, to run it again.
    #[error("run `{run_id}` failed for good: {message}")]
    FailedForGood {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// The stage that failed.
        stage: String,
        /// How it failed, as stored (it names the stage).
        message: String,
    },

    /// A compensator failed (rule 35): it returned an error, panicked or
    /// timed out. The run is left [`crate::RunStatus::NeedsAttention`] at
    /// this compensator; an operator's retry
    /// ([`retry_run`](crate::store::retry_run), then a resume or a worker) or
    /// [`Pipeline::compensate`](crate::Pipeline::compensate) runs it again,
    /// and the ones after it.
    #[error("run `{run_id}`: compensator `{compensator}` of stage `{stage}` failed: {message}")]
    CompensationFailed {
        /// The run, as its store key (`pipeline/run_id` when named).
        run_id: String,
        /// The compensated stage.
        stage: String,
        /// The compensator that failed.
        compensator: String,
        /// How it failed.
        message: String,
    },
}

/// An error's `Display`, or its `Debug` when the `Display` is empty (an
/// error type with an empty message still says something).
fn display_or_debug(e: &(dyn std::error::Error + 'static)) -> String {
    let shown = e.to_string();
    if shown.trim().is_empty() {
        format!("{e:?}")
    } else {
        shown
    }
}

/// How a run finished, for [`Error::RunFinished`]'s message.
fn finished(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Completed => "already completed",
        RunStatus::Cancelled => "was already cancelled",
        RunStatus::Running
        | RunStatus::Failed
        | RunStatus::NeedsAttention
        | RunStatus::Sleeping
        | RunStatus::Waiting
        | RunStatus::Paused => "is not finished",
    }
}

/// `ms` since the Unix epoch as an RFC 3339 time to the millisecond, UTC;
/// a time past `9999-12-31T23:59:59.999Z` (the store's `MAX_UNTIL_MS`,
/// which no stored deadline exceeds) as milliseconds.
fn rfc3339_ms(ms: u64) -> String {
    const LAST: u64 = 253_402_300_799_999;
    if ms > LAST {
        return format!("{ms} ms since the Unix epoch");
    }
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

/// `status` as a word in a message: `running`, `needing attention`, ...
fn status_word(status: &RunStatus) -> &'static str {
    match status {
        RunStatus::Running => "running",
        RunStatus::Failed => "failed",
        RunStatus::Completed => "completed",
        RunStatus::Cancelled => "cancelled",
        RunStatus::NeedsAttention => "needing attention",
        RunStatus::Sleeping => "sleeping",
        RunStatus::Waiting => "waiting",
        RunStatus::Paused => "paused",
    }
}

fn quoted(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| format!("`{s}`")).collect();
    parts.join(", ")
}

impl Error {
    /// The stage's own error, downcast to `E`, when this is [`Error::Stage`]
    /// and the stage failed with an `E`.
    #[must_use]
    pub fn stage_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::Stage { source, .. } => source.downcast_ref::<E>().or_else(|| {
                // a final failure's own error, through its wrapper
                source
                    .downcast_ref::<TerminalError>()
                    .and_then(|t| t.inner().downcast_ref::<E>())
            }),
            _ => None,
        }
    }

    /// Whether the run failed for good (rule 35): a stage's error that is,
    /// or is caused by, a [`TerminalError`], or [`Error::FailedForGood`].
    /// No retry, recovery or repeated `start` runs such a failure again.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        match self {
            Error::Stage { source, .. } => is_terminal(&**source),
            Error::FailedForGood { .. } => true,
            _ => false,
        }
    }

    /// The stage this error is attached to, if any.
    #[must_use]
    pub fn stage(&self) -> Option<&str> {
        match self {
            Error::Stage { stage, .. }
            | Error::StagePanic { stage, .. }
            | Error::StageTimeout { stage, .. }
            | Error::Validation { stage, .. }
            | Error::CircuitOpen { stage }
            | Error::FailedForGood { stage, .. }
            | Error::CompensationFailed { stage, .. } => Some(stage),
            Error::UnknownRoute { router, .. } => Some(router),
            _ => None,
        }
    }

    /// The message with its whole cause chain: this error's `Display`, then
    /// `": cause"` for every source in turn that the message does not already
    /// show (an empty `Display` falls back to `Debug`). A failure checkpoint
    /// stores this as its `error_message`.
    ///
    /// ```
    /// use fluxio_core::Error;
    ///
    /// #[derive(Debug, thiserror::Error)]
    /// #[error("connection refused")]
    /// struct Refused;
    ///
    /// #[derive(Debug, thiserror::Error)]
    /// #[error("payment gateway unreachable")]
    /// struct Unreachable(#[source] Refused);
    ///
    /// let err = Error::Stage { stage: "charge".into(), source: Box::new(Unreachable(Refused)) };
    /// assert_eq!(
    ///     err.message_with_causes(),
    ///     "stage `charge` failed: payment gateway unreachable: connection refused"
    /// );
    /// ```
    #[must_use]
    pub fn message_with_causes(&self) -> String {
        let mut message = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            let shown = display_or_debug(c);
            if !message.contains(&shown) {
                message.push_str(": ");
                message.push_str(&shown);
            }
            cause = c.source();
        }
        message
    }

    /// Wraps a backend error as [`Error::Store`] of kind
    /// [`StoreErrorKind::Other`]. A store that can tell a timeout or a
    /// connection failure uses [`Error::store_with_kind`].
    pub fn store(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Self::store_with_kind(backend, StoreErrorKind::Other, source)
    }

    /// Wraps a backend error as [`Error::Store`], saying whether it is a
    /// timeout, a connection failure or another failure.
    pub fn store_with_kind(
        backend: &'static str,
        kind: StoreErrorKind,
        source: impl Into<BoxError>,
    ) -> Self {
        Error::Store {
            backend,
            kind,
            source: source.into(),
        }
    }

    /// For an [`Error::Store`], whether the store timed out, could not be
    /// reached, or failed otherwise (its `kind`), whatever the backend;
    /// `None` for every other error.
    #[must_use]
    pub fn store_error_kind(&self) -> Option<StoreErrorKind> {
        match self {
            Error::Store { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    pub(crate) fn build(message: impl Into<String>) -> Self {
        Error::Build {
            message: message.into(),
        }
    }
}

/// The tail of [`Error::CheckpointVersion`]'s message: what changed, and
/// what the caller can do about it.
fn version_advice(changes: Option<&Changes>) -> String {
    match changes {
        None => ": the checkpoint does not record its stages (it predates format 2); \
                 resume it with the version that wrote it (`Pipeline::hold`)"
            .to_owned(),
        Some(c) if c.same_shape() => format!(
            ": {c}. Only stage code changed, so the run can continue on the new code: \
             `resume_with(run_id, ResumeOptions::new().allow_code_changes(true))`; or keep \
             the old version beside the new one with `Pipeline::hold` to finish it on the old code"
        ),
        Some(c) => format!(
            ": {c}. The shape changed, so the run cannot continue on this code; resume it \
             with the version that wrote it (`Pipeline::hold`)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::Error;
    use crate::store::{Checkpoint, FORMAT_VERSION, MAGIC};
    use crate::value::ValueError;

    #[test]
    fn rule30_deadline_and_pause_errors_say_when_and_what() {
        let late = |deadline_ms| Error::DeadlineExceeded {
            run_id: "orders/7".to_owned(),
            step: "charge".to_owned(),
            deadline_ms,
        };
        assert_eq!(
            late(1_700_000_000_123).to_string(),
            "run `orders/7`: its deadline, 2023-11-14T22:13:20.123Z, passed before step `charge`"
        );
        assert!(
            late(u64::MAX)
                .to_string()
                .contains("18446744073709551615 ms")
        );
        let not = Error::NotPaused {
            run_id: "orders/7".to_owned(),
            status: crate::RunStatus::NeedsAttention,
        };
        assert_eq!(
            not.to_string(),
            "run `orders/7` is not paused: it is needing attention"
        );
    }

    #[test]
    fn wrong_type_keeps_the_deserializers_error_as_its_source() {
        let ctx = crate::ctx! { "n" => "seven" }.expect("a string");
        let err = ctx.get::<u64>("n").expect_err("not a u64");
        assert!(matches!(err, Error::WrongType { ref key, .. } if key == "n"));
        let source = err.source().and_then(|s| s.downcast_ref::<ValueError>());
        let source = source.expect("the ValueError as source");
        assert!(source.message.starts_with("invalid type"), "{source}");
        assert_eq!(
            err.to_string(),
            "context key `n` holds string, expected u64"
        );
        assert_eq!(
            err.message_with_causes(),
            format!("context key `n` holds string, expected u64: {source}")
        );
    }

    #[test]
    fn serialize_keeps_the_serializers_error_as_its_source() {
        struct Refuses;
        impl serde::Serialize for Refuses {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no way"))
            }
        }
        let err = crate::Context::new()
            .set("k", Refuses)
            .expect_err("refused");
        assert!(matches!(err, Error::Serialize { ref key, .. } if key == "k"));
        let source = err.source().and_then(|s| s.downcast_ref::<ValueError>());
        assert_eq!(source.map(ValueError::message), Some("no way"));
        assert_eq!(err.to_string(), "cannot store context key `k`");
        assert_eq!(
            err.message_with_causes(),
            "cannot store context key `k`: no way"
        );
    }

    #[test]
    fn rule14_cancel_errors_say_what_happened() {
        use crate::store::RunStatus;
        let finished = |status| Error::RunFinished {
            run_id: "orders/7".into(),
            status,
        };
        assert_eq!(
            finished(RunStatus::Completed).to_string(),
            "run `orders/7` already completed; nothing was changed"
        );
        assert_eq!(
            finished(RunStatus::Cancelled).to_string(),
            "run `orders/7` was already cancelled; nothing was changed"
        );
        let cancelled = Error::Cancelled {
            run_id: "orders/7".into(),
        };
        assert_eq!(cancelled.to_string(), "run `orders/7` was cancelled");
        assert_eq!(cancelled.store_error_kind(), None);
        assert_eq!(cancelled.stage(), None);
    }

    /// A checkpoint frame around `payload`, with a correct header.
    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend(FORMAT_VERSION.to_le_bytes());
        out.extend(crate::store::checkpoint_checksum(FORMAT_VERSION, payload).to_le_bytes());
        out.extend((payload.len() as u64).to_le_bytes());
        out.extend(payload);
        out
    }

    #[test]
    fn corrupt_checkpoint_keeps_the_decoders_error_as_its_source() {
        let err = Checkpoint::from_bytes("r", &frame(&[])).expect_err("no payload");
        match &err {
            Error::CorruptCheckpoint { run_id, reason, .. } => {
                assert_eq!(
                    (run_id.as_str(), reason.as_str()),
                    ("r", "cannot decode the payload")
                );
            }
            other => panic!("{other:?}"),
        }
        let source = err
            .source()
            .and_then(|s| s.downcast_ref::<crate::value::WireError>());
        assert!(
            matches!(source, Some(crate::value::WireError::End)),
            "{source:?}"
        );
        assert_eq!(
            err.to_string(),
            "corrupt checkpoint for run `r`: cannot decode the payload"
        );
        let chain = err.message_with_causes();
        assert!(chain.starts_with("corrupt checkpoint for run `r`: cannot decode the payload: "));

        // A reason with nothing underneath has no source.
        let err = Checkpoint::from_bytes("r", b"junk").expect_err("too short");
        assert!(matches!(err, Error::CorruptCheckpoint { source: None, .. }));
    }
}
