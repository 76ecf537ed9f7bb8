//! The pipeline version: a SHA-256 digest computed at compile time.
//!
//! A pipeline's version rests on two encodings, each with exactly one
//! implementation:
//!
//! - the **stage hash** (`fluxio/stage/v1`), computed by `#[stage]` while it
//!   expands, with the `sha2` crate: `stage_hash` in `fluxio-macros/src/hash.rs`;
//! - the **pipeline digest** (`fluxio/pipeline/v1`), computed here: the code
//!   `pipeline!` generates calls the `const fn`s of [`VersionHasher`] in a
//!   `const` item, one call per node, so the compiler evaluates the digest.
//!
//! The macros crate does not depend on this crate (that would put tokio and
//! imbl into the proc-macro build), so `pipeline!` cannot run this code itself;
//! instead its output names [`VersionHasher`] through `fluxio::__private`.
//! Either way, the tag bytes and the framing below are written in one place
//! only: the macro never spells them. Because every input is a compile-time
//! constant, the same source gives the same version on every build, machine
//! and compiler version.
//!
//! # Stage hash (`fluxio/stage/v1`)
//!
//! SHA-256 over the length-prefixed domain tag `fluxio/stage/v1`, then four
//! length-prefixed parts: the `#[stage(...)]` arguments, the function's other
//! attributes, its signature and its body. Each part is its tokens, normalized
//! so that what rustfmt changes does not count (doc comments dropped, trailing
//! commas and commas after `{...}` dropped, a one-expression match-arm block
//! counted as that expression), then encoded one by one: an identifier as
//! `i`, its length and text; a punctuation character as `p` and the character
//! (spacing ignored); a literal as `l`, its length and source text; a group as
//! `g`, its delimiter (`(`, `[`, `{`, or `n` for none), its tokens and `e`.
//! `fluxio-macros/src/hash.rs` has the details and the golden digest.
//!
//! # Pipeline digest (`fluxio/pipeline/v1`)
//!
//! SHA-256 over, in order:
//!
//! 1. the domain tag [`PIPELINE_DOMAIN`], length-prefixed ([`VersionHasher::pipeline`]);
//! 2. the pipeline's top-level sequence. A *sequence* is `[`
//!    ([`seq_start`](VersionHasher::seq_start)), its nodes in order, `]`
//!    ([`seq_end`](VersionHasher::seq_end)); nested sequences (`[a, b]`,
//!    `pipeline![...]`) are flattened into the enclosing one first. A *node* is
//!    one of:
//!    - a stage: `S` and the stage's 32-byte hash ([`stage`](VersionHasher::stage));
//!    - a parallel block: `P` ([`parallel`](VersionHasher::parallel)) or, for
//!      `fire_and_forget!`, `F` ([`fire_and_forget`](VersionHasher::fire_and_forget)),
//!      the branch count as a u32 little endian, then each branch as a sequence;
//!    - a sleep (rule 25): `Z`, then `d` and its duration in milliseconds as
//!      a u64 little endian ([`sleep_for`](VersionHasher::sleep_for)), or `k`
//!      and the context key its instant is read from, length-prefixed
//!      ([`sleep_until`](VersionHasher::sleep_until));
//!    - a wait (rule 26): `W` and its name count as a u32 little endian
//!      ([`wait`](VersionHasher::wait)); each name, the key its payload goes
//!      to (both length-prefixed) and the stage-hash encoding's digest of its
//!      payload type's tokens ([`wait_name`](VersionHasher::wait_name)); its
//!      deadline: `n` (none), `d` and milliseconds, or `k` and a key; its
//!      timeout outcome: `0` (the default), `f` (fail), or `v` and the digest
//!      of the value expression's tokens; then, when a routing block follows
//!      it, the block as after a router (`R`, ...);
//!    - a child step (rule 29): `C` and its pipeline's name, length-prefixed
//!      ([`child`](VersionHasher::child)); its input keys, then its output
//!      keys, each `a` (all) or `l`, the count as a u32 little endian and
//!      each key length-prefixed ([`child_keys`](VersionHasher::child_keys));
//!      for a fan-out, `E` and its list, item and results keys, each
//!      length-prefixed ([`child_each`](VersionHasher::child_each)); its
//!      failure key: `n`, or `k` and the key; its deadline: `n`, or `d`
//!      and milliseconds ([`child_end`](VersionHasher::child_end));
//!    - a routing block: first its router as a stage node, then `R` and the
//!      route count as a u32 little endian ([`routes`](VersionHasher::routes)),
//!      then for each route in source order its key, length-prefixed UTF-8
//!      ([`route_key`](VersionHasher::route_key)), and its body as a sequence;
//! 3. the mode ([`finish`](VersionHasher::finish)): `A` when auto-parallelism is
//!    on, `N` when it is off (it changes the compiled program, so checkpoints
//!    of one mode must not resume in the other).
//!
//! # Helpers (`fluxio/uses/v1`, rule 34)
//!
//! A stage or helper that declares the functions it calls (`uses = [...]`)
//! has, in place of its own hash, the SHA-256 of the length-prefixed tag
//! [`USES_DOMAIN`], its own 32-byte hash, the helper count as a u32 little
//! endian, then for each helper in declared order its name (length-prefixed)
//! and its hash, itself computed the same way ([`with_helpers`]). A stage that
//! declares none keeps its own hash, so declaring helpers is the only thing
//! that moves a version. A cycle of helpers is a compile error (the constants
//! would depend on themselves).
//!
//! Tags are single ASCII bytes; length prefixes are u64 little endian. The
//! version string is the first six bytes of the digest in lowercase hex (12
//! characters, [`short_hex`]).
//!
//! The hasher is a small `const fn` implementation of SHA-256 (FIPS 180-4),
//! because the `sha2` crate cannot run in a `const` context; the tests check it
//! against `sha2` on many inputs, and pin the encoding's bytes.

/// The domain tag of a hash combined with its helpers' ([`with_helpers`]).
pub const USES_DOMAIN: &[u8] = b"fluxio/uses/v1";

/// A stage's or helper's own hash combined with the hashes of the helpers it
/// declares, `(name, hash)` in declared order (the `fluxio/uses/v1` encoding
/// of the module docs); `own` unchanged when there are none.
///
/// ```
/// use fluxio_core::version::with_helpers;
///
/// const OWN: [u8; 32] = [1; 32];
/// assert_eq!(with_helpers(&OWN, &[]), OWN);
/// const A: [u8; 32] = with_helpers(&OWN, &[("tax", &[2; 32])]);
/// const B: [u8; 32] = with_helpers(&OWN, &[("tax", &[3; 32])]);
/// assert_ne!(A, OWN);
/// assert_ne!(A, B);
/// ```
#[must_use]
pub const fn with_helpers(own: &[u8; 32], helpers: &[(&str, &[u8; 32])]) -> [u8; 32] {
    if helpers.is_empty() {
        return *own;
    }
    #[allow(clippy::cast_possible_truncation)] // a function declares far fewer than 2^32 helpers
    let mut h = VersionHasher::new()
        .part(USES_DOMAIN)
        .update(own)
        .count(helpers.len() as u32);
    let mut i = 0;
    while i < helpers.len() {
        h = h.part(helpers[i].0.as_bytes()).update(helpers[i].1);
        i += 1;
    }
    h.finalize()
}

/// The domain tag of a hash combined with its typed keys' names
/// ([`with_keys`]).
pub const KEYS_DOMAIN: &[u8] = b"fluxio/keys/v1";

/// A stage's hash combined with the names of the typed keys
/// (`fluxio::Key` constants) its `reads` and `writes` name, in order: the
/// macro sees a constant's path, not its name, so the name counts here
/// (renaming the key's string changes the version). `own` unchanged when
/// there are none.
#[must_use]
pub const fn with_keys(own: &[u8; 32], keys: &[&str]) -> [u8; 32] {
    if keys.is_empty() {
        return *own;
    }
    #[allow(clippy::cast_possible_truncation)] // a stage names far fewer than 2^32 keys
    let mut h = VersionHasher::new()
        .part(KEYS_DOMAIN)
        .update(own)
        .count(keys.len() as u32);
    let mut i = 0;
    while i < keys.len() {
        h = h.part(keys[i].as_bytes());
        i += 1;
    }
    h.finalize()
}

/// The domain tag that starts every pipeline digest.
pub const PIPELINE_DOMAIN: &[u8] = b"fluxio/pipeline/v1";

// The tag bytes of the pipeline encoding (see the module docs); fixed
// forever, since changing one changes every pipeline's version.
const SEQ_START: u8 = b'[';
const SEQ_END: u8 = b']';
const STAGE: u8 = b'S';
const PARALLEL: u8 = b'P';
const FIRE_AND_FORGET: u8 = b'F';
const ROUTES: u8 = b'R';
const SLEEP: u8 = b'Z';
const WAIT: u8 = b'W';
const CHILD: u8 = b'C';
const CHILD_EACH: u8 = b'E';
const KEYS_ALL: u8 = b'a';
const KEYS_LISTED: u8 = b'l';
/// A time: a duration in milliseconds (u64 little endian), or a context key.
const TIME_AFTER: u8 = b'd';
const TIME_KEY: u8 = b'k';
const TIME_NONE: u8 = b'n';
/// A wait's timeout outcome.
const TIMEOUT_DEFAULT: u8 = b'0';
const TIMEOUT_FAIL: u8 = b'f';
const TIMEOUT_VALUE: u8 = b'v';
const MODE_AUTO: u8 = b'A';
const MODE_PLAIN: u8 = b'N';

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

const H0: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// A `const fn` SHA-256 hasher, and the one writer of the pipeline encoding.
///
/// Every method takes `self` by value and returns the updated hasher, so it
/// can be chained inside a `const` item. The node methods
/// ([`seq_start`](Self::seq_start), [`stage`](Self::stage),
/// [`parallel`](Self::parallel), [`routes`](Self::routes), ...) and
/// [`finish`](Self::finish) write the encoding of the module docs; `pipeline!`
/// expands to a chain of them. [`update`](Self::update) and
/// [`part`](Self::part) feed raw bytes, for digests of other encodings.
///
/// ```
/// use fluxio_core::version::{VersionHasher, short_hex};
///
/// // what `pipeline![a, parallel![b, c]]` computes, given its stages' hashes
/// const fn shape(a: &[u8; 32], b: &[u8; 32], c: &[u8; 32]) -> VersionHasher {
///     VersionHasher::pipeline()
///         .seq_start()
///         .stage(a)
///         .parallel(2)
///         .seq_start().stage(b).seq_end()
///         .seq_start().stage(c).seq_end()
///         .seq_end()
/// }
/// const AUTO: [u8; 32] = shape(&[1; 32], &[2; 32], &[3; 32]).finish(true);
/// const PLAIN: [u8; 32] = shape(&[1; 32], &[2; 32], &[3; 32]).finish(false);
/// assert_ne!(short_hex(&AUTO), short_hex(&PLAIN));
///
/// // and a plain SHA-256
/// const ABC: [u8; 32] = VersionHasher::new().update(b"abc").finalize();
/// assert_eq!(short_hex(&ABC), "ba7816bf8f01");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct VersionHasher {
    state: [u32; 8],
    block: [u8; 64],
    filled: usize,
    total: u64,
}

impl Default for VersionHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl VersionHasher {
    /// An empty hasher.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            state: H0,
            block: [0; 64],
            filled: 0,
            total: 0,
        }
    }

    /// A hasher already fed with the length-prefixed [`PIPELINE_DOMAIN`] tag.
    #[must_use]
    pub const fn pipeline() -> Self {
        Self::new().part(PIPELINE_DOMAIN)
    }

    /// Feeds raw bytes.
    #[must_use]
    pub const fn update(mut self, data: &[u8]) -> Self {
        let mut i = 0;
        while i < data.len() {
            self.block[self.filled] = data[i];
            self.filled += 1;
            if self.filled == 64 {
                self.state = compress(self.state, &self.block);
                self.filled = 0;
            }
            i += 1;
        }
        self.total = self.total.wrapping_add(data.len() as u64);
        self
    }

    /// Feeds a length-prefixed byte string (u64 LE length, then the bytes).
    #[must_use]
    pub const fn part(self, data: &[u8]) -> Self {
        self.update(&(data.len() as u64).to_le_bytes()).update(data)
    }

    /// Feeds one tag byte.
    const fn tag(self, tag: u8) -> Self {
        self.update(&[tag])
    }

    /// Feeds a u32 in little endian.
    const fn count(self, n: u32) -> Self {
        self.update(&n.to_le_bytes())
    }

    /// Starts a sequence: `[`.
    #[must_use]
    pub const fn seq_start(self) -> Self {
        self.tag(SEQ_START)
    }

    /// Ends a sequence: `]`.
    #[must_use]
    pub const fn seq_end(self) -> Self {
        self.tag(SEQ_END)
    }

    /// Feeds a stage node: `S` and the stage's hash.
    #[must_use]
    pub const fn stage(self, hash: &[u8; 32]) -> Self {
        self.tag(STAGE).update(hash)
    }

    /// Starts a `parallel![...]` block: `P` and its branch count; each
    /// branch follows as a sequence.
    #[must_use]
    pub const fn parallel(self, branches: u32) -> Self {
        self.tag(PARALLEL).count(branches)
    }

    /// Starts a `fire_and_forget![...]` block: `F` and its branch count; each
    /// branch follows as a sequence.
    #[must_use]
    pub const fn fire_and_forget(self, branches: u32) -> Self {
        self.tag(FIRE_AND_FORGET).count(branches)
    }

    /// Starts a routing block, after its router's [`stage`](Self::stage)
    /// node: `R` and the number of routes; each route follows as its
    /// [`route_key`](Self::route_key) and its body as a sequence.
    #[must_use]
    pub const fn routes(self, count: u32) -> Self {
        self.tag(ROUTES).count(count)
    }

    /// Feeds a sleep of `ms` milliseconds: `Z`, `d` and the duration as a
    /// u64 little endian.
    #[must_use]
    pub const fn sleep_for(self, ms: u64) -> Self {
        self.tag(SLEEP).tag(TIME_AFTER).update(&ms.to_le_bytes())
    }

    /// Feeds a sleep until the instant in context key `key`: `Z`, `k` and
    /// the key, length-prefixed.
    #[must_use]
    pub const fn sleep_until(self, key: &str) -> Self {
        self.tag(SLEEP).tag(TIME_KEY).part(key.as_bytes())
    }

    /// Starts a wait on `names` names: `W` and the count; each name follows
    /// ([`wait_name`](Self::wait_name)), then its deadline and its timeout
    /// outcome, then, when a routing block follows it, [`routes`](Self::routes).
    #[must_use]
    pub const fn wait(self, names: u32) -> Self {
        self.tag(WAIT).count(names)
    }

    /// Feeds one name of a wait: the name, the context key its payload goes
    /// to (both length-prefixed), and the hash of its payload type's tokens.
    #[must_use]
    pub const fn wait_name(self, name: &str, key: &str, payload: &[u8; 32]) -> Self {
        self.part(name.as_bytes())
            .part(key.as_bytes())
            .update(payload)
    }

    /// Feeds a wait without a deadline: `n`.
    #[must_use]
    pub const fn no_deadline(self) -> Self {
        self.tag(TIME_NONE)
    }

    /// Feeds a wait's deadline `ms` milliseconds after it is reached: `d`
    /// and the duration as a u64 little endian.
    #[must_use]
    pub const fn deadline_after(self, ms: u64) -> Self {
        self.tag(TIME_AFTER).update(&ms.to_le_bytes())
    }

    /// Feeds a wait's deadline read from context key `key`: `k` and the
    /// key, length-prefixed.
    #[must_use]
    pub const fn deadline_at(self, key: &str) -> Self {
        self.tag(TIME_KEY).part(key.as_bytes())
    }

    /// Feeds a wait's timeout outcome left to its default (fail, or the
    /// `"timeout"` route of the routing block after it): `0`.
    #[must_use]
    pub const fn timeout_default(self) -> Self {
        self.tag(TIMEOUT_DEFAULT)
    }

    /// Feeds a wait's timeout outcome `fail`: `f`.
    #[must_use]
    pub const fn timeout_fail(self) -> Self {
        self.tag(TIMEOUT_FAIL)
    }

    /// Feeds a wait's timeout value, by the hash of its expression's
    /// tokens: `v` and the hash.
    #[must_use]
    pub const fn timeout_value(self, expr: &[u8; 32]) -> Self {
        self.tag(TIMEOUT_VALUE).update(expr)
    }

    /// Starts a child step (rule 29): `C` and the child pipeline's name,
    /// length-prefixed; its input and output keys follow
    /// ([`child_keys`](Self::child_keys), twice), then
    /// [`child_end`](Self::child_end).
    #[must_use]
    pub const fn child(self, pipeline: &str) -> Self {
        self.tag(CHILD).part(pipeline.as_bytes())
    }

    /// Feeds a child step's input or output keys: `a` for all (`None`), or
    /// `l`, the count and each key, length-prefixed.
    #[must_use]
    pub const fn child_keys(self, keys: Option<&[&str]>) -> Self {
        let Some(keys) = keys else {
            return self.tag(KEYS_ALL);
        };
        let mut h = self.tag(KEYS_LISTED).count(keys.len() as u32);
        let mut i = 0;
        while i < keys.len() {
            h = h.part(keys[i].as_bytes());
            i += 1;
        }
        h
    }

    /// Feeds a fan-out child step's keys, between its output keys and its
    /// end: `E`, the list key, the item key and the results key, each
    /// length-prefixed.
    #[must_use]
    pub const fn child_each(self, list: &str, item: &str, into: &str) -> Self {
        self.tag(CHILD_EACH)
            .part(list.as_bytes())
            .part(item.as_bytes())
            .part(into.as_bytes())
    }

    /// Ends a child step: its failure key (`n`, or `k` and the key) and its
    /// own deadline (`n`, or `d` and milliseconds as a u64 little endian).
    #[must_use]
    pub const fn child_end(self, failure: Option<&str>, deadline_ms: Option<u64>) -> Self {
        let h = match failure {
            None => self.tag(TIME_NONE),
            Some(key) => self.tag(TIME_KEY).part(key.as_bytes()),
        };
        match deadline_ms {
            None => h.tag(TIME_NONE),
            Some(ms) => h.tag(TIME_AFTER).update(&ms.to_le_bytes()),
        }
    }

    /// Feeds a route's key, length-prefixed UTF-8.
    #[must_use]
    pub const fn route_key(self, key: &str) -> Self {
        self.part(key.as_bytes())
    }

    /// Feeds the mode (`A` with auto-parallelism, `N` without) and returns
    /// the digest: the last step of a pipeline's encoding.
    #[must_use]
    pub const fn finish(self, auto_parallel: bool) -> [u8; 32] {
        self.tag(if auto_parallel { MODE_AUTO } else { MODE_PLAIN })
            .finalize()
    }

    /// Finishes and returns the 32-byte digest.
    #[must_use]
    pub const fn finalize(self) -> [u8; 32] {
        let bits = self.total.wrapping_mul(8);
        let mut state = self.state;
        let mut block = self.block;
        let mut filled = self.filled;
        block[filled] = 0x80;
        filled += 1;
        if filled > 56 {
            while filled < 64 {
                block[filled] = 0;
                filled += 1;
            }
            state = compress(state, &block);
            filled = 0;
        }
        while filled < 56 {
            block[filled] = 0;
            filled += 1;
        }
        let len = bits.to_be_bytes();
        let mut i = 0;
        while i < 8 {
            block[56 + i] = len[i];
            i += 1;
        }
        state = compress(state, &block);
        let mut out = [0u8; 32];
        let mut w = 0;
        while w < 8 {
            let b = state[w].to_be_bytes();
            out[w * 4] = b[0];
            out[w * 4 + 1] = b[1];
            out[w * 4 + 2] = b[2];
            out[w * 4 + 3] = b[3];
            w += 1;
        }
        out
    }
}

const fn compress(mut state: [u32; 8], block: &[u8; 64]) -> [u32; 8] {
    let mut w = [0u32; 64];
    let mut t = 0;
    while t < 16 {
        w[t] = u32::from_be_bytes([
            block[t * 4],
            block[t * 4 + 1],
            block[t * 4 + 2],
            block[t * 4 + 3],
        ]);
        t += 1;
    }
    while t < 64 {
        let s0 = w[t - 15].rotate_right(7) ^ w[t - 15].rotate_right(18) ^ (w[t - 15] >> 3);
        let s1 = w[t - 2].rotate_right(17) ^ w[t - 2].rotate_right(19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16]
            .wrapping_add(s0)
            .wrapping_add(w[t - 7])
            .wrapping_add(s1);
        t += 1;
    }
    let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = state;
    t = 0;
    while t < 64 {
        let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
        let ch = (e & f) ^ (!e & g);
        let t1 = h
            .wrapping_add(s1)
            .wrapping_add(ch)
            .wrapping_add(K[t])
            .wrapping_add(w[t]);
        let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
        let maj = (a & b) ^ (a & c) ^ (b & c);
        let t2 = s0.wrapping_add(maj);
        h = g;
        g = f;
        f = e;
        e = d.wrapping_add(t1);
        d = c;
        c = b;
        b = a;
        a = t1.wrapping_add(t2);
        t += 1;
    }
    state[0] = state[0].wrapping_add(a);
    state[1] = state[1].wrapping_add(b);
    state[2] = state[2].wrapping_add(c);
    state[3] = state[3].wrapping_add(d);
    state[4] = state[4].wrapping_add(e);
    state[5] = state[5].wrapping_add(f);
    state[6] = state[6].wrapping_add(g);
    state[7] = state[7].wrapping_add(h);
    state
}

/// The short version string of a digest: its first six bytes in lowercase hex.
///
/// ```
/// let v = fluxio_core::version::short_hex(&[0xab; 32]);
/// assert_eq!(v, "abababababab");
/// ```
#[must_use]
pub fn short_hex(digest: &[u8; 32]) -> String {
    use std::fmt::Write as _;
    digest[..6]
        .iter()
        .fold(String::with_capacity(12), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn reference(data: &[u8]) -> [u8; 32] {
        Sha256::digest(data).into()
    }

    #[test]
    fn matches_sha2_on_every_length_around_block_boundaries() {
        let data: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(31) ^ 0x5a) as u8)
            .collect();
        for len in 0..data.len() {
            let ours = VersionHasher::new().update(&data[..len]).finalize();
            assert_eq!(ours, reference(&data[..len]), "length {len}");
        }
    }

    #[test]
    fn chunked_updates_equal_one_update() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let mut h = VersionHasher::new();
        for chunk in data.chunks(37) {
            h = h.update(chunk);
        }
        assert_eq!(h.finalize(), reference(&data));
    }

    #[test]
    fn known_answer_abc() {
        let d = VersionHasher::new().update(b"abc").finalize();
        assert_eq!(
            short_hex(&d),
            "ba7816bf8f01",
            "sha256(\"abc\") starts with ba7816bf8f01"
        );
    }

    #[test]
    fn evaluates_in_const_context() {
        const D: [u8; 32] = VersionHasher::pipeline()
            .seq_start()
            .stage(&[1; 32])
            .seq_end()
            .finish(false);
        let mut manual = Vec::new();
        manual.extend_from_slice(&(PIPELINE_DOMAIN.len() as u64).to_le_bytes());
        manual.extend_from_slice(PIPELINE_DOMAIN);
        manual.push(b'[');
        manual.push(b'S');
        manual.extend_from_slice(&[1; 32]);
        manual.push(b']');
        manual.push(b'N');
        assert_eq!(D, reference(&manual));
    }

    /// Rule 34's encoding written out by hand: own hash, count, then each
    /// helper's name and hash; no helpers leaves the own hash as it was.
    #[test]
    fn rule34_the_helpers_encoding_is_pinned() {
        let own = [0x11; 32];
        assert_eq!(with_helpers(&own, &[]), own);
        let got = with_helpers(&own, &[("tax", &[0x22; 32]), ("rate", &[0x33; 32])]);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&(b"fluxio/uses/v1".len() as u64).to_le_bytes());
        bytes.extend_from_slice(b"fluxio/uses/v1");
        bytes.extend_from_slice(&own);
        bytes.extend_from_slice(&2u32.to_le_bytes());
        for (name, hash) in [("tax", [0x22; 32]), ("rate", [0x33; 32])] {
            bytes.extend_from_slice(&(name.len() as u64).to_le_bytes());
            bytes.extend_from_slice(name.as_bytes());
            bytes.extend_from_slice(&hash);
        }
        assert_eq!(got, reference(&bytes));
        let swapped = with_helpers(&own, &[("rate", &[0x33; 32]), ("tax", &[0x22; 32])]);
        assert_ne!(got, swapped, "declared order counts");
    }

    /// The bytes of every node kind, written out by hand: changing any of
    /// them changes every pipeline's version, so this must stay as it is.
    #[test]
    fn the_pipeline_encoding_is_pinned() {
        // pipeline![a, parallel![b, [c, a]], fire_and_forget![b], r => { "x" => c, "yz" => [] }]
        // (an empty route body cannot be written; the encoding allows it)
        let (a, b, c, r) = ([0xa; 32], [0xb; 32], [0xc; 32], [0xd; 32]);
        let shape = VersionHasher::pipeline()
            .seq_start()
            .stage(&a)
            .parallel(2)
            .seq_start()
            .stage(&b)
            .seq_end()
            .seq_start()
            .stage(&c)
            .stage(&a)
            .seq_end()
            .fire_and_forget(1)
            .seq_start()
            .stage(&b)
            .seq_end()
            .stage(&r)
            .routes(2)
            .route_key("x")
            .seq_start()
            .stage(&c)
            .seq_end()
            .route_key("yz")
            .seq_start()
            .seq_end()
            .seq_end();

        let mut bytes = Vec::new();
        let part = |bytes: &mut Vec<u8>, data: &[u8]| {
            bytes.extend_from_slice(&(data.len() as u64).to_le_bytes());
            bytes.extend_from_slice(data);
        };
        let stage = |bytes: &mut Vec<u8>, hash: &[u8; 32]| {
            bytes.push(b'S');
            bytes.extend_from_slice(hash);
        };
        part(&mut bytes, b"fluxio/pipeline/v1");
        bytes.push(b'[');
        stage(&mut bytes, &a);
        bytes.push(b'P');
        bytes.extend_from_slice(&2u32.to_le_bytes());
        bytes.push(b'[');
        stage(&mut bytes, &b);
        bytes.push(b']');
        bytes.push(b'[');
        stage(&mut bytes, &c);
        stage(&mut bytes, &a);
        bytes.push(b']');
        bytes.push(b'F');
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.push(b'[');
        stage(&mut bytes, &b);
        bytes.push(b']');
        stage(&mut bytes, &r);
        bytes.push(b'R');
        bytes.extend_from_slice(&2u32.to_le_bytes());
        part(&mut bytes, b"x");
        bytes.push(b'[');
        stage(&mut bytes, &c);
        bytes.push(b']');
        part(&mut bytes, b"yz");
        bytes.push(b'[');
        bytes.push(b']');
        bytes.push(b']');

        let mut auto = bytes.clone();
        auto.push(b'A');
        let mut plain = bytes;
        plain.push(b'N');
        assert_eq!(shape.finish(true), reference(&auto));
        assert_eq!(shape.finish(false), reference(&plain));
        // (also checked with Python's hashlib)
        assert_eq!(short_hex(&shape.finish(true)), "f2c3b6c7ef38");
        assert_eq!(short_hex(&shape.finish(false)), "0183895dbb63");
    }
}
