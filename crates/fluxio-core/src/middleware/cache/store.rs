//! Where the cache keeps its entries.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{CacheEntry, CacheKey};
use crate::error::BoxError;

/// Where [`Cache`](super::Cache) keeps results: a key-value store with expiry, separate
/// from the checkpoint store.
///
/// Entries are whole values: a store keeps them as they are
/// ([`MemoryCacheStore`](super::MemoryCacheStore)) or as bytes ([`CacheEntry::to_bytes`]), under the
/// key's [`Display`](fmt::Display) form or its bytes. Errors are the
/// store's own; the cache logs them and calls the stage.
///
/// ```
/// use std::time::Duration;
/// use fluxio_core::BoxError;
/// use fluxio_core::middleware::{CacheEntry, CacheKey, CacheStore};
///
/// /// Remembers nothing.
/// #[derive(Debug)]
/// struct NoCache;
///
/// #[async_trait::async_trait]
/// impl CacheStore for NoCache {
///     async fn get(&self, _key: &CacheKey) -> Result<Option<CacheEntry>, BoxError> {
///         Ok(None)
///     }
///     async fn put(&self, _: CacheKey, _: CacheEntry, _: Option<Duration>) -> Result<(), BoxError> {
///         Ok(())
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait CacheStore: fmt::Debug + Send + Sync + 'static {
    /// The entry stored under `key`, `None` when there is none or it expired.
    ///
    /// # Errors
    /// The store's failure.
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, BoxError>;

    /// Stores `entry` under `key`, replacing any entry there, valid for `ttl`
    /// (`None`: until evicted).
    ///
    /// # Errors
    /// The store's failure.
    async fn put(
        &self,
        key: CacheKey,
        entry: CacheEntry,
        ttl: Option<Duration>,
    ) -> Result<(), BoxError>;
}

#[async_trait::async_trait]
impl<S: CacheStore + ?Sized> CacheStore for Arc<S> {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, BoxError> {
        (**self).get(key).await
    }

    async fn put(
        &self,
        key: CacheKey,
        entry: CacheEntry,
        ttl: Option<Duration>,
    ) -> Result<(), BoxError> {
        (**self).put(key, entry, ttl).await
    }
}
