//! Metrics of runs and checkpoints, through the [`metrics`](https://docs.rs/metrics) facade crate
//! (with the `metrics` cargo feature; without it every call here is empty
//! and costs nothing). A service exports them with the exporter it already
//! installs (`metrics-exporter-prometheus`, say). Every metric has a
//! `pipeline` label (the pipeline's name, empty when unnamed).
//!
//! | metric | kind | what |
//! |---|---|---|
//! | `fluxio_runs_started_total` | counter | runs started: invoke, start, resume, replay |
//! | `fluxio_runs_completed_total` | counter | runs that completed |
//! | `fluxio_runs_failed_total` | counter | runs that ended with an error (a stage's, the store's) |
//! | `fluxio_runs_cancelled_total` | counter | runs that stopped because they were cancelled |
//! | `fluxio_runs_in_flight` | gauge | runs executing in this process |
//! | `fluxio_runs_recovered_total` | counter | runs a recovery worker resumed to completion |
//! | `fluxio_runs_needing_attention_total` | counter | runs a recovery worker gave up on |
//! | `fluxio_checkpoint_write_seconds` | histogram | how long each checkpoint write took |

#[cfg(feature = "metrics")]
mod on {
    use std::time::Duration;

    use crate::error::{Error, Result};

    fn label(pipeline: &str) -> [(&'static str, String); 1] {
        [("pipeline", pipeline.to_owned())]
    }

    pub(crate) fn run_started(pipeline: &str) {
        metrics::counter!("fluxio_runs_started_total", &label(pipeline)).increment(1);
        metrics::gauge!("fluxio_runs_in_flight", &label(pipeline)).increment(1.0);
    }

    pub(crate) fn run_ended<T>(pipeline: &str, result: &Result<T>) {
        metrics::gauge!("fluxio_runs_in_flight", &label(pipeline)).decrement(1.0);
        let name = match result {
            Ok(_) => "fluxio_runs_completed_total",
            Err(Error::Cancelled { .. }) => "fluxio_runs_cancelled_total",
            Err(_) => "fluxio_runs_failed_total",
        };
        metrics::counter!(name, &label(pipeline)).increment(1);
    }

    pub(crate) fn checkpoint_written(pipeline: &str, took: Duration) {
        metrics::histogram!("fluxio_checkpoint_write_seconds", &label(pipeline)).record(took);
    }

    pub(crate) fn recovered(pipeline: &str) {
        metrics::counter!("fluxio_runs_recovered_total", &label(pipeline)).increment(1);
    }

    pub(crate) fn gave_up(pipeline: &str) {
        metrics::counter!("fluxio_runs_needing_attention_total", &label(pipeline)).increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    use std::time::Duration;

    use crate::error::Result;

    pub(crate) fn run_started(_: &str) {}
    pub(crate) fn run_ended<T>(_: &str, _: &Result<T>) {}
    pub(crate) fn checkpoint_written(_: &str, _: Duration) {}
    pub(crate) fn recovered(_: &str) {}
    pub(crate) fn gave_up(_: &str) {}
}

/// Whether this build records metrics (the `metrics` feature).
pub(crate) const ON: bool = cfg!(feature = "metrics");

pub(crate) use on::{checkpoint_written, gave_up, recovered, run_ended, run_started};
