//! The pipeline version: a sha256 digest computed at compile time.
//!
//! `pipeline!` expands to a `const` that feeds the canonical encoding of the
//! pipeline's shape and the hashes of its stages (computed by `#[stage]`) into
//! [`VersionHasher`]. Because every input is a compile-time constant, the
//! digest is evaluated by the compiler: the same source gives the same version
//! on every build, machine and compiler version.
//!
//! # Canonical encoding (`fluxio/pipeline/v1`)
//!
//! The hasher is fed, in order:
//!
//! 1. the domain tag `fluxio/pipeline/v1` (length-prefixed);
//! 2. the shape, depth first, one tag byte per node:
//!    - `b'S'` then the stage's 32-byte hash (see `fluxio-macros`, `fluxio/stage/v1`);
//!    - `b'P'` (parallel) or `b'F'` (fire-and-forget parallel), the branch count
//!      as u32 little endian, then each branch as a sequence;
//!    - `b'R'` (routing block), the route count as u32 LE, then for each route the
//!      key (length-prefixed UTF-8) and its body as a sequence;
//!    - a sequence is `b'['`, its nodes, `b']'`.
//! 3. the mode: `b'A'` when auto-parallelism is on, `b'N'` when it is off (it
//!    changes the compiled program, so checkpoints of one mode must not resume
//!    in the other).
//!
//! Length prefixes are u64 little endian. The version string is the first six
//! bytes of the digest in lowercase hex (12 characters).
//!
//! This module is a small `const fn` implementation of SHA-256 (FIPS 180-4),
//! because the `sha2` crate cannot run in a `const` context; the tests check it
//! against `sha2` on many inputs.

/// The domain tag that starts every pipeline digest.
pub const PIPELINE_DOMAIN: &[u8] = b"fluxio/pipeline/v1";

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

/// A `const fn` SHA-256 hasher with the helpers of the canonical encoding.
///
/// Every method takes `self` by value and returns the updated hasher, so it
/// can be chained inside a `const` item. This is what `pipeline!` expands to;
/// it is public so the encoding can be reproduced and tested.
///
/// ```
/// use fluxio_core::version::VersionHasher;
/// const DIGEST: [u8; 32] = VersionHasher::new().update(b"abc").finalize();
/// assert_eq!(DIGEST[0], 0xba);
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

    /// Feeds one tag byte.
    #[must_use]
    pub const fn tag(self, tag: u8) -> Self {
        self.update(&[tag])
    }

    /// Feeds a u32 in little endian.
    #[must_use]
    pub const fn count(self, n: u32) -> Self {
        self.update(&n.to_le_bytes())
    }

    /// Feeds a length-prefixed byte string (u64 LE length, then the bytes).
    #[must_use]
    pub const fn part(self, data: &[u8]) -> Self {
        self.update(&(data.len() as u64).to_le_bytes()).update(data)
    }

    /// Feeds a stage node: `b'S'` and the stage's hash.
    #[must_use]
    pub const fn stage(self, hash: &[u8; 32]) -> Self {
        self.tag(b'S').update(hash)
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
            .stage(&[1; 32])
            .tag(b'N')
            .finalize();
        let mut manual = Vec::new();
        manual.extend_from_slice(&(PIPELINE_DOMAIN.len() as u64).to_le_bytes());
        manual.extend_from_slice(PIPELINE_DOMAIN);
        manual.push(b'S');
        manual.extend_from_slice(&[1; 32]);
        manual.push(b'N');
        assert_eq!(D, reference(&manual));
    }
}
