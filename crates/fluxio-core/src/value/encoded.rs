//! [`EncodedValue`]: how a context holds a value, as its encoding.

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::decode::decode_value;
use super::error::Refusal;
use super::ser::Writer;
use super::wire::varint_len;
use super::{MAX_DEPTH, Value, ValueError, from_encoded, tag};
use crate::error::Error;
use crate::store::MAX_PAYLOAD;

/// A context value in its wire encoding (see the
/// [module documentation](super#wire-format)), shared: a clone is O(1).
///
/// The bytes are what a checkpoint stores, byte for byte. A [`Value`] is
/// built from them only when someone asks for one
/// ([`Context::value`](crate::Context::value), `iter`), and then kept beside
/// them.
#[derive(Clone)]
pub(crate) struct EncodedValue(Arc<Inner>);

struct Inner {
    bytes: Box<[u8]>,
    /// The deepest level of the value (the root is 0).
    depth: usize,
    value: OnceLock<Value>,
}

impl EncodedValue {
    /// Bytes a checkpoint knows to be valid (written by the writer, or
    /// checked by `decode::validate`), `depth` levels deep.
    pub(crate) fn from_valid(bytes: Box<[u8]>, depth: usize) -> Self {
        EncodedValue(Arc::new(Inner {
            bytes,
            depth,
            value: OnceLock::new(),
        }))
    }

    /// `value`, encoded as it is, whatever its size and depth (the
    /// checkpoint refuses it if it is past a limit).
    pub(crate) fn from_value(value: &Value) -> Self {
        let mut w = Writer::new(0, u64::MAX, usize::MAX);
        // An unlimited writer refuses nothing, and a `Value` cannot misuse
        // the serializer API: nothing can fail.
        let _ = w.value(value);
        Self::from_valid(w.buf.into_boxed_slice(), w.deepest)
    }

    /// The encoding.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0.bytes
    }

    /// The deepest level of the value (0 for a scalar).
    pub(crate) fn depth(&self) -> usize {
        self.0.depth
    }

    /// The value, decoded on first use and kept.
    pub(crate) fn value(&self) -> &Value {
        self.0.value.get_or_init(|| self.decode())
    }

    /// The value, decoded now (not kept).
    pub(crate) fn decode(&self) -> Value {
        // The bytes are valid (see `from_valid`): decoding cannot fail; a
        // fluxio bug would show as this string.
        decode_value(&self.0.bytes, usize::MAX)
            .unwrap_or_else(|e| Value::String(format!("<undecodable value: {e}>")))
    }

    /// The value as a `T`.
    pub(crate) fn deserialize<T: DeserializeOwned>(&self) -> Result<T, ValueError> {
        from_encoded(&self.0.bytes)
    }

    /// The kind of the value ([`Value::kind`]).
    pub(crate) fn kind(&self) -> &'static str {
        match self.0.bytes.first() {
            Some(&tag::UNIT) => "unit",
            Some(&tag::BOOL) => "bool",
            Some(&tag::I64) => "i64",
            Some(&tag::U64) => "u64",
            Some(&tag::I128) => "i128",
            Some(&tag::U128) => "u128",
            Some(&tag::F64) => "f64",
            Some(&tag::CHAR) => "char",
            Some(&tag::STRING) => "string",
            Some(&tag::BYTES) => "bytes",
            Some(&tag::NONE) => "none",
            Some(&tag::SOME) => "some",
            Some(&tag::MAP) => "map",
            Some(&tag::ENUM) => "enum",
            _ => "seq",
        }
    }

    /// Whether two handles share one encoding (a cheap equality).
    pub(crate) fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl PartialEq for EncodedValue {
    /// Equal encodings: equal values (the encoding is canonical).
    fn eq(&self, other: &Self) -> bool {
        self.ptr_eq(other) || self.0.bytes == other.0.bytes
    }
}

impl Eq for EncodedValue {}

impl fmt::Debug for EncodedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for EncodedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.value.get() {
            Some(v) => fmt::Display::fmt(v, f),
            None => fmt::Display::fmt(&self.decode(), f),
        }
    }
}

/// What a key costs in a checkpoint's context: its length and its bytes.
pub(crate) fn key_size(key: &str) -> u64 {
    (varint_len(key.len() as u64) + key.len()) as u64
}

/// Encodes `value` for storing under `key` in a context, refusing it past
/// the limits ([`MAX_DEPTH`], and [`MAX_PAYLOAD`] bytes for the key and the
/// value together) as soon as the writer reaches them.
///
/// # Errors
/// [`Error::ValueTooDeep`], [`Error::ValueTooLarge`] or
/// [`Error::Serialize`], naming `key`.
pub(crate) fn encode_entry<T: Serialize + ?Sized>(
    key: &str,
    value: &T,
) -> crate::Result<EncodedValue> {
    encode_within(key, value, MAX_PAYLOAD as u64)
}

/// [`encode_entry`] within `limit` bytes (the tests try small limits).
pub(crate) fn encode_within<T: Serialize + ?Sized>(
    key: &str,
    value: &T,
    limit: u64,
) -> crate::Result<EncodedValue> {
    let mut w = Writer::new(key_size(key), limit, MAX_DEPTH);
    value.serialize(&mut w).map_err(|e| refusal_error(key, e))?;
    Ok(EncodedValue::from_valid(
        w.buf.into_boxed_slice(),
        w.deepest,
    ))
}

/// The writer's error as the context reports it, naming `key`.
pub(crate) fn refusal_error(key: &str, e: ValueError) -> Error {
    match e.refusal {
        Some(Refusal::TooLarge { size, limit }) => Error::ValueTooLarge {
            key: key.to_owned(),
            size,
            limit,
        },
        Some(Refusal::TooDeep) => Error::ValueTooDeep {
            key: key.to_owned(),
            limit: MAX_DEPTH as u32,
        },
        None => Error::Serialize {
            key: key.to_owned(),
            source: Box::new(e),
        },
    }
}

/// Refuses an entry past the limits (a value given as a [`Value`], encoded
/// without them): the check a checkpoint makes of every entry.
///
/// # Errors
/// [`Error::ValueTooDeep`] or [`Error::ValueTooLarge`] naming `key`.
pub(crate) fn check_entry(key: &str, value: &EncodedValue, limit: u64) -> crate::Result<u64> {
    if value.depth() > MAX_DEPTH {
        return Err(Error::ValueTooDeep {
            key: key.to_owned(),
            limit: MAX_DEPTH as u32,
        });
    }
    let size = key_size(key) + value.bytes().len() as u64;
    if size > limit {
        return Err(Error::ValueTooLarge {
            key: key.to_owned(),
            size,
            limit,
        });
    }
    Ok(size)
}
