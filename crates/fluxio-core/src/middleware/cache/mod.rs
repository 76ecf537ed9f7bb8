//! The cache middleware: a stage called again on the same context returns
//! its earlier result without running.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bincode::error::{DecodeError, EncodeError};
use bincode::{Decode, Encode};
use tokio::time::Instant;

use super::{Middleware, Next};
use crate::context::Context;
use crate::error::{BoxError, Result};
use crate::stage::{Output, Stage, StageKind};
use crate::value::Value;
use crate::version::VersionHasher;

/// The domain tag that starts every cache key digest.
pub const CACHE_DOMAIN: &[u8] = b"fluxio/cache/v1";

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
#[derive(Clone)]
pub struct Cache {
    store: Arc<dyn CacheStore>,
    ttl: Option<Duration>,
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("store", &self.store)
            .field("ttl", &self.ttl)
            .finish()
    }
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
            None => ctx.clear_written(),
        };
        let entry = match next.run(fresh).await? {
            Output::Context(out) => {
                CacheEntry(Cached::Writes(Context::merge(&Context::new(), &[out])?))
            }
            Output::Route(send) => CacheEntry(Cached::Route(send)),
        };
        let out = entry.apply(ctx)?;
        if let Err(e) = self.store.put(key, entry, self.ttl).await {
            tracing::warn!(stage = stage.name(), %key, error = %e, "cache store put failed");
        }
        Ok(out)
    }
}

/// Where [`Cache`] keeps results: a key-value store with expiry, separate
/// from the checkpoint store.
///
/// Entries are whole values: a store keeps them as they are
/// ([`MemoryCacheStore`]) or as bytes ([`CacheEntry::to_bytes`]), under the
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

/// The key of one cached call: the stage's name and a sha256 digest.
///
/// # Digest (`fluxio/cache/v1`)
///
/// SHA-256 (computed with [`VersionHasher`]) of, in order:
/// 1. the domain tag `fluxio/cache/v1`, length-prefixed (u64 little endian);
/// 2. the stage's name, length-prefixed;
/// 3. the stage's 32-byte hash ([`StageMeta::hash`](crate::StageMeta::hash),
///    so editing the stage changes every key);
/// 4. the context's data in its checkpoint encoding: the bincode (standard
///    configuration) encoding of its [`Snapshot`](crate::Snapshot), i.e.
///    the key count, then each key and its [`Value`] in key order.
///
/// Only the data counts: the written set and the branch name do not. The
/// same data gives the same key in every process and on every machine, so a
/// shared store serves several workers.
///
/// ```
/// use fluxio_core::middleware::CacheKey;
/// use fluxio_core::Context;
/// # fn main() -> fluxio_core::Result<()> {
/// let key = |ctx: &Context| CacheKey::from_parts("enrich", &[7; 32], ctx).expect("encodable");
/// let a = Context::new().set("x", 1)?.set("y", 2)?;
/// let b = Context::new().set("y", 2)?.set("x", 1)?;
/// assert_eq!(key(&a), key(&b));
/// assert_ne!(key(&a), key(&a.set("x", 2)?));
/// assert_eq!(key(&a).stage(), "enrich");
/// assert_eq!(key(&a).to_string().len(), "enrich/".len() + 64);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey {
    stage: &'static str,
    digest: [u8; 32],
}

impl CacheKey {
    /// The key of a call of `stage` on `ctx`.
    ///
    /// # Errors
    /// When a value is nested too deeply to be encoded (see
    /// [`MAX_DEPTH`](crate::value::MAX_DEPTH)); such a call is not cached.
    pub fn new(stage: &Stage, ctx: &Context) -> Result<Self, EncodeError> {
        Self::from_parts(stage.name(), &stage.meta().hash, ctx)
    }

    /// The key of a call of the stage called `stage`, whose hash is `hash`,
    /// on `ctx`.
    ///
    /// # Errors
    /// As [`new`](CacheKey::new).
    pub fn from_parts(
        stage: &'static str,
        hash: &[u8; 32],
        ctx: &Context,
    ) -> Result<Self, EncodeError> {
        let mut hasher = HashWriter(
            VersionHasher::new()
                .part(CACHE_DOMAIN)
                .part(stage.as_bytes())
                .update(hash),
        );
        bincode::encode_into_writer(ctx.snapshot(), &mut hasher, bincode::config::standard())?;
        Ok(CacheKey {
            stage,
            digest: hasher.0.finalize(),
        })
    }

    /// The stage's name.
    #[must_use]
    pub fn stage(&self) -> &'static str {
        self.stage
    }

    /// The 32-byte digest.
    #[must_use]
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }
}

/// `"{stage}/{digest in lowercase hex}"`.
impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.stage)?;
        self.digest.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheKey({self})")
    }
}

/// Feeds bincode's output into a hasher.
struct HashWriter(VersionHasher);

impl bincode::enc::write::Writer for &mut HashWriter {
    fn write(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        self.0 = self.0.update(bytes);
        Ok(())
    }
}

/// One cached result: a stage's writes, or a router's decision.
///
/// Cloning is cheap (the values are shared). [`to_bytes`](CacheEntry::to_bytes)
/// and [`from_bytes`](CacheEntry::from_bytes) give stores that keep bytes a
/// stable encoding.
///
/// ```
/// use fluxio_core::middleware::CacheEntry;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let entry = CacheEntry::writes(&fluxio_core::Context::new().set("x", 1)?);
/// let back = CacheEntry::from_bytes(&entry.to_bytes()?)?;
/// assert_eq!(back, entry);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct CacheEntry(Cached);

#[derive(Clone, Debug)]
enum Cached {
    /// A context holding exactly the stage's writes: every key in its
    /// written set, present when set, absent when removed.
    Writes(Context),
    /// A router's decision.
    Route(crate::Route),
}

impl PartialEq for Cached {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            // `Context`'s equality ignores the written set: removals count here.
            (Cached::Writes(a), Cached::Writes(b)) => a == b && a.written().eq(b.written()),
            (Cached::Route(a), Cached::Route(b)) => a == b,
            _ => false,
        }
    }
}

/// Tags of the byte encoding.
const WRITES: u8 = 0;
const ROUTE: u8 = 1;

impl CacheEntry {
    /// The writes of `out`: the keys in its written set, with a copy of their
    /// values (or their removal). Its other keys are not kept.
    #[must_use]
    pub fn writes(out: &Context) -> Self {
        let mut writes = Context::new();
        for key in out.written() {
            writes = match out.value(key) {
                Some(v) => writes.set_value(key, v.clone()),
                None => writes.remove(key),
            };
        }
        CacheEntry(Cached::Writes(writes))
    }

    /// A router's decision.
    #[must_use]
    pub fn route(send: crate::Route) -> Self {
        CacheEntry(Cached::Route(send))
    }

    /// The call's result on `ctx`: `ctx` with the writes applied (marked
    /// written, as the stage wrote them), or the router's decision.
    ///
    /// # Errors
    /// None in practice: applying one set of writes cannot conflict.
    pub fn apply(&self, ctx: Context) -> Result<Output> {
        match &self.0 {
            Cached::Writes(writes) => {
                Context::merge(&ctx, std::slice::from_ref(writes)).map(Output::Context)
            }
            Cached::Route(send) => Ok(Output::Route(send.clone())),
        }
    }

    /// The entry as bytes (bincode, standard configuration): a tag byte,
    /// then for writes the count and each key with `Option<Value>` (`None`
    /// for a removal), for a decision the route and the patch's count and
    /// key-value pairs. Values use [`Value`]'s checkpoint encoding.
    ///
    /// # Errors
    /// When a value is nested too deeply to be encoded.
    pub fn to_bytes(&self) -> Result<Vec<u8>, EncodeError> {
        bincode::encode_to_vec(self, bincode::config::standard())
    }

    /// Decodes bytes written by [`to_bytes`](CacheEntry::to_bytes).
    ///
    /// # Errors
    /// When the bytes are not such an encoding (corrupt, truncated, or
    /// followed by extra bytes).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (entry, read) = bincode::decode_from_slice(bytes, bincode::config::standard())?;
        if read != bytes.len() {
            return Err(DecodeError::Other("trailing bytes after a cache entry"));
        }
        Ok(entry)
    }
}

impl Encode for CacheEntry {
    fn encode<E: bincode::enc::Encoder>(&self, e: &mut E) -> Result<(), EncodeError> {
        match &self.0 {
            Cached::Writes(writes) => {
                WRITES.encode(e)?;
                (writes.written().count() as u64).encode(e)?;
                for key in writes.written() {
                    key.encode(e)?;
                    writes.value(key).encode(e)?;
                }
            }
            Cached::Route(send) => {
                ROUTE.encode(e)?;
                send.route.encode(e)?;
                (send.patch.len() as u64).encode(e)?;
                for (key, value) in &send.patch {
                    key.encode(e)?;
                    value.encode(e)?;
                }
            }
        }
        Ok(())
    }
}

impl<C> Decode<C> for CacheEntry {
    fn decode<D: bincode::de::Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
        match u8::decode(d)? {
            WRITES => {
                let len = u64::decode(d)?;
                let mut writes = Context::new();
                for _ in 0..len {
                    let key = crate::value::decode_string(d)?;
                    if writes.was_written(&key) {
                        return Err(DecodeError::Other("duplicate key in a cache entry"));
                    }
                    writes = match Option::<Value>::decode(d)? {
                        Some(v) => writes.set_value(key, v),
                        None => writes.remove(&key),
                    };
                }
                Ok(CacheEntry(Cached::Writes(writes)))
            }
            ROUTE => {
                let mut send = crate::Route::to(crate::value::decode_string(d)?);
                let len = u64::decode(d)?;
                for _ in 0..len {
                    let key = crate::value::decode_string(d)?;
                    send.patch.push((key, Value::decode(d)?));
                }
                Ok(CacheEntry(Cached::Route(send)))
            }
            found => Err(DecodeError::UnexpectedVariant {
                type_name: "fluxio_core::middleware::CacheEntry",
                allowed: &bincode::error::AllowedEnumVariants::Range {
                    min: WRITES as u32,
                    max: ROUTE as u32,
                },
                found: u32::from(found),
            }),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_digest_is_pinned() {
        // A changed digest strands every shared cache: change it knowingly.
        let ctx = Context::new()
            .set("user", "ada")
            .and_then(|c| c.set("n", 42u64))
            .expect("serializable");
        let key = CacheKey::from_parts("enrich", &[7; 32], &ctx).expect("encodable");
        let hex = key.to_string();
        let expected = {
            let mut h = VersionHasher::new()
                .part(b"fluxio/cache/v1")
                .part(b"enrich")
                .update(&[7; 32]);
            // the snapshot encoding: 2 keys, then "n" => U64 42, "user" => String "ada"
            // (the digest below was also checked with an independent sha256)
            h = h.update(&[
                2, 1, b'n', 3, 42, 4, b'u', b's', b'e', b'r', 8, 3, b'a', b'd', b'a',
            ]);
            h.finalize()
        };
        assert_eq!(key.digest(), &expected);
        assert_eq!(
            hex,
            "enrich/56bda303af1950642a7fbc3dd03592f8a8f0714b4952f4db2e2578b7ab4bcaa6"
        );
    }

    #[test]
    fn the_key_depends_on_the_stage_its_hash_and_the_data_only() {
        let ctx = Context::new().set("x", 1).expect("serializable");
        let key = |s, h: u8, c: &Context| CacheKey::from_parts(s, &[h; 32], c).expect("encodable");
        let base = key("a", 0, &ctx);
        assert_ne!(base, key("b", 0, &ctx));
        assert_ne!(base, key("a", 1, &ctx));
        assert_ne!(base, key("a", 0, &Context::new()));
        assert_ne!(
            base,
            key("a", 0, &ctx.set("x", 1u8).expect("ok")),
            "same number, other type"
        );
        assert_ne!(
            base,
            key("a", 0, &ctx.set("x", "1").expect("ok")),
            "same digits, other type"
        );
        assert_eq!(base, key("a", 0, &ctx.fork("branch")));
        assert_eq!(base, key("a", 0, &ctx.clear_written()));
    }

    #[test]
    fn entries_round_trip_through_bytes() {
        let out = Context::new()
            .set("kept", "yes")
            .map(|c| c.remove("gone"))
            .expect("serializable");
        let writes = CacheEntry::writes(&out);
        let send = crate::Route::to("premium")
            .with("discount", 0.2)
            .expect("serializable");
        for entry in [
            writes,
            CacheEntry::route(send),
            CacheEntry::writes(&Context::new()),
        ] {
            let bytes = entry.to_bytes().expect("encodable");
            assert_eq!(CacheEntry::from_bytes(&bytes).expect("decodes"), entry);
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(CacheEntry::from_bytes(&longer).is_err());
            for cut in 0..bytes.len() {
                assert!(
                    CacheEntry::from_bytes(&bytes[..cut]).is_err(),
                    "cut at {cut}"
                );
            }
        }
        // Removals survive: applying the decoded writes removes the key.
        let entry =
            CacheEntry::from_bytes(&CacheEntry::writes(&out).to_bytes().expect("encodable"))
                .expect("decodes");
        let before = Context::new().set("gone", 1).expect("ok").clear_written();
        match entry.apply(before).expect("applies") {
            Output::Context(after) => {
                assert!(!after.contains_key("gone"));
                assert!(after.was_written("gone") && after.was_written("kept"));
            }
            Output::Route(_) => panic!("writes give a context"),
        }
        assert!(CacheEntry::from_bytes(&[9]).is_err());
    }

    #[test]
    fn a_removal_applied_to_a_branch_merges_as_a_removal() {
        let base = Context::new().set("k", 1).expect("ok");
        let out = base.fork("b").remove("k");
        let Output::Context(branch) = CacheEntry::writes(&out)
            .apply(base.fork("b"))
            .expect("applies")
        else {
            panic!("writes give a context")
        };
        let merged = Context::merge(&base, &[branch]).expect("no conflict");
        assert!(!merged.contains_key("k"));
    }
}
