//! The persistent map under a context: a flat sorted array while small, a
//! persistent B-tree ([`imbl::OrdMap`]) past that.
//!
//! Both are shared copy-on-write: a clone is O(1), and an update changes
//! the map in place when no clone shares it. Otherwise an update of a flat
//! map first copies its array (a small context's entries are held in
//! place, so that is a copy of a few words each), and an update of a tree
//! copies the path to the changed key. Small contexts are the common case,
//! and a flat array is cheaper to search, to copy and to change than a
//! B-tree leaf of sixteen slots.

use std::sync::Arc;

use imbl::OrdMap;
use imbl::ordmap::DiffItem;

use super::key::{Key, Probe};

/// A map of up to this many keys is a flat array.
const FLAT_MAX: usize = 64;

/// A persistent map from [`Key`] to `V`, in key order.
#[derive(Clone)]
pub(crate) struct Map<V: Clone>(Repr<V>);

#[derive(Clone)]
enum Repr<V: Clone> {
    /// Sorted by key, without duplicates; `None` when empty (no
    /// allocation for an empty map). A `Vec` behind the `Arc`, so that an
    /// unshared map grows in place.
    Flat(Option<Arc<Vec<Entry<V>>>>),
    /// Behind an `Arc`, so that a map (and a context, two of them) is two
    /// words: contexts are moved at every stage call.
    Tree(Arc<OrdMap<Key, V>>),
}

/// An entry of a flat map, with its key's first eight bytes as a number
/// ([`Key::head`]): a lookup finds its place among these numbers, side by
/// side in memory, and compares keys only among equal ones.
#[derive(Clone)]
pub(crate) struct Entry<V> {
    head: u64,
    key: Key,
    value: V,
    /// The mark of the last [`upsert`](Map::upsert) that set it (0: none).
    mark: u64,
}

impl<V> Entry<V> {
    fn new(key: Key, value: V, mark: u64) -> Self {
        Entry {
            head: key.head(),
            key,
            value,
            mark,
        }
    }
}

impl<V: Clone> Default for Map<V> {
    fn default() -> Self {
        Map(Repr::Flat(None))
    }
}

/// The entries of a flat map.
fn entries<V: Clone>(flat: &Option<Arc<Vec<Entry<V>>>>) -> &[Entry<V>] {
    flat.as_deref().map_or(&[], Vec::as_slice)
}

/// The entries of a flat map to change in place, with room for `extra`
/// more: its own when no clone shares them, else a copy of them (made with
/// that room, so an insert right after does not allocate again).
fn own<V: Clone>(flat: &mut Option<Arc<Vec<Entry<V>>>>, extra: usize) -> &mut Vec<Entry<V>> {
    let arc = flat.get_or_insert_with(|| Arc::new(Vec::with_capacity(extra)));
    // plain loads first (no map makes a `Weak`): one atomic exchange, in
    // `make_mut`, on the path of an unshared map
    if Arc::strong_count(arc) != 1 || Arc::weak_count(arc) != 0 {
        let mut copy = Vec::with_capacity(arc.len() + extra);
        copy.extend_from_slice(arc);
        *arc = Arc::new(copy);
    }
    // unshared now (if a clone were made since the loads, which `&mut`
    // rules out, `make_mut` would still copy rather than share)
    Arc::make_mut(arc)
}

/// Where the key of `probe` is in sorted `entries`, or where it would go.
fn find<V>(entries: &[Entry<V>], probe: &Probe<'_>) -> Result<usize, usize> {
    // heads are in key order (a key's first eight bytes, zero-padded)
    let head = probe.head();
    let lo = entries.partition_point(|e| e.head < head);
    let same = |i: usize| entries.get(i).is_some_and(|e| e.head == head);
    if !same(lo) {
        return Err(lo);
    }
    if !same(lo + 1) {
        // the one key with this head (the common case)
        return match entries[lo].key.cmp_probe(probe) {
            std::cmp::Ordering::Equal => Ok(lo),
            std::cmp::Ordering::Greater => Err(lo),
            std::cmp::Ordering::Less => Err(lo + 1),
        };
    }
    // keys that share their first eight bytes
    let hi = lo + entries[lo..].partition_point(|e| e.head == head);
    entries[lo..hi]
        .binary_search_by(|e| e.key.cmp_probe(probe))
        .map(|i| lo + i)
        .map_err(|i| lo + i)
}

impl<V: Clone> Map<V> {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn len(&self) -> usize {
        match &self.0 {
            Repr::Flat(flat) => entries(flat).len(),
            Repr::Tree(tree) => tree.len(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn get_key_value(&self, key: &[u8]) -> Option<(&Key, &V)> {
        self.get_probed(&Probe::new(key))
    }

    /// [`get_key_value`](Map::get_key_value) of a key made a probe once
    /// for several lookups.
    pub(crate) fn get_probed(&self, probe: &Probe<'_>) -> Option<(&Key, &V)> {
        match &self.0 {
            Repr::Flat(flat) => {
                let entries = entries(flat);
                find(entries, probe)
                    .ok()
                    .map(|i| (&entries[i].key, &entries[i].value))
            }
            Repr::Tree(tree) => tree.get_key_value(probe.bytes()),
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<&V> {
        self.get_key_value(key).map(|(_, v)| v)
    }

    pub(crate) fn contains_key(&self, key: &[u8]) -> bool {
        self.get_key_value(key).is_some()
    }

    /// Sets `key` to `value`.
    pub(crate) fn insert(&mut self, key: Key, value: V) {
        let bytes = key.clone();
        self.upsert(&Probe::new(bytes.as_bytes()), || key, value, 0);
    }

    /// Sets `key` to `value`, with the key `new_key()` when it is new, and
    /// marks its entry with `mark`. Returns whether the entry had that mark
    /// already (never for a tree, which keeps no marks, nor for mark 0):
    /// the context marks the entries it writes with its epoch, so that a
    /// key it wrote before needs no look-up in its written set.
    ///
    /// Copy on write: a map that shares its entries with a clone copies
    /// them first (once: the copy is its own), and one that does not is
    /// changed in place, so a run of updates to an unshared map copies
    /// nothing.
    pub(crate) fn upsert(
        &mut self,
        key: &Probe<'_>,
        new_key: impl FnOnce() -> Key,
        value: V,
        mark: u64,
    ) -> bool {
        match &mut self.0 {
            Repr::Flat(flat) => match find(entries(flat), key) {
                Ok(i) => {
                    let entry = &mut own(flat, 0)[i];
                    entry.value = value;
                    let had = mark != 0 && entry.mark == mark;
                    entry.mark = mark;
                    had
                }
                Err(i) if entries(flat).len() < FLAT_MAX => {
                    own(flat, 1).insert(i, Entry::new(new_key(), value, mark));
                    false
                }
                Err(_) => {
                    let mut tree: OrdMap<Key, V> = entries(flat)
                        .iter()
                        .map(|e| (e.key.clone(), e.value.clone()))
                        .collect();
                    tree.insert(new_key(), value);
                    self.0 = Repr::Tree(Arc::new(tree));
                    false
                }
            },
            Repr::Tree(tree) => {
                let tree = Arc::make_mut(tree);
                match tree.get_mut(key.bytes()) {
                    Some(slot) => *slot = value,
                    None => {
                        tree.insert(new_key(), value);
                    }
                }
                false
            }
        }
    }

    /// Removes `key` (nothing when it is absent).
    pub(crate) fn remove(&mut self, key: &[u8]) {
        match &mut self.0 {
            Repr::Flat(flat) => {
                if let Ok(i) = find(entries(flat), &Probe::new(key)) {
                    if entries(flat).len() == 1 {
                        *flat = None;
                    } else {
                        own(flat, 0).remove(i);
                    }
                }
            }
            Repr::Tree(tree) => {
                Arc::make_mut(tree).remove(key);
            }
        }
    }

    /// Keys and values in key order.
    pub(crate) fn iter(&self) -> Iter<'_, V> {
        match &self.0 {
            Repr::Flat(flat) => Iter::Flat(entries(flat).iter()),
            Repr::Tree(tree) => Iter::Tree(tree.iter()),
        }
    }

    /// Keys in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &Key> {
        self.iter().map(|(k, _)| k)
    }
}

impl<V: Clone + PartialEq> Map<V> {
    /// [`changes_since`](Self::changes_since) `before` by the entries'
    /// marks, when both maps are flat: the keys of the entries marked
    /// `mark` (non-zero), for a map every change of which since `before`
    /// marked its entry so (a context's lineage since it took its epoch at
    /// a checkpoint, see [`Context::next_epoch`](crate::Context)). Costs a
    /// look-up in `before` per marked entry instead of a walk of both maps.
    /// `None` (walk instead) for a tree, or when a key was removed: the
    /// entry counts show it, and only the walk says which.
    pub(crate) fn changes_marked(&self, before: &Map<V>, mark: u64) -> Option<Vec<String>> {
        let (Repr::Flat(new), Repr::Flat(old)) = (&self.0, &before.0) else {
            return None;
        };
        if mark == 0 {
            return None;
        }
        let (new, old) = (entries(new), entries(old));
        let mut written = Vec::new();
        let mut added = 0;
        for e in new.iter().filter(|e| e.mark == mark) {
            written.push(e.key.as_str().to_owned());
            if find(old, &Probe::new(e.key.as_bytes())).is_err() {
                added += 1;
            }
        }
        (new.len() == old.len() + added).then_some(written)
    }

    /// The keys set (new or changed) and the keys removed from `before` to
    /// `self`, each in key order. Two trees skip the subtrees they share;
    /// anything else (a flat map is small) is compared entry by entry.
    pub(crate) fn changes_since(&self, before: &Map<V>) -> (Vec<String>, Vec<String>) {
        let (mut written, mut removed) = (Vec::new(), Vec::new());
        if let (Repr::Tree(old), Repr::Tree(new)) = (&before.0, &self.0) {
            for item in old.diff(&**new) {
                match item {
                    DiffItem::Add(key, _) | DiffItem::Update { new: (key, _), .. } => {
                        written.push(key.as_str().to_owned());
                    }
                    DiffItem::Remove(key, _) => removed.push(key.as_str().to_owned()),
                }
            }
            return (written, removed);
        }
        let (mut old, mut new) = (before.iter().peekable(), self.iter().peekable());
        loop {
            match (old.peek(), new.peek()) {
                (None, None) => break,
                (Some((k, _)), None) => {
                    removed.push(k.as_str().to_owned());
                    old.next();
                }
                (None, Some((k, _))) => {
                    written.push(k.as_str().to_owned());
                    new.next();
                }
                (Some((ko, vo)), Some((kn, vn))) => match ko.cmp(kn) {
                    std::cmp::Ordering::Less => {
                        removed.push(ko.as_str().to_owned());
                        old.next();
                    }
                    std::cmp::Ordering::Greater => {
                        written.push(kn.as_str().to_owned());
                        new.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if vo != vn {
                            written.push(kn.as_str().to_owned());
                        }
                        old.next();
                        new.next();
                    }
                },
            }
        }
        (written, removed)
    }
}

impl<V: Clone + PartialEq> PartialEq for Map<V> {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Tree(a), Repr::Tree(b)) => a == b,
            (Repr::Flat(Some(a)), Repr::Flat(Some(b))) if Arc::ptr_eq(a, b) => true,
            _ => self.len() == other.len() && self.iter().eq(other.iter()),
        }
    }
}

impl<V: Clone + Eq> Eq for Map<V> {}

impl<V: Clone> FromIterator<(Key, V)> for Map<V> {
    /// Entries in any order; the last of equal keys wins.
    fn from_iter<I: IntoIterator<Item = (Key, V)>>(items: I) -> Self {
        let tree: OrdMap<Key, V> = items.into_iter().collect();
        if tree.len() > FLAT_MAX {
            Map(Repr::Tree(Arc::new(tree)))
        } else if tree.is_empty() {
            Map::new()
        } else {
            Map(Repr::Flat(Some(Arc::new(
                tree.iter()
                    .map(|(k, v)| Entry::new(k.clone(), v.clone(), 0))
                    .collect(),
            ))))
        }
    }
}

impl<'a, V: Clone> IntoIterator for &'a Map<V> {
    type Item = (&'a Key, &'a V);
    type IntoIter = Iter<'a, V>;

    fn into_iter(self) -> Iter<'a, V> {
        self.iter()
    }
}

/// A map's entries in key order.
pub(crate) enum Iter<'a, V: Clone> {
    Flat(std::slice::Iter<'a, Entry<V>>),
    Tree(imbl::ordmap::Iter<'a, Key, V, imbl::shared_ptr::DefaultSharedPtr>),
}

impl<'a, V: Clone> Iterator for Iter<'a, V> {
    type Item = (&'a Key, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Flat(entries) => entries.next().map(|e| (&e.key, &e.value)),
            Iter::Tree(tree) => tree.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Flat(entries) => entries.size_hint(),
            Iter::Tree(tree) => tree.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A pseudo-random walk of inserts and removes across the flat/tree
    /// boundary, checked against a `BTreeMap` after every step, with every
    /// earlier version unchanged and `changes_since` exact between
    /// consecutive versions of either shape.
    #[test]
    fn a_map_is_a_sorted_map_across_the_flat_and_tree_shapes() {
        let mut seed = 7u64;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        let mut map: Map<u64> = Map::new();
        let mut model: BTreeMap<String, u64> = BTreeMap::new();
        let mut versions: Vec<(Map<u64>, BTreeMap<String, u64>)> = Vec::new();
        for step in 0..4000u64 {
            // keys of every length: held in place and shared
            let key = format!(
                "{}{}",
                "k".repeat(next(30) as usize),
                next(3 * FLAT_MAX as u64)
            );
            let before = map.clone();
            if next(3) == 0 {
                map.remove(key.as_bytes());
                model.remove(&key);
            } else {
                let value = next(4);
                map.insert(Key::new(&key), value);
                model.insert(key.clone(), value);
            }
            assert_eq!(listed(&map), model_listed(&model), "step {step}");
            assert_eq!(map.len(), model.len());
            assert_eq!(map.get(key.as_bytes()), model.get(&key));
            let (written, removed) = map.changes_since(&before);
            let (w, r) = (model.get(&key), before.get(key.as_bytes()));
            let expect_written = w.is_some() && w != r;
            let expect_removed = w.is_none() && r.is_some();
            assert_eq!(written, Vec::from_iter(expect_written.then(|| key.clone())));
            assert_eq!(removed, Vec::from_iter(expect_removed.then(|| key.clone())));
            let rebuilt: Map<u64> = map.iter().map(|(k, v)| (k.clone(), *v)).collect();
            assert!(rebuilt == map, "the same entries are equal in either shape");
            if step % 97 == 0 {
                versions.push((map.clone(), model.clone()));
            }
        }
        for (old, model) in &versions {
            assert_eq!(
                listed(old),
                model_listed(model),
                "an earlier version is unchanged"
            );
        }
    }

    /// Where a flat map's entries are (`None` for a tree or an empty map).
    fn at(map: &Map<u64>) -> Option<*const Entry<u64>> {
        match &map.0 {
            Repr::Flat(Some(flat)) => Some(flat.as_ptr()),
            _ => None,
        }
    }

    /// The same walk without a clone each step: an unshared map changes in
    /// place (its entries stay where they were while they fit), a shared
    /// one copies itself once, and every clone taken along the way keeps
    /// the entries it had, in either shape.
    #[test]
    fn an_unshared_map_changes_in_place_and_a_clone_never_changes() {
        let mut map: Map<u64> = Map::new();
        let mut model: BTreeMap<String, u64> = BTreeMap::new();
        let mut kept: Vec<(Map<u64>, BTreeMap<String, u64>)> = Vec::new();
        for step in 0..3000u64 {
            // flat for 2,000 steps (at most FLAT_MAX keys), then a tree
            let space = if step < 2000 { FLAT_MAX } else { 2 * FLAT_MAX };
            let key = format!("k{}", (step * 7919) % space as u64);
            let (before, room) = (
                at(&map),
                match &map.0 {
                    Repr::Flat(Some(flat)) => flat.capacity() > flat.len(),
                    _ => false,
                },
            );
            if step % 5 == 0 {
                map.remove(key.as_bytes());
                model.remove(&key);
            } else {
                map.insert(Key::new(&key), step);
                model.insert(key, step);
            }
            if before.is_some() && at(&map).is_some() && (room || step % 5 == 0) {
                assert_eq!(at(&map), before, "step {step}: changed in place");
            }
            if step % 61 == 0 {
                let clone = map.clone();
                let shared = at(&map);
                kept.push((clone, model.clone()));
                // the next write copies: the clone's entries stay put
                map.insert(Key::new("k0"), step);
                model.insert("k0".to_owned(), step);
                if shared.is_some() {
                    assert_ne!(at(&map), shared, "step {step}: a shared map is copied");
                }
            }
            assert_eq!(listed(&map), model_listed(&model), "step {step}");
        }
        for (old, model) in &kept {
            assert_eq!(listed(old), model_listed(model), "a clone is unchanged");
        }
    }

    fn listed(map: &Map<u64>) -> Vec<(String, u64)> {
        map.iter()
            .map(|(k, v)| (k.as_str().to_owned(), *v))
            .collect()
    }

    fn model_listed(model: &BTreeMap<String, u64>) -> Vec<(String, u64)> {
        model.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}
