//! The persistent map under a context: a flat sorted array while small, a
//! persistent B-tree ([`imbl::OrdMap`]) past that.
//!
//! Both are immutable and shared: a clone is O(1). An update of a flat map
//! writes a new array of exactly its entries in one allocation (a small
//! context's entries are held in place, so that is a copy of a few words
//! each); an update of a tree copies the path to the changed key. Small
//! contexts are the common case, and copying twelve entries into one exact
//! allocation costs less than copying a B-tree leaf of sixteen slots.

use std::iter;
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
    /// allocation for an empty map).
    Flat(Option<Arc<[(Key, V)]>>),
    Tree(OrdMap<Key, V>),
}

impl<V: Clone> Default for Map<V> {
    fn default() -> Self {
        Map(Repr::Flat(None))
    }
}

/// The entries of a flat map.
fn entries<V: Clone>(flat: &Option<Arc<[(Key, V)]>>) -> &[(Key, V)] {
    flat.as_deref().unwrap_or(&[])
}

/// Where `key` is in sorted `entries`, or where it would go.
fn find<V>(entries: &[(Key, V)], key: &[u8]) -> Result<usize, usize> {
    let probe = Probe::new(key);
    entries.binary_search_by(|(k, _)| k.cmp_probe(&probe))
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
        match &self.0 {
            Repr::Flat(flat) => {
                let entries = entries(flat);
                find(entries, key)
                    .ok()
                    .map(|i| (&entries[i].0, &entries[i].1))
            }
            Repr::Tree(tree) => tree.get_key_value(key),
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<&V> {
        self.get_key_value(key).map(|(_, v)| v)
    }

    pub(crate) fn contains_key(&self, key: &[u8]) -> bool {
        self.get_key_value(key).is_some()
    }

    /// Sets `key` to `value` (a new array, or a copied path).
    pub(crate) fn insert(&mut self, key: Key, value: V) {
        let bytes = key.clone();
        self.upsert(bytes.as_bytes(), || key, value);
    }

    /// Sets `key` to `value` and returns the key as the map holds it: the
    /// one it held already, else `new_key()`.
    pub(crate) fn upsert(&mut self, key: &[u8], new_key: impl FnOnce() -> Key, value: V) -> Key {
        match &mut self.0 {
            Repr::Flat(flat) => {
                let old = entries(flat);
                let at = match find(old, key) {
                    Ok(i) => {
                        // a copy of every entry in one exact allocation,
                        // then the one changed in place
                        let mut next: Arc<[(Key, V)]> = old.iter().cloned().collect();
                        if let Some(slot) = Arc::get_mut(&mut next).and_then(|e| e.get_mut(i)) {
                            slot.1 = value;
                        }
                        *flat = Some(next);
                        i
                    }
                    Err(i) if old.len() < FLAT_MAX => {
                        let next: Arc<[(Key, V)]> = old[..i]
                            .iter()
                            .cloned()
                            .chain(iter::once((new_key(), value)))
                            .chain(old[i..].iter().cloned())
                            .collect();
                        *flat = Some(next);
                        i
                    }
                    Err(_) => {
                        let mut tree: OrdMap<Key, V> = old.iter().cloned().collect();
                        let new = new_key();
                        tree.insert(new.clone(), value);
                        self.0 = Repr::Tree(tree);
                        return new;
                    }
                };
                entries(flat)[at].0.clone()
            }
            Repr::Tree(tree) => match tree.get_key_value_mut(key) {
                Some((held, slot)) => {
                    *slot = value;
                    held.clone()
                }
                None => {
                    let new = new_key();
                    tree.insert(new.clone(), value);
                    new
                }
            },
        }
    }

    /// Removes `key` (nothing when it is absent).
    pub(crate) fn remove(&mut self, key: &[u8]) {
        match &mut self.0 {
            Repr::Flat(flat) => {
                let old = entries(flat);
                if let Ok(i) = find(old, key) {
                    *flat = (old.len() > 1).then(|| {
                        old[..i]
                            .iter()
                            .cloned()
                            .chain(old[i + 1..].iter().cloned())
                            .collect()
                    });
                }
            }
            Repr::Tree(tree) => {
                tree.remove(key);
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
    /// The keys set (new or changed) and the keys removed from `before` to
    /// `self`, each in key order. Two trees skip the subtrees they share;
    /// anything else (a flat map is small) is compared entry by entry.
    pub(crate) fn changes_since(&self, before: &Map<V>) -> (Vec<String>, Vec<String>) {
        let (mut written, mut removed) = (Vec::new(), Vec::new());
        if let (Repr::Tree(old), Repr::Tree(new)) = (&before.0, &self.0) {
            for item in old.diff(new) {
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
            Map(Repr::Tree(tree))
        } else if tree.is_empty() {
            Map::new()
        } else {
            Map(Repr::Flat(Some(
                tree.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            )))
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
    Flat(std::slice::Iter<'a, (Key, V)>),
    Tree(imbl::ordmap::Iter<'a, Key, V, imbl::shared_ptr::DefaultSharedPtr>),
}

impl<'a, V: Clone> Iterator for Iter<'a, V> {
    type Item = (&'a Key, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Flat(entries) => entries.next().map(|(k, v)| (k, v)),
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

    fn listed(map: &Map<u64>) -> Vec<(String, u64)> {
        map.iter()
            .map(|(k, v)| (k.as_str().to_owned(), *v))
            .collect()
    }

    fn model_listed(model: &BTreeMap<String, u64>) -> Vec<(String, u64)> {
        model.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}
