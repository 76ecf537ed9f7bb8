//! The circuit breaker middleware: stops calling a stage that keeps failing.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{Middleware, Next, stage_failure};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::stage::{Output, Stage};

type FailureIf = Arc<dyn Fn(&Error) -> bool + Send + Sync>;

/// The state of one stage's circuit, as [`CircuitBreaker::state`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CircuitState {
    /// Calls go through; `failures` consecutive failures so far.
    Closed {
        /// Consecutive failures since the last success.
        failures: u32,
    },
    /// Calls fail fast with [`Error::CircuitOpen`] until the cool-down ends.
    Open,
    /// The cool-down is over and one probe call is in flight; every other
    /// call fails fast until it ends.
    HalfOpen,
}

/// Stops calling a stage after consecutive failures, and tries it again
/// after a cool-down.
///
/// Each stage has its own circuit, keyed by stage name:
/// - **closed**: calls go through. `failures` consecutive failures (default
///   5) open the circuit; a success resets the count.
/// - **open**: calls fail fast with [`Error::CircuitOpen`], without calling
///   the stage, for the cool-down (default 30 s, measured with tokio's clock).
/// - **half-open**: the first call after the cool-down is the probe, and it
///   is the only call in flight: every other call fails fast while it runs.
///   A successful probe closes the circuit, a failed one opens it again for
///   another cool-down. A probe that ends with an error that is not a failure
///   (see below), or is cancelled, decides nothing: the next call probes.
///
/// Failures are the stage's own ([`Error::Stage`], [`Error::StagePanic`],
/// [`Error::StageTimeout`]), like [`Retry`](super::Retry)'s default;
/// [`failure_if`](CircuitBreaker::failure_if) chooses others. Other errors
/// neither count nor reset the count. A call that started in an earlier
/// state (before the circuit opened, or before it closed again) does not
/// change the state when it ends.
///
/// Clones share the circuits: give clones of one breaker to several
/// pipelines to trip them together. Put it inside [`Retry`](super::Retry)
/// so that every attempt counts; `CircuitOpen` is not retried by default.
///
/// ```
/// use std::time::Duration;
/// use fluxio_core::middleware::{CircuitBreaker, CircuitState};
/// let breaker = CircuitBreaker::new(3)
///     .cool_down(Duration::from_secs(10))
///     .failure_if(|e| e.stage_error::<std::io::Error>().is_some());
/// assert_eq!(breaker.state("charge"), CircuitState::Closed { failures: 0 });
/// ```
#[derive(Clone)]
pub struct CircuitBreaker {
    threshold: u32,
    cool_down: Duration,
    failure_if: FailureIf,
    circuits: Arc<Mutex<HashMap<&'static str, Circuit>>>,
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("failures", &self.threshold)
            .field("cool_down", &self.cool_down)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Circuit {
    phase: Phase,
    /// Bumped on every change of phase; a call's outcome counts only in the
    /// epoch it started in.
    epoch: u64,
}

#[derive(Clone, Copy, Debug)]
enum Phase {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen,
}

impl Default for Phase {
    fn default() -> Self {
        Phase::Closed { failures: 0 }
    }
}

impl Circuit {
    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        self.epoch += 1;
    }
}

/// How a call ended, for the circuit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Success,
    Failure,
    /// Not a failure, not a success (or cancelled).
    Neutral,
}

impl CircuitBreaker {
    /// Opens a stage's circuit after `failures` consecutive failures, for a
    /// 30 s cool-down. `failures` must be at least 1: a pipeline (or a
    /// [`StageTest`](crate::testing::StageTest)) with
    /// `CircuitBreaker::new(0)` is refused when built, with
    /// [`Error::InvalidSetting`] naming `failures`.
    #[must_use]
    pub fn new(failures: u32) -> Self {
        CircuitBreaker {
            threshold: failures,
            cool_down: Duration::from_secs(30),
            failure_if: Arc::new(stage_failure),
            circuits: Arc::default(),
        }
    }

    /// How long an open circuit stays open before a probe (default 30 s; at
    /// most [`MAX_WAIT`](super::MAX_WAIT), longer is clamped to it).
    #[must_use]
    pub fn cool_down(mut self, cool_down: Duration) -> Self {
        self.cool_down = cool_down.min(super::MAX_WAIT);
        self
    }

    /// Which errors are failures (default: the stage's own failures).
    #[must_use]
    pub fn failure_if(
        mut self,
        predicate: impl Fn(&Error) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.failure_if = Arc::new(predicate);
        self
    }

    /// The state of the circuit of the stage called `stage` (closed with no
    /// failures for a stage it has not seen). An open circuit whose cool-down
    /// is over is still `Open` until a call probes it.
    #[must_use]
    pub fn state(&self, stage: &str) -> CircuitState {
        match self.lock().get(stage).map(|c| c.phase).unwrap_or_default() {
            Phase::Closed { failures } => CircuitState::Closed { failures },
            Phase::Open { .. } => CircuitState::Open,
            Phase::HalfOpen => CircuitState::HalfOpen,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<&'static str, Circuit>> {
        self.circuits.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets a call of `stage` through, or fails it fast.
    fn admit(&self, stage: &'static str) -> Result<Permit<'_>> {
        let mut circuits = self.lock();
        let circuit = circuits.entry(stage).or_default();
        let probe = match circuit.phase {
            Phase::Closed { .. } => false,
            Phase::Open { until } if Instant::now() >= until => {
                circuit.enter(Phase::HalfOpen);
                tracing::info!(stage, "circuit half-open: probing the stage");
                true
            }
            Phase::Open { .. } | Phase::HalfOpen => {
                return Err(Error::CircuitOpen {
                    stage: stage.to_owned(),
                });
            }
        };
        Ok(Permit {
            breaker: self,
            stage,
            epoch: circuit.epoch,
            probe,
            outcome: Outcome::Neutral,
        })
    }

    fn record(&self, stage: &'static str, epoch: u64, probe: bool, outcome: Outcome) {
        let mut circuits = self.lock();
        let Some(circuit) = circuits.get_mut(stage) else {
            return;
        };
        if circuit.epoch != epoch {
            return; // started in an earlier state
        }
        let reopen = |c: &mut Circuit, until: Instant| c.enter(Phase::Open { until });
        match (circuit.phase, probe, outcome) {
            (Phase::Closed { .. }, false, Outcome::Success) => {
                circuit.phase = Phase::Closed { failures: 0 };
            }
            (Phase::Closed { failures }, false, Outcome::Failure) => {
                let failures = failures.saturating_add(1);
                if failures >= self.threshold.max(1) {
                    tracing::warn!(stage, failures, cool_down = ?self.cool_down, "circuit open");
                    reopen(circuit, super::after(Instant::now(), self.cool_down));
                } else {
                    circuit.phase = Phase::Closed { failures };
                }
            }
            (Phase::HalfOpen, true, Outcome::Success) => {
                tracing::info!(stage, "circuit closed: the probe succeeded");
                circuit.enter(Phase::Closed { failures: 0 });
            }
            (Phase::HalfOpen, true, Outcome::Failure) => {
                tracing::warn!(stage, cool_down = ?self.cool_down, "circuit open again: the probe failed");
                reopen(circuit, super::after(Instant::now(), self.cool_down));
            }
            // Undecided probe: open with the cool-down over, so the next call probes.
            (Phase::HalfOpen, true, Outcome::Neutral) => reopen(circuit, Instant::now()),
            _ => {}
        }
    }
}

/// One admitted call. Records its outcome when dropped, so a cancelled
/// probe frees the half-open slot.
struct Permit<'a> {
    breaker: &'a CircuitBreaker,
    stage: &'static str,
    epoch: u64,
    probe: bool,
    outcome: Outcome,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.breaker
            .record(self.stage, self.epoch, self.probe, self.outcome);
    }
}

#[async_trait::async_trait]
impl Middleware for CircuitBreaker {
    async fn call(&self, stage: &Stage, ctx: Context, next: Next<'_>) -> Result<Output> {
        let mut permit = self.admit(stage.name())?;
        let out = next.run(ctx).await;
        permit.outcome = match &out {
            Ok(_) => Outcome::Success,
            Err(e) if (self.failure_if)(e) => Outcome::Failure,
            Err(_) => Outcome::Neutral,
        };
        drop(permit);
        out
    }

    fn check(&self) -> Result<()> {
        if self.threshold == 0 {
            return Err(Error::InvalidSetting {
                setting: "failures",
                message: "`CircuitBreaker::new(0)` would open before any call failed: \
                          give it 1 or more consecutive failures"
                    .to_owned(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_probe_lets_the_next_call_probe() {
        let breaker = CircuitBreaker::new(1).cool_down(Duration::from_secs(1));
        drop(breaker.admit("s").map(|mut p| p.outcome = Outcome::Failure));
        assert_eq!(breaker.state("s"), CircuitState::Open);
        tokio::time::advance(Duration::from_secs(1)).await;
        let probe = breaker.admit("s").expect("the probe");
        assert!(probe.probe);
        assert!(matches!(
            breaker.admit("s"),
            Err(Error::CircuitOpen { ref stage }) if stage == "s"
        ));
        drop(probe); // cancelled: outcome stays neutral
        assert_eq!(breaker.state("s"), CircuitState::Open);
        let probe = breaker.admit("s").expect("probes again at once");
        assert!(probe.probe);
    }

    #[tokio::test(start_paused = true)]
    async fn stale_outcomes_do_not_count() {
        let breaker = CircuitBreaker::new(2).cool_down(Duration::from_secs(1));
        let mut slow = breaker.admit("s").expect("closed");
        for _ in 0..2 {
            drop(breaker.admit("s").map(|mut p| p.outcome = Outcome::Failure));
        }
        assert_eq!(breaker.state("s"), CircuitState::Open);
        slow.outcome = Outcome::Success;
        drop(slow); // started while closed: does not close the circuit
        assert_eq!(breaker.state("s"), CircuitState::Open);
        // Non-failures neither count nor reset.
        let breaker = CircuitBreaker::new(2);
        drop(breaker.admit("s").map(|mut p| p.outcome = Outcome::Failure));
        drop(breaker.admit("s"));
        assert_eq!(breaker.state("s"), CircuitState::Closed { failures: 1 });
        drop(breaker.admit("s").map(|mut p| p.outcome = Outcome::Success));
        assert_eq!(breaker.state("s"), CircuitState::Closed { failures: 0 });
    }
}
