//! Middleware: code that wraps every stage call.
//!
//! A [`Middleware`] sees the stage, the context and [`Next`], the rest of the
//! chain ending in the stage itself; it may call `next` zero, one or several
//! times. Pipeline-wide middleware ([`PipelineBuilder::middleware`]) wraps
//! every stage, outermost first in declaration order; per-stage middleware
//! ([`PipelineBuilder::stage_middleware`]) sits inside it. A stage with no
//! middleware is called directly, at no cost.
//!
//! Built in: [`Retry`] (fixed, exponential or jittered backoff, with a
//! predicate choosing which errors retry; never for stream stages),
//! [`Timeout`], [`Cache`] (its own [`CacheStore`], never for stream stages),
//! [`CircuitBreaker`] (closed, open, half-open with exactly one probe) and
//! [`RateLimit`] (waits, never errors).
//!
//! [`PipelineBuilder::middleware`]: crate::PipelineBuilder::middleware
//! [`PipelineBuilder::stage_middleware`]: crate::PipelineBuilder::stage_middleware

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use backon::BackoffBuilder as _;
use futures::future::BoxFuture;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::stage::{Output, Stage};

/// The longest wait a built-in middleware keeps: a circuit breaker's
/// cool-down and a rate limit's interval are clamped to it (365 days), so
/// `Duration::MAX` means "as long as possible" and never overflows a clock.
pub const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// `base + wait`, with `wait` clamped to [`MAX_WAIT`]: never panics.
pub(crate) fn after(base: tokio::time::Instant, wait: Duration) -> tokio::time::Instant {
    let wait = wait.min(MAX_WAIT);
    base.checked_add(wait).unwrap_or(base)
}

/// A stage's middleware, outermost first.
pub(crate) type Chain = Arc<[Arc<dyn Middleware>]>;

/// Wraps stage calls.
///
/// ```
/// use fluxio_core::middleware::{Middleware, Next};
/// use fluxio_core::{Context, Result, Stage};
/// use fluxio_core::stage::Output;
///
/// /// Counts calls.
/// #[derive(Debug, Default)]
/// struct Count(std::sync::atomic::AtomicUsize);
///
/// #[async_trait::async_trait]
/// impl Middleware for Count {
///     async fn call(&self, stage: &Stage, ctx: Context, next: Next<'_>) -> Result<Output> {
///         self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///         next.run(ctx).await
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait Middleware: fmt::Debug + Send + Sync + 'static {
    /// Handles one call of `stage`; `next.run(ctx)` continues the chain.
    ///
    /// # Errors
    /// Whatever the middleware or the rest of the chain fails with.
    async fn call(&self, stage: &Stage, ctx: Context, next: Next<'_>) -> Result<Output>;
}

/// The rest of a middleware chain, ending in the stage. `Copy`: call it as
/// often as you like (a retry calls it once per attempt).
#[derive(Clone, Copy)]
pub struct Next<'a> {
    stage: &'a Stage,
    chain: &'a [Arc<dyn Middleware>],
}

impl fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Next")
            .field("stage", &self.stage.name())
            .field("remaining", &self.chain.len())
            .finish()
    }
}

impl<'a> Next<'a> {
    pub(crate) fn new(stage: &'a Stage, chain: &'a [Arc<dyn Middleware>]) -> Self {
        Next { stage, chain }
    }

    /// Runs the rest of the chain, then the stage, on `ctx`.
    ///
    /// # Errors
    /// The stage's failure, or a later middleware's.
    pub fn run(self, ctx: Context) -> BoxFuture<'a, Result<Output>> {
        match self.chain.split_first() {
            None => Box::pin(self.stage.call(ctx)),
            Some((first, rest)) => first.call(
                self.stage,
                ctx,
                Next {
                    stage: self.stage,
                    chain: rest,
                },
            ),
        }
    }

    /// [`run`](Self::run) for the interpreter: a panic in a middleware (or
    /// the stage) becomes [`Error::StagePanic`] naming the stage, like a
    /// panicking stage, so the run writes its failure checkpoint and releases
    /// its lease instead of unwinding into the caller.
    pub(crate) async fn run_caught(self, ctx: Context) -> Result<Output> {
        use futures::FutureExt as _;
        let chain = std::panic::AssertUnwindSafe(async move { self.run(ctx).await });
        match chain.catch_unwind().await {
            Ok(result) => result,
            Err(panic) => Err(Error::StagePanic {
                stage: self.stage.name().to_owned(),
                message: format!(
                    "a middleware panicked: {}",
                    crate::stage::panic_message(&*panic)
                ),
            }),
        }
    }

    /// The stage at the end of the chain.
    #[must_use]
    pub fn stage(&self) -> &'a Stage {
        self.stage
    }
}

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

/// The default retry predicate: the stage's own failures.
fn stage_failure(e: &Error) -> bool {
    matches!(
        e,
        Error::Stage { .. } | Error::StagePanic { .. } | Error::StageTimeout { .. }
    )
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

    /// Which errors retry (default: the stage's own failures).
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
                if self.jitter {
                    Box::new(b.with_jitter().build())
                } else {
                    Box::new(b.build())
                }
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
                if self.jitter {
                    Box::new(b.with_jitter().build())
                } else {
                    Box::new(b.build())
                }
            }
        }
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
                Err(e) if (self.retry_if)(&e) => match delays.next() {
                    Some(delay) => {
                        attempt += 1;
                        tracing::debug!(stage = stage.name(), attempt, ?delay, error = %e, "retrying the stage");
                        tokio::time::sleep(delay).await;
                    }
                    None => return Err(e),
                },
                Err(e) => return Err(e),
            }
        }
    }
}

/// Fails a stage call that takes longer than the given time with
/// [`Error::StageTimeout`] (like `#[stage(timeout = "...")]`, but set on the
/// pipeline or per stage without touching the stage's code).
#[derive(Clone, Copy, Debug)]
pub struct Timeout(pub Duration);

#[async_trait::async_trait]
impl Middleware for Timeout {
    async fn call(&self, stage: &Stage, ctx: Context, next: Next<'_>) -> Result<Output> {
        match tokio::time::timeout(self.0, next.run(ctx)).await {
            Ok(out) => out,
            Err(_) => Err(Error::StageTimeout {
                stage: stage.name().to_owned(),
                timeout: self.0,
            }),
        }
    }
}

mod breaker;
mod cache;
mod rate_limit;

pub use breaker::{CircuitBreaker, CircuitState};
pub use cache::{CACHE_DOMAIN, Cache, CacheEntry, CacheKey, CacheStore, MemoryCacheStore};
pub use rate_limit::RateLimit;
