//! [`StartOptions`]: what a run is started with besides its input.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clock::Clock;
use crate::error::Result;
use crate::store::{CheckpointStore, MAX_UNTIL_MS};

/// How a run is started, besides its id and input: given to
/// [`Pipeline::start_with`](super::Pipeline::start_with) and
/// [`Pipeline::invoke_with`](super::Pipeline::invoke_with), and stored with
/// the run's first checkpoint, so that every later resume, wake-up and
/// recovery of the run, in any process, keeps it. A `start` of a run that is
/// stored already keeps what the run was started with.
///
/// ```
/// use std::time::Duration;
/// use fluxio_core::StartOptions;
///
/// // the run fails with `Error::DeadlineExceeded` if it has not ended within an hour
/// let options = StartOptions::new().deadline_in(Duration::from_secs(3600));
/// assert!(options.has_deadline());
/// assert!(!StartOptions::new().has_deadline());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StartOptions {
    deadline: Option<Deadline>,
}

/// A deadline as given: a time, or a duration from the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deadline {
    /// Milliseconds since the Unix epoch on the pipeline's clock.
    AtMs(u64),
    /// This many milliseconds after the start, on the pipeline's clock.
    InMs(u64),
}

impl StartOptions {
    /// No options: a run without a deadline.
    #[must_use]
    pub fn new() -> Self {
        StartOptions::default()
    }

    /// The run's deadline (contract rule 30), at `at_ms` milliseconds since
    /// the Unix epoch on the pipeline's [clock](crate::clock::Clock). Past
    /// it the run stops before its next stage, or leaves its sleep or wait,
    /// failed with [`Error::DeadlineExceeded`](crate::Error::DeadlineExceeded);
    /// a sleep or wait that would last longer wakes at the deadline. A time
    /// already past fails the run before its first stage; one past
    /// [`MAX_UNTIL_MS`] is read as it.
    #[must_use]
    pub fn deadline_at_ms(mut self, at_ms: u64) -> Self {
        self.deadline = Some(Deadline::AtMs(at_ms));
        self
    }

    /// [`deadline_at_ms`](Self::deadline_at_ms) at `at` (a time before the
    /// Unix epoch is read as the epoch: already past).
    #[must_use]
    pub fn deadline_at(self, at: SystemTime) -> Self {
        let ms = at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.deadline_at_ms(ms)
    }

    /// [`deadline_at_ms`](Self::deadline_at_ms) `within` after the run
    /// starts, on the pipeline's clock (read once, when the run begins).
    /// `Duration::ZERO` fails the run before its first stage; a duration
    /// past [`MAX_UNTIL_MS`] is read as it.
    #[must_use]
    pub fn deadline_in(mut self, within: Duration) -> Self {
        let ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
        self.deadline = Some(Deadline::InMs(ms));
        self
    }

    /// Whether a deadline is set.
    #[must_use]
    pub fn has_deadline(&self) -> bool {
        self.deadline.is_some()
    }

    /// The deadline in milliseconds since the Unix epoch, at most
    /// [`MAX_UNTIL_MS`]: a duration is read from `clock`'s now (the
    /// store's, for a store clock).
    pub(crate) async fn deadline_ms(
        &self,
        clock: &Clock,
        store: Option<&dyn CheckpointStore>,
    ) -> Result<Option<u64>> {
        Ok(match self.deadline {
            None => None,
            Some(Deadline::AtMs(ms)) => Some(ms.min(MAX_UNTIL_MS)),
            Some(Deadline::InMs(within)) => Some(
                clock
                    .now_ms(store)
                    .await?
                    .saturating_add(within)
                    .min(MAX_UNTIL_MS),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rule30_a_deadline_is_read_on_the_pipelines_clock_and_capped() {
        let clock = Clock::manual(5_000);
        let ms = |o: StartOptions| {
            let clock = clock.clone();
            async move { o.deadline_ms(&clock, None).await.expect("no store") }
        };
        assert_eq!(ms(StartOptions::new()).await, None);
        assert_eq!(
            ms(StartOptions::new().deadline_in(Duration::from_secs(2))).await,
            Some(7_000)
        );
        assert_eq!(
            ms(StartOptions::new().deadline_in(Duration::MAX)).await,
            Some(MAX_UNTIL_MS)
        );
        assert_eq!(
            ms(StartOptions::new().deadline_at_ms(u64::MAX)).await,
            Some(MAX_UNTIL_MS)
        );
        assert_eq!(
            ms(StartOptions::new().deadline_at(UNIX_EPOCH - Duration::from_secs(1))).await,
            Some(0)
        );
        assert_eq!(
            ms(StartOptions::new().deadline_at(UNIX_EPOCH + Duration::from_millis(42))).await,
            Some(42)
        );
    }
}
