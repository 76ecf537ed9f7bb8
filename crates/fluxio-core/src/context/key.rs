//! A context key: up to 23 bytes held in place, longer ones shared.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// Keys up to this many bytes are held in place.
const HELD: usize = 23;

/// A key of a context's map.
///
/// A short key (most are) is held in place as an aligned, `Copy` block,
/// so copying a map node on update copies it as three words, with no
/// reference count and no allocation. A longer one is shared (`Arc<str>`):
/// a copy is a reference count, never an allocation. Keys compare and are
/// looked up by their bytes (the order of `str`).
#[derive(Clone)]
pub(crate) enum Key {
    Held(Held),
    Shared(Arc<str>),
}

/// A short key: its bytes, zero-padded, then its length (last byte).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct Held([u8; HELD + 1]);

impl Key {
    #[inline]
    pub(crate) fn new(key: &str) -> Key {
        Held::new(key.as_bytes()).map_or_else(|| Key::Shared(Arc::from(key)), Key::Held)
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Held(Held(held)) => &held[..usize::from(held[HELD])],
            Key::Shared(key) => key.as_bytes(),
        }
    }

    #[inline]
    pub(crate) fn as_str(&self) -> &str {
        match self {
            // made from a `str` (see `new`): always valid
            Key::Held(Held(held)) => {
                std::str::from_utf8(&held[..usize::from(held[HELD])]).unwrap_or_default()
            }
            Key::Shared(key) => key,
        }
    }

    /// Compares this key with `probe` (the order of their bytes).
    #[inline]
    pub(crate) fn cmp_probe(&self, probe: &Probe<'_>) -> Ordering {
        // most keys differ in their first eight bytes; two keys of at
        // most eight bytes with the same head differ only in length
        self.head().cmp(&probe.head).then_with(|| {
            let (mine, theirs) = (self.as_bytes(), probe.bytes);
            if mine.len() <= 8 && theirs.len() <= 8 {
                mine.len().cmp(&theirs.len())
            } else {
                mine.cmp(theirs)
            }
        })
    }

    /// The first eight bytes, zero-padded, big-endian: they compare as
    /// the keys do, up to a tie.
    #[inline]
    pub(crate) fn head(&self) -> u64 {
        match self {
            Key::Held(Held(held)) => {
                let mut w = [0u8; 8];
                w.copy_from_slice(&held[..8]);
                u64::from_be_bytes(w)
            }
            Key::Shared(key) => head(key.as_bytes()),
        }
    }

    #[cfg(test)]
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, Key::Shared(_))
    }
}

impl Held {
    #[inline]
    fn new(bytes: &[u8]) -> Option<Held> {
        let len = u8::try_from(bytes.len())
            .ok()
            .filter(|&n| usize::from(n) <= HELD)?;
        let mut held = [0u8; HELD + 1];
        held[..bytes.len()].copy_from_slice(bytes);
        held[HELD] = len;
        Some(Held(held))
    }
}

/// A key being looked up, with its first eight bytes as a number: most
/// comparisons take one integer comparison.
pub(crate) struct Probe<'a> {
    bytes: &'a [u8],
    head: u64,
}

impl<'a> Probe<'a> {
    #[inline]
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Probe {
            bytes,
            head: head(bytes),
        }
    }

    /// The first eight bytes of the key looked up (see [`Key::head`]).
    #[inline]
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// The key looked up.
    #[inline]
    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// The first eight bytes of `bytes`, zero-padded, big-endian.
#[inline]
fn head(bytes: &[u8]) -> u64 {
    if let Some(first) = bytes.first_chunk::<8>() {
        return u64::from_be_bytes(*first);
    }
    // shorter: two loads that overlap, shifted in place (a byte loop, or a
    // copy to memory read back as a word, costs several times as much)
    let n = bytes.len();
    let at = |i: usize| u64::from(bytes[i]);
    match n {
        4..=7 => {
            let word = |i: usize| {
                let mut w = [0u8; 4];
                w.copy_from_slice(&bytes[i..i + 4]);
                u64::from(u32::from_be_bytes(w))
            };
            word(0) << 32 | word(n - 4) << (8 * (8 - n))
        }
        1..=3 => at(0) << 56 | at(n / 2) << (56 - 8 * (n / 2)) | at(n - 1) << (56 - 8 * (n - 1)),
        _ => 0,
    }
}

impl Borrow<[u8]> for Key {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            // zero-padded after the bytes, the length last: equal keys are
            // equal blocks (compared as words, not by a call to `memcmp`)
            (Key::Held(a), Key::Held(b)) => a.0 == b.0,
            _ => self.as_bytes() == other.as_bytes(),
        }
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        if let (Key::Held(a), Key::Held(b)) = (self, other)
            && a.0 == b.0
        {
            // the same key, as a walk of two versions of a map meets most
            return Ordering::Equal;
        }
        // the first eight bytes as one number, the rest only on a tie
        self.head()
            .cmp(&other.head())
            .then_with(|| self.as_bytes().cmp(other.as_bytes()))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_text_and_the_order_of_str_at_every_length() {
        let texts: Vec<String> = (0..40)
            .flat_map(|n| {
                [
                    "k".repeat(n),
                    // distinct bytes: a head shifted to the wrong place shows
                    "abcdefghijklmnopqrstuvwxyz".chars().take(n).collect(),
                    format!("{}\0", "k".repeat(n)),
                    format!("k\0{}", "\0".repeat(n)),
                    "é".repeat(n / 2),
                    format!("{}\u{10FFFF}", "a".repeat(n)),
                ]
            })
            .collect();
        for a in &texts {
            let ka = Key::new(a);
            assert_eq!(ka.as_str(), a);
            assert_eq!(ka.is_shared(), a.len() > HELD, "{a}");
            let mut padded = [0u8; 8];
            let n = a.len().min(8);
            padded[..n].copy_from_slice(&a.as_bytes()[..n]);
            assert_eq!(head(a.as_bytes()), u64::from_be_bytes(padded), "{a:?}");
            for b in &texts {
                let want = a.as_str().cmp(b.as_str());
                assert_eq!(ka.cmp(&Key::new(b)), want, "{a} {b}");
                assert_eq!(ka == Key::new(b), a == b, "{a} {b}");
                assert_eq!(ka.cmp_probe(&Probe::new(b.as_bytes())), want, "{a} {b}");
            }
        }
    }
}
