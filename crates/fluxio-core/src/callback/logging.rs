//! [`Logging`]: a ready-made callback that logs a run's events with
//! `tracing`.

use std::time::Duration;

use super::{Callback, CallbackResult, StepEvent};
use crate::error::Error;

/// A callback that logs each run's events as `tracing` events (target
/// `fluxio::log`), for a service that wants them without writing a
/// [`Callback`]: a run's start and end and a router's choice at `INFO`, a
/// stage's start and end and a parallel branch's start at `DEBUG`, a failed
/// stage or run at `WARN`. Each event carries the run id (and the stage, its
/// attempt and how long it took, where there is one) as fields.
///
/// ```
/// use fluxio_core::callback::Logging;
/// # fn demo(builder: fluxio_core::PipelineBuilder) -> fluxio_core::PipelineBuilder {
/// builder.callback(Logging)
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Logging;

impl Callback for Logging {
    fn on_pipeline_start(&self, run_id: &str, version: &str) -> CallbackResult {
        tracing::info!(target: "fluxio::log", run_id, version, "run started");
        Ok(())
    }

    fn on_pipeline_end(
        &self,
        run_id: &str,
        took: Duration,
        error: Option<&Error>,
    ) -> CallbackResult {
        match error {
            None => tracing::info!(target: "fluxio::log", run_id, ?took, "run completed"),
            Some(e) => {
                tracing::warn!(target: "fluxio::log", run_id, ?took, error = %e, "run ended without completing");
            }
        }
        Ok(())
    }

    fn on_step_start(&self, step: &StepEvent<'_>) -> CallbackResult {
        tracing::debug!(
            target: "fluxio::log",
            run_id = step.run_id,
            stage = step.stage,
            attempt = step.attempt,
            "stage started"
        );
        Ok(())
    }

    fn on_step_end(
        &self,
        step: &StepEvent<'_>,
        took: Duration,
        error: Option<&Error>,
    ) -> CallbackResult {
        match error {
            None => tracing::debug!(
                target: "fluxio::log",
                run_id = step.run_id,
                stage = step.stage,
                attempt = step.attempt,
                ?took,
                "stage ended"
            ),
            Some(e) => tracing::warn!(
                target: "fluxio::log",
                run_id = step.run_id,
                stage = step.stage,
                attempt = step.attempt,
                ?took,
                error = %e,
                "stage failed"
            ),
        }
        Ok(())
    }

    fn on_branch(&self, run_id: &str, branch: &str) -> CallbackResult {
        tracing::debug!(target: "fluxio::log", run_id, branch, "branch started");
        Ok(())
    }

    fn on_route(&self, run_id: &str, router: &str, route: &str) -> CallbackResult {
        tracing::info!(target: "fluxio::log", run_id, router, route, "route chosen");
        Ok(())
    }
}
