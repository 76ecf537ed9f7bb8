//! The one error type of fluxio.

use std::time::Duration;

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
    /// Nothing was executed and the checkpoint is untouched.
    #[error(
        "checkpoint of run `{run_id}` was written by pipeline version {checkpoint_version}, \
         but this pipeline is version {pipeline_version}"
    )]
    CheckpointVersion {
        /// The run id.
        run_id: String,
        /// The version stored in the checkpoint.
        checkpoint_version: String,
        /// The version of the pipeline asked to resume it.
        pipeline_version: String,
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

    /// A strict read found a value of another type under the key.
    #[error("context key `{key}` holds {found}, expected {expected}: {message}")]
    WrongType {
        /// The key that was read.
        key: String,
        /// The type the caller asked for.
        expected: &'static str,
        /// The kind of value that is stored.
        found: &'static str,
        /// The deserializer's message.
        message: String,
    },

    /// A value could not be converted into a context value.
    #[error("cannot store context key `{key}`: {message}")]
    Serialize {
        /// The key being written.
        key: String,
        /// The serializer's message.
        message: String,
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

    /// A stage's declared input or output did not match the context.
    #[error("validation failed for stage `{stage}`: {message}")]
    Validation {
        /// The stage.
        stage: String,
        /// The missing or mistyped field.
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

    /// A context value is larger than a checkpoint may hold: refused when it
    /// is set, so no checkpoint is ever written that cannot be read back.
    #[error("context key `{key}` holds a value of {size} bytes or elements; the limit is {limit}")]
    ValueTooLarge {
        /// The key being written.
        key: String,
        /// The value's size (encoded bytes, or elements of one sequence).
        size: u64,
        /// The limit it exceeds.
        limit: u64,
    },

    /// A context value nests deeper than a checkpoint may hold: refused when
    /// it is set, on every store alike.
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
        /// What was wrong with it.
        reason: String,
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

    /// An operation that reads or writes checkpoints (resume, replay, diff,
    /// checkpoint, exists) was called on a pipeline built without a store.
    #[error(
        "`{operation}` needs a durable pipeline and this one is not durable: \
         build it with `.store(...)` or `.durable(true)`"
    )]
    NotDurable {
        /// The [`Pipeline`](crate::Pipeline) method called, e.g. `"resume"`.
        operation: &'static str,
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
            Error::Stage { source, .. } => source.downcast_ref::<E>(),
            _ => None,
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
            | Error::CircuitOpen { stage } => Some(stage),
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

    /// Wraps a backend error as [`Error::Store`].
    pub fn store(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Store {
            backend,
            source: source.into(),
        }
    }

    pub(crate) fn build(message: impl Into<String>) -> Self {
        Error::Build {
            message: message.into(),
        }
    }
}
