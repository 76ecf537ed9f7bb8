//! The cache middleware: a stage called again on the same context returns
//! its earlier result without running.
//!
//! [`Cache`] (the middleware, here) looks calls up by [`CacheKey`] (`key`)
//! in a [`CacheStore`] (`store`, with the in-process [`MemoryCacheStore`] in
//! `memory`), which holds [`CacheEntry`] values (`entry`, with their byte
//! encoding).

use std::sync::Arc;
use std::time::Duration;

use super::{Middleware, Next};
use crate::context::Context;
use crate::error::Result;
use crate::stage::{Output, Stage, StageKind};

mod entry;
mod key;
mod memory;
mod store;

pub use entry::CacheEntry;
pub use key::{CACHE_DOMAIN, CacheKey};
pub use memory::MemoryCacheStore;
pub use store::CacheStore;

/// Caches stage results in a [`CacheStore`].
///
/// A call whose [`CacheKey`] (the stage's name and hash and a digest of the
/// context's data) is in the store returns the stored result and the stage
/// is not called. Otherwise the stage runs and a successful result is stored
/// for [`ttl`](Cache::ttl) (default: no expiry; the store may still evict
/// it). Errors are never cached.
///
/// What is cached:
/// - a context-returning stage's *writes*: the keys it set or removed, with
///   their values. A hit applies them to the context the call received, so
///   the result keeps exactly the written keys an uncached call would have,
///   and a cached stage inside a `parallel![...]` merges like an uncached
///   one. For this the stage is called on its context with an empty written
///   set (same data, same branch name), so it sees only its own writes in
///   [`Context::written`]; the result is the input with those writes applied.
/// - a router's decision ([`Route`](crate::Route)): route and patch, replayed
///   as they were.
///
/// Only [`StageKind::Async`] and [`StageKind::Blocking`] stages are cached;
/// every other kind (stream stages) is called through untouched, because a
/// replayed result would skip or duplicate its chunks.
///
/// The cache never fails a call: a store that cannot be read is a miss and a
/// store that cannot be written is skipped, both logged with `tracing` at
/// warn level. Two calls with the same key at the same time both run (no
/// coalescing); the later store wins.
///
/// Put it outside [`Retry`](super::Retry) so that a hit skips the retries,
/// and cache only stages whose result depends on nothing but their context.
///
/// ```
/// use std::time::Duration;
/// use fluxio_core::middleware::{Cache, MemoryCacheStore};
/// let cache = Cache::new(MemoryCacheStore::new(10_000)).ttl(Duration::from_secs(300));
/// # let _ = cache;
/// ```
#[derive(Clone, Debug)]
pub struct Cache {
    store: Arc<dyn CacheStore>,
    ttl: Option<Duration>,
}

impl Cache {
    /// A cache in `store`, without expiry. Pass an `Arc` of a store to keep
    /// a handle on it or share it between caches.
    #[must_use]
    pub fn new(store: impl CacheStore) -> Self {
        Cache {
            store: Arc::new(store),
            ttl: None,
        }
    }

    /// How long a stored result stays valid (default: until the store evicts it).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

/// Whether a stage of this kind may be cached: named kinds only, so a kind
/// added later (streams) is not cached until someone decides it may be.
fn cacheable(kind: StageKind) -> bool {
    matches!(kind, StageKind::Async | StageKind::Blocking)
}

#[async_trait::async_trait]
impl Middleware for Cache {
    async fn call(&self, stage: &Stage, ctx: Context, next: Next<'_>) -> Result<Output> {
        if !cacheable(stage.meta().kind) {
            return next.run(ctx).await;
        }
        let key = match CacheKey::new(stage, &ctx) {
            Ok(key) => key,
            Err(e) => {
                tracing::warn!(stage = stage.name(), error = %e, "cannot compute the cache key; calling the stage");
                return next.run(ctx).await;
            }
        };
        match self.store.get(&key).await {
            Ok(Some(entry)) => {
                tracing::debug!(stage = stage.name(), %key, "cache hit");
                return entry.apply(ctx);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(stage = stage.name(), %key, error = %e, "cache store get failed; calling the stage");
            }
        }
        // Same data and branch, empty written set: the output's written set
        // is then exactly the stage's own writes.
        let fresh = match ctx.branch() {
            Some(branch) => ctx.fork(branch),
            None => ctx.clone().clear_written(),
        };
        let entry = match next.run(fresh).await? {
            Output::Context(out) => CacheEntry::stage_writes(out)?,
            Output::Route(send) => CacheEntry::route(send),
        };
        let out = entry.apply(ctx)?;
        if let Err(e) = self.store.put(key, entry, self.ttl).await {
            tracing::warn!(stage = stage.name(), %key, error = %e, "cache store put failed");
        }
        Ok(out)
    }
}
