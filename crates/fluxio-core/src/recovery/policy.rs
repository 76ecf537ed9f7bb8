//! When a recovery worker resumes a run, defers it, or gives up on it
//! ([`RecoveryPolicy`]).

use std::time::Duration;

use crate::pipeline::{Claim, Pipeline};
use crate::store::{Checkpoint, RunStatus};

/// When a worker resumes a run, and when it gives up on one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryPolicy {
    pub(super) max_attempts: u32,
    pub(super) retry_failed: bool,
    pause_given_up: bool,
    backoff: Duration,
    max_backoff: Duration,
}

impl Default for RecoveryPolicy {
    fn default() -> Self {
        RecoveryPolicy {
            max_attempts: 5,
            retry_failed: false,
            pause_given_up: false,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
        }
    }
}

impl RecoveryPolicy {
    /// At most 5 attempts of a stage, abandoned runs only, backoff from 1 s
    /// doubling to 5 min.
    #[must_use]
    pub fn new() -> Self {
        RecoveryPolicy::default()
    }

    /// Give up on a run (mark it needs-attention) once its stage had
    /// `attempts` attempts, counting the first run and every resume. At
    /// least 1: [`RecoveryWorkerBuilder::build`](super::RecoveryWorkerBuilder::build) refuses a policy with
    /// `max_attempts(0)` with [`Error::InvalidSetting`](crate::Error::InvalidSetting) naming
    /// `max_attempts`.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Resume failed runs too (their stage returned an error), not only
    /// abandoned ones. Off by default: a stage's error is usually a fact
    /// about the input, and a blind retry repeats it.
    #[must_use]
    pub fn retry_failed(mut self, on: bool) -> Self {
        self.retry_failed = on;
        self
    }

    /// Pause the runs this policy gives up on (contract rule 30:
    /// [`RunStatus::Paused`], until an operator unpauses them, which makes
    /// them due at once) instead of marking them needs-attention (which an
    /// operator's retry hands back to the workers). Off by default.
    #[must_use]
    pub fn pause_given_up(mut self, on: bool) -> Self {
        self.pause_given_up = on;
        self
    }

    /// Wait `first` after a run's last write before recovering it, twice
    /// that after its second attempt, and so on, never more than `max`.
    /// A run an operator retried waits for nothing.
    #[must_use]
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = first;
        self.max_backoff = max.max(first);
        self
    }

    /// How long after its last write a run whose stage had `attempt`
    /// attempts is due.
    ///
    /// ```
    /// use std::time::Duration;
    /// use fluxio_core::recovery::RecoveryPolicy;
    /// let p = RecoveryPolicy::new().backoff(Duration::from_secs(1), Duration::from_secs(10));
    /// assert_eq!(p.wait_before(0), Duration::ZERO);
    /// assert_eq!(p.wait_before(1), Duration::from_secs(1));
    /// assert_eq!(p.wait_before(3), Duration::from_secs(4));
    /// assert_eq!(p.wait_before(60), Duration::from_secs(10));
    /// ```
    #[must_use]
    pub fn wait_before(&self, attempt: u32) -> Duration {
        if attempt == 0 {
            return Duration::ZERO;
        }
        let doubled = self
            .backoff
            .checked_mul(1u32 << (attempt - 1).min(31))
            .unwrap_or(self.max_backoff);
        doubled.min(self.max_backoff)
    }

    /// When a run whose stage had `attempt` attempts, last written at
    /// `updated_at_ms`, is due, on the same clock.
    pub(super) fn due_at(&self, attempt: u32, updated_at_ms: u64) -> u64 {
        let wait = u64::try_from(self.wait_before(attempt).as_millis()).unwrap_or(u64::MAX);
        updated_at_ms.saturating_add(wait)
    }

    /// What a worker holding a run's lease does with `cp`, found as `how`
    /// says.
    pub(super) fn decide(&self, cp: &Checkpoint, pipeline: &Pipeline, how: Found) -> Claim {
        let wanted = match cp.status {
            RunStatus::Running => true,
            // rule 35: a run failed for good is never retried
            RunStatus::Failed => self.retry_failed && !cp.is_failed_for_good(),
            _ => false,
        };
        if !wanted || !pipeline.runs_version(&cp.version) {
            // a run the due-index holds for nobody: out of it
            return match how {
                Found::Due { .. } => Claim::Defer(None),
                Found::Listed { .. } => Claim::Leave,
            };
        }
        let (Found::Due { clock_ms } | Found::Listed { clock_ms, .. }) = how;
        // rule 30: a run failed past its deadline would fail again at once
        let late = cp.deadline_ms.is_some_and(|at| at <= clock_ms);
        if cp.attempt >= self.max_attempts || (late && cp.status == RunStatus::Failed) {
            return Claim::GiveUp {
                pause: self.pause_given_up,
            };
        }
        match how {
            // the due-index said so, on the clock that set it
            Found::Due { .. } => Claim::Resume,
            Found::Listed { wall_ms, clock_ms } => {
                let due = self.due_at(cp.attempt, cp.updated_at_ms);
                if due <= wall_ms {
                    Claim::Resume
                } else {
                    // checkpoints carry the writer's wall time; the index
                    // holds the pipeline's clock: what is left of the wait
                    Claim::Defer(Some(clock_ms.saturating_add(due - wall_ms)))
                }
            }
        }
    }

    /// When a run whose resume just left it failed (`cp`) is due again, on
    /// the pipeline's clock, which reads `clock_ms`: after its backoff; at
    /// once when its backoff is over or it is out of attempts (the next
    /// claim gives up on it); `None` when failed runs are not retried.
    pub(super) fn retry_at(
        &self,
        cp: &Checkpoint,
        pipeline: &Pipeline,
        clock_ms: u64,
    ) -> Option<u64> {
        let wall_ms = crate::store::now_ms();
        match self.decide(cp, pipeline, Found::Listed { wall_ms, clock_ms }) {
            Claim::Defer(at) => at,
            Claim::Resume | Claim::GiveUp { .. } => Some(clock_ms),
            Claim::Leave => None,
        }
    }
}

/// How a worker came to a run it decides on.
#[derive(Clone, Copy, Debug)]
pub(super) enum Found {
    /// Claimed from the due-index, when the pipeline's clock read
    /// `clock_ms`: its recovery time (the backoff a worker wrote there)
    /// passed.
    Due { clock_ms: u64 },
    /// Listed as abandoned or failed when the wall clock read `wall_ms` and
    /// the pipeline's clock `clock_ms`.
    Listed { wall_ms: u64, clock_ms: u64 },
}
