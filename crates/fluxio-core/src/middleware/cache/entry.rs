//! Cache entries: a stage's writes or a router's decision, and their byte
//! encoding.

use bincode::error::{DecodeError, EncodeError};
use bincode::{Decode, Encode};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::stage::Output;
use crate::value::Value;

/// One cached result: a stage's writes, or a router's decision.
///
/// Cloning is cheap (the values are shared). [`to_bytes`](CacheEntry::to_bytes)
/// and [`from_bytes`](CacheEntry::from_bytes) give stores that keep bytes a
/// stable encoding.
///
/// ```
/// use fluxio_core::middleware::CacheEntry;
/// # fn main() -> fluxio_core::Result<()> {
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
            writes = match out.encoded(key) {
                Some(v) => writes.set_encoded(key.to_owned(), v.clone()),
                None => writes.remove(key),
            };
        }
        CacheEntry(Cached::Writes(writes))
    }

    /// The writes of a stage called on a context with an empty written set:
    /// `out`'s written keys applied to an empty context.
    pub(super) fn stage_writes(out: Context) -> Result<Self> {
        Ok(CacheEntry(Cached::Writes(Context::merge(
            &Context::new(),
            &[out],
        )?)))
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
    /// [`Error::Encoding`] (its source the encoder's error) when a value is
    /// nested too deeply to be encoded.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        bincode::encode_to_vec(self, bincode::config::standard()).map_err(|e| Error::Encoding {
            what: "encode a cache entry",
            source: Box::new(e),
        })
    }

    /// Decodes bytes written by [`to_bytes`](CacheEntry::to_bytes).
    ///
    /// # Errors
    /// [`Error::Encoding`] (its source the decoder's error) when the bytes
    /// are not such an encoding (corrupt, truncated, or followed by extra
    /// bytes).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::decode_all(bytes).map_err(|e| Error::Encoding {
            what: "decode a cache entry",
            source: Box::new(e),
        })
    }

    fn decode_all(bytes: &[u8]) -> Result<Self, DecodeError> {
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
                    // `Option<Value>`: the value's encoding, copied
                    match writes.encoded(key) {
                        Some(v) if v.depth() > crate::value::MAX_DEPTH => {
                            return Err(EncodeError::OtherString(format!(
                                "the value of `{key}` is nested deeper than MAX_DEPTH ({})",
                                crate::value::MAX_DEPTH
                            )));
                        }
                        Some(v) => {
                            1u8.encode(e)?;
                            bincode::enc::write::Writer::write(e.writer(), v.bytes())?;
                        }
                        None => 0u8.encode(e)?,
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn byte_errors_keep_the_bincode_error_as_their_source() {
        let err = CacheEntry::from_bytes(&[9]).expect_err("no such tag");
        assert!(matches!(
            err,
            Error::Encoding {
                what: "decode a cache entry",
                ..
            }
        ));
        let source = std::error::Error::source(&err).expect("a source");
        assert!(
            matches!(
                source.downcast_ref::<DecodeError>(),
                Some(DecodeError::UnexpectedVariant { found: 9, .. })
            ),
            "{source:?}"
        );
        let bytes = CacheEntry::route(crate::Route::to("r"))
            .to_bytes()
            .expect("encodable");
        let err = CacheEntry::from_bytes(&[bytes.as_slice(), &[0]].concat()).expect_err("extra");
        let message = err.to_string();
        assert!(
            message.starts_with("cannot decode a cache entry: ")
                && message.contains("trailing bytes after a cache entry"),
            "{message}"
        );

        let mut deep = Value::Unit;
        for _ in 0..=crate::value::MAX_DEPTH {
            deep = Value::Some(Box::new(deep));
        }
        let err = CacheEntry::writes(&Context::new().set_value("deep", deep))
            .to_bytes()
            .expect_err("too deep");
        assert!(matches!(
            err,
            Error::Encoding {
                what: "encode a cache entry",
                ..
            }
        ));
        let source = std::error::Error::source(&err).expect("a source");
        assert!(source.downcast_ref::<EncodeError>().is_some(), "{source:?}");
    }
}
