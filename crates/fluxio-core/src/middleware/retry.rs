//! The retry middleware: a failing stage is called again after a backoff.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{MAX_WAIT, Middleware, Next, stage_failure};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::stage::{Output, Stage};

/// How long a [`Retry`] waits between attempts. Delays are clamped to
/// [`MAX_WAIT`] and an exponential factor to 1..=1000 (NaN counts as 1), so
/// no setting can overflow a clock.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Backoff {
    /// The same delay every time.
    Fixed(Duration),
    /// `initial`, then multiplied by `factor` each time, at most `max`.
    Exponential {
        /// The first delay.
        initial: Duration,
        /// The growth factor (2.0 doubles).
        factor: f32,
        /// The largest delay.
        max: Duration,
    },
}

type RetryIf = Arc<dyn Fn(&Error) -> bool + Send + Sync>;

/// Retries a failing stage.
///
/// Defaults: 3 attempts in all, exponential backoff from 100 ms (factor 2,
/// at most 10 s), no jitter, and only the stage's own failures retry
/// ([`Error::Stage`], [`Error::StagePanic`], [`Error::StageTimeout`]) —
/// never fluxio's control errors (run id in use, lease lost, store, merge
/// conflict, ...). The last error is returned when every attempt failed.
/// Stream stages ([`StageKind::Stream`](crate::StageKind::Stream)) are
/// called once, never retried: a retry would repeat their chunks.
///
/// Delays come from the `backon` crate.
///
/// ```
/// use std::time::Duration;
/// use fluxio_core::middleware::{Backoff, Retry};
/// let retry = Retry::new(5)
///     .backoff(Backoff::Fixed(Duration::from_millis(50)))
///     .jitter(true)
///     .retry_if(|e| e.stage_error::<std::io::Error>().is_some());
/// # let _ = retry;
/// ```
#[derive(Clone)]
pub struct Retry {
    attempts: u32,
    backoff: Backoff,
    jitter: bool,
    retry_if: RetryIf,
}

impl fmt::Debug for Retry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("attempts", &self.attempts)
            .field("backoff", &self.backoff)
            .field("jitter", &self.jitter)
            .finish_non_exhaustive()
    }
}

impl Retry {
    /// At most `attempts` calls in all (1 means no retry).
    #[must_use]
    pub fn new(attempts: u32) -> Self {
        Retry {
            attempts: attempts.max(1),
            backoff: Backoff::Exponential {
                initial: Duration::from_millis(100),
                factor: 2.0,
                max: Duration::from_secs(10),
            },
            jitter: false,
            retry_if: Arc::new(stage_failure),
        }
    }

    /// The delays between attempts.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Adds random jitter to every delay.
    #[must_use]
    pub fn jitter(mut self, on: bool) -> Self {
        self.jitter = on;
        self
    }

    /// Which errors retry (default: the stage's own failures). A
    /// [`TerminalError`](crate::TerminalError) never does.
    #[must_use]
    pub fn retry_if(mut self, predicate: impl Fn(&Error) -> bool + Send + Sync + 'static) -> Self {
        self.retry_if = Arc::new(predicate);
        self
    }

    fn delays(&self) -> Box<dyn Iterator<Item = Duration> + Send> {
        let times = self.attempts.saturating_sub(1) as usize;
        // Keep every input in a range where no duration arithmetic (ours,
        // backon's, the jitter's) can overflow: delays at most MAX_WAIT, a
        // factor from 1 to 1,000 (NaN counts as 1).
        let backoff = match self.backoff {
            Backoff::Fixed(d) => Backoff::Fixed(d.min(MAX_WAIT)),
            Backoff::Exponential {
                initial,
                factor,
                max,
            } => Backoff::Exponential {
                initial: initial.min(MAX_WAIT),
                factor: if factor.is_nan() {
                    1.0
                } else {
                    factor.clamp(1.0, 1000.0)
                },
                max: max.min(MAX_WAIT),
            },
        };
        match backoff {
            Backoff::Fixed(d) => {
                let b = backon::ConstantBuilder::default()
                    .with_delay(d)
                    .with_max_times(times);
                self.built(b, backon::ConstantBuilder::with_jitter)
            }
            Backoff::Exponential {
                initial,
                factor,
                max,
            } => {
                let b = backon::ExponentialBuilder::default()
                    .with_min_delay(initial)
                    .with_factor(factor)
                    .with_max_delay(max)
                    .with_max_times(times);
                self.built(b, backon::ExponentialBuilder::with_jitter)
            }
        }
    }

    /// The delays `builder` makes, jittered (by `with_jitter`, the builder's
    /// own) when [`jitter`](Self::jitter) is on.
    fn built<B>(
        &self,
        builder: B,
        with_jitter: fn(B) -> B,
    ) -> Box<dyn Iterator<Item = Duration> + Send>
    where
        B: backon::BackoffBuilder,
        B::Backoff: 'static,
    {
        let builder = if self.jitter {
            with_jitter(builder)
        } else {
            builder
        };
        Box::new(builder.build())
    }
}

#[async_trait::async_trait]
impl Middleware for Retry {
    async fn call(&self, stage: &Stage, ctx: Context, next: Next<'_>) -> Result<Output> {
        if stage.meta().kind == crate::stage::StageKind::Stream {
            return next.run(ctx).await; // a retry would repeat the chunks already emitted
        }
        let mut delays = self.delays();
        let mut attempt = 1u32;
        loop {
            match next.run(ctx.clone()).await {
                Ok(out) => return Ok(out),
                // a final failure (rule 35) is never retried, whatever `retry_if` says
                Err(e) if !e.is_terminal() && (self.retry_if)(&e) => match delays.next() {
                    Some(delay) => {
                        attempt += 1;
                        tracing::debug!(stage = stage.name(), attempt, ?delay, error = %e.message_with_causes(), "retrying the stage");
                        tokio::time::sleep(delay).await;
                    }
                    None => return Err(e),
                },
                Err(e) => return Err(e),
            }
        }
    }
}
