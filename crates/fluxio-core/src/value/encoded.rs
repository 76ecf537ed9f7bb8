//! [`EncodedValue`]: how a context holds a value, as its encoding.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::MAX_PAYLOAD;
use super::decode::decode_value;
use super::error::Refusal;
use super::ser::WireWriter;
use super::wire::varint_len;
use super::{MAX_DEPTH, Value, ValueError, from_encoded, tag};
use crate::error::Error;

/// A context value in its wire encoding (see the
/// [module documentation](super#wire-format)); a clone is O(1).
///
/// The bytes are what a checkpoint stores, byte for byte. A small encoding
/// (up to [`SMALL`] bytes: numbers, flags, short strings and byte strings)
/// is held in place, so a context's map node holds it directly: copying a
/// node on update copies it without an allocation or a reference count,
/// and setting it allocates nothing. A larger one is shared behind an
/// `Arc`, and a [`Value`] built from it is kept beside it when someone asks
/// for one ([`Context::value`](crate::Context::value), `iter`).
#[derive(Clone)]
pub(crate) struct EncodedValue(Repr);

#[derive(Clone)]
enum Repr {
    /// An encoding held in place.
    Small(Held),
    Shared(Arc<Inner>),
}

/// A small encoding held in place: its length, its depth, then its
/// [`SMALL`] bytes. Aligned and `Copy`, so copying a map node copies it as
/// three words.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Held([u8; SMALL + 2]);

struct Inner {
    /// The encoding, with bounded spare capacity (see [`SLACK`]).
    bytes: Vec<u8>,
    /// The deepest level of the value (the root is 0).
    depth: usize,
    value: OnceLock<Value>,
}

/// Encodings up to this size are held in place (with their length and
/// depth: 24 bytes beside the tag).
const SMALL: usize = 22;

/// The spare capacity a large encoding may keep (past it, the buffer is
/// shrunk to fit): at most 64 bytes or 1/16 of its size.
const SLACK: usize = 64;

/// Encodings up to this size are copied out of the writer's reused buffer
/// (one exact allocation); larger ones take the buffer itself.
const COPY_MAX: usize = 4096;

/// The largest buffer a thread keeps for the next encoding.
const SCRATCH_MAX: usize = 64 * 1024;

thread_local! {
    /// The writer's buffer, reused from one `set` to the next (taken while
    /// in use, so a `Serialize` impl that sets a value itself just gets a
    /// fresh buffer).
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

impl EncodedValue {
    /// Bytes a checkpoint knows to be valid (written by the writer, or
    /// checked by `decode::validate`), `depth` levels deep.
    pub(crate) fn from_valid(bytes: Box<[u8]>, depth: usize) -> Self {
        Self::from_buf(bytes.into_vec(), depth)
    }

    /// A writer's buffer, valid, `depth` levels deep: in place when small,
    /// else kept as it is unless it holds too much spare capacity.
    fn from_buf(mut bytes: Vec<u8>, depth: usize) -> Self {
        if let Some(small) = Self::small(&bytes, depth) {
            return small;
        }
        if bytes.capacity() - bytes.len() > SLACK.max(bytes.len() / 16) {
            bytes.shrink_to_fit();
        }
        Self::shared(bytes, depth)
    }

    /// A reused writer buffer's contents, valid, `depth` levels deep: in
    /// place or copied when small enough, else taken (leaving `buf` empty).
    fn from_scratch(buf: &mut Vec<u8>, depth: usize) -> Self {
        if let Some(small) = Self::small(buf, depth) {
            small
        } else if buf.len() <= COPY_MAX {
            Self::shared(buf.as_slice().to_vec(), depth)
        } else {
            Self::from_buf(std::mem::take(buf), depth)
        }
    }

    /// `bytes` held in place, when they fit.
    fn small(bytes: &[u8], depth: usize) -> Option<Self> {
        // an encoding of at most SMALL bytes nests at most SMALL levels
        let (len, depth) = (u8::try_from(bytes.len()).ok()?, u8::try_from(depth).ok()?);
        let mut held = [0u8; SMALL + 2];
        held.get_mut(2..2 + bytes.len())?.copy_from_slice(bytes);
        held[0] = len;
        held[1] = depth;
        Some(EncodedValue(Repr::Small(Held(held))))
    }

    fn shared(bytes: Vec<u8>, depth: usize) -> Self {
        EncodedValue(Repr::Shared(Arc::new(Inner {
            bytes,
            depth,
            value: OnceLock::new(),
        })))
    }

    /// `value`, encoded as it is, whatever its size and depth (the
    /// checkpoint refuses it if it is past a limit).
    pub(crate) fn from_value(value: &Value) -> Self {
        let mut w = WireWriter::new(0, u64::MAX, usize::MAX);
        // An unlimited writer refuses nothing, and a `Value` cannot misuse
        // the serializer API: nothing can fail.
        let _ = w.value(value);
        Self::from_buf(w.buf, w.deepest)
    }

    /// `bytes` read from storage: checked to be one canonical value within
    /// the limits (`decode::validate`), then kept as they are.
    pub(crate) fn from_stored(bytes: &[u8]) -> Result<Self, super::WireError> {
        let mut c = super::Cursor::new(bytes);
        let depth = super::validate(&mut c)?;
        if c.remaining() != 0 {
            return Err(super::WireError::Invalid("trailing bytes after the value"));
        }
        Ok(Self::from_valid(bytes.into(), depth))
    }

    /// The encoding.
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Small(Held(held)) => &held[2..2 + usize::from(held[0])],
            Repr::Shared(inner) => &inner.bytes,
        }
    }

    /// The deepest level of the value (0 for a scalar).
    pub(crate) fn depth(&self) -> usize {
        match &self.0 {
            Repr::Small(Held(held)) => usize::from(held[1]),
            Repr::Shared(inner) => inner.depth,
        }
    }

    /// The value: a small one decoded now, a large one decoded on first use
    /// and kept.
    pub(crate) fn value(&self) -> Cow<'_, Value> {
        match &self.0 {
            Repr::Small(_) => Cow::Owned(self.decode()),
            Repr::Shared(inner) => Cow::Borrowed(inner.value.get_or_init(|| self.decode())),
        }
    }

    /// The value, decoded now (not kept).
    pub(crate) fn decode(&self) -> Value {
        // The bytes are valid (see `from_valid`): decoding cannot fail; a
        // fluxio bug would show as this string.
        decode_value(self.bytes(), usize::MAX)
            .unwrap_or_else(|e| Value::String(format!("<undecodable value: {e}>")))
    }

    /// The value as a `T`.
    pub(crate) fn deserialize<T: DeserializeOwned>(&self) -> Result<T, ValueError> {
        let bytes = self.bytes();
        if let Some(vec) = super::fast::packed_vec::<T>(bytes) {
            return Ok(vec);
        }
        from_encoded(bytes)
    }

    /// The kind of the value ([`Value::kind`]).
    pub(crate) fn kind(&self) -> &'static str {
        match self.bytes().first() {
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

    /// The spare capacity the encoding's buffer holds (none in place).
    #[cfg(test)]
    fn spare(&self) -> usize {
        match &self.0 {
            Repr::Small(_) => 0,
            Repr::Shared(inner) => inner.bytes.capacity() - inner.bytes.len(),
        }
    }

    /// Whether two handles share one encoding (a cheap equality; small
    /// encodings, held in place, compare their bytes).
    pub(crate) fn ptr_eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Shared(a), Repr::Shared(b)) => Arc::ptr_eq(a, b),
            (Repr::Small(_), Repr::Small(_)) => self.bytes() == other.bytes(),
            _ => false,
        }
    }
}

impl PartialEq for EncodedValue {
    /// Equal encodings: equal values (the encoding is canonical).
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            // made zeroed, then the length and the bytes: equal encodings
            // have equal lengths and equal blocks of bytes (compared as
            // words; the depth byte is left out)
            (Repr::Small(Held(a)), Repr::Small(Held(b))) => a[0] == b[0] && a[2..] == b[2..],
            _ => self.ptr_eq(other) || self.bytes() == other.bytes(),
        }
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
        match &self.0 {
            Repr::Shared(inner) => match inner.value.get() {
                Some(v) => fmt::Display::fmt(v, f),
                None => fmt::Display::fmt(&self.decode(), f),
            },
            Repr::Small(_) => fmt::Display::fmt(&self.decode(), f),
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
    let mut w = WireWriter::new(key_size(key), limit, MAX_DEPTH);
    w.buf = SCRATCH.take();
    w.buf.clear();
    let encoded = match value.serialize(&mut w) {
        Ok(()) => Ok(EncodedValue::from_scratch(&mut w.buf, w.deepest)),
        Err(e) => Err(refusal_error(key, e)),
    };
    if w.buf.capacity() <= SCRATCH_MAX {
        w.buf.clear();
        SCRATCH.set(w.buf);
    }
    encoded
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Context;
    use crate::store::Checkpoint;
    use crate::value::roundtrip::{arbitrary, nested_some};
    use crate::value::{Cursor, Packed, validate};

    /// Values growing with `n`, one kind per way of reaching the limit.
    fn grow(kind: usize, n: usize) -> Value {
        match kind {
            0 => Value::Seq(vec![Value::Unit; n]),
            1 => Value::Seq(vec![Value::U64(u64::MAX); n]),
            2 => Value::Map(
                (0..n as u64)
                    .map(|i| (Value::U64(i), Value::Bool(true)))
                    .collect(),
            ),
            3 => Value::String("é".repeat(n / 2) + &"x".repeat(n % 2)),
            4 => Value::Bytes(vec![7; n]),
            5 => Value::Enum {
                variant: "v".repeat(n),
                value: Box::new(Value::I128(i128::MIN)),
            },
            6 => Value::Packed(Packed::U8(vec![1; n + 1])),
            7 => Value::Packed(Packed::F32(vec![0.5; n + 1])),
            8 => Value::Seq((0..n).map(|i| Value::String("s".repeat(i % 70))).collect()),
            _ => Value::Some(Box::new(Value::Map(
                (0..n as i64)
                    .map(|i| {
                        (
                            Value::I64(-i),
                            Value::Packed(Packed::U16(vec![3; 1 + (i % 5) as usize])),
                        )
                    })
                    .collect(),
            ))),
        }
    }

    fn refused_at(key: &str, value: &Value, limit: u64) -> Option<(u64, u64)> {
        match encode_within(key, value, limit) {
            Ok(_) => None,
            Err(Error::ValueTooLarge {
                key: k,
                size,
                limit,
            }) => {
                assert_eq!(k, key);
                Some((size, limit))
            }
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn rule17_the_size_limit_is_the_encodings_size_at_every_boundary() {
        for limit in [40u64, 100, 333, 1000, 4096] {
            for kind in 0..10 {
                let key = format!("key-{kind}");
                let mut n = 0;
                while refused_at(&key, &grow(kind, n + 1), limit).is_none() {
                    n += 1;
                }
                // The largest accepted: key and encoding within the limit,
                // its bytes canonical, read back by a checkpoint.
                let at = encode_within(&key, &grow(kind, n), limit).expect("at the limit");
                let size = key_size(&key) + at.bytes().len() as u64;
                assert!(size <= limit, "kind {kind}, n {n}: {size} > {limit}");
                assert_eq!(at.bytes(), EncodedValue::from_value(&grow(kind, n)).bytes());
                // One more is refused, and what it would take is past the limit.
                let past = EncodedValue::from_value(&grow(kind, n + 1));
                let (said, l) = refused_at(&key, &grow(kind, n + 1), limit).expect("refused");
                assert_eq!(l, limit);
                assert!(said > limit, "kind {kind}: {said}");
                assert!(
                    key_size(&key) + past.bytes().len() as u64 > limit,
                    "kind {kind}, n {n}, limit {limit}: said {said}, takes {}",
                    key_size(&key) + past.bytes().len() as u64
                );
                assert!(
                    said <= key_size(&key) + past.bytes().len() as u64 + 16,
                    "kind {kind}"
                );
                // check_entry (what a checkpoint asks of set_value's values)
                // draws the same line.
                assert!(check_entry(&key, &at, limit).is_ok());
                assert!(matches!(
                    check_entry(&key, &past, limit),
                    Err(Error::ValueTooLarge { .. })
                ));
            }
        }
    }

    #[test]
    fn rule17_everything_set_accepts_survives_a_checkpoint() {
        let mut seed = 8;
        let mut ctx = Context::new();
        for i in 0..3000 {
            let value = arbitrary(&mut seed, 1 + i % 5);
            let key = format!("k{}", i % 97);
            // through serde, as any user value is set
            let next = ctx.clone().set(key.clone(), &value).expect("accepted");
            let entry = next.encoded(&key).expect("set");
            let mut c = Cursor::new(entry.bytes());
            assert_eq!(validate(&mut c), Ok(entry.depth()), "{value}");
            assert_eq!(c.remaining(), 0);
            assert_eq!(next.value(&key).as_deref(), Some(&value), "exact");
            assert_eq!(next.get::<Value>(&key).ok().as_ref(), Some(&value));
            ctx = next;
            if i % 300 == 299 {
                let cp = Checkpoint::new("r", "v", 1, "s", ctx.snapshot());
                let bytes = cp.to_bytes().expect("encodes");
                let back = Checkpoint::from_bytes("r", &bytes).expect("decodes");
                assert_eq!(back, cp);
                assert_eq!(back.to_bytes().expect("re-encodes"), bytes);
                for (k, v) in ctx.iter() {
                    assert_eq!(back.context.get(k), Some(v));
                }
            }
        }
    }

    #[test]
    fn rule17_the_depth_limit_is_the_same_at_set_at_save_and_at_load() {
        let at = nested_some(MAX_DEPTH);
        let ctx = Context::new().set("k", &at).expect("MAX_DEPTH is allowed");
        assert_eq!(ctx.encoded("k").map(EncodedValue::depth), Some(MAX_DEPTH));
        let cp = Checkpoint::new("r", "v", 1, "s", ctx.snapshot());
        let back = Checkpoint::from_bytes("r", &cp.to_bytes().expect("encodes")).expect("decodes");
        assert_eq!(back.context.get("k").as_deref(), Some(&at));
        match Context::new().set("k", nested_some(MAX_DEPTH + 1)) {
            Err(Error::ValueTooDeep { key, limit }) => {
                assert_eq!((key.as_str(), limit as usize), ("k", MAX_DEPTH));
            }
            other => panic!("{other:?}"),
        }
        // A non-empty sequence at MAX_DEPTH puts its elements one deeper,
        // packed or not; an empty one is fine.
        let seq_at = |inner: Value| {
            let mut v = inner;
            for _ in 0..MAX_DEPTH {
                v = Value::Some(Box::new(v));
            }
            v
        };
        for (inner, ok) in [
            (Value::Seq(vec![]), true),
            (Value::Seq(vec![Value::Unit]), false),
            (Value::Packed(Packed::U8(vec![1])), false),
            (
                Value::Enum {
                    variant: "E".into(),
                    value: Box::new(Value::Unit),
                },
                false,
            ),
        ] {
            let value = seq_at(inner);
            let set = Context::new().set("k", &value);
            assert_eq!(set.is_ok(), ok, "{value}");
            let saved = Checkpoint::new(
                "r",
                "v",
                1,
                "s",
                Context::new().set_value("k", value.clone()).snapshot(),
            )
            .to_bytes();
            assert_eq!(saved.is_ok(), ok, "{value}");
            let encoded = EncodedValue::from_value(&value);
            let mut c = Cursor::new(encoded.bytes());
            assert_eq!(validate(&mut c).is_ok(), ok, "{value}");
        }
    }

    /// A `Serialize` impl that sets a value itself while it is being
    /// written (it finds the reused buffer taken, and gets its own).
    struct SetsInside(usize);

    impl Serialize for SetsInside {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let inner = Context::new()
                .set("inner", vec![9u8; self.0])
                .map_err(serde::ser::Error::custom)?;
            let len = inner.get::<Vec<u8>>("inner").map_or(0, |v| v.len());
            s.serialize_u64(len as u64)
        }
    }

    #[test]
    fn rule17_encodings_of_every_size_are_exact_through_the_reused_buffer() {
        // around the inline size, the copy limit and the kept-buffer limit,
        // large then small (a large buffer is not handed to a small value)
        let sizes = [
            0, 1, 22, 23, 24, 25, 4094, 4095, 4096, 4097, 70_000, 3, 65_536, 5,
        ];
        for n in sizes {
            for value in [Value::Bytes(vec![(n % 251) as u8; n]), grow(3, n)] {
                let ctx = Context::new().set("k", &value).expect("set");
                let entry = ctx.encoded("k").expect("present");
                assert_eq!(entry.bytes(), EncodedValue::from_value(&value).bytes());
                assert!(entry.spare() <= SLACK.max(n / 16));
                assert_eq!(ctx.value("k").as_deref(), Some(&value), "{n}");
            }
        }
        // a refused value leaves the buffer usable
        assert!(encode_within("k", &grow(4, 100), 40).is_err());
        let ok = Context::new().set("k", "after").expect("set");
        assert_eq!(ok.get::<String>("k").ok().as_deref(), Some("after"));
        // a value that sets a context while it is written
        for n in [3, 5000] {
            let ctx = Context::new().set("outer", SetsInside(n)).expect("set");
            assert_eq!(ctx.get::<u64>("outer").ok(), Some(n as u64));
        }
    }
}
