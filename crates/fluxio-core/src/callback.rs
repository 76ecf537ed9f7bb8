//! Callbacks: observe a run without taking part in it.
//!
//! Every method of [`Callback`] has a no-op default; implement the ones you
//! need and add the callback with
//! [`PipelineBuilder::callback`](crate::PipelineBuilder::callback). A callback
//! that returns an error or panics never fails the run and never replaces a
//! stage's error: the problem is logged with `tracing` and the run goes on.
//! A step that fails or times out still gets its `on_step_end` (with the
//! error), so spans opened in `on_step_start` are always closed.
//! [`Logging`] is a ready-made one that logs every event with `tracing`.

mod logging;

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{BoxError, Error};
use crate::store::RunStatus;

pub use logging::Logging;

/// What a callback method returns; an `Err` is logged and ignored.
pub type CallbackResult = Result<(), BoxError>;

/// The stage a step event is about.
#[derive(Clone, Copy, Debug)]
pub struct StepEvent<'a> {
    /// The run id.
    pub run_id: &'a str,
    /// The stage's name.
    pub stage: &'a str,
    /// The ip of the stage's `CALL` instruction.
    pub ip: usize,
    /// The attempt (see [`StageInfo`](crate::StageInfo)).
    pub attempt: u32,
}

/// Observes runs. All methods default to doing nothing.
///
/// ```
/// use std::time::Duration;
/// use fluxio_core::callback::{Callback, CallbackResult, StepEvent};
///
/// #[derive(Debug)]
/// struct Log;
///
/// impl Callback for Log {
///     fn on_step_end(&self, step: &StepEvent<'_>, took: Duration, error: Option<&fluxio_core::Error>) -> CallbackResult {
///         println!("{} took {took:?} (failed: {})", step.stage, error.is_some());
///         Ok(())
///     }
/// }
/// ```
#[allow(unused_variables)]
pub trait Callback: fmt::Debug + Send + Sync + 'static {
    /// A run starts (invoke, resume or replay).
    fn on_pipeline_start(&self, run_id: &str, version: &str) -> CallbackResult {
        Ok(())
    }
    /// A run ends, after `took`, with `error` when it did not complete:
    /// [`Error::Cancelled`] when it was cancelled (rule 14), any other
    /// error when it failed.
    fn on_pipeline_end(
        &self,
        run_id: &str,
        took: Duration,
        error: Option<&Error>,
    ) -> CallbackResult {
        Ok(())
    }
    /// A stage is about to be called.
    fn on_step_start(&self, step: &StepEvent<'_>) -> CallbackResult {
        Ok(())
    }
    /// A stage returned (or failed, or timed out: then `error` is set), after `took`.
    fn on_step_end(
        &self,
        step: &StepEvent<'_>,
        took: Duration,
        error: Option<&Error>,
    ) -> CallbackResult {
        Ok(())
    }
    /// A branch of a parallel block starts.
    fn on_branch(&self, run_id: &str, branch: &str) -> CallbackResult {
        Ok(())
    }
    /// A router chose `route`.
    fn on_route(&self, run_id: &str, router: &str, route: &str) -> CallbackResult {
        Ok(())
    }
    /// The run failed, or was cancelled ([`Error::Cancelled`]), with `error`
    /// (called before `on_pipeline_end`).
    fn on_error(&self, run_id: &str, error: &Error) -> CallbackResult {
        Ok(())
    }
    /// A stream stage emitted `chunk`.
    fn on_stream_chunk(&self, run_id: &str, stage: &str, chunk: &crate::Value) -> CallbackResult {
        Ok(())
    }
    /// A checkpoint at `ip` (what it records: its
    /// [position](crate::store::Checkpoint::ip)) with `status` was saved;
    /// the store took `latency`.
    fn on_checkpoint(
        &self,
        run_id: &str,
        ip: usize,
        status: RunStatus,
        latency: Duration,
    ) -> CallbackResult {
        Ok(())
    }
}

/// The callbacks of a run, for a stream stage's emitter.
#[derive(Clone, Debug)]
pub(crate) struct ChunkSink {
    pub(crate) callbacks: Arc<[Arc<dyn Callback>]>,
    pub(crate) run_id: Arc<str>,
}

tokio::task_local! {
    pub(crate) static CHUNK_SINK: ChunkSink;
}

/// Calls `f` on every callback, isolating errors and panics.
pub(crate) fn emit(
    callbacks: &[Arc<dyn Callback>],
    event: &str,
    f: impl Fn(&dyn Callback) -> CallbackResult,
) {
    for cb in callbacks {
        match std::panic::catch_unwind(AssertUnwindSafe(|| f(cb.as_ref()))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(callback = ?cb, event, error = %e, "a callback failed; the run goes on")
            }
            Err(panic) => tracing::warn!(
                callback = ?cb,
                event,
                panic = %crate::stage::panic_message(&*panic),
                "a callback panicked; the run goes on"
            ),
        }
    }
}
