//! Cache keys: a stage's name and a SHA-256 digest of its hash and the
//! context's data.

use std::fmt;

use bincode::error::EncodeError;
use sha2::{Digest as _, Sha256};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::stage::Stage;

/// The domain tag that starts every cache key digest.
pub const CACHE_DOMAIN: &[u8] = b"fluxio/cache/v2";

/// The key of one cached call: the stage's name and a sha256 digest.
///
/// # Digest (`fluxio/cache/v2`)
///
/// SHA-256 of, in order:
/// 1. the domain tag `fluxio/cache/v2`, length-prefixed (u64 little endian);
/// 2. the stage's name, length-prefixed;
/// 3. the stage's 32-byte hash ([`StageMeta::hash`](crate::StageMeta::hash),
///    so editing the stage changes every key);
/// 4. the context's data in its checkpoint encoding: the bincode (standard
///    configuration) encoding of its [`Snapshot`](crate::Snapshot), i.e.
///    the key count, then each key and its value's encoding (the
///    [wire format](crate::value#wire-format), copied as the context holds
///    it) in key order.
///
/// (`v1` hashed the values' format 2 encoding; `v2` came with format 3's
/// packed sequences and canonical map order.)
///
/// Only the data counts: the written set and the branch name do not. The
/// same data gives the same key in every process and on every machine, so a
/// shared store serves several workers.
///
/// ```
/// use fluxio_core::middleware::CacheKey;
/// use fluxio_core::Context;
/// # fn main() -> fluxio_core::Result<()> {
/// let key = |ctx: &Context| CacheKey::from_parts("enrich", &[7; 32], ctx);
/// let a = Context::new().set("x", 1)?.set("y", 2)?;
/// let b = Context::new().set("y", 2)?.set("x", 1)?;
/// assert_eq!(key(&a)?, key(&b)?);
/// assert_ne!(key(&a)?, key(&a.clone().set("x", 2)?)?);
/// assert_eq!(key(&a)?.stage(), "enrich");
/// assert_eq!(key(&a)?.to_string().len(), "enrich/".len() + 64);
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
    /// [`Error::Encoding`] (its source the encoder's error) when a value is
    /// nested too deeply to be encoded (see
    /// [`MAX_DEPTH`](crate::value::MAX_DEPTH)); such a call is not cached.
    pub fn new(stage: &Stage, ctx: &Context) -> Result<Self> {
        Self::from_parts(stage.name(), &stage.meta().hash, ctx)
    }

    /// The key of a call of the stage called `stage`, whose hash is `hash`,
    /// on `ctx`.
    ///
    /// # Errors
    /// As [`new`](CacheKey::new).
    pub fn from_parts(stage: &'static str, hash: &[u8; 32], ctx: &Context) -> Result<Self> {
        let mut hasher = HashWriter(Sha256::new());
        hasher.part(CACHE_DOMAIN);
        hasher.part(stage.as_bytes());
        hasher.0.update(hash);
        bincode::encode_into_writer(ctx.snapshot(), &mut hasher, bincode::config::standard())
            .map_err(|e| Error::Encoding {
                what: "hash the context for a cache key",
                source: Box::new(e),
            })?;
        Ok(CacheKey {
            stage,
            digest: hasher.0.finalize().into(),
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

/// Feeds bincode's output into a hasher, as it is written (the context is
/// never encoded into a buffer first).
struct HashWriter(Sha256);

impl HashWriter {
    /// A length-prefixed byte string: u64 little-endian length, then the
    /// bytes (the framing of [`VersionHasher::part`](crate::version::VersionHasher::part)).
    fn part(&mut self, bytes: &[u8]) {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }
}

impl bincode::enc::write::Writer for &mut HashWriter {
    fn write(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        self.0.update(bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::VersionHasher;

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
                .part(b"fluxio/cache/v2")
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
            "enrich/5bb924236cc6413de802ad0e261026f1c18ad9b3783d7f28d41fb529ccb3d877"
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
            key("a", 0, &ctx.clone().set("x", 1u8).expect("ok")),
            "same number, other type"
        );
        assert_ne!(
            base,
            key("a", 0, &ctx.clone().set("x", "1").expect("ok")),
            "same digits, other type"
        );
        assert_eq!(base, key("a", 0, &ctx.fork("branch")));
        assert_eq!(base, key("a", 0, &ctx.clone().clear_written()));
    }

    #[test]
    fn a_key_is_the_sha256_of_its_framed_bytes_however_long_the_context() {
        // sha2 fed as bincode writes, against the const hasher fed the whole
        // encoding at once: values long enough to span many 64-byte blocks.
        let ctx = (0..40usize)
            .try_fold(Context::new(), |c, i| {
                c.set(format!("key-{i:02}"), "x".repeat(i * 97))
            })
            .and_then(|c| c.set("bytes", vec![0xA5u8; 4096]))
            .expect("serializable");
        let encoded =
            bincode::encode_to_vec(ctx.snapshot(), bincode::config::standard()).expect("encodable");
        assert!(encoded.len() > 80_000, "{} bytes", encoded.len());
        let expected = VersionHasher::new()
            .part(CACHE_DOMAIN)
            .part(b"enrich")
            .update(&[3; 32])
            .update(&encoded)
            .finalize();
        let key = CacheKey::from_parts("enrich", &[3; 32], &ctx).expect("encodable");
        assert_eq!(key.digest(), &expected);
    }
}
