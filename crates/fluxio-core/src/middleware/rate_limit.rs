//! The rate limit middleware: spaces stage calls out in time.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{Middleware, Next};
use crate::context::Context;
use crate::error::Result;
use crate::stage::{Output, Stage};

/// Limits how often stages are called: a call over the limit waits for its
/// turn; it never fails.
///
/// `RateLimit::new(n, per)` lets `n` calls through every `per`, evenly
/// spaced (one every `per / n`). By default there is no burst: after a quiet
/// spell the next call goes at once and the one after waits a full interval;
/// [`burst`](RateLimit::burst) lets that many calls through at once after a
/// quiet spell, the rate staying the same. (This is the generic cell rate
/// algorithm, the one of the `governor` crate, on tokio's clock.)
///
/// Calls get their turn in the order they arrive: each reserves the next
/// free slot, then sleeps until it. A call cancelled while it waits leaves
/// its slot unused.
///
/// By default each stage has its own limit, keyed by stage name, so a
/// pipeline-wide `RateLimit` limits every stage separately;
/// [`shared`](RateLimit::shared) makes the stages it wraps share one. Clones
/// share the limits: give clones of one `RateLimit` to several pipelines to
/// limit them together.
///
/// ```
/// use std::time::Duration;
/// use fluxio_core::middleware::RateLimit;
/// let api = RateLimit::per_second(10).burst(5).shared();
/// let slow = RateLimit::new(3, Duration::from_secs(60));
/// # let _ = (api, slow);
/// ```
#[derive(Clone)]
pub struct RateLimit {
    /// The `calls` of [`RateLimit::new`], as given (0 is refused at build).
    calls: u32,
    interval: Duration,
    burst: u32,
    shared: bool,
    /// The theoretical arrival time of the next call, per limit.
    next_free: Arc<Mutex<HashMap<&'static str, Instant>>>,
}

impl fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("calls", &self.calls)
            .field("interval", &self.interval)
            .field("burst", &self.burst)
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

impl RateLimit {
    /// `calls` calls every `per`, no burst, per stage. `calls` must be at
    /// least 1: a pipeline (or a [`StageTest`](crate::testing::StageTest))
    /// with `RateLimit::new(0, ..)` is refused when built, with
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) naming
    /// `calls`. The interval between calls is at most
    /// [`MAX_WAIT`](super::MAX_WAIT): a longer one is clamped to it.
    #[must_use]
    pub fn new(calls: u32, per: Duration) -> Self {
        RateLimit {
            calls,
            interval: (per / calls.max(1)).min(super::MAX_WAIT),
            burst: 1,
            shared: false,
            next_free: Arc::default(),
        }
    }

    /// `calls` calls a second.
    #[must_use]
    pub fn per_second(calls: u32) -> Self {
        Self::new(calls, Duration::from_secs(1))
    }

    /// `calls` calls a minute.
    #[must_use]
    pub fn per_minute(calls: u32) -> Self {
        Self::new(calls, Duration::from_secs(60))
    }

    /// Lets up to `calls` calls through at once after a quiet spell (default
    /// 1, no burst; 0 is taken as 1).
    #[must_use]
    pub fn burst(mut self, calls: u32) -> Self {
        self.burst = calls.max(1);
        self
    }

    /// One limit for every stage this middleware wraps, instead of one per stage.
    #[must_use]
    pub fn shared(mut self) -> Self {
        self.shared = true;
        self
    }

    /// Reserves the next slot of `key`'s limit and returns when it is.
    fn reserve(&self, key: &'static str) -> Instant {
        let now = Instant::now();
        let tolerance = self.interval.saturating_mul(self.burst - 1);
        let mut next_free = self
            .next_free
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let tat = next_free.get(key).copied().unwrap_or(now).max(now);
        // Up to `burst - 1` intervals ahead of the theoretical time may go now.
        let at = tat.checked_sub(tolerance).map_or(now, |t| t.max(now));
        next_free.insert(key, super::after(tat, self.interval));
        at
    }
}

#[async_trait::async_trait]
impl Middleware for RateLimit {
    async fn call(&self, stage: &Stage, ctx: Context, next: Next<'_>) -> Result<Output> {
        let key = if self.shared { "" } else { stage.name() };
        let at = self.reserve(key);
        if at > Instant::now() {
            tracing::trace!(stage = stage.name(), wait = ?(at - Instant::now()), "rate limited");
            tokio::time::sleep_until(at).await;
        }
        next.run(ctx).await
    }

    fn check(&self) -> Result<()> {
        if self.calls == 0 {
            return Err(crate::Error::InvalidSetting {
                setting: "calls",
                message: "`RateLimit::new(0, ..)` would let no call through: \
                          give it 1 or more calls per interval"
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
    async fn slots_follow_the_rate_after_the_burst() {
        let limit = RateLimit::per_second(10).burst(3);
        let start = Instant::now();
        let slots: Vec<u128> = (0..6)
            .map(|_| (limit.reserve("s") - start).as_millis())
            .collect();
        assert_eq!(slots, [0, 0, 0, 100, 200, 300]);
        // A quiet spell refills the burst, no more.
        tokio::time::advance(Duration::from_secs(10)).await;
        let start = Instant::now();
        let slots: Vec<u128> = (0..4)
            .map(|_| (limit.reserve("s") - start).as_millis())
            .collect();
        assert_eq!(slots, [0, 0, 0, 100]);
        // Other keys are independent.
        assert_eq!(limit.reserve("t"), Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn without_burst_calls_are_evenly_spaced() {
        let limit = RateLimit::new(2, Duration::from_secs(1));
        let start = Instant::now();
        let slots: Vec<u128> = (0..3)
            .map(|_| (limit.reserve("s") - start).as_millis())
            .collect();
        assert_eq!(slots, [0, 500, 1000]);
    }
}
