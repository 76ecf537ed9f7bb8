//! The in-process cache store: bounded, least recently used out first.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{CacheEntry, CacheKey, CacheStore};
use crate::error::BoxError;

/// A process-local, bounded [`CacheStore`] with least-recently-used eviction.
///
/// It holds at most `capacity` entries (default 1024): storing one more
/// evicts the entry read or written longest ago. An expired entry is
/// dropped when a read meets it, or evicted like any other. Expiry uses
/// tokio's clock, so tests can pause time.
///
/// Clones share the entries. The map sits behind a mutex that is never held
/// across an `.await`: every method is atomic and cancel safe. Reads and
/// writes are O(log n).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fluxio_core::BoxError> {
/// use fluxio_core::Context;
/// use fluxio_core::middleware::{CacheEntry, CacheKey, CacheStore, MemoryCacheStore};
/// let store = MemoryCacheStore::new(1);
/// let (a, b) = (Context::new().set("n", 1)?, Context::new().set("n", 2)?);
/// let ka = CacheKey::from_parts("stage", &[0; 32], &a)?;
/// let kb = CacheKey::from_parts("stage", &[0; 32], &b)?;
/// store.put(ka, CacheEntry::writes(&a), None).await?;
/// store.put(kb, CacheEntry::writes(&b), None).await?; // evicts `ka`
/// assert!(store.get(&ka).await?.is_none());
/// assert_eq!(store.get(&kb).await?, Some(CacheEntry::writes(&b)));
/// assert_eq!(store.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemoryCacheStore {
    inner: Arc<Mutex<Lru>>,
}

impl fmt::Debug for MemoryCacheStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lru = self.lock();
        f.debug_struct("MemoryCacheStore")
            .field("capacity", &lru.capacity)
            .field("len", &lru.entries.len())
            .finish()
    }
}

impl Default for MemoryCacheStore {
    fn default() -> Self {
        Self::new(1024)
    }
}

#[derive(Debug)]
struct Lru {
    capacity: usize,
    entries: HashMap<CacheKey, Slot>,
    /// Entries by last use, oldest first.
    by_use: BTreeMap<u64, CacheKey>,
    clock: u64,
}

#[derive(Debug)]
struct Slot {
    entry: CacheEntry,
    expires: Option<Instant>,
    used: u64,
}

impl Lru {
    fn touch(&mut self, key: CacheKey) -> u64 {
        self.clock += 1;
        self.by_use.insert(self.clock, key);
        self.clock
    }

    fn remove(&mut self, key: &CacheKey) {
        if let Some(slot) = self.entries.remove(key) {
            self.by_use.remove(&slot.used);
        }
    }
}

impl MemoryCacheStore {
    /// A store of at most `capacity` entries (0 is taken as 1).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        MemoryCacheStore {
            inner: Arc::new(Mutex::new(Lru {
                capacity: capacity.max(1),
                entries: HashMap::new(),
                by_use: BTreeMap::new(),
                clock: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Number of entries, expired ones not yet dropped included.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether the store holds no entry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.lock().entries.is_empty()
    }

    /// Drops every entry.
    pub fn clear(&self) {
        let mut lru = self.lock();
        lru.entries.clear();
        lru.by_use.clear();
    }
}

#[async_trait::async_trait]
impl CacheStore for MemoryCacheStore {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, BoxError> {
        let mut lru = self.lock();
        let (used, expired) = match lru.entries.get(key) {
            None => return Ok(None),
            Some(slot) => (
                slot.used,
                slot.expires.is_some_and(|at| Instant::now() >= at),
            ),
        };
        if expired {
            lru.remove(key);
            return Ok(None);
        }
        lru.by_use.remove(&used);
        let now = lru.touch(*key);
        Ok(lru.entries.get_mut(key).map(|slot| {
            slot.used = now;
            slot.entry.clone()
        }))
    }

    async fn put(
        &self,
        key: CacheKey,
        entry: CacheEntry,
        ttl: Option<Duration>,
    ) -> Result<(), BoxError> {
        let expires = ttl.and_then(|ttl| Instant::now().checked_add(ttl));
        let mut lru = self.lock();
        lru.remove(&key);
        while lru.entries.len() >= lru.capacity {
            match lru.by_use.pop_first() {
                Some((_, oldest)) => {
                    lru.entries.remove(&oldest);
                }
                None => break,
            }
        }
        let used = lru.touch(key);
        lru.entries.insert(
            key,
            Slot {
                entry,
                expires,
                used,
            },
        );
        Ok(())
    }
}
