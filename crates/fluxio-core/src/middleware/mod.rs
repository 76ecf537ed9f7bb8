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
/// The trait is async: implement it under `#[async_trait]`, the
/// [`async-trait`](https://docs.rs/async-trait) crate's attribute, which
/// fluxio re-exports as `fluxio::async_trait` (and
/// [`fluxio_core::async_trait`](crate::async_trait)), so no dependency of your
/// own is needed.
///
/// ```
/// use fluxio_core::async_trait;
/// use fluxio_core::middleware::{Middleware, Next};
/// use fluxio_core::{Context, Result, Stage};
/// use fluxio_core::stage::Output;
///
/// /// Counts calls.
/// #[derive(Debug, Default)]
/// struct Count(std::sync::atomic::AtomicUsize);
///
/// #[async_trait]
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

    /// Checks the middleware's settings before any call:
    /// [`PipelineBuilder::build`](crate::PipelineBuilder::build) (and
    /// [`StageTest::run`](crate::testing::StageTest::run)) calls it for every
    /// middleware and refuses with its error. The default accepts anything.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming the setting and the values it accepts.
    fn check(&self) -> Result<()> {
        Ok(())
    }
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

/// The default predicate of [`Retry`] and [`CircuitBreaker`]: the stage's
/// own failures, never fluxio's control errors.
fn stage_failure(e: &Error) -> bool {
    matches!(
        e,
        Error::Stage { .. } | Error::StagePanic { .. } | Error::StageTimeout { .. }
    )
}

mod breaker;
mod cache;
mod rate_limit;
mod retry;
mod timeout;

pub use breaker::{CircuitBreaker, CircuitState};
pub use cache::{CACHE_DOMAIN, Cache, CacheEntry, CacheKey, CacheStore, MemoryCacheStore};
pub use rate_limit::RateLimit;
pub use retry::{Backoff, Retry};
pub use timeout::Timeout;
