//! The pipeline context: an immutable, persistent map from string keys to values.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use imbl::OrdMap;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::value::{Cursor, EncodedValue, Value, WireError, encode_entry, validate};

mod key;
mod map;
mod typed;

use key::{Key as SharedKey, Probe};
use map::Map;
#[doc(hidden)]
pub use typed::key_of as typed_key_of;
pub use typed::{Key, KeyName};

/// The state a pipeline passes from stage to stage.
///
/// [`set`](Context::set), [`update`](Context::update) and
/// [`remove`](Context::remove) take the context by value and return it
/// changed. It is a persistent map, copy on write: a clone, a
/// [`fork`](Context::fork) or a [`snapshot`](Context::snapshot) shares the
/// whole structure, costs O(1), and never changes afterwards, whatever is
/// done to the context it was taken from. To keep a context as it is, set
/// on a clone of it. A context that shares nothing is changed in place, so
/// a stage that sets a few keys copies the context at most once. Up to 64
/// keys it is one flat array (short keys and small values are held in
/// place, so a copy is a few words each); past that it is a B-tree
/// ([`imbl::OrdMap`]), and an update copies only the O(log n) path to the
/// changed key.
///
/// Values are any serde type. Each is stored as its encoding (the
/// [wire format](crate::value#wire-format) a checkpoint holds, byte for
/// byte), written straight from the serde type and read straight back into
/// it, so a value costs about its encoded size in memory. The encoding is
/// self-describing and keeps every type of serde's data model exactly
/// (`u64::MAX`, `i64::MIN`, NaN bits, `f32`s, bytes, nested structs and
/// maps, unicode), so a read returns what was written, and a [`Value`] can
/// be read without the type ([`value`](Context::value), [`iter`](Context::iter)).
///
/// The context remembers which keys were written since it was created or
/// forked; [`Context::merge`] uses that to combine parallel branches.
///
/// ```
/// use fluxio_core::{ctx, Context};
///
/// # fn main() -> fluxio_core::Result<()> {
/// let a = ctx! { "user_id" => 42u64, "name" => "Ada" }?;
/// let b = a.clone().set("score", 0.5)?;    // `a` is kept: set on a clone
/// assert_eq!(a.get::<u64>("user_id")?, 42);
/// assert!(!a.contains_key("score"));          // `a` is unchanged
/// assert_eq!(b.get::<f64>("score")?, 0.5);
/// assert_eq!(b.get_opt::<String>("missing"), None);
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Context {
    /// Keys inline up to 23 bytes, values in place up to 22 bytes of
    /// encoding, larger ones behind `Arc`: copying a tree node on update
    /// copies small keys and values as they are and pointers for the rest.
    data: Map<EncodedValue>,
    written: Map<()>,
    /// Behind a second `Arc` (a thin pointer): a context is moved at
    /// every stage call, and forks are rare.
    branch: Option<Arc<Arc<str>>>,
    /// What this context marks the entries it writes with (see
    /// [`Map::upsert`]): taken from [`EPOCHS`] at its first write, 0
    /// before. A clone keeps it, with the written set; a fork, a cleared
    /// written set and a context made from a snapshot start again at 0.
    /// So an entry that bears it was written by this context (or a clone
    /// that had the same written set), and is in `written`.
    epoch: u64,
}

/// The epochs contexts mark their writes with: each is taken once.
static EPOCHS: AtomicU64 = AtomicU64::new(1);

/// A context's epochs around a checkpoint: the one it had (`before`) and
/// the one it took there (`after`, 0 when it took none).
///
/// A context that still has the epoch it took at the last written
/// checkpoint is that checkpoint's context changed only by its own writes
/// and removals, or its clones': every entry written since bears that
/// epoch (a merge, a cleared written set, a context made from a snapshot
/// or a fork take another). So the next checkpoint's delta is the entries
/// that bear it, found without comparing the two contexts key by key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Lineage {
    pub(crate) before: u64,
    pub(crate) after: u64,
}

impl Lineage {
    /// No lineage: the delta is found by comparing.
    pub(crate) const NONE: Lineage = Lineage {
        before: 0,
        after: 0,
    };
}

impl Context {
    /// An empty context.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// This context with `key` set to `value` (in place, unless a clone
    /// shares it: see [`Context`]).
    ///
    /// The value is written straight into its encoding (no [`Value`] is
    /// built), and must fit in a checkpoint, on every store alike (see
    /// [the limits](crate::value#limits)): at most
    /// [`MAX_DEPTH`](crate::value::MAX_DEPTH) (128) levels deep, and the key
    /// and the encoding together at most
    /// [`MAX_PAYLOAD`](crate::store::MAX_PAYLOAD) (1 GiB). A plain
    /// `Vec<u8>` takes one byte per byte, like a `serde_bytes` buffer.
    ///
    /// ```
    /// use fluxio_core::{Context, Error};
    /// # fn main() -> fluxio_core::Result<()> {
    /// let ctx = Context::new().set("blob", vec![7u8; 1 << 20])?;
    /// assert_eq!(ctx.get::<Vec<u8>>("blob")?.len(), 1 << 20);
    /// let deep = (0..200).fold(fluxio_core::Value::Unit, |v, _| fluxio_core::Value::Some(Box::new(v)));
    /// let err = ctx.set("deep", deep).unwrap_err();
    /// assert!(matches!(err, Error::ValueTooDeep { ref key, .. } if key == "deep"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Serialize`] when `value`'s `Serialize` impl fails;
    /// [`Error::ValueTooDeep`] when it nests deeper than `MAX_DEPTH`;
    /// [`Error::ValueTooLarge`] when it is too large for a checkpoint (see
    /// [`to_context_value`](crate::value::to_context_value) for its `size`).
    /// All name `key`. The context is dropped with the error (it was moved
    /// in): set on a clone to keep it.
    pub fn set<T: Serialize>(self, key: impl KeyName<T>, value: T) -> Result<Context> {
        let key = key.key_name();
        let encoded = encode_entry(key, &value)?;
        Ok(self.insert(key, encoded))
    }

    /// This context with `key` set to an already converted [`Value`].
    ///
    /// Unlike [`set`](Context::set), this does not check the value against
    /// [the limits](crate::value#limits) (use
    /// [`check_context_value`](crate::value::check_context_value) for that);
    /// a value past them is refused when a checkpoint holding it is saved.
    #[must_use]
    pub fn set_value(self, key: impl Into<String>, value: Value) -> Context {
        self.set_encoded(key.into(), EncodedValue::from_value(&value))
    }

    /// This context with `key` set to an encoded value.
    pub(crate) fn set_encoded(self, key: String, value: EncodedValue) -> Context {
        self.insert(&key, value)
    }

    /// This context with `key` set to `value`, changed in place where no
    /// clone shares it. A key already present (or already written) is
    /// shared, not allocated again; a key already in the written set is not
    /// inserted again.
    fn insert(mut self, key: &str, value: EncodedValue) -> Context {
        if self.epoch == 0 {
            self.epoch = EPOCHS.fetch_add(1, Ordering::Relaxed);
        }
        let probe = Probe::new(key.as_bytes());
        let written = &self.written;
        let new_key = || {
            written
                .get_probed(&probe)
                .map_or_else(|| SharedKey::new(key), |(k, ())| k.clone())
        };
        // a key this context wrote already is in its written set
        let marked = self.data.upsert(&probe, new_key, value, self.epoch);
        if !marked && self.written.get_probed(&probe).is_none() {
            // the key as the data holds it now: shared, not allocated again
            let held = self
                .data
                .get_probed(&probe)
                .map_or_else(|| SharedKey::new(key), |(k, _)| k.clone());
            self.written.insert(held, ());
        }
        self
    }

    /// `key` as a shared key: the one this context already holds in its data
    /// or its written set, else a new one.
    fn shared_key(&self, key: &str) -> SharedKey {
        self.data
            .get_key_value(key.as_bytes())
            .map(|(k, _)| k)
            .or_else(|| self.written.get_key_value(key.as_bytes()).map(|(k, ())| k))
            .map_or_else(|| SharedKey::new(key), SharedKey::clone)
    }

    /// The encoded value under `key`.
    pub(crate) fn encoded(&self, key: &str) -> Option<&EncodedValue> {
        self.data.get(key.as_bytes())
    }

    /// This context without `key` (a no-op when it is absent, but still
    /// recorded as written, so a merge removes it too).
    #[must_use]
    pub fn remove(mut self, key: impl AsRef<str>) -> Context {
        let key = key.as_ref();
        if !self.written.contains_key(key.as_bytes()) {
            let held = self.shared_key(key);
            self.written.insert(held, ());
        }
        self.data.remove(key.as_bytes());
        self
    }

    /// This context where `key` holds `f(current)`; `current` is `None` when
    /// the key is absent.
    ///
    /// # Errors
    /// [`Error::WrongType`] when the current value is not a `T`;
    /// [`Error::Serialize`], [`Error::ValueTooDeep`] or
    /// [`Error::ValueTooLarge`] when the new value cannot be stored (as
    /// [`set`](Context::set)).
    pub fn update<T, F>(self, key: impl KeyName<T>, f: F) -> Result<Context>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(Option<T>) -> T,
    {
        let key = key.key_name();
        let current = match self.data.get(key.as_bytes()) {
            None => None,
            Some(v) => Some(read(key, v)?),
        };
        self.set(key, f(current))
    }

    /// Strict read: the value under `key` as a `T`.
    ///
    /// # Errors
    /// [`Error::MissingKey`] when absent, [`Error::WrongType`] when the stored
    /// value is not a `T`. Both name the key and the expected type.
    pub fn get<T: DeserializeOwned>(&self, key: impl KeyName<T>) -> Result<T> {
        let key = key.key_name();
        match self.data.get(key.as_bytes()) {
            None => Err(Error::MissingKey {
                key: key.to_owned(),
                expected: std::any::type_name::<T>(),
            }),
            Some(v) => read(key, v),
        }
    }

    /// Permissive read: `None` when the key is absent or holds another type
    /// (a stored 300 read as a `u8` is `None`); [`try_get`](Self::try_get)
    /// tells the two apart.
    #[must_use]
    pub fn get_opt<T: DeserializeOwned>(&self, key: impl KeyName<T>) -> Option<T> {
        self.data
            .get(key.key_name().as_bytes())
            .and_then(|v| v.deserialize().ok())
    }

    /// The stored value under `key`, as a [`Value`]. A small value (an
    /// encoding of up to 22 bytes: numbers, flags, short strings) is
    /// decoded on each call; a larger one is decoded on first use and then
    /// kept with its encoding, and borrowed from there (so it costs memory
    /// beyond the encoding only for the values someone looked at).
    ///
    /// ```
    /// use fluxio_core::{Context, Value};
    /// # fn main() -> fluxio_core::Result<()> {
    /// let ctx = Context::new().set("n", 7u64)?.set("text", "x".repeat(100))?;
    /// assert_eq!(ctx.value("n").as_deref(), Some(&Value::U64(7)));
    /// assert_eq!(ctx.value("text").as_deref(), Some(&Value::String("x".repeat(100))));
    /// assert_eq!(ctx.value("missing"), None);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn value(&self, key: &str) -> Option<Cow<'_, Value>> {
        self.data.get(key.as_bytes()).map(EncodedValue::value)
    }

    /// Whether `key` is present.
    #[must_use]
    pub fn contains_key(&self, key: &str) -> bool {
        self.data.contains_key(key.as_bytes())
    }

    /// Number of keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the context has no keys.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Keys and values in key order (each value decoded as
    /// [`value`](Context::value) does).
    pub fn iter(&self) -> impl Iterator<Item = (&str, Cow<'_, Value>)> {
        self.data.iter().map(|(k, v)| (k.as_str(), v.value()))
    }

    /// Keys and encoded values in key order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&str, &EncodedValue)> {
        self.data.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.data.keys().map(SharedKey::as_str)
    }

    /// The keys written (set, updated or removed) since this context was
    /// created or forked, in order.
    pub fn written(&self) -> impl Iterator<Item = &str> {
        self.written.keys().map(SharedKey::as_str)
    }

    /// Whether `key` was written since this context was created or forked.
    #[must_use]
    pub fn was_written(&self, key: &str) -> bool {
        self.written.contains_key(key.as_bytes())
    }

    /// The branch name given to [`fork`](Context::fork), if this is a fork.
    #[must_use]
    pub fn branch(&self) -> Option<&str> {
        self.branch.as_deref().map(|name| &**name)
    }

    /// A branch of this context: the same data (shared, O(1)), an empty
    /// written set and the branch `name` (used in merge-conflict errors).
    #[must_use]
    pub fn fork(&self, name: impl Into<Arc<str>>) -> Context {
        Context {
            data: self.data.clone(),
            written: Map::new(),
            branch: Some(Arc::new(name.into())),
            epoch: 0,
        }
    }

    /// Applies every branch's written keys to `base`.
    ///
    /// The result's written set is `base`'s plus every branch's, so merges
    /// nest. Branches without a name are called `branch-<index>` in errors.
    ///
    /// # Errors
    /// [`Error::MergeConflict`] when two or more branches wrote the same key;
    /// it names every such key and the branches that wrote them.
    ///
    /// ```
    /// use fluxio_core::{Context, Error};
    /// # fn main() -> fluxio_core::Result<()> {
    /// let base = Context::new().set("n", 1)?;
    /// let a = base.fork("a").set("x", 1)?;
    /// let b = base.fork("b").set("y", 2)?;
    /// let merged = Context::merge(&base, &[a.clone(), b])?;
    /// assert_eq!(merged.get::<i32>("y")?, 2);
    ///
    /// let c = base.fork("c").set("x", 3)?;
    /// let err = Context::merge(&base, &[a, c]).unwrap_err();
    /// assert!(matches!(err, Error::MergeConflict { ref keys, .. } if keys == &["x"]));
    /// # Ok(()) }
    /// ```
    pub fn merge(base: &Context, branches: &[Context]) -> Result<Context> {
        let name = |i: usize, b: &Context| {
            b.branch()
                .map_or_else(|| format!("branch-{i}"), str::to_owned)
        };
        let mut owner: OrdMap<&str, usize> = OrdMap::new();
        let mut conflict_keys = Vec::new();
        let mut conflict_branches: Vec<usize> = Vec::new();
        for (i, b) in branches.iter().enumerate() {
            for key in b.written.keys() {
                if let Some(&first) = owner.get(key.as_str()) {
                    if !conflict_keys.iter().any(|k: &String| k == key.as_str()) {
                        conflict_keys.push(key.as_str().to_owned());
                    }
                    for idx in [first, i] {
                        if !conflict_branches.contains(&idx) {
                            conflict_branches.push(idx);
                        }
                    }
                } else {
                    owner.insert(key.as_str(), i);
                }
            }
        }
        if !conflict_keys.is_empty() {
            conflict_keys.sort();
            conflict_branches.sort_unstable();
            return Err(Error::MergeConflict {
                keys: conflict_keys,
                branches: conflict_branches
                    .into_iter()
                    .map(|i| name(i, &branches[i]))
                    .collect(),
            });
        }
        let mut merged = base.clone();
        // the branches' entries come in unmarked: the merged context is not
        // the base's lineage any more (see [`Lineage`])
        merged.epoch = 0;
        for b in branches {
            for key in b.written.keys() {
                match b.data.get(key.as_bytes()) {
                    Some(v) => merged.data.insert(key.clone(), v.clone()),
                    None => merged.data.remove(key.as_bytes()),
                };
                merged.written.insert(key.clone(), ());
            }
        }
        Ok(merged)
    }

    /// Gives this context a new epoch, at a checkpoint: what it (and its
    /// clones) write from now on is marked with it, so that the next
    /// checkpoint finds what changed by the marks (see [`Lineage`]).
    pub(crate) fn next_epoch(&mut self) -> Lineage {
        let before = self.epoch;
        self.epoch = EPOCHS.fetch_add(1, Ordering::Relaxed);
        Lineage {
            before,
            after: self.epoch,
        }
    }

    /// The lineage of a checkpoint of this context that takes no new
    /// epoch (the run's last one).
    pub(crate) fn lineage(&self) -> Lineage {
        Lineage {
            before: self.epoch,
            after: 0,
        }
    }

    /// An O(1) snapshot of the data (structural sharing, no copy).
    #[must_use]
    pub fn snapshot(&self) -> Snapshot {
        Snapshot(self.data.clone())
    }

    /// The context's whole state, serializable: its data, its branch name
    /// and its written set, which [`from_snapshot`](Self::from_snapshot)
    /// restores ([`snapshot`](Self::snapshot) keeps the data only).
    #[must_use]
    pub fn full_snapshot(&self) -> ContextSnapshot {
        ContextSnapshot {
            data: self.snapshot(),
            branch: self.branch().map(str::to_owned),
            written: self.written().map(str::to_owned).collect(),
        }
    }

    /// The context `snapshot` was taken of ([`full_snapshot`](Self::full_snapshot)):
    /// the same data, branch name and written set, so a merge or a delta of
    /// the restored context sees the keys the original had written.
    ///
    /// ```
    /// use fluxio_core::{Context, context::ContextSnapshot};
    ///
    /// let branch = Context::new().set("a", 1u8)?.fork("pricing").set("b", 2u8)?;
    /// let saved: ContextSnapshot = branch.full_snapshot();
    /// let json = serde_json::to_string(&saved).expect("serializes");
    /// let back = Context::from_snapshot(serde_json::from_str(&json).expect("parses"));
    /// assert_eq!(back.branch(), Some("pricing"));
    /// assert_eq!(back.written().collect::<Vec<_>>(), ["b"]);
    /// assert_eq!(back.get::<u8>("a")?, 1);
    /// # Ok::<(), fluxio_core::Error>(())
    /// ```
    #[must_use]
    pub fn from_snapshot(snapshot: ContextSnapshot) -> Context {
        let mut ctx = Context::from(snapshot.data);
        ctx.branch = snapshot.branch.map(|name| Arc::new(Arc::from(name)));
        for key in &snapshot.written {
            let key = ctx.shared_key(key);
            ctx.written.insert(key, ());
        }
        ctx
    }

    /// The same data with an empty written set and no branch name.
    #[must_use]
    pub fn clear_written(self) -> Context {
        Context {
            data: self.data,
            written: Map::new(),
            branch: None,
            epoch: 0,
        }
    }
}

fn read<T: DeserializeOwned>(key: &str, v: &EncodedValue) -> Result<T> {
    v.deserialize().map_err(|e| Error::WrongType {
        key: key.to_owned(),
        expected: std::any::type_name::<T>(),
        found: v.kind(),
        source: e,
    })
}

impl PartialEq for Context {
    /// Contexts are equal when their data is equal (the written set and the
    /// branch name are bookkeeping, not data).
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data
    }
}

impl Eq for Context {}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in &self.data {
            m.key(k).value(&format_args!("{v}"));
        }
        m.finish()
    }
}

/// A context's whole state ([`Context::full_snapshot`]): its data, its
/// branch name and its written set. Serializable (the data as
/// [`Snapshot`] is).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ContextSnapshot {
    /// The data.
    pub data: Snapshot,
    /// The branch name, in a fork.
    pub branch: Option<String>,
    /// The keys written (set or removed) since the context was created or
    /// forked, in key order.
    pub written: Vec<String>,
}

impl From<Snapshot> for Context {
    fn from(s: Snapshot) -> Self {
        Context {
            data: s.0,
            written: Map::new(),
            branch: None,
            epoch: 0,
        }
    }
}

impl<K: Into<String>> FromIterator<(K, Value)> for Context {
    fn from_iter<I: IntoIterator<Item = (K, Value)>>(iter: I) -> Self {
        iter.into_iter()
            .fold(Context::new(), |c, (k, v)| c.set_value(k, v))
    }
}

/// An immutable copy of a context's data, as stored in a checkpoint.
///
/// Taking one is O(1): it shares structure with the context it came from,
/// encoded values included. It serializes as a map from key to [`Value`],
/// and has its own bincode encoding (the key count, then each key and its
/// value's encoding, copied as it is: used by
/// [`Checkpoint::to_bytes`](crate::store::Checkpoint::to_bytes)).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Snapshot(Map<EncodedValue>);

impl Snapshot {
    /// Keys and values in key order (decoded as [`Context::value`] does).
    pub fn iter(&self) -> impl Iterator<Item = (&str, Cow<'_, Value>)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.value()))
    }

    /// The value under `key` (decoded as [`Context::value`] does).
    #[must_use]
    pub fn get(&self, key: &str) -> Option<Cow<'_, Value>> {
        self.0.get(key.as_bytes()).map(EncodedValue::value)
    }

    /// The size in bytes of the value under `key` as a checkpoint stores
    /// it (its encoding), without decoding it: what a tool that shows
    /// values checks before rendering a huge one.
    ///
    /// ```
    /// # fn main() -> fluxio_core::Result<()> {
    /// let ctx = fluxio_core::Context::new().set("blob", vec![0u8; 1000])?;
    /// let size = ctx.snapshot().encoded_len("blob").unwrap_or(0);
    /// assert!((1000..1010).contains(&size), "{size}");
    /// assert_eq!(ctx.snapshot().encoded_len("missing"), None);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn encoded_len(&self, key: &str) -> Option<usize> {
        self.0.get(key.as_bytes()).map(|v| v.bytes().len())
    }

    /// Keys and encoded values in key order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&str, &EncodedValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The encoded value under `key`.
    pub(crate) fn encoded(&self, key: &str) -> Option<&EncodedValue> {
        self.0.get(key.as_bytes())
    }

    /// The keys set (new or changed) and the keys removed between `before`
    /// and this snapshot, each in key order. Subtrees the two share are
    /// skipped, so consecutive checkpoints of a run compare in about the
    /// time their changes take.
    pub(crate) fn changes_since(&self, before: &Snapshot) -> (Vec<String>, Vec<String>) {
        self.0.changes_since(&before.0)
    }

    /// The keys written since `before` by the entries' marks (see
    /// [`Lineage`]); `None` when the marks cannot tell (walk instead).
    pub(crate) fn changes_marked(&self, before: &Snapshot, mark: u64) -> Option<Vec<String>> {
        self.0.changes_marked(&before.0, mark)
    }

    /// This snapshot with `written` set and `removed` taken out.
    pub(crate) fn apply(&self, written: &Snapshot, removed: &[String]) -> Snapshot {
        let mut map = self.0.clone();
        for (key, value) in written.0.iter() {
            map.insert(key.clone(), value.clone());
        }
        for key in removed {
            map.remove(key.as_bytes());
        }
        Snapshot(map)
    }

    /// A context as format 3 writes it: the key count, then each key, in
    /// strictly increasing order, and its value's encoding, validated and
    /// copied (no `Value` built). Branch records hold their writes the same way.
    pub(crate) fn read_wire(c: &mut Cursor<'_>) -> std::result::Result<Snapshot, WireError> {
        let count = c.len(2)?;
        let mut entries: Vec<(String, EncodedValue)> = Vec::new();
        for _ in 0..count {
            let key = c.str()?;
            if entries.last().is_some_and(|(last, _)| last.as_str() >= key) {
                return Err(WireError::Invalid("context keys out of order or repeated"));
            }
            let start = c.pos();
            let depth = validate(c)?;
            let bytes = c.since(start);
            entries.push((
                key.to_owned(),
                EncodedValue::from_valid(bytes.into(), depth),
            ));
        }
        Ok(Snapshot::from_sorted(entries))
    }

    /// A snapshot of `entries`, in strictly increasing key order.
    pub(crate) fn from_sorted(entries: Vec<(String, EncodedValue)>) -> Self {
        Snapshot(
            entries
                .into_iter()
                .map(|(k, v)| (SharedKey::new(&k), v))
                .collect(),
        )
    }

    /// Number of keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no keys.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A context holding this data (O(1)).
    #[must_use]
    pub fn to_context(&self) -> Context {
        Context::from(self.clone())
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_context(), f)
    }
}

/// A value decoded for serializing, and dropped after (not kept with the
/// encoding as [`Context::value`] keeps it).
struct Decoded<'a>(&'a EncodedValue);

impl Serialize for Decoded<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.decode().serialize(s)
    }
}

impl Serialize for Snapshot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k.as_str(), Decoded(v))))
    }
}

impl<'de> Deserialize<'de> for Snapshot {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<String, Value>::deserialize(d)?;
        Ok(Snapshot(
            map.into_iter()
                .map(|(k, v)| (SharedKey::new(&k), EncodedValue::from_value(&v)))
                .collect(),
        ))
    }
}

/// The key count, then each key and its value's encoding, as it is. A
/// value nested deeper than [`MAX_DEPTH`](crate::value::MAX_DEPTH) (given
/// as a [`Value`] to [`Context::set_value`]) is an error: no decoder would
/// read it back.
impl bincode::Encode for Snapshot {
    fn encode<E: bincode::enc::Encoder>(
        &self,
        e: &mut E,
    ) -> std::result::Result<(), bincode::error::EncodeError> {
        use bincode::enc::write::Writer as _;
        (self.0.len() as u64).encode(e)?;
        for (k, v) in &self.0 {
            if v.depth() > crate::value::MAX_DEPTH {
                return Err(bincode::error::EncodeError::OtherString(format!(
                    "the value of `{}` is nested deeper than MAX_DEPTH ({})",
                    k.as_str(),
                    crate::value::MAX_DEPTH
                )));
            }
            // a key encodes as the `String` it once was: length, bytes
            str::encode(k.as_str(), e)?;
            e.writer().write(v.bytes())?;
        }
        Ok(())
    }
}

/// Builds a [`Context`] from `key => value` pairs; evaluates to
/// `Result<Context>` (a value [`Context::set`] refuses is an error).
///
/// ```
/// # fn main() -> fluxio_core::Result<()> {
/// let ctx = fluxio_core::ctx! { "user_id" => 42u64, "tags" => vec!["a", "b"] }?;
/// assert_eq!(ctx.get::<Vec<String>>("tags")?, ["a", "b"]);
/// assert!(fluxio_core::ctx! {}?.is_empty());
/// # Ok(()) }
/// ```
#[macro_export]
macro_rules! ctx {
    () => {
        $crate::Result::<$crate::Context>::Ok($crate::Context::new())
    };
    ($($key:expr => $value:expr),+ $(,)?) => {
        (|| -> $crate::Result<$crate::Context> {
            let ctx = $crate::Context::new();
            $(let ctx = ctx.set($key, $value)?;)+
            ::core::result::Result::Ok(ctx)
        })()
    };
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::store::Checkpoint;

    /// What a context was before keys were shared: a sorted map and a
    /// sorted written set, updated by copying.
    #[derive(Clone, Default)]
    struct Model {
        data: BTreeMap<String, Value>,
        written: BTreeSet<String>,
    }

    /// A deterministic xorshift, so a failure replays.
    fn next(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    /// Small, inline-sized, medium and (rarely) large values of three kinds.
    fn value(seed: &mut u64) -> Value {
        let len = match next(seed) % 10 {
            0..=5 => (next(seed) % 24) as usize,
            6..=8 => 20 + (next(seed) % 200) as usize,
            _ => 4000 + (next(seed) % 200) as usize,
        };
        match next(seed) % 3 {
            0 => Value::String("é".repeat(len / 2)),
            1 => Value::Bytes(vec![(len % 251) as u8; len]),
            _ => Value::U64(next(seed)),
        }
    }

    fn key(seed: &mut u64) -> String {
        // 40 keys: contexts grow past one tree leaf
        format!("k{:02}", next(seed) % 40)
    }

    /// One random `set` or `remove` on both.
    fn step(seed: &mut u64, ctx: &Context, model: &mut Model) -> Context {
        let k = key(seed);
        model.written.insert(k.clone());
        if next(seed) % 5 == 0 {
            model.data.remove(&k);
            ctx.clone().remove(&k)
        } else {
            let v = value(seed);
            model.data.insert(k.clone(), v.clone());
            // both key forms `set` takes
            let set = if next(seed) % 2 == 0 {
                ctx.clone().set(&k, &v)
            } else {
                ctx.clone().set(k.clone(), &v)
            };
            set.expect("a small value is accepted")
        }
    }

    fn check(ctx: &Context, model: &Model) {
        let keys: Vec<&str> = model.data.keys().map(String::as_str).collect();
        assert_eq!(ctx.keys().collect::<Vec<_>>(), keys);
        assert_eq!(ctx.len(), model.data.len());
        for (k, v) in &model.data {
            assert_eq!(ctx.value(k).as_deref(), Some(v), "{k}");
            assert!(ctx.contains_key(k));
        }
        let written: Vec<&str> = model.written.iter().map(String::as_str).collect();
        assert_eq!(ctx.written().collect::<Vec<_>>(), written);
        for k in &model.written {
            assert!(ctx.was_written(k), "{k}");
        }
        // the same data built afresh: equal, and the same checkpoint bytes
        let fresh: Context = model
            .data
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(ctx, &fresh);
        // one checkpoint (one timestamp), with either context in it
        let mut cp = Checkpoint::new("r", "v", 1, "s", ctx.snapshot());
        let got = cp.to_bytes().expect("encodes");
        cp.context = fresh.snapshot();
        let want = cp.to_bytes().expect("encodes");
        let first = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            got == want,
            "checkpoint bytes differ: {} vs {} bytes, first at {first:?}",
            got.len(),
            want.len()
        );
    }

    /// At a checkpoint the run's context takes a new epoch; at the next,
    /// the checkpoint's delta is read off the entries marked with it when
    /// the context is still of that lineage. Whatever a stage did (sets,
    /// no-op sets, removes, a clone returned, a context of its own, a
    /// merge, a cleared written set), a delta read off the marks must be
    /// what changed: every changed key in it, nothing removed, and every
    /// key not in it unchanged. Otherwise it must say it cannot tell.
    #[test]
    fn rule18_a_delta_read_off_the_marks_is_what_changed_since_the_last_checkpoint() {
        let mut seed = 0x2545_f491_4f6c_dd1d;
        let mut ctx = Context::new();
        let mut model = Model::default();
        let (mut last, mut since) = (ctx.snapshot(), 0);
        let (mut read, mut walked) = (0, 0);
        for round in 0..2000 {
            match next(&mut seed) % 10 {
                // a stage that returns a clone taken before its writes
                0 => {
                    let kept = ctx.clone();
                    let _ = step(&mut seed, &ctx, &mut model.clone());
                    ctx = kept;
                }
                // a stage that returns a context of its own
                1 => {
                    let mut own = Model::default();
                    ctx = step(&mut seed, &Context::new(), &mut own);
                }
                // a parallel block: forks merged
                2 => {
                    let mut bm = model.clone();
                    let branch = step(&mut seed, &ctx.fork("b"), &mut bm);
                    ctx = Context::merge(&ctx, &[branch]).expect("one branch");
                }
                3 => ctx = ctx.clear_written(),
                // a no-op set: the same value again
                4 => {
                    if let Some((k, v)) =
                        ctx.data.iter().next().map(|(k, v)| (k.clone(), v.clone()))
                    {
                        ctx = ctx.set_encoded(k.as_str().to_owned(), v);
                    }
                }
                _ => {
                    for _ in 0..(1 + next(&mut seed) % 3) {
                        ctx = step(&mut seed, &ctx, &mut model);
                    }
                }
            }
            // the checkpoint
            let lineage = ctx.next_epoch();
            let now = ctx.snapshot();
            let marked = (since != 0 && lineage.before == since)
                .then(|| now.changes_marked(&last, since))
                .flatten();
            let (written, removed) = now.changes_since(&last);
            match marked {
                Some(marked) => {
                    read += 1;
                    assert!(removed.is_empty(), "round {round}: {removed:?} removed");
                    for k in &written {
                        assert!(
                            marked.contains(k),
                            "round {round}: `{k}` changed, not marked"
                        );
                    }
                    let keys: BTreeSet<&str> = now.0.keys().map(SharedKey::as_str).collect();
                    let mut want: BTreeSet<&str> = last.0.keys().map(SharedKey::as_str).collect();
                    want.extend(marked.iter().map(String::as_str));
                    assert_eq!(keys, want, "round {round}");
                    for k in keys.iter().filter(|k| !marked.iter().any(|m| m == *k)) {
                        assert_eq!(
                            now.0.get(k.as_bytes()),
                            last.0.get(k.as_bytes()),
                            "round {round}: `{k}`"
                        );
                    }
                }
                None => walked += 1,
            }
            (last, since) = (now, lineage.after);
        }
        // both ways were taken, the marks' most often
        assert!(
            read > walked && walked > 100,
            "read {read}, walked {walked}"
        );
    }

    #[test]
    fn context_behaves_as_a_sorted_map_model_through_sets_removes_forks_and_merges() {
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        let (mut ctx, mut model) = (Context::new(), Model::default());
        for round in 0..300 {
            let before = (ctx.clone(), model.clone());
            for _ in 0..(1 + next(&mut seed) % 6) {
                ctx = step(&mut seed, &ctx, &mut model);
            }
            check(&ctx, &model);
            // the context the steps started from is unchanged
            check(&before.0, &before.1);
            match next(&mut seed) % 4 {
                0 => {
                    // a snapshot, back to a context: same data, nothing written
                    ctx = ctx.snapshot().to_context();
                    model.written.clear();
                }
                1 => {
                    ctx = ctx.clear_written();
                    model.written.clear();
                }
                _ => {
                    // two or three branches of random steps, merged
                    let n = 2 + next(&mut seed) % 2;
                    let (mut branches, mut models) = (Vec::new(), Vec::new());
                    for b in 0..n {
                        let (mut br, mut bm) = (
                            ctx.fork(format!("b{b}")),
                            Model {
                                data: model.data.clone(),
                                written: BTreeSet::new(),
                            },
                        );
                        check(&br, &bm);
                        for _ in 0..(next(&mut seed) % 3) {
                            br = step(&mut seed, &br, &mut bm);
                        }
                        check(&br, &bm);
                        branches.push(br);
                        models.push(bm);
                    }
                    let mut owners: BTreeMap<&str, usize> = BTreeMap::new();
                    for bm in &models {
                        for k in &bm.written {
                            *owners.entry(k.as_str()).or_default() += 1;
                        }
                    }
                    let conflicts: Vec<String> = owners
                        .iter()
                        .filter(|(_, n)| **n > 1)
                        .map(|(k, _)| (*k).to_owned())
                        .collect();
                    match Context::merge(&ctx, &branches) {
                        Ok(merged) => {
                            assert!(conflicts.is_empty(), "round {round}: {conflicts:?}");
                            for bm in &models {
                                for k in &bm.written {
                                    match bm.data.get(k) {
                                        Some(v) => model.data.insert(k.clone(), v.clone()),
                                        None => model.data.remove(k),
                                    };
                                    model.written.insert(k.clone());
                                }
                            }
                            ctx = merged;
                        }
                        Err(Error::MergeConflict { keys, .. }) => {
                            assert_eq!(keys, conflicts, "round {round}");
                        }
                        Err(other) => panic!("{other:?}"),
                    }
                }
            }
            check(&ctx, &model);
        }
    }

    /// A context skips the look-up in its written set for a key it wrote
    /// already (its entry bears the context's mark): a fork, a cleared
    /// written set, a context made from a snapshot, a merge and a clone
    /// that went its own way must each still record what they write.
    #[test]
    fn every_context_records_its_own_writes_whatever_its_entries_bear() {
        let written = |c: &Context| c.written().map(str::to_owned).collect::<Vec<_>>();
        let a = Context::new()
            .set("k", 1)
            .expect("set")
            .set("k", 2)
            .expect("set");
        assert_eq!(written(&a), ["k"]);
        let forked = a.fork("f").set("k", 3).expect("set");
        assert_eq!(
            written(&forked),
            ["k"],
            "a fork records a key its base wrote"
        );
        let cleared = a.clone().clear_written().set("k", 4).expect("set");
        assert_eq!(written(&cleared), ["k"]);
        let restored = Context::from(a.snapshot()).set("k", 5).expect("set");
        assert_eq!(written(&restored), ["k"]);
        let (x, y) = (a.clone().set("j", 6).expect("set"), a.clone());
        let y = y.set("i", 7).expect("set");
        assert_eq!(
            (written(&x), written(&y)),
            (
                vec!["j".to_owned(), "k".to_owned()],
                vec!["i".to_owned(), "k".to_owned()]
            )
        );
        let base = Context::new().set("n", 0).expect("set").clear_written();
        let branch = base.fork("b").set("n", 1).expect("set");
        let merged = Context::merge(&base, &[branch]).expect("merge");
        let again = merged.clear_written().set("n", 2).expect("set");
        assert_eq!(written(&again), ["n"], "a merged entry, written again");
        // past the flat shape, where entries bear no mark
        let big = (0..100).fold(Context::new(), |c, i| {
            c.set(format!("k{i}"), i).expect("set")
        });
        let big = big
            .fork("g")
            .set("k7", 0)
            .expect("set")
            .set("k7", 1)
            .expect("set");
        assert_eq!(written(&big), ["k7"]);
    }

    #[test]
    fn context_versions_share_keys_and_values() {
        // a key too long to be inline: one allocation, shared by every
        // version's data and written set
        let long = "a key longer than twenty-three bytes";
        let a = Context::new().set(long, "value").expect("set");
        let b = a.clone().set(long, "other").expect("set");
        let c = b.clone().remove(long);
        let at = |k: &SharedKey| k.as_str().as_ptr();
        let (ka, _) = a.data.get_key_value(long.as_bytes()).expect("present");
        let (kb, _) = b.data.get_key_value(long.as_bytes()).expect("present");
        assert!(ka.is_shared());
        assert_eq!(at(ka), at(kb));
        assert_eq!(
            at(ka),
            at(c.written.get_key_value(long.as_bytes()).expect("written").0)
        );
        let a = Context::new().set("key", "value").expect("set");
        let b = a.clone().set("key", "other").expect("set");
        // a clone and a snapshot share a large value itself
        let big = a.clone().set("big", "v".repeat(100)).expect("set");
        let (va, vs) = (big.encoded("big"), big.snapshot().encoded("big").cloned());
        assert!(va.zip(vs.as_ref()).is_some_and(|(x, y)| x.ptr_eq(y)));
        assert_eq!(a.get::<String>("key").ok().as_deref(), Some("value"));
        assert_eq!(b.get::<String>("key").ok().as_deref(), Some("other"));
        let removed = b.clone().remove("key");
        assert!(!removed.contains_key("key") && removed.was_written("key"));
        assert_eq!(
            b.get::<String>("key").ok().as_deref(),
            Some("other"),
            "a clone is kept"
        );
    }
}
