//! A self-describing value tree for the pipeline context.
//!
//! The context stores values of arbitrary serde types. Checkpoints are encoded
//! with bincode 2, which cannot decode self-describing data (it has no
//! `deserialize_any`), so the context keeps every entry as a [`Value`]:
//!
//! * on write, a user value is converted once with [`to_value`] (a hand-written
//!   [`serde::Serializer`] producing a [`Value`]);
//! * on read, it is converted back with [`from_value`] (a borrowing
//!   [`serde::Deserializer`] implemented for `&Value`);
//! * [`Value`] itself is persisted with bincode's *native* [`bincode::Encode`] /
//!   [`bincode::Decode`] traits: one tag byte per variant followed by bincode's
//!   own encoding of the payload.
//!
//! The round trip `T -> Value -> bytes -> Value -> T` is lossless for every type
//! of the serde data model (128-bit integers, `-0.0` and NaN payloads,
//! `Option<Option<T>>`, byte buffers, maps with non-string keys, all enum
//! variant kinds...). Decoding untrusted or corrupt bytes never panics: the
//! nesting depth is bounded by [`MAX_DEPTH`], unknown tags are rejected and
//! buffers grow with the input actually read rather than with the lengths the
//! input claims.
//!
//! ## Wire format
//!
//! | tag | variant  | payload                                   |
//! |-----|----------|-------------------------------------------|
//! | 0   | `Unit`   | —                                         |
//! | 1   | `Bool`   | `bool`                                    |
//! | 2   | `I64`    | `i64`                                     |
//! | 3   | `U64`    | `u64`                                     |
//! | 4   | `I128`   | `i128`                                    |
//! | 5   | `U128`   | `u128`                                    |
//! | 6   | `F64`    | `f64` (raw IEEE-754 bits)                 |
//! | 7   | `Char`   | `char`                                    |
//! | 8   | `String` | `String` (length + UTF-8 bytes)           |
//! | 9   | `Bytes`  | `Vec<u8>` (length + bytes)                |
//! | 10  | `None`   | —                                         |
//! | 11  | `Some`   | a value                                   |
//! | 12  | `Seq`    | length (`u64`) + values                   |
//! | 13  | `Map`    | length (`u64`) + key/value pairs, sorted  |
//! | 14  | `Enum`   | variant name (`String`) + a value         |
//!
//! Integer encodings and endianness follow the bincode configuration in use.
//! The tags are part of the checkpoint format and must never be renumbered.
//!
//! ## Limits
//!
//! A checkpoint must be readable by the decoder that reads it back, so a
//! context value must stay within what that decoder accepts:
//!
//! * **depth**: at most [`MAX_DEPTH`] (128) levels of `Some`, sequences, maps
//!   and enums (a struct is a map, so a field of a struct is one level down);
//! * **size**: the decoder reads at most
//!   [`MAX_PAYLOAD`] (1 GiB) per checkpoint, and it
//!   budgets what it builds, not just the bytes it reads: every element of a
//!   sequence costs `size_of::<Value>()` (32) bytes of that budget, every map
//!   entry twice that, a string or byte buffer its length plus 8, an integer
//!   its width. So a `Vec<u8>` (a sequence, one `Value` per byte) holds at most
//!   about 2<sup>25</sup> elements (32 MiB); store large binary data with
//!   `serde_bytes` (one byte per byte), or outside the context.
//!
//! [`Context::set`](crate::Context::set) (and [`ctx!`](crate::ctx),
//! [`Context::update`](crate::Context::update)) refuse a value past either
//! limit with [`Error::ValueTooDeep`] or [`Error::ValueTooLarge`], naming the
//! key, on every store alike; [`to_context_value`] and
//! [`check_context_value`] are the same checks for other callers.
//! [`Checkpoint::to_bytes`](crate::store::Checkpoint::to_bytes) checks the
//! whole checkpoint the same way, so a checkpoint it encodes always decodes.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::collections::btree_map;
use std::fmt;
use std::hash::{Hash, Hasher};

use bincode::de::read::Reader;
use bincode::de::{Decode, Decoder};
use bincode::enc::{Encode, Encoder};
use bincode::error::{AllowedEnumVariants, DecodeError, EncodeError};
use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeSeed, EnumAccess, MapAccess, SeqAccess, Unexpected, VariantAccess, Visitor,
};
use serde::ser::{self, Serialize, SerializeMap as _};

use crate::error::Error;
use crate::store::MAX_PAYLOAD;

/// Maximum nesting depth of a [`Value`] accepted by the bincode encoder and
/// decoder, and by [`Context::set`](crate::Context::set).
///
/// The root value is at depth 0 and every `Some`, `Seq`, `Map` or `Enum`
/// increases the depth of its children by one; a value nested deeper than
/// `MAX_DEPTH` is rejected with an error (instead of overflowing the stack on
/// corrupt input): [`Error::ValueTooDeep`] when it is set on a context.
pub const MAX_DEPTH: usize = 128;

/// [`MAX_PAYLOAD`] as the `u64` sizes are counted in.
const MAX_PAYLOAD_U64: u64 = MAX_PAYLOAD as u64;

/// What the decoder charges before the first item of a top-level container:
/// its key's length (8), the value's tag (1) and the container's length (8).
const CONTAINER_FLOOR: u64 = 8 + 1 + 8;

/// What the decoder charges per sequence element while reading a sequence.
const SEQ_SLOT: usize = size_of::<Value>();

/// What the decoder charges per map entry while reading a map.
const MAP_SLOT: usize = size_of::<(Value, Value)>();

/// Upper bound on capacities pre-allocated from lengths read from untrusted
/// input; containers grow beyond it only as elements are actually decoded.
const PREALLOC_LIMIT: usize = 256;

/// Largest step by which a byte buffer grows while decoding, when the reader
/// cannot show whether the claimed bytes are there.
const BYTE_CHUNK: usize = 64 * 1024;

/// Smallest such step.
const FIRST_CHUNK: usize = 256;

/// Private newtype-struct name used by `impl Serialize for Value` so that
/// [`to_value`] can rebuild a [`Value::Enum`] exactly. Every other serializer
/// sees an ordinary (transparent) newtype struct wrapping a one-entry map.
const ENUM_TOKEN: &str = "$fluxio_core::value::Enum";

/// Private newtype-struct name used by `impl Deserialize for Value` so that
/// [`from_value`] can hand a [`Value::Enum`] over as an enum. Every other
/// deserializer sees an ordinary (transparent) newtype struct.
const VALUE_TOKEN: &str = "$fluxio_core::value::Value";

/// Wire tags, one per variant, in declaration order (also the order used by
/// `Ord` between different variants).
mod tag {
    pub(super) const UNIT: u8 = 0;
    pub(super) const BOOL: u8 = 1;
    pub(super) const I64: u8 = 2;
    pub(super) const U64: u8 = 3;
    pub(super) const I128: u8 = 4;
    pub(super) const U128: u8 = 5;
    pub(super) const F64: u8 = 6;
    pub(super) const CHAR: u8 = 7;
    pub(super) const STRING: u8 = 8;
    pub(super) const BYTES: u8 = 9;
    pub(super) const NONE: u8 = 10;
    pub(super) const SOME: u8 = 11;
    pub(super) const SEQ: u8 = 12;
    pub(super) const MAP: u8 = 13;
    pub(super) const ENUM: u8 = 14;
}

/// A value of the serde data model, as stored in the pipeline context.
///
/// Equality, ordering and hashing are structural and total: different
/// variants never compare equal (`I64(1) != U64(1)`), and floats are compared
/// with [`f64::total_cmp`] and hashed by their bits, so `NaN == NaN` when the
/// bits are identical and `-0.0 != 0.0`. This makes `Value` usable as a
/// [`BTreeMap`] or hash-map key.
#[derive(Clone, Debug)]
pub enum Value {
    /// `()` and unit structs.
    Unit,
    /// A boolean.
    Bool(bool),
    /// A signed integer (`i8` to `i64`).
    I64(i64),
    /// An unsigned integer (`u8` to `u64`).
    U64(u64),
    /// A 128-bit signed integer.
    I128(i128),
    /// A 128-bit unsigned integer.
    U128(u128),
    /// A float; `f32` is widened losslessly.
    F64(f64),
    /// A character.
    Char(char),
    /// A UTF-8 string.
    String(String),
    /// A byte buffer (`serialize_bytes`, e.g. through `serde_bytes`).
    Bytes(Vec<u8>),
    /// `Option::None`.
    None,
    /// `Option::Some`; nesting keeps `Option<Option<T>>` exact.
    Some(Box<Value>),
    /// Sequences, tuples and tuple structs.
    Seq(Vec<Value>),
    /// Maps (with keys of any type) and structs (keys are
    /// `Value::String(field_name)`).
    Map(BTreeMap<Value, Value>),
    /// An enum variant.
    Enum {
        /// The variant name.
        variant: String,
        /// `Unit` for unit variants, the inner value for newtype variants,
        /// `Seq` for tuple variants and `Map` for struct variants.
        value: Box<Value>,
    },
}

impl Value {
    /// A short name of the variant, for error messages: `"unit"`, `"bool"`,
    /// `"i64"`, `"u64"`, `"i128"`, `"u128"`, `"f64"`, `"char"`, `"string"`,
    /// `"bytes"`, `"none"`, `"some"`, `"seq"`, `"map"` or `"enum"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Unit => "unit",
            Value::Bool(_) => "bool",
            Value::I64(_) => "i64",
            Value::U64(_) => "u64",
            Value::I128(_) => "i128",
            Value::U128(_) => "u128",
            Value::F64(_) => "f64",
            Value::Char(_) => "char",
            Value::String(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::None => "none",
            Value::Some(_) => "some",
            Value::Seq(_) => "seq",
            Value::Map(_) => "map",
            Value::Enum { .. } => "enum",
        }
    }

    /// The wire tag of the variant.
    fn tag(&self) -> u8 {
        match self {
            Value::Unit => tag::UNIT,
            Value::Bool(_) => tag::BOOL,
            Value::I64(_) => tag::I64,
            Value::U64(_) => tag::U64,
            Value::I128(_) => tag::I128,
            Value::U128(_) => tag::U128,
            Value::F64(_) => tag::F64,
            Value::Char(_) => tag::CHAR,
            Value::String(_) => tag::STRING,
            Value::Bytes(_) => tag::BYTES,
            Value::None => tag::NONE,
            Value::Some(_) => tag::SOME,
            Value::Seq(_) => tag::SEQ,
            Value::Map(_) => tag::MAP,
            Value::Enum { .. } => tag::ENUM,
        }
    }

    /// This value as serde's description of an unexpected input.
    fn unexpected(&self) -> Unexpected<'_> {
        match self {
            Value::Unit => Unexpected::Unit,
            Value::Bool(v) => Unexpected::Bool(*v),
            Value::I64(v) => Unexpected::Signed(*v),
            Value::U64(v) => Unexpected::Unsigned(*v),
            Value::I128(_) => Unexpected::Other("i128"),
            Value::U128(_) => Unexpected::Other("u128"),
            Value::F64(v) => Unexpected::Float(*v),
            Value::Char(v) => Unexpected::Char(*v),
            Value::String(v) => Unexpected::Str(v),
            Value::Bytes(v) => Unexpected::Bytes(v),
            Value::None | Value::Some(_) => Unexpected::Option,
            Value::Seq(_) => Unexpected::Seq,
            Value::Map(_) => Unexpected::Map,
            Value::Enum { .. } => Unexpected::Enum,
        }
    }
}

// ---------------------------------------------------------------------------
// Equality, ordering, hashing
// ---------------------------------------------------------------------------

impl Ord for Value {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Value::Unit, Value::Unit) | (Value::None, Value::None) => Ordering::Equal,
            (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
            (Value::I64(a), Value::I64(b)) => a.cmp(b),
            (Value::U64(a), Value::U64(b)) => a.cmp(b),
            (Value::I128(a), Value::I128(b)) => a.cmp(b),
            (Value::U128(a), Value::U128(b)) => a.cmp(b),
            (Value::F64(a), Value::F64(b)) => a.total_cmp(b),
            (Value::Char(a), Value::Char(b)) => a.cmp(b),
            (Value::String(a), Value::String(b)) => a.cmp(b),
            (Value::Bytes(a), Value::Bytes(b)) => a.cmp(b),
            (Value::Some(a), Value::Some(b)) => a.cmp(b),
            (Value::Seq(a), Value::Seq(b)) => a.cmp(b),
            (Value::Map(a), Value::Map(b)) => a.cmp(b),
            (
                Value::Enum {
                    variant: va,
                    value: xa,
                },
                Value::Enum {
                    variant: vb,
                    value: xb,
                },
            ) => va.cmp(vb).then_with(|| xa.cmp(xb)),
            _ => self.tag().cmp(&other.tag()),
        }
    }
}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Value {}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u8(self.tag());
        match self {
            Value::Unit | Value::None => {}
            Value::Bool(v) => v.hash(state),
            Value::I64(v) => v.hash(state),
            Value::U64(v) => v.hash(state),
            Value::I128(v) => v.hash(state),
            Value::U128(v) => v.hash(state),
            Value::F64(v) => v.to_bits().hash(state),
            Value::Char(v) => v.hash(state),
            Value::String(v) => v.hash(state),
            Value::Bytes(v) => v.hash(state),
            Value::Some(v) => v.hash(state),
            Value::Seq(v) => v.hash(state),
            Value::Map(v) => v.hash(state),
            Value::Enum { variant, value } => {
                variant.hash(state);
                value.hash(state);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Conversions from primitives
// ---------------------------------------------------------------------------

macro_rules! from_primitive {
    ($($ty:ty => $variant:ident as $target:ty),* $(,)?) => {
        $(
            impl From<$ty> for Value {
                fn from(v: $ty) -> Self {
                    Value::$variant(<$target>::from(v))
                }
            }
        )*
    };
}

from_primitive! {
    bool => Bool as bool,
    i8 => I64 as i64,
    i16 => I64 as i64,
    i32 => I64 as i64,
    i64 => I64 as i64,
    u8 => U64 as u64,
    u16 => U64 as u64,
    u32 => U64 as u64,
    u64 => U64 as u64,
    i128 => I128 as i128,
    u128 => U128 as u128,
    f32 => F64 as f64,
    f64 => F64 as f64,
    char => Char as char,
    String => String as String,
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_owned())
    }
}

// ---------------------------------------------------------------------------
// Display
// ---------------------------------------------------------------------------

fn fmt_seq(f: &mut fmt::Formatter<'_>, items: &[Value]) -> fmt::Result {
    f.write_str("[")?;
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    f.write_str("]")
}

fn fmt_map(f: &mut fmt::Formatter<'_>, map: &BTreeMap<Value, Value>) -> fmt::Result {
    f.write_str("{")?;
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{key}: {value}")?;
    }
    f.write_str("}")
}

/// Compact, single-line, JSON-like rendering meant for humans (logs, diffs):
/// `()`, `null`, `true`, `42`, `1.0`, `NaN`, `'c'`, `"text"`, `b"\x00ab"`,
/// `[1, 2]`, `{"key": 1}`, and enums as `Variant`, `Variant(v)`,
/// `Variant[a, b]` or `Variant{"field": v}`. `Some(v)` renders as `v`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Unit => f.write_str("()"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I128(v) => write!(f, "{v}"),
            Value::U128(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v:?}"),
            Value::Char(v) => write!(f, "{v:?}"),
            Value::String(v) => write!(f, "{v:?}"),
            Value::Bytes(v) => write!(f, "b\"{}\"", v.escape_ascii()),
            Value::None => f.write_str("null"),
            Value::Some(v) => write!(f, "{v}"),
            Value::Seq(items) => fmt_seq(f, items),
            Value::Map(map) => fmt_map(f, map),
            Value::Enum { variant, value } => {
                f.write_str(variant)?;
                match &**value {
                    Value::Unit => Ok(()),
                    Value::Seq(items) => fmt_seq(f, items),
                    Value::Map(map) => fmt_map(f, map),
                    other => write!(f, "({other})"),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Error converting between a serde type and a [`Value`] (see [`to_value`] and
/// [`from_value`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValueError {
    /// Human-readable description of what went wrong (lowercase, e.g.
    /// `invalid type: string "x", expected u64`).
    pub message: String,
    /// Set when [`to_value`] refused a sequence, map, string or byte buffer
    /// too large for any checkpoint, so that [`Context::set`](crate::Context::set)
    /// can report [`Error::ValueTooLarge`](crate::Error::ValueTooLarge).
    too_large: Option<TooLarge>,
}

/// A container [`to_value`] refused: its length and the most it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TooLarge {
    size: u64,
    limit: u64,
}

impl ValueError {
    /// Creates an error with the given message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            too_large: None,
        }
    }

    fn too_large(what: &str, unit: &str, size: usize, limit: u64) -> Self {
        Self {
            message: format!(
                "{what} of {size} {unit} is larger than a checkpoint can hold (at most {limit})"
            ),
            too_large: Some(TooLarge {
                size: size as u64,
                limit,
            }),
        }
    }

    /// The message of this error.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl ser::Error for ValueError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::new(msg.to_string())
    }
}

impl de::Error for ValueError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::new(msg.to_string())
    }
}

// ---------------------------------------------------------------------------
// T -> Value
// ---------------------------------------------------------------------------

/// Converts any serializable value into a [`Value`].
///
/// Integers narrower than 64 bits are widened (`i8..i64` to `I64`, `u8..u64`
/// to `U64`), `f32` to `F64`; newtype structs are transparent; structs become
/// maps keyed by field name (fields skipped by serde are absent).
///
/// # Errors
///
/// Fails only if the type's `Serialize` implementation reports an error or
/// misuses the serializer API (e.g. a map value without a key).
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, ValueError> {
    value.serialize(ValueSerializer)
}

/// The serializer behind [`to_value`].
struct ValueSerializer;

/// Refuses, before anything is built, a container of `len` items of `slot`
/// bytes each that no checkpoint can hold: the decoder charges `len * slot`
/// bytes for it on top of its key's 8-byte length and its own tag and length
/// (see [`Footprint`]), and the whole checkpoint must stay within
/// [`MAX_PAYLOAD`]. A container this check lets through may still be refused
/// by [`check_context_value`], which counts everything.
fn check_len(what: &str, unit: &str, len: usize, slot: usize) -> Result<(), ValueError> {
    let limit = (MAX_PAYLOAD_U64 - CONTAINER_FLOOR) / slot as u64;
    if len as u64 > limit {
        return Err(ValueError::too_large(what, unit, len, limit));
    }
    Ok(())
}

/// Builder for sequences, tuples and tuple structs.
struct SeqBuilder {
    items: Vec<Value>,
}

/// Builder for tuple variants.
struct TupleVariantBuilder {
    variant: &'static str,
    items: Vec<Value>,
}

/// Builder for maps.
struct MapBuilder {
    map: BTreeMap<Value, Value>,
    pending_key: Option<Value>,
}

/// Builder for structs.
struct StructBuilder {
    map: BTreeMap<Value, Value>,
}

/// Builder for struct variants.
struct StructVariantBuilder {
    variant: &'static str,
    map: BTreeMap<Value, Value>,
}

fn enum_value(variant: &str, value: Value) -> Value {
    Value::Enum {
        variant: variant.to_owned(),
        value: Box::new(value),
    }
}

impl ser::Serializer for ValueSerializer {
    type Ok = Value;
    type Error = ValueError;
    type SerializeSeq = SeqBuilder;
    type SerializeTuple = SeqBuilder;
    type SerializeTupleStruct = SeqBuilder;
    type SerializeTupleVariant = TupleVariantBuilder;
    type SerializeMap = MapBuilder;
    type SerializeStruct = StructBuilder;
    type SerializeStructVariant = StructVariantBuilder;

    fn serialize_bool(self, v: bool) -> Result<Value, ValueError> {
        Ok(Value::Bool(v))
    }

    fn serialize_i8(self, v: i8) -> Result<Value, ValueError> {
        Ok(Value::I64(v.into()))
    }

    fn serialize_i16(self, v: i16) -> Result<Value, ValueError> {
        Ok(Value::I64(v.into()))
    }

    fn serialize_i32(self, v: i32) -> Result<Value, ValueError> {
        Ok(Value::I64(v.into()))
    }

    fn serialize_i64(self, v: i64) -> Result<Value, ValueError> {
        Ok(Value::I64(v))
    }

    fn serialize_i128(self, v: i128) -> Result<Value, ValueError> {
        Ok(Value::I128(v))
    }

    fn serialize_u8(self, v: u8) -> Result<Value, ValueError> {
        Ok(Value::U64(v.into()))
    }

    fn serialize_u16(self, v: u16) -> Result<Value, ValueError> {
        Ok(Value::U64(v.into()))
    }

    fn serialize_u32(self, v: u32) -> Result<Value, ValueError> {
        Ok(Value::U64(v.into()))
    }

    fn serialize_u64(self, v: u64) -> Result<Value, ValueError> {
        Ok(Value::U64(v))
    }

    fn serialize_u128(self, v: u128) -> Result<Value, ValueError> {
        Ok(Value::U128(v))
    }

    fn serialize_f32(self, v: f32) -> Result<Value, ValueError> {
        Ok(Value::F64(v.into()))
    }

    fn serialize_f64(self, v: f64) -> Result<Value, ValueError> {
        Ok(Value::F64(v))
    }

    fn serialize_char(self, v: char) -> Result<Value, ValueError> {
        Ok(Value::Char(v))
    }

    fn serialize_str(self, v: &str) -> Result<Value, ValueError> {
        check_len("a string", "bytes", v.len(), 1)?;
        Ok(Value::String(v.to_owned()))
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<Value, ValueError> {
        check_len("a byte buffer", "bytes", v.len(), 1)?;
        Ok(Value::Bytes(v.to_vec()))
    }

    fn serialize_none(self) -> Result<Value, ValueError> {
        Ok(Value::None)
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Value, ValueError> {
        Ok(Value::Some(Box::new(to_value(value)?)))
    }

    fn serialize_unit(self) -> Result<Value, ValueError> {
        Ok(Value::Unit)
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<Value, ValueError> {
        Ok(Value::Unit)
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
    ) -> Result<Value, ValueError> {
        Ok(enum_value(variant, Value::Unit))
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<Value, ValueError> {
        let inner = to_value(value)?;
        if name != ENUM_TOKEN {
            return Ok(inner);
        }
        // Emitted by `impl Serialize for Value` for `Value::Enum`: the inner
        // value is a one-entry map `{variant: value}`.
        Ok(match inner {
            Value::Map(mut map) if map.len() == 1 => match map.pop_first() {
                Some((Value::String(variant), value)) => Value::Enum {
                    variant,
                    value: Box::new(value),
                },
                Some((key, value)) => {
                    map.insert(key, value);
                    Value::Map(map)
                }
                None => Value::Map(map),
            },
            other => other,
        })
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Value, ValueError> {
        Ok(enum_value(variant, to_value(value)?))
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<SeqBuilder, ValueError> {
        if let Some(len) = len {
            check_len("a sequence", "elements", len, SEQ_SLOT)?;
        }
        Ok(SeqBuilder {
            items: Vec::with_capacity(len.unwrap_or(0).min(PREALLOC_LIMIT)),
        })
    }

    fn serialize_tuple(self, len: usize) -> Result<SeqBuilder, ValueError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<SeqBuilder, ValueError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<TupleVariantBuilder, ValueError> {
        check_len("a sequence", "elements", len, SEQ_SLOT)?;
        Ok(TupleVariantBuilder {
            variant,
            items: Vec::with_capacity(len.min(PREALLOC_LIMIT)),
        })
    }

    fn serialize_map(self, len: Option<usize>) -> Result<MapBuilder, ValueError> {
        if let Some(len) = len {
            check_len("a map", "entries", len, MAP_SLOT)?;
        }
        Ok(MapBuilder {
            map: BTreeMap::new(),
            pending_key: None,
        })
    }

    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<StructBuilder, ValueError> {
        Ok(StructBuilder {
            map: BTreeMap::new(),
        })
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<StructVariantBuilder, ValueError> {
        Ok(StructVariantBuilder {
            variant,
            map: BTreeMap::new(),
        })
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

impl ser::SerializeSeq for SeqBuilder {
    type Ok = Value;
    type Error = ValueError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ValueError> {
        self.items.push(to_value(value)?);
        Ok(())
    }

    fn end(self) -> Result<Value, ValueError> {
        Ok(Value::Seq(self.items))
    }
}

impl ser::SerializeTuple for SeqBuilder {
    type Ok = Value;
    type Error = ValueError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ValueError> {
        ser::SerializeSeq::serialize_element(self, value)
    }

    fn end(self) -> Result<Value, ValueError> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleStruct for SeqBuilder {
    type Ok = Value;
    type Error = ValueError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ValueError> {
        ser::SerializeSeq::serialize_element(self, value)
    }

    fn end(self) -> Result<Value, ValueError> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleVariant for TupleVariantBuilder {
    type Ok = Value;
    type Error = ValueError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ValueError> {
        self.items.push(to_value(value)?);
        Ok(())
    }

    fn end(self) -> Result<Value, ValueError> {
        Ok(enum_value(self.variant, Value::Seq(self.items)))
    }
}

impl ser::SerializeMap for MapBuilder {
    type Ok = Value;
    type Error = ValueError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), ValueError> {
        if self.pending_key.is_some() {
            return Err(ValueError::new(
                "serialize_key called twice without serialize_value",
            ));
        }
        self.pending_key = Some(to_value(key)?);
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ValueError> {
        let Some(key) = self.pending_key.take() else {
            return Err(ValueError::new(
                "serialize_value called without a preceding serialize_key",
            ));
        };
        self.map.insert(key, to_value(value)?);
        Ok(())
    }

    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        value: &V,
    ) -> Result<(), ValueError> {
        if self.pending_key.is_some() {
            return Err(ValueError::new(
                "serialize_entry called after serialize_key without serialize_value",
            ));
        }
        let key = to_value(key)?;
        self.map.insert(key, to_value(value)?);
        Ok(())
    }

    fn end(self) -> Result<Value, ValueError> {
        if self.pending_key.is_some() {
            return Err(ValueError::new("map ended with a key but no value"));
        }
        Ok(Value::Map(self.map))
    }
}

impl ser::SerializeStruct for StructBuilder {
    type Ok = Value;
    type Error = ValueError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), ValueError> {
        self.map.insert(Value::from(key), to_value(value)?);
        Ok(())
    }

    fn end(self) -> Result<Value, ValueError> {
        Ok(Value::Map(self.map))
    }
}

impl ser::SerializeStructVariant for StructVariantBuilder {
    type Ok = Value;
    type Error = ValueError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), ValueError> {
        self.map.insert(Value::from(key), to_value(value)?);
        Ok(())
    }

    fn end(self) -> Result<Value, ValueError> {
        Ok(enum_value(self.variant, Value::Map(self.map)))
    }
}

// ---------------------------------------------------------------------------
// Value -> T
// ---------------------------------------------------------------------------

/// Converts a [`Value`] back into any deserializable type, borrowing from it
/// where the type allows (`&str`, `&[u8]`, `Cow<str>`...).
///
/// Integers are range-checked by the target type (`U64(300)` into a `u8` is
/// an error), and a value of the wrong shape gives an `invalid type` error.
///
/// # Errors
///
/// Fails if the value does not have the shape `T` expects.
pub fn from_value<'de, T: de::Deserialize<'de>>(value: &'de Value) -> Result<T, ValueError> {
    T::deserialize(value)
}

/// Drives `visitor` over a sequence, requiring every element to be consumed.
fn visit_seq_ref<'de, V: Visitor<'de>>(
    items: &'de [Value],
    visitor: V,
) -> Result<V::Value, ValueError> {
    let mut access = SeqRef { iter: items.iter() };
    let out = visitor.visit_seq(&mut access)?;
    let remaining = access.iter.len();
    if remaining == 0 {
        Ok(out)
    } else {
        let consumed = items.len() - remaining;
        Err(de::Error::invalid_length(
            items.len(),
            &format!("{consumed} elements in sequence").as_str(),
        ))
    }
}

/// Drives `visitor` over a map, requiring every entry to be consumed.
fn visit_map_ref<'de, V: Visitor<'de>>(
    map: &'de BTreeMap<Value, Value>,
    visitor: V,
) -> Result<V::Value, ValueError> {
    let mut access = MapRef {
        iter: map.iter(),
        value: None,
    };
    let out = visitor.visit_map(&mut access)?;
    let remaining = access.iter.len();
    if remaining == 0 {
        Ok(out)
    } else {
        let consumed = map.len() - remaining;
        Err(de::Error::invalid_length(
            map.len(),
            &format!("{consumed} entries in map").as_str(),
        ))
    }
}

/// `SeqAccess` over borrowed values.
struct SeqRef<'de> {
    iter: std::slice::Iter<'de, Value>,
}

impl<'de> SeqAccess<'de> for SeqRef<'de> {
    type Error = ValueError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, ValueError> {
        match self.iter.next() {
            Some(value) => seed.deserialize(value).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// `MapAccess` over borrowed entries.
struct MapRef<'de> {
    iter: btree_map::Iter<'de, Value, Value>,
    value: Option<&'de Value>,
}

impl<'de> MapAccess<'de> for MapRef<'de> {
    type Error = ValueError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ValueError> {
        match self.iter.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(key).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, ValueError> {
        match self.value.take() {
            Some(value) => seed.deserialize(value),
            None => Err(ValueError::new("map value requested before its key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// An enum variant seen as a one-entry map `{variant: value}` (what
/// `deserialize_any` produces for `Value::Enum`, so that serde's buffering of
/// untagged / internally tagged / flattened data can still read it).
struct EnumAsMap<'de> {
    variant: Option<&'de str>,
    value: Option<&'de Value>,
}

impl<'de> MapAccess<'de> for EnumAsMap<'de> {
    type Error = ValueError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ValueError> {
        match self.variant.take() {
            Some(variant) => seed
                .deserialize(BorrowedStrDeserializer::new(variant))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, ValueError> {
        match self.value.take() {
            Some(value) => seed.deserialize(value),
            None => Err(ValueError::new("enum value requested twice")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(usize::from(self.variant.is_some()))
    }
}

/// `EnumAccess` over a borrowed variant. `value` is `None` for a variant
/// given as a bare string (unit variant).
struct EnumRef<'de> {
    variant: &'de str,
    value: Option<&'de Value>,
}

impl<'de> EnumAccess<'de> for EnumRef<'de> {
    type Error = ValueError;
    type Variant = VariantRef<'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, VariantRef<'de>), ValueError> {
        let variant = seed.deserialize(BorrowedStrDeserializer::new(self.variant))?;
        Ok((variant, VariantRef { value: self.value }))
    }
}

/// `VariantAccess` over a borrowed variant payload.
struct VariantRef<'de> {
    value: Option<&'de Value>,
}

impl<'de> VariantAccess<'de> for VariantRef<'de> {
    type Error = ValueError;

    fn unit_variant(self) -> Result<(), ValueError> {
        match self.value {
            None | Some(Value::Unit) => Ok(()),
            Some(other) => Err(de::Error::invalid_type(other.unexpected(), &"unit variant")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, ValueError> {
        match self.value {
            Some(value) => seed.deserialize(value),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"newtype variant",
            )),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, ValueError> {
        match self.value {
            Some(Value::Seq(items)) => visit_seq_ref(items, visitor),
            Some(other) => Err(de::Error::invalid_type(
                other.unexpected(),
                &"tuple variant",
            )),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"tuple variant",
            )),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ValueError> {
        match self.value {
            Some(Value::Map(map)) => visit_map_ref(map, visitor),
            Some(Value::Seq(items)) => visit_seq_ref(items, visitor),
            Some(other) => Err(de::Error::invalid_type(
                other.unexpected(),
                &"struct variant",
            )),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"struct variant",
            )),
        }
    }
}

impl<'de> de::Deserializer<'de> for &'de Value {
    type Error = ValueError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ValueError> {
        match self {
            Value::Unit => visitor.visit_unit(),
            Value::Bool(v) => visitor.visit_bool(*v),
            Value::I64(v) => visitor.visit_i64(*v),
            Value::U64(v) => visitor.visit_u64(*v),
            Value::I128(v) => visitor.visit_i128(*v),
            Value::U128(v) => visitor.visit_u128(*v),
            Value::F64(v) => visitor.visit_f64(*v),
            Value::Char(v) => visitor.visit_char(*v),
            Value::String(v) => visitor.visit_borrowed_str(v),
            Value::Bytes(v) => visitor.visit_borrowed_bytes(v),
            Value::None => visitor.visit_none(),
            Value::Some(v) => visitor.visit_some(&**v),
            Value::Seq(items) => visit_seq_ref(items, visitor),
            Value::Map(map) => visit_map_ref(map, visitor),
            Value::Enum { variant, value } => visitor.visit_map(EnumAsMap {
                variant: Some(variant),
                value: Some(value),
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ValueError> {
        match self {
            Value::None | Value::Unit => visitor.visit_none(),
            Value::Some(v) => visitor.visit_some(&**v),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ValueError> {
        match self {
            Value::Unit | Value::None => visitor.visit_unit(),
            other => Err(de::Error::invalid_type(other.unexpected(), &visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ValueError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ValueError> {
        if name == VALUE_TOKEN {
            // `impl Deserialize for Value`: give enums to it as enums so that
            // `from_value::<Value>` is the identity.
            return match self {
                Value::Enum { variant, value } => visitor.visit_enum(EnumRef {
                    variant,
                    value: Some(value),
                }),
                _ => self.deserialize_any(visitor),
            };
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ValueError> {
        match self {
            Value::Enum { variant, value } => visitor.visit_enum(EnumRef {
                variant,
                value: Some(value),
            }),
            Value::String(variant) => visitor.visit_enum(EnumRef {
                variant,
                value: None,
            }),
            Value::Map(map) if map.len() == 1 => match map.iter().next() {
                Some((Value::String(variant), value)) => visitor.visit_enum(EnumRef {
                    variant,
                    value: Some(value),
                }),
                _ => Err(de::Error::invalid_type(Unexpected::Map, &visitor)),
            },
            other => Err(de::Error::invalid_type(other.unexpected(), &visitor)),
        }
    }

    fn is_human_readable(&self) -> bool {
        false
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf seq tuple tuple_struct map struct identifier ignored_any
    }
}

// ---------------------------------------------------------------------------
// serde for Value itself
// ---------------------------------------------------------------------------

/// `Value::Enum` as a one-entry map `{variant: value}`.
struct EnumEntry<'a> {
    variant: &'a str,
    value: &'a Value,
}

impl Serialize for EnumEntry<'_> {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(self.variant, self.value)?;
        map.end()
    }
}

/// Serializes a value in its natural serde form. `Enum` is written as a
/// one-entry map `{variant: value}` (wrapped in a private newtype struct that
/// formats treat transparently, so that [`to_value`] restores the `Enum`).
impl Serialize for Value {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Unit => serializer.serialize_unit(),
            Value::Bool(v) => serializer.serialize_bool(*v),
            Value::I64(v) => serializer.serialize_i64(*v),
            Value::U64(v) => serializer.serialize_u64(*v),
            Value::I128(v) => serializer.serialize_i128(*v),
            Value::U128(v) => serializer.serialize_u128(*v),
            Value::F64(v) => serializer.serialize_f64(*v),
            Value::Char(v) => serializer.serialize_char(*v),
            Value::String(v) => serializer.serialize_str(v),
            Value::Bytes(v) => serializer.serialize_bytes(v),
            Value::None => serializer.serialize_none(),
            Value::Some(v) => serializer.serialize_some(&**v),
            Value::Seq(items) => serializer.collect_seq(items),
            Value::Map(map) => serializer.collect_map(map),
            Value::Enum { variant, value } => {
                serializer.serialize_newtype_struct(ENUM_TOKEN, &EnumEntry { variant, value })
            }
        }
    }
}

/// Visitor building a [`Value`] from any self-describing input.
struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::I64(v))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        Ok(Value::I128(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::U64(v))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        Ok(Value::U128(v))
    }

    fn visit_f32<E: de::Error>(self, v: f32) -> Result<Value, E> {
        Ok(Value::F64(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::F64(v))
    }

    fn visit_char<E: de::Error>(self, v: char) -> Result<Value, E> {
        Ok(Value::Char(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::Bytes(v.to_vec()))
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Value, E> {
        Ok(Value::Bytes(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::None)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        de::Deserialize::deserialize(deserializer).map(|v| Value::Some(Box::new(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Unit)
    }

    fn visit_newtype_struct<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Value, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(PREALLOC_LIMIT));
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = BTreeMap::new();
        while let Some((key, value)) = access.next_entry::<Value, Value>()? {
            map.insert(key, value);
        }
        Ok(Value::Map(map))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        let (variant, access): (String, _) = data.variant()?;
        let value: Value = access.newtype_variant()?;
        Ok(Value::Enum {
            variant,
            value: Box::new(value),
        })
    }
}

/// Deserializes a value from any self-describing format (JSON, ...), and
/// exactly (including `Enum`) from a `&Value`.
impl<'de> de::Deserialize<'de> for Value {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Formats treat this as a transparent newtype struct; the `&Value`
        // deserializer recognises the name and hands enums over as enums.
        deserializer.deserialize_newtype_struct(VALUE_TOKEN, ValueVisitor)
    }
}

// ---------------------------------------------------------------------------
// Owned Value -> serde (moves, for the checkpoint decoder)
// ---------------------------------------------------------------------------

/// A deserializer that hands an owned [`Value`] over without copying:
/// strings and byte buffers are moved (`visit_string`, `visit_byte_buf`),
/// only containers are rebuilt. `Value::deserialize(OwnedValue(v))` is `v`.
///
/// The checkpoint decoder uses it to build a [`Snapshot`](crate::Snapshot)
/// from decoded entries through `Snapshot`'s `Deserialize` (the one way to
/// build it in one pass, without a copy-on-write clone per key).
#[derive(Debug)]
pub(crate) struct OwnedValue(pub(crate) Value);

impl<'de> de::IntoDeserializer<'de, ValueError> for OwnedValue {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> de::Deserializer<'de> for OwnedValue {
    type Error = ValueError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ValueError> {
        use serde::de::value::{MapDeserializer, SeqDeserializer};
        match self.0 {
            Value::Unit => visitor.visit_unit(),
            Value::Bool(v) => visitor.visit_bool(v),
            Value::I64(v) => visitor.visit_i64(v),
            Value::U64(v) => visitor.visit_u64(v),
            Value::I128(v) => visitor.visit_i128(v),
            Value::U128(v) => visitor.visit_u128(v),
            Value::F64(v) => visitor.visit_f64(v),
            Value::Char(v) => visitor.visit_char(v),
            Value::String(v) => visitor.visit_string(v),
            Value::Bytes(v) => visitor.visit_byte_buf(v),
            Value::None => visitor.visit_none(),
            Value::Some(v) => visitor.visit_some(OwnedValue(*v)),
            Value::Seq(items) => {
                let mut seq = SeqDeserializer::new(items.into_iter().map(OwnedValue));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Value::Map(map) => {
                let entries = map.into_iter().map(|(k, v)| (OwnedValue(k), OwnedValue(v)));
                let mut map = MapDeserializer::new(entries);
                let value = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(value)
            }
            Value::Enum { variant, value } => visitor.visit_enum(OwnedEnum(variant, *value)),
        }
    }

    fn is_human_readable(&self) -> bool {
        false
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// `Value::Enum` as an enum, for [`OwnedValue`].
struct OwnedEnum(String, Value);

impl<'de> EnumAccess<'de> for OwnedEnum {
    type Error = ValueError;
    type Variant = OwnedValue;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, OwnedValue), ValueError> {
        let variant = seed.deserialize(de::value::StringDeserializer::<ValueError>::new(self.0))?;
        Ok((variant, OwnedValue(self.1)))
    }
}

impl<'de> VariantAccess<'de> for OwnedValue {
    type Error = ValueError;

    fn unit_variant(self) -> Result<(), ValueError> {
        match self.0 {
            Value::Unit => Ok(()),
            other => Err(de::Error::invalid_type(other.unexpected(), &"unit variant")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, ValueError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, ValueError> {
        de::Deserializer::deserialize_any(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ValueError> {
        de::Deserializer::deserialize_any(self, visitor)
    }
}

// ---------------------------------------------------------------------------
// bincode (native)
// ---------------------------------------------------------------------------

fn encode_len<E: Encoder>(len: usize, encoder: &mut E) -> Result<(), EncodeError> {
    // usize is at most 64 bits on every supported target; this is the same
    // conversion bincode uses for its own collection lengths.
    (len as u64).encode(encoder)
}

fn encode_value<E: Encoder>(
    value: &Value,
    encoder: &mut E,
    depth: usize,
) -> Result<(), EncodeError> {
    if depth > MAX_DEPTH {
        return Err(EncodeError::OtherString(format!(
            "value nested deeper than MAX_DEPTH ({MAX_DEPTH})"
        )));
    }
    value.tag().encode(encoder)?;
    match value {
        Value::Unit | Value::None => Ok(()),
        Value::Bool(v) => v.encode(encoder),
        Value::I64(v) => v.encode(encoder),
        Value::U64(v) => v.encode(encoder),
        Value::I128(v) => v.encode(encoder),
        Value::U128(v) => v.encode(encoder),
        Value::F64(v) => v.encode(encoder),
        Value::Char(v) => v.encode(encoder),
        Value::String(v) => v.encode(encoder),
        Value::Bytes(v) => v.encode(encoder),
        Value::Some(v) => encode_value(v, encoder, depth + 1),
        Value::Seq(items) => {
            encode_len(items.len(), encoder)?;
            for item in items {
                encode_value(item, encoder, depth + 1)?;
            }
            Ok(())
        }
        Value::Map(map) => {
            encode_len(map.len(), encoder)?;
            for (key, value) in map {
                encode_value(key, encoder, depth + 1)?;
                encode_value(value, encoder, depth + 1)?;
            }
            Ok(())
        }
        Value::Enum { variant, value } => {
            variant.encode(encoder)?;
            encode_value(value, encoder, depth + 1)
        }
    }
}

/// Encodes the value as one tag byte followed by bincode's encoding of the
/// payload (see the module documentation). Fails if the value is nested
/// deeper than [`MAX_DEPTH`], since it could not be decoded again.
impl Encode for Value {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> Result<(), EncodeError> {
        encode_value(self, encoder, 0)
    }
}

fn decode_len<D: Decoder>(decoder: &mut D) -> Result<usize, DecodeError> {
    let len = u64::decode(decoder)?;
    usize::try_from(len).map_err(|_| DecodeError::OutsideUsizeRange(len))
}

/// Decodes a length-prefixed byte buffer like bincode's `Vec<u8>` (same wire
/// format), but never allocates the claimed length up front: bincode's own
/// `Vec<u8>` and `String` decoders allocate whatever length the input claims
/// (up to the configured limit, 1 GiB for checkpoints) before reading a byte.
///
/// When the reader can show the bytes (a slice), they are copied only if
/// they are all there. Otherwise (an `io::Read`, or a claim beyond the
/// input) the buffer grows in steps as large as what was read so far
/// (between [`FIRST_CHUNK`] and [`BYTE_CHUNK`]), so a false claim fails
/// after allocating at most about twice the bytes the input held.
fn decode_bytes<D: Decoder>(decoder: &mut D) -> Result<Vec<u8>, DecodeError> {
    let len = decode_len(decoder)?;
    decoder.claim_container_read::<u8>(len)?;
    if let Some(available) = decoder.reader().peek_read(len) {
        let bytes = available.to_vec();
        decoder.reader().consume(len);
        return Ok(bytes);
    }
    let mut bytes = Vec::new();
    while bytes.len() < len {
        let start = bytes.len();
        let step = (len - start).min(start.clamp(FIRST_CHUNK, BYTE_CHUNK));
        bytes.resize(start + step, 0);
        decoder.reader().read(&mut bytes[start..])?;
    }
    Ok(bytes)
}

/// Decodes a `String` in bincode's wire format (length + UTF-8 bytes) without
/// trusting the claimed length; see [`decode_bytes`]. Used for every string
/// of a checkpoint, not only those inside values.
pub(crate) fn decode_string<D: Decoder>(decoder: &mut D) -> Result<String, DecodeError> {
    String::from_utf8(decode_bytes(decoder)?).map_err(|e| DecodeError::Utf8 {
        inner: e.utf8_error(),
    })
}

fn decode_value<D: Decoder>(decoder: &mut D, depth: usize) -> Result<Value, DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::OtherString(format!(
            "value nested deeper than MAX_DEPTH ({MAX_DEPTH})"
        )));
    }
    let tag = u8::decode(decoder)?;
    Ok(match tag {
        tag::UNIT => Value::Unit,
        tag::BOOL => Value::Bool(bool::decode(decoder)?),
        tag::I64 => Value::I64(i64::decode(decoder)?),
        tag::U64 => Value::U64(u64::decode(decoder)?),
        tag::I128 => Value::I128(i128::decode(decoder)?),
        tag::U128 => Value::U128(u128::decode(decoder)?),
        tag::F64 => Value::F64(f64::decode(decoder)?),
        tag::CHAR => Value::Char(char::decode(decoder)?),
        tag::STRING => Value::String(decode_string(decoder)?),
        tag::BYTES => Value::Bytes(decode_bytes(decoder)?),
        tag::NONE => Value::None,
        tag::SOME => Value::Some(Box::new(decode_value(decoder, depth + 1)?)),
        tag::SEQ => {
            let len = decode_len(decoder)?;
            decoder.claim_container_read::<Value>(len)?;
            let mut items = Vec::with_capacity(len.min(PREALLOC_LIMIT));
            for _ in 0..len {
                decoder.unclaim_bytes_read(size_of::<Value>());
                items.push(decode_value(decoder, depth + 1)?);
            }
            Value::Seq(items)
        }
        tag::MAP => {
            let len = decode_len(decoder)?;
            decoder.claim_container_read::<(Value, Value)>(len)?;
            let mut map = BTreeMap::new();
            for _ in 0..len {
                decoder.unclaim_bytes_read(size_of::<(Value, Value)>());
                let key = decode_value(decoder, depth + 1)?;
                let value = decode_value(decoder, depth + 1)?;
                if map.insert(key, value).is_some() {
                    return Err(DecodeError::Other("duplicate key in Value::Map"));
                }
            }
            Value::Map(map)
        }
        tag::ENUM => {
            let variant = decode_string(decoder)?;
            let value = decode_value(decoder, depth + 1)?;
            Value::Enum {
                variant,
                value: Box::new(value),
            }
        }
        unknown => {
            return Err(DecodeError::UnexpectedVariant {
                type_name: "fluxio_core::value::Value",
                allowed: &AllowedEnumVariants::Range {
                    min: tag::UNIT as u32,
                    max: tag::ENUM as u32,
                },
                found: u32::from(unknown),
            });
        }
    })
}

/// Decodes a value written by the `Encode` implementation. Corrupt input gives
/// a [`DecodeError`], never a panic: unknown tags are rejected, nesting deeper
/// than [`MAX_DEPTH`] is rejected, duplicate map keys are rejected, and
/// buffers only grow with input actually read.
impl<Context> Decode<Context> for Value {
    fn decode<D: Decoder<Context = Context>>(decoder: &mut D) -> Result<Self, DecodeError> {
        decode_value(decoder, 0)
    }
}

bincode::impl_borrow_decode!(Value);

// ---------------------------------------------------------------------------
// Limits: what the checkpoint decoder accepts
// ---------------------------------------------------------------------------

/// What reading a part of a checkpoint costs, counted exactly as the decoder
/// counts it against its limit (bincode's `claim_bytes_read`): every integer
/// its width (a `u64` 8 bytes, however few its varint takes), every string
/// or byte buffer 8 plus its length, and a sequence (map) of `n` items
/// `n * size_of::<Value>()` (`size_of::<(Value, Value)>()`) bytes up front,
/// given back item by item as the items are read (see `decode_value`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Footprint {
    /// Bytes of the encoding.
    pub(crate) encoded: u64,
    /// What the decoder has charged once the part is read.
    pub(crate) net: u64,
    /// The most the decoder charges while reading it (at least `net`).
    pub(crate) peak: u64,
}

impl Footprint {
    /// A part the decoder charges `claim` for, `encoded` bytes long.
    pub(crate) fn item(claim: u64, encoded: u64) -> Self {
        Footprint {
            encoded,
            net: claim,
            peak: claim,
        }
    }

    /// An integer of `width` bytes holding `v` (zigzagged when signed).
    pub(crate) fn int(width: u64, v: u128) -> Self {
        Self::item(width, varint_len(v))
    }

    /// A string or byte buffer of `len` bytes.
    pub(crate) fn string(len: usize) -> Self {
        let (claim, encoded) = string_parts(len);
        Self::item(claim, encoded)
    }

    /// `self`, then `next`.
    pub(crate) fn then(&mut self, next: Footprint) {
        self.peak = self.peak.max(self.net.saturating_add(next.peak));
        self.net = self.net.saturating_add(next.net);
        self.encoded = self.encoded.saturating_add(next.encoded);
    }

    /// What must stay within the decoder's limit: the larger of the bytes
    /// read and the most charged.
    pub(crate) fn size(&self) -> u64 {
        self.peak.max(self.encoded)
    }
}

/// Bytes of bincode's varint encoding of `v`.
fn varint_len(v: u128) -> u64 {
    if v <= 250 {
        1
    } else if v <= u128::from(u16::MAX) {
        3
    } else if v <= u128::from(u32::MAX) {
        5
    } else if v <= u128::from(u64::MAX) {
        9
    } else {
        17
    }
}

/// Bincode's zigzag mapping of a signed integer to an unsigned one.
fn zigzag(v: i128) -> u128 {
    if v < 0 {
        (!(v as u128)) * 2 + 1
    } else {
        (v as u128) * 2
    }
}

/// A value nested deeper than [`MAX_DEPTH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooDeep;

/// A sequence or map of `len` items: its length, and the up-front charge.
fn container(len: usize, slot: usize) -> Footprint {
    let charge = 8u64.saturating_add((len as u64).saturating_mul(slot as u64));
    Footprint::item(charge, varint_len(len as u128))
}

/// The footprint of `value` in a checkpoint, mirroring `decode_value`
/// step by step (and refusing the same depth).
pub(crate) fn footprint(value: &Value) -> Result<Footprint, TooDeep> {
    footprint_at(value, 0)
}

fn footprint_at(value: &Value, depth: usize) -> Result<Footprint, TooDeep> {
    if depth > MAX_DEPTH {
        return Err(TooDeep);
    }
    if let Some(fp) = scalar_footprint(value) {
        return Ok(fp);
    }
    // Every child is one level down: a scalar child needs no further check.
    let child = |v: &Value| match scalar_footprint(v) {
        Some(fp) if depth < MAX_DEPTH => Ok(fp),
        _ => footprint_at(v, depth + 1),
    };
    let mut fp = Footprint::item(1, 1); // the tag
    match value {
        Value::Some(v) => fp.then(child(v)?),
        Value::Seq(items) => {
            fp.then(container(items.len(), SEQ_SLOT));
            for item in items {
                fp.net -= SEQ_SLOT as u64;
                match scalar_footprint(item) {
                    // The common case (a `Vec<u8>`, say) without the recursion.
                    Some(c) if depth < MAX_DEPTH => {
                        fp.net += c.net;
                        fp.peak = fp.peak.max(fp.net);
                        fp.encoded += c.encoded;
                    }
                    _ => fp.then(footprint_at(item, depth + 1)?),
                }
            }
        }
        Value::Map(map) => {
            fp.then(container(map.len(), MAP_SLOT));
            for (key, value) in map {
                fp.net -= MAP_SLOT as u64;
                fp.then(child(key)?);
                fp.then(child(value)?);
            }
        }
        Value::Enum { variant, value } => {
            fp.then(Footprint::string(variant.len()));
            fp.then(child(value)?);
        }
        // Returned by `scalar_footprint` above.
        Value::Unit
        | Value::None
        | Value::Bool(_)
        | Value::I64(_)
        | Value::U64(_)
        | Value::I128(_)
        | Value::U128(_)
        | Value::F64(_)
        | Value::Char(_)
        | Value::String(_)
        | Value::Bytes(_) => {}
    }
    Ok(fp)
}

/// The footprint of a value without children, tag included; `None` for
/// `Some`, sequences, maps and enums.
#[inline]
fn scalar_footprint(value: &Value) -> Option<Footprint> {
    let (claim, encoded) = match value {
        Value::Unit | Value::None => (0, 0),
        Value::Bool(_) => (1, 1),
        Value::I64(v) => (8, varint_len(zigzag((*v).into()))),
        Value::U64(v) => (8, varint_len((*v).into())),
        Value::I128(v) => (16, varint_len(zigzag(*v))),
        Value::U128(v) => (16, varint_len(*v)),
        Value::F64(_) => (8, 8),
        Value::Char(c) => (c.len_utf8() as u64, c.len_utf8() as u64),
        Value::String(v) => string_parts(v.len()),
        Value::Bytes(v) => string_parts(v.len()),
        Value::Some(_) | Value::Seq(_) | Value::Map(_) | Value::Enum { .. } => return None,
    };
    Some(Footprint::item(1 + claim, 1 + encoded))
}

/// What a string or byte buffer of `len` bytes is charged, and its length.
fn string_parts(len: usize) -> (u64, u64) {
    let len = len as u64;
    (8 + len, varint_len(len.into()) + len)
}

/// The footprint of `key` and `value` as one entry of a checkpoint's context.
///
/// # Errors
/// [`Error::ValueTooDeep`] naming `key`.
pub(crate) fn entry_footprint(key: &str, value: &Value) -> crate::Result<Footprint> {
    let mut fp = Footprint::string(key.len());
    fp.then(footprint(value).map_err(|TooDeep| too_deep(key))?);
    Ok(fp)
}

fn too_deep(key: &str) -> Error {
    Error::ValueTooDeep {
        key: key.to_owned(),
        limit: MAX_DEPTH as u32,
    }
}

/// [`check_context_value`] against any `limit` (the unit tests check it
/// against the decoder at small limits).
fn check_entry(key: &str, value: &Value, limit: u64) -> crate::Result<()> {
    let size = entry_footprint(key, value)?.size();
    if size > limit {
        return Err(Error::ValueTooLarge {
            key: key.to_owned(),
            size,
            limit,
        });
    }
    Ok(())
}

/// Whether `value` may be stored under `key` in a context: the check behind
/// [`Context::set`](crate::Context::set), for a value converted already (as
/// [`Context::set_value`](crate::Context::set_value), which does not check,
/// takes it). See the [module documentation](self#limits).
///
/// ```
/// use fluxio_core::value::{check_context_value, MAX_DEPTH};
/// use fluxio_core::{Error, Value};
///
/// let mut deep = Value::Unit;
/// for _ in 0..=MAX_DEPTH {
///     deep = Value::Some(Box::new(deep));
/// }
/// let err = check_context_value("tree", &deep).unwrap_err();
/// assert!(matches!(err, Error::ValueTooDeep { ref key, limit: 128 } if key == "tree"));
/// assert!(check_context_value("small", &Value::from("ok")).is_ok());
/// ```
///
/// # Errors
/// [`Error::ValueTooDeep`] when `value` nests deeper than [`MAX_DEPTH`];
/// [`Error::ValueTooLarge`] when the key and value alone take more than
/// [`MAX_PAYLOAD`] of a checkpoint's decoding
/// budget (`size` and `limit` in bytes). Both name `key`.
pub fn check_context_value(key: &str, value: &Value) -> crate::Result<()> {
    check_entry(key, value, MAX_PAYLOAD_U64)
}

/// Converts `value` for storing under `key` in a context: [`to_value`], then
/// [`check_context_value`]. [`Context::set`](crate::Context::set) is this
/// plus the insertion.
///
/// A sequence or map whose length alone is past what any checkpoint can hold
/// (more than about 2<sup>25</sup> elements of a sequence), and a string or
/// byte buffer longer than [`MAX_PAYLOAD`], is
/// refused before any of it is converted.
///
/// # Errors
/// [`Error::Serialize`] when `value`'s `Serialize` impl fails;
/// [`Error::ValueTooLarge`] when it is too large, with `size` and `limit` in
/// elements (entries, bytes) when one sequence (map, string) is past what any
/// checkpoint can hold, in bytes of the checkpoint's decoding budget
/// otherwise; [`Error::ValueTooDeep`] when it nests deeper than
/// [`MAX_DEPTH`]. All name `key`.
pub fn to_context_value<T: Serialize + ?Sized>(key: &str, value: &T) -> crate::Result<Value> {
    let v = to_value(value).map_err(|e| match e.too_large {
        Some(TooLarge { size, limit }) => Error::ValueTooLarge {
            key: key.to_owned(),
            size,
            limit,
        },
        None => Error::Serialize {
            key: key.to_owned(),
            message: e.message,
        },
    })?;
    check_context_value(key, &v)?;
    Ok(v)
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

impl<'de> serde::de::IntoDeserializer<'de, ValueError> for &'de Value {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bincode::config;
    use serde::de::DeserializeOwned;
    use serde::{Deserialize, Serialize};
    use std::collections::{BTreeSet, HashMap, HashSet};
    use std::fmt::Debug;

    fn encode(value: &Value) -> Vec<u8> {
        bincode::encode_to_vec(value, config::standard()).expect("encode")
    }

    fn decode(bytes: &[u8]) -> Result<Value, DecodeError> {
        let (value, read): (Value, usize) = bincode::decode_from_slice(bytes, config::standard())?;
        assert_eq!(read, bytes.len(), "trailing bytes after a value");
        Ok(value)
    }

    /// T -> Value -> bytes -> Value -> T.
    fn roundtrip<T: Serialize + DeserializeOwned>(input: &T) -> T {
        let value = to_value(input).expect("to_value");
        let bytes = encode(&value);
        let decoded = decode(&bytes).expect("decode");
        assert_eq!(decoded, value, "bincode round trip changed the value");
        from_value(&decoded).expect("from_value")
    }

    fn assert_roundtrip<T: Serialize + DeserializeOwned + PartialEq + Debug>(input: T) {
        assert_eq!(roundtrip(&input), input);
    }

    fn nested_some(depth: usize) -> Value {
        let mut value = Value::Unit;
        for _ in 0..depth {
            value = Value::Some(Box::new(value));
        }
        value
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    struct UnitStruct;

    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    struct Meters(u32);

    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    struct Pair(i8, String);

    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    struct Inner {
        name: String,
        tags: Vec<String>,
        score: f64,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    struct Outer {
        id: u64,
        inner: Inner,
        list: Vec<Inner>,
        by_name: HashMap<String, Inner>,
        labels: BTreeMap<u32, String>,
        maybe: Option<Inner>,
        pair: Pair,
        unit: UnitStruct,
        meters: Meters,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    enum Shape {
        Empty,
        Circle(u32),
        Rect(i8, String),
        Poly { sides: u32, label: Option<String> },
        UnitInside(()),
        NoFields(),
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Sparse {
        always: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        maybe: Option<u32>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        list: Vec<u32>,
        #[serde(skip)]
        never: u32,
    }

    fn sample_inner(name: &str) -> Inner {
        Inner {
            name: name.to_owned(),
            tags: vec!["a".into(), "ü".into()],
            score: -2.5,
        }
    }

    fn sample_outer() -> Outer {
        let mut by_name = HashMap::new();
        by_name.insert("ключ".to_owned(), sample_inner("x"));
        by_name.insert("日本".to_owned(), sample_inner("y"));
        Outer {
            id: u64::MAX,
            inner: sample_inner("root"),
            list: vec![sample_inner("l1"), sample_inner("l2")],
            by_name,
            labels: [(3, "three".to_owned()), (1, "one".to_owned())].into(),
            maybe: Some(sample_inner("m")),
            pair: Pair(-7, "p".into()),
            unit: UnitStruct,
            meters: Meters(12),
        }
    }

    // -- round trips -------------------------------------------------------

    #[test]
    fn integer_extremes_round_trip() {
        assert_roundtrip(u64::MAX);
        assert_roundtrip(i64::MIN);
        assert_roundtrip(i64::MAX);
        assert_roundtrip(i128::MIN);
        assert_roundtrip(i128::MAX);
        assert_roundtrip(u128::MAX);
        assert_roundtrip(200u8);
        assert_roundtrip(-300i16);
        assert_roundtrip(usize::MAX);
        assert_roundtrip(isize::MIN);
        assert_eq!(to_value(&200u8), Ok(Value::U64(200)));
        assert_eq!(to_value(&-300i16), Ok(Value::I64(-300)));
        assert_eq!(to_value(&i128::MIN), Ok(Value::I128(i128::MIN)));
        assert_eq!(to_value(&u128::MAX), Ok(Value::U128(u128::MAX)));
    }

    #[test]
    fn f64_round_trip_keeps_bits() {
        let custom_nan = f64::from_bits(0x7ff8_0000_0000_1234);
        for x in [
            1.5,
            -0.0,
            0.0,
            f64::NAN,
            -f64::NAN,
            custom_nan,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::EPSILON,
        ] {
            let back: f64 = roundtrip(&x);
            assert_eq!(back.to_bits(), x.to_bits(), "bits of {x:?}");
        }
        assert!(roundtrip(&-0.0f64).is_sign_negative());
    }

    #[test]
    fn f32_round_trip_keeps_bits() {
        for x in [
            1.25f32,
            -0.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN_POSITIVE,
            0.1,
        ] {
            let back: f32 = roundtrip(&x);
            assert_eq!(back.to_bits(), x.to_bits(), "bits of {x:?}");
        }
        assert_eq!(to_value(&0.1f32), Ok(Value::F64(f64::from(0.1f32))));
    }

    #[test]
    fn bool_char_and_strings_round_trip() {
        assert_roundtrip(true);
        assert_roundtrip(false);
        assert_roundtrip('a');
        assert_roundtrip('é');
        assert_roundtrip('🦀');
        assert_roundtrip(String::new());
        assert_roundtrip("ключ 日本 🦀 \u{0} \"quoted\"\n".to_owned());
        assert_eq!(to_value(&'x'), Ok(Value::Char('x')));
    }

    #[test]
    fn unicode_map_keys_round_trip() {
        let map: BTreeMap<String, u32> = [
            ("ключ".to_owned(), 1),
            ("日本".to_owned(), 2),
            ("🦀🎉".to_owned(), 3),
            (String::new(), 4),
        ]
        .into();
        assert_roundtrip(map.clone());
        let hash: HashMap<String, u32> = map.into_iter().collect();
        assert_roundtrip(hash);
    }

    #[test]
    fn bytes_round_trip_as_bytes() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Blob {
            #[serde(with = "serde_bytes")]
            data: Vec<u8>,
        }
        let blob = Blob {
            data: vec![0, 1, 2, 255, b'"'],
        };
        let value = to_value(&blob).expect("to_value");
        let expected: BTreeMap<Value, Value> =
            [(Value::from("data"), Value::Bytes(vec![0, 1, 2, 255, b'"']))].into();
        assert_eq!(value, Value::Map(expected));
        assert_roundtrip(blob);

        let buf = serde_bytes::ByteBuf::from(vec![9u8; 70_000]);
        assert_eq!(to_value(&buf), Ok(Value::Bytes(vec![9u8; 70_000])));
        assert_roundtrip(buf);
        assert_roundtrip(serde_bytes::ByteBuf::new());
    }

    #[test]
    fn sequences_and_tuples_round_trip() {
        assert_roundtrip(vec![1u32, 2, 3, u32::MAX]);
        assert_roundtrip(Vec::<u32>::new());
        assert_roundtrip(vec![0u8, 255]); // plain Vec<u8> is a sequence
        assert_eq!(
            to_value(&vec![0u8, 255]),
            Ok(Value::Seq(vec![Value::U64(0), Value::U64(255)]))
        );
        assert_roundtrip((1u8, "two".to_owned(), false, 4.5f64));
        assert_roundtrip(((1i32, -1i64), [7u16; 3], ('c', ())));
        assert_roundtrip(vec![vec![Some(1u8), None], vec![]]);
        let set: BTreeSet<i32> = [3, -1, 7].into();
        assert_roundtrip(set);
    }

    #[test]
    fn options_round_trip_exactly() {
        assert_roundtrip(Some(5u32));
        assert_roundtrip(None::<u32>);
        assert_roundtrip(None::<Option<u32>>);
        assert_roundtrip(Some(None::<u32>));
        assert_roundtrip(Some(Some(3u32)));
        assert_roundtrip(Some(()));
        assert_eq!(to_value(&None::<Option<u32>>), Ok(Value::None));
        assert_eq!(
            to_value(&Some(None::<u32>)),
            Ok(Value::Some(Box::new(Value::None)))
        );
        assert_eq!(
            to_value(&Some(Some(3u32))),
            Ok(Value::Some(Box::new(Value::Some(Box::new(Value::U64(3))))))
        );
    }

    #[test]
    fn unit_unit_struct_newtype_struct_round_trip() {
        assert_roundtrip(());
        assert_roundtrip(UnitStruct);
        assert_roundtrip(Meters(42));
        assert_roundtrip(Pair(-1, "x".into()));
        assert_eq!(to_value(&()), Ok(Value::Unit));
        assert_eq!(to_value(&UnitStruct), Ok(Value::Unit));
        // Newtype structs are transparent.
        assert_eq!(to_value(&Meters(42)), Ok(Value::U64(42)));
        assert_eq!(from_value::<Meters>(&Value::U64(42)), Ok(Meters(42)));
    }

    #[test]
    fn nested_structs_round_trip() {
        let outer = sample_outer();
        assert_roundtrip(outer.clone());
        let value = to_value(&outer).expect("to_value");
        let Value::Map(map) = &value else {
            panic!("struct should be a map, got {value}");
        };
        // Non-string map keys stay typed.
        let labels = map.get(&Value::from("labels")).expect("labels field");
        let expected: BTreeMap<Value, Value> = [
            (Value::U64(1), Value::from("one")),
            (Value::U64(3), Value::from("three")),
        ]
        .into();
        assert_eq!(labels, &Value::Map(expected));
        assert_eq!(map.get(&Value::from("id")), Some(&Value::U64(u64::MAX)));
    }

    #[test]
    fn enums_round_trip_all_variant_kinds() {
        let all = vec![
            Shape::Empty,
            Shape::Circle(3),
            Shape::Rect(-2, "r".into()),
            Shape::Poly {
                sides: 5,
                label: Some("penta".into()),
            },
            Shape::Poly {
                sides: 0,
                label: None,
            },
            Shape::UnitInside(()),
            Shape::NoFields(),
        ];
        for shape in &all {
            assert_roundtrip(shape.clone());
        }
        assert_roundtrip(all);
        assert_eq!(
            to_value(&Shape::Empty),
            Ok(enum_value("Empty", Value::Unit))
        );
        assert_eq!(
            to_value(&Shape::Circle(3)),
            Ok(enum_value("Circle", Value::U64(3)))
        );
        assert_eq!(
            to_value(&Shape::Rect(-2, "r".into())),
            Ok(enum_value(
                "Rect",
                Value::Seq(vec![Value::I64(-2), Value::from("r")])
            ))
        );
        let fields: BTreeMap<Value, Value> = [
            (Value::from("sides"), Value::U64(5)),
            (Value::from("label"), Value::None),
        ]
        .into();
        assert_eq!(
            to_value(&Shape::Poly {
                sides: 5,
                label: None
            }),
            Ok(enum_value("Poly", Value::Map(fields)))
        );
        // Enum as map key.
        let keyed: BTreeMap<u8, Shape> = [(1, Shape::Empty), (2, Shape::Circle(1))].into();
        assert_roundtrip(keyed);
    }

    #[test]
    fn enum_accepts_string_and_single_entry_map() {
        assert_eq!(from_value::<Shape>(&Value::from("Empty")), Ok(Shape::Empty));
        let map: BTreeMap<Value, Value> = [(Value::from("Circle"), Value::U64(9))].into();
        assert_eq!(from_value::<Shape>(&Value::Map(map)), Ok(Shape::Circle(9)));
        let err = from_value::<Shape>(&Value::from("Circle")).expect_err("needs a payload");
        assert!(err.message.contains("newtype variant"), "{err}");
        let err = from_value::<Shape>(&Value::from("Hexagon")).expect_err("unknown variant");
        assert!(err.message.contains("unknown variant"), "{err}");
        let err = from_value::<Shape>(&Value::U64(1)).expect_err("not an enum");
        assert!(err.message.contains("invalid type"), "{err}");
    }

    #[test]
    fn skipped_fields_are_absent_and_default_back() {
        let sparse = Sparse {
            always: 1,
            maybe: None,
            list: vec![],
            never: 99,
        };
        let value = to_value(&sparse).expect("to_value");
        let expected: BTreeMap<Value, Value> = [(Value::from("always"), Value::U64(1))].into();
        assert_eq!(value, Value::Map(expected));
        let back: Sparse = roundtrip(&sparse);
        assert_eq!(
            back,
            Sparse {
                always: 1,
                maybe: None,
                list: vec![],
                never: 0
            }
        );
        let full = Sparse {
            always: 2,
            maybe: Some(3),
            list: vec![4],
            never: 0,
        };
        assert_roundtrip(full);
    }

    #[test]
    fn flatten_tagged_and_untagged_enums_round_trip() {
        #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
        enum Mode {
            Fast,
            Slow { factor: u32 },
            Named(String),
        }
        #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
        struct Extra {
            mode: Mode,
            other: Mode,
            note: String,
        }
        #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
        struct WithFlatten {
            id: u32,
            #[serde(flatten)]
            extra: Extra,
        }
        #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
        #[serde(tag = "type")]
        enum Tagged {
            A { mode: Mode },
            B(Inner),
        }
        #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
        #[serde(untagged)]
        enum Untagged {
            Num(u64),
            Text(String),
            Moded { mode: Mode },
        }
        assert_roundtrip(WithFlatten {
            id: 7,
            extra: Extra {
                mode: Mode::Slow { factor: 3 },
                other: Mode::Fast,
                note: "n".into(),
            },
        });
        assert_roundtrip(Tagged::A {
            mode: Mode::Named("x".into()),
        });
        assert_roundtrip(Tagged::B(sample_inner("b")));
        assert_roundtrip(vec![
            Untagged::Num(1),
            Untagged::Text("t".into()),
            Untagged::Moded { mode: Mode::Fast },
        ]);
    }

    #[test]
    fn std_types_use_compact_form() {
        use std::net::{IpAddr, Ipv6Addr, SocketAddr};
        use std::time::Duration;
        assert_roundtrip(IpAddr::from([10, 0, 0, 1]));
        assert_roundtrip(IpAddr::from(Ipv6Addr::LOCALHOST));
        assert_roundtrip(SocketAddr::from(([127, 0, 0, 1], 8080)));
        assert_roundtrip(Duration::new(5, 123));
        // Not human readable: an IP address is not a string.
        let ip = to_value(&IpAddr::from([10, 0, 0, 1])).expect("to_value");
        assert_eq!(ip.kind(), "enum");
    }

    // -- Value itself through serde ------------------------------------------

    fn every_kind() -> Value {
        let mut map = BTreeMap::new();
        map.insert(Value::from("k"), Value::I128(-5));
        map.insert(Value::U64(1), Value::Bytes(vec![1, 2]));
        map.insert(
            enum_value("Key", Value::Unit),
            Value::Some(Box::new(Value::None)),
        );
        Value::Seq(vec![
            Value::Unit,
            Value::Bool(true),
            Value::I64(-1),
            Value::U64(2),
            Value::U128(u128::MAX),
            Value::F64(f64::NAN),
            Value::F64(-0.0),
            Value::Char('🦀'),
            Value::from("s"),
            Value::Bytes(vec![]),
            Value::None,
            Value::Some(Box::new(Value::Some(Box::new(Value::Unit)))),
            Value::Map(map),
            enum_value("Unit", Value::Unit),
            enum_value("Newtype", enum_value("Nested", Value::U64(1))),
            enum_value("Tuple", Value::Seq(vec![Value::Unit])),
            enum_value("Struct", Value::Map(BTreeMap::new())),
        ])
    }

    #[test]
    fn value_serde_is_identity() {
        let value = every_kind();
        assert_eq!(to_value(&value), Ok(value.clone()));
        assert_eq!(from_value::<Value>(&value), Ok(value.clone()));
        // As a field of a user type, through the full pipeline.
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Holder {
            v: Value,
            list: Vec<Value>,
        }
        assert_roundtrip(Holder {
            v: value.clone(),
            list: vec![value, Value::None],
        });
    }

    #[test]
    fn deserialize_any_sees_enum_as_single_entry_map() {
        // What generic consumers (e.g. serde's buffering) observe.
        let value = enum_value("V", Value::U64(1));
        let as_map: BTreeMap<String, u64> = from_value(&value).expect("enum as map");
        assert_eq!(as_map, [("V".to_owned(), 1)].into());
    }

    // -- errors and borrowing ------------------------------------------------

    #[test]
    fn type_mismatches_are_errors() {
        let err = from_value::<u64>(&Value::from("x")).expect_err("string into u64");
        assert!(err.message.starts_with("invalid type"), "{err}");
        assert!(err.to_string().contains("u64"), "{err}");

        let err = from_value::<u8>(&Value::U64(300)).expect_err("300 into u8");
        assert!(err.message.contains("300"), "{err}");
        assert!(from_value::<i8>(&Value::I64(-200)).is_err());
        assert!(from_value::<u32>(&Value::I64(-1)).is_err());
        assert!(from_value::<i64>(&Value::I128(i128::MAX)).is_err());
        // serde's primitive visitors do not narrow 128-bit integers, even in
        // range; widening works.
        assert!(from_value::<i64>(&Value::I128(-3)).is_err());
        assert_eq!(from_value::<i128>(&Value::I64(-3)), Ok(-3));
        assert_eq!(from_value::<u128>(&Value::U64(3)), Ok(3));
        assert!(from_value::<bool>(&Value::Unit).is_err());
        assert!(from_value::<()>(&Value::Bool(true)).is_err());
        assert!(from_value::<String>(&Value::Seq(vec![])).is_err());
        assert!(from_value::<Vec<u32>>(&Value::from("abc")).is_err());
        assert!(from_value::<Shape>(&Value::Seq(vec![])).is_err());

        let err = from_value::<Inner>(&Value::Map(BTreeMap::new())).expect_err("missing field");
        assert!(err.message.contains("missing field"), "{err}");

        let three = Value::Seq(vec![Value::U64(1), Value::U64(2), Value::U64(3)]);
        let err = from_value::<(u8, u8)>(&three).expect_err("trailing element");
        assert!(err.message.contains("invalid length 3"), "{err}");

        let wrong_payload = enum_value("Rect", Value::U64(1));
        assert!(from_value::<Shape>(&wrong_payload).is_err());
        let wrong_unit = enum_value("Empty", Value::U64(1));
        assert!(from_value::<Shape>(&wrong_unit).is_err());
    }

    #[test]
    fn lenient_reads() {
        assert_eq!(from_value::<Option<u8>>(&Value::U64(3)), Ok(Some(3)));
        assert_eq!(from_value::<Option<u8>>(&Value::Unit), Ok(None));
        assert_eq!(from_value::<()>(&Value::None), Ok(()));
        let seq = Value::Seq(vec![Value::U64(1), Value::U64(2)]);
        let bytes: serde_bytes::ByteBuf = from_value(&seq).expect("seq as bytes");
        assert_eq!(bytes.as_ref(), &[1, 2]);
        assert!(from_value::<serde_bytes::ByteBuf>(&Value::Seq(vec![Value::U64(256)])).is_err());
        assert_eq!(from_value::<f64>(&Value::U64(2)), Ok(2.0));
    }

    #[test]
    fn from_value_borrows() {
        let value = Value::from("hello");
        let s: &str = from_value(&value).expect("borrowed str");
        let Value::String(owned) = &value else {
            panic!("not a string");
        };
        assert_eq!(s, "hello");
        assert!(std::ptr::eq(s.as_ptr(), owned.as_ptr()));

        let value = Value::Bytes(vec![1, 2, 3]);
        let b: &[u8] = from_value(&value).expect("borrowed bytes");
        assert_eq!(b, &[1, 2, 3]);

        #[derive(Deserialize)]
        struct Borrowing<'a> {
            name: &'a str,
        }
        let value =
            to_value(&[("name", "n")].into_iter().collect::<BTreeMap<_, _>>()).expect("to_value");
        let borrowed: Borrowing<'_> = from_value(&value).expect("borrowing struct");
        assert_eq!(borrowed.name, "n");
    }

    #[test]
    fn serializer_misuse_is_an_error() {
        struct ValueWithoutKey;
        impl Serialize for ValueWithoutKey {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(None)?;
                map.serialize_value(&1u8)?;
                map.end()
            }
        }
        struct KeyWithoutValue;
        impl Serialize for KeyWithoutValue {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(None)?;
                map.serialize_key(&1u8)?;
                map.end()
            }
        }
        struct KeyThenValue;
        impl Serialize for KeyThenValue {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(None)?;
                map.serialize_key(&1u8)?;
                map.serialize_value("one")?;
                map.end()
            }
        }
        assert!(to_value(&ValueWithoutKey).is_err());
        assert!(to_value(&KeyWithoutValue).is_err());
        let expected: BTreeMap<Value, Value> = [(Value::U64(1), Value::from("one"))].into();
        assert_eq!(to_value(&KeyThenValue), Ok(Value::Map(expected)));
    }

    // -- Display, kind, From ---------------------------------------------------

    #[test]
    fn display_is_pinned() {
        let mut fields = BTreeMap::new();
        fields.insert(Value::from("b"), Value::F64(1.0));
        fields.insert(Value::from("a"), Value::Some(Box::new(Value::I64(-3))));
        let mut map = BTreeMap::new();
        map.insert(Value::from("name"), Value::from("x\"y\n"));
        map.insert(Value::U64(7), Value::Bytes(vec![b'a', 0, 255, b'"']));
        map.insert(
            Value::from("list"),
            Value::Seq(vec![
                Value::Unit,
                Value::None,
                Value::Bool(false),
                Value::Char('c'),
                Value::F64(f64::NAN),
                Value::F64(f64::INFINITY),
                Value::U128(u128::MAX),
            ]),
        );
        map.insert(
            Value::from("shapes"),
            Value::Seq(vec![
                enum_value("Empty", Value::Unit),
                enum_value("Circle", Value::U64(3)),
                enum_value("Rect", Value::Seq(vec![Value::I64(1), Value::I64(2)])),
                enum_value("Poly", Value::Map(fields)),
            ]),
        );
        map.insert(Value::from("empty"), Value::Map(BTreeMap::new()));
        let value = Value::Map(map);
        assert_eq!(
            value.to_string(),
            concat!(
                r#"{7: b"a\x00\xff\"", "empty": {}, "list": [(), null, false, 'c', NaN, inf, "#,
                r#"340282366920938463463374607431768211455], "name": "x\"y\n", "#,
                r#""shapes": [Empty, Circle(3), Rect[1, 2], Poly{"a": -3, "b": 1.0}]}"#,
            )
        );
    }

    #[test]
    fn kind_names() {
        let kinds: Vec<&str> = match every_kind() {
            Value::Seq(items) => items.iter().map(Value::kind).collect(),
            other => panic!("unexpected {other}"),
        };
        assert_eq!(
            kinds,
            [
                "unit", "bool", "i64", "u64", "u128", "f64", "f64", "char", "string", "bytes",
                "none", "some", "map", "enum", "enum", "enum", "enum"
            ]
        );
        assert_eq!(Value::I128(0).kind(), "i128");
        assert_eq!(Value::Seq(vec![]).kind(), "seq");
    }

    #[test]
    fn from_primitives() {
        assert_eq!(Value::from(true), Value::Bool(true));
        assert_eq!(Value::from(-1i8), Value::I64(-1));
        assert_eq!(Value::from(-1i16), Value::I64(-1));
        assert_eq!(Value::from(-1i32), Value::I64(-1));
        assert_eq!(Value::from(-1i64), Value::I64(-1));
        assert_eq!(Value::from(1u8), Value::U64(1));
        assert_eq!(Value::from(1u16), Value::U64(1));
        assert_eq!(Value::from(1u32), Value::U64(1));
        assert_eq!(Value::from(1u64), Value::U64(1));
        assert_eq!(Value::from(-1i128), Value::I128(-1));
        assert_eq!(Value::from(1u128), Value::U128(1));
        assert_eq!(Value::from(1.5f32), Value::F64(1.5));
        assert_eq!(Value::from(1.5f64), Value::F64(1.5));
        assert_eq!(Value::from('z'), Value::Char('z'));
        assert_eq!(Value::from("s"), Value::String("s".into()));
        assert_eq!(Value::from(String::from("s")), Value::String("s".into()));
        // From agrees with to_value.
        assert_eq!(to_value(&7u16), Ok(Value::from(7u16)));
        assert_eq!(to_value("s"), Ok(Value::from("s")));
    }

    // -- Eq / Ord / Hash -------------------------------------------------------

    fn hash_of(value: &Value) -> u64 {
        use std::collections::hash_map::DefaultHasher;
        let mut hasher = DefaultHasher::new();
        value.hash(&mut hasher);
        hasher.finish()
    }

    #[test]
    fn eq_ord_hash_are_consistent_for_floats() {
        let nan = Value::F64(f64::NAN);
        let other_nan = Value::F64(f64::from_bits(f64::NAN.to_bits() | 1));
        let zero = Value::F64(0.0);
        let neg_zero = Value::F64(-0.0);

        assert_eq!(nan, nan.clone());
        assert_eq!(nan.cmp(&nan.clone()), Ordering::Equal);
        assert_eq!(hash_of(&nan), hash_of(&nan.clone()));
        assert_ne!(nan, other_nan);
        assert_ne!(nan.cmp(&other_nan), Ordering::Equal);

        assert_ne!(zero, neg_zero);
        assert_eq!(neg_zero.cmp(&zero), Ordering::Less);
        assert_eq!(zero.partial_cmp(&neg_zero), Some(Ordering::Greater));

        let mut set = BTreeSet::new();
        set.insert(nan.clone());
        set.insert(nan.clone());
        set.insert(zero.clone());
        set.insert(neg_zero.clone());
        assert_eq!(set.len(), 3);
        let hashed: HashSet<Value> = [nan.clone(), nan, zero, neg_zero].into();
        assert_eq!(hashed.len(), 3);
    }

    #[test]
    fn eq_ord_hash_are_consistent_across_values() {
        let Value::Seq(mut items) = every_kind() else {
            panic!("every_kind is a seq");
        };
        items.push(Value::I64(1));
        items.push(Value::U64(1));
        items.push(Value::I128(1));
        items.push(Value::from("a"));
        items.push(Value::from("b"));
        for a in &items {
            for b in &items {
                let ord = a.cmp(b);
                assert_eq!(ord, b.cmp(a).reverse(), "antisymmetry {a} {b}");
                assert_eq!(ord == Ordering::Equal, a == b, "eq/cmp {a} {b}");
                assert_eq!(a.partial_cmp(b), Some(ord));
                if a == b {
                    assert_eq!(hash_of(a), hash_of(b));
                }
            }
        }
        // Different variants never compare equal.
        assert_ne!(Value::I64(1), Value::U64(1));
        assert_ne!(Value::Unit, Value::None);
        // Sorting is consistent (transitivity spot check).
        let mut sorted = items.clone();
        sorted.sort();
        for pair in sorted.windows(2) {
            assert!(pair[0] <= pair[1]);
        }
    }

    // -- bincode -------------------------------------------------------------

    #[test]
    fn wire_format_is_pinned() {
        assert_eq!(encode(&Value::Unit), [0]);
        assert_eq!(encode(&Value::Bool(true)), [1, 1]);
        assert_eq!(encode(&Value::I64(-1)), [2, 1]);
        assert_eq!(encode(&Value::U64(5)), [3, 5]);
        assert_eq!(encode(&Value::F64(1.0)), [6, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f]);
        assert_eq!(encode(&Value::Char('a')), [7, b'a']);
        assert_eq!(encode(&Value::from("ab")), [8, 2, b'a', b'b']);
        assert_eq!(encode(&Value::Bytes(vec![7])), [9, 1, 7]);
        assert_eq!(encode(&Value::None), [10]);
        assert_eq!(encode(&Value::Some(Box::new(Value::Unit))), [11, 0]);
        assert_eq!(encode(&Value::Seq(vec![Value::Unit])), [12, 1, 0]);
        let map: BTreeMap<Value, Value> = [(Value::Unit, Value::None)].into();
        assert_eq!(encode(&Value::Map(map)), [13, 1, 0, 10]);
        assert_eq!(encode(&enum_value("E", Value::Unit)), [14, 1, b'E', 0]);
        assert_eq!(encode(&Value::I128(1)), [4, 2]);
        assert_eq!(encode(&Value::U128(1)), [5, 1]);
    }

    #[test]
    fn bincode_round_trip_of_every_kind_and_with_other_configs() {
        let value = every_kind();
        assert_eq!(decode(&encode(&value)).expect("decode"), value);

        let legacy = config::legacy();
        let bytes = bincode::encode_to_vec(&value, legacy).expect("encode legacy");
        let (back, _): (Value, usize) =
            bincode::decode_from_slice(&bytes, legacy).expect("decode legacy");
        assert_eq!(back, value);

        let limited = config::standard().with_limit::<4096>();
        let (back, _): (Value, usize) =
            bincode::decode_from_slice(&encode(&value), limited).expect("decode limited");
        assert_eq!(back, value);
    }

    #[test]
    fn derived_bincode_types_can_hold_values() {
        #[derive(bincode::Encode, bincode::Decode, Debug, PartialEq)]
        struct Checkpoint {
            seq: u64,
            context: BTreeMap<String, Value>,
            last: Value,
            history: Vec<Value>,
        }
        let checkpoint = Checkpoint {
            seq: 9,
            context: [
                (
                    "outer".to_owned(),
                    to_value(&sample_outer()).expect("to_value"),
                ),
                (
                    "shape".to_owned(),
                    to_value(&Shape::Rect(1, "r".into())).expect("to_value"),
                ),
            ]
            .into(),
            last: every_kind(),
            history: vec![Value::None, Value::U64(1)],
        };
        let bytes = bincode::encode_to_vec(&checkpoint, config::standard()).expect("encode");
        let (back, read): (Checkpoint, usize) =
            bincode::decode_from_slice(&bytes, config::standard()).expect("decode");
        assert_eq!(read, bytes.len());
        assert_eq!(back, checkpoint);
        let (borrowed, _): (Checkpoint, usize) =
            bincode::borrow_decode_from_slice(&bytes, config::standard()).expect("borrow decode");
        assert_eq!(borrowed, checkpoint);
        let outer: Outer = from_value(&back.context["outer"]).expect("from_value");
        assert_eq!(outer, sample_outer());
    }

    #[test]
    fn depth_limit_boundary() {
        let deepest_ok = nested_some(MAX_DEPTH);
        assert_eq!(decode(&encode(&deepest_ok)).expect("decode"), deepest_ok);

        let too_deep = nested_some(MAX_DEPTH + 1);
        assert!(bincode::encode_to_vec(&too_deep, config::standard()).is_err());

        let mut bytes = vec![tag::SOME; MAX_DEPTH + 1];
        bytes.push(tag::UNIT);
        let err = decode(&bytes).expect_err("too deep");
        assert!(err.to_string().contains("MAX_DEPTH"), "{err}");

        // Sequences count too.
        let mut bytes = Vec::new();
        for _ in 0..=MAX_DEPTH {
            bytes.extend([tag::SEQ, 1]);
        }
        bytes.push(tag::UNIT);
        assert!(decode(&bytes).is_err());
    }

    #[test]
    fn ten_thousand_nested_some_tags_error_without_overflow() {
        let mut bytes = vec![tag::SOME; 10_000];
        bytes.push(tag::UNIT);
        let err = decode(&bytes).expect_err("must be rejected");
        assert!(err.to_string().contains("MAX_DEPTH"), "{err}");
        // Same with an unterminated chain of enums.
        let mut bytes = Vec::new();
        for _ in 0..10_000 {
            bytes.extend([tag::ENUM, 1, b'E']);
        }
        assert!(decode(&bytes).is_err());
    }

    #[test]
    fn unknown_tags_error() {
        for bad in [15u8, 99, 200, 255] {
            let err = decode(&[bad]).expect_err("unknown tag");
            let text = err.to_string();
            assert!(text.contains(&bad.to_string()), "{text}");
            assert!(
                matches!(err, DecodeError::UnexpectedVariant { found, .. } if found == u32::from(bad))
            );
        }
        // Nested unknown tag.
        assert!(decode(&[tag::SEQ, 1, 42]).is_err());
    }

    #[test]
    fn invalid_payloads_error() {
        assert!(decode(&[]).is_err());
        assert!(decode(&[tag::BOOL, 2]).is_err());
        assert!(decode(&[tag::CHAR, 0xff]).is_err());
        assert!(decode(&[tag::STRING, 2, 0xc3, 0x28]).is_err()); // invalid UTF-8
        assert!(decode(&[tag::STRING, 5, b'a']).is_err()); // truncated
        assert!(decode(&[tag::F64, 0, 0]).is_err());
        // Duplicate map keys.
        let err = decode(&[tag::MAP, 2, tag::UNIT, tag::UNIT, tag::UNIT, tag::NONE])
            .expect_err("duplicate key");
        assert!(err.to_string().contains("duplicate"), "{err}");
    }

    #[test]
    fn huge_claimed_lengths_do_not_allocate_or_panic() {
        let huge = |tag: u8| {
            let mut bytes = vec![tag, 253]; // varint marker for a u64
            bytes.extend(u64::MAX.to_le_bytes());
            bytes.extend([tag::UNIT, tag::UNIT, tag::UNIT]);
            bytes
        };
        for t in [tag::STRING, tag::BYTES, tag::SEQ, tag::MAP] {
            let err = decode(&huge(t)).expect_err("claimed length exceeds input");
            assert!(
                matches!(
                    err,
                    DecodeError::UnexpectedEnd { .. } | DecodeError::OutsideUsizeRange(_)
                ),
                "{err}"
            );
        }
        let limited = config::standard().with_limit::<1024>();
        let res: Result<(Value, usize), _> = bincode::decode_from_slice(&huge(tag::BYTES), limited);
        assert!(matches!(res, Err(DecodeError::LimitExceeded)));
        let res: Result<(Value, usize), _> = bincode::decode_from_slice(&huge(tag::SEQ), limited);
        assert!(matches!(res, Err(DecodeError::LimitExceeded)));
    }

    #[test]
    fn owned_value_deserializes_to_itself() {
        let nan = Value::F64(f64::from_bits(0x7ff8_dead_beef_0001));
        for value in [
            every_kind(),
            nan,
            Value::I128(i128::MIN),
            Value::I64(i64::MIN),
            Value::U64(u64::MAX),
            Value::Some(Box::new(every_kind())),
            enum_value("Deep", Value::Seq(vec![every_kind(), Value::None])),
        ] {
            let back = Value::deserialize(OwnedValue(value.clone())).expect("deserializes");
            assert_eq!(back, value);
        }
        // Strings and byte buffers are moved, not copied.
        let bytes = vec![7u8; 1 << 16];
        let ptr = bytes.as_ptr();
        match Value::deserialize(OwnedValue(Value::Bytes(bytes))) {
            Ok(Value::Bytes(back)) => assert_eq!(back.as_ptr(), ptr),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn byte_buffers_decode_from_readers_that_cannot_peek() {
        // `io::Read` sources cannot show whether the claimed bytes are there:
        // buffers grow step by step, across the step sizes.
        let sizes = [
            0,
            1,
            FIRST_CHUNK - 1,
            FIRST_CHUNK,
            FIRST_CHUNK + 1,
            3 * FIRST_CHUNK + 7,
            BYTE_CHUNK,
            BYTE_CHUNK + 1,
            5 * BYTE_CHUNK / 2,
        ];
        for size in sizes {
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let text = "ü".repeat(size / 2) + &"x".repeat(size % 2);
            for value in [Value::Bytes(bytes.clone()), Value::String(text.clone())] {
                let encoded = encode(&value);
                let back: Value =
                    bincode::decode_from_std_read(&mut &encoded[..], config::standard())
                        .expect("decodes from a reader");
                assert_eq!(back, value, "size {size}");
                assert_eq!(decode(&encoded).expect("decodes from a slice"), value);
            }
        }
        // A claim beyond the input fails from a reader too.
        let mut claim = vec![tag::BYTES, 252];
        claim.extend(((1u32 << 30) - 1).to_le_bytes());
        claim.extend([1, 2, 3]);
        let res: Result<Value, _> =
            bincode::decode_from_std_read(&mut &claim[..], config::standard());
        assert!(res.is_err());
        assert!(decode(&claim).is_err());
    }

    /// Tiny deterministic xorshift64 RNG.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % (n as u64)).expect("fits")
        }
    }

    #[test]
    fn random_mutations_never_panic() {
        let mut context = BTreeMap::new();
        context.insert(
            Value::from("outer"),
            to_value(&sample_outer()).expect("to_value"),
        );
        context.insert(Value::from("all"), every_kind());
        context.insert(
            Value::from("shapes"),
            to_value(&vec![
                Shape::Empty,
                Shape::Poly {
                    sides: 3,
                    label: Some("t".into()),
                },
            ])
            .expect("to_value"),
        );
        let original = encode(&Value::Map(context));
        assert!(original.len() > 200);

        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let (mut ok, mut failed) = (0u32, 0u32);
        for _ in 0..20_000 {
            let mut bytes = original.clone();
            for _ in 0..=rng.below(3) {
                match rng.below(4) {
                    0 => bytes.truncate(rng.below(bytes.len() + 1)),
                    1 if !bytes.is_empty() => {
                        let i = rng.below(bytes.len());
                        bytes[i] ^= 1 << rng.below(8);
                    }
                    2 if !bytes.is_empty() => {
                        let i = rng.below(bytes.len());
                        bytes[i] = rng.next().to_le_bytes()[0];
                    }
                    _ => {
                        let i = rng.below(bytes.len() + 1);
                        bytes.insert(i, rng.next().to_le_bytes()[0]);
                    }
                }
            }
            let outcome = std::panic::catch_unwind(|| {
                bincode::decode_from_slice::<Value, _>(&bytes, config::standard())
            });
            match outcome {
                Ok(Ok((value, _))) => {
                    ok += 1;
                    // Whatever decodes re-encodes to a decodable value.
                    let again = encode(&value);
                    assert_eq!(decode(&again).expect("re-decode"), value);
                    let _ = value.to_string();
                }
                Ok(Err(_)) => failed += 1,
                Err(_) => panic!("decode panicked on input {bytes:?}"),
            }
        }
        assert_eq!(ok + failed, 20_000);
        assert!(
            ok > 0,
            "some mutations (e.g. in payload bytes) should still decode"
        );
        assert!(failed > 0, "some mutations should be rejected");
    }

    // ---- limits: the footprint is the decoder's own count -----------------

    /// A context entry as a checkpoint holds it: the key, then the value.
    #[derive(Debug, PartialEq)]
    struct Entry(String, Value);

    impl<C> Decode<C> for Entry {
        fn decode<D: Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
            Ok(Entry(decode_string(d)?, Value::decode(d)?))
        }
    }

    fn entry_bytes(key: &str, value: &Value) -> Vec<u8> {
        bincode::encode_to_vec((key, value), config::standard()).expect("encodable")
    }

    /// Decodes an entry with the decoder's limit set to `L`.
    fn decode_within<const L: usize>(bytes: &[u8]) -> Result<Entry, DecodeError> {
        let (entry, used) =
            bincode::decode_from_slice::<Entry, _>(bytes, config::standard().with_limit::<L>())?;
        assert_eq!(used, bytes.len());
        Ok(entry)
    }

    /// Values growing with `n`, one kind per way of reaching the limit.
    fn grow(kind: usize, n: usize) -> Value {
        let n64 = n as u64;
        match kind {
            0 => Value::Seq(vec![Value::Unit; n]),
            1 => Value::Seq(vec![Value::U64(u64::MAX); n]),
            2 => Value::Map(
                (0..n64)
                    .map(|i| (Value::U64(i), Value::Bool(true)))
                    .collect(),
            ),
            3 => Value::String("é".repeat(n / 2) + &"x".repeat(n % 2)),
            4 => Value::Bytes(vec![7; n]),
            5 => Value::Enum {
                variant: "v".repeat(n),
                value: Box::new(Value::I128(i128::MIN)),
            },
            // Strings inside a sequence: the budget grows with each one read
            // while the sequence's up-front charge shrinks.
            6 => Value::Seq((0..n).map(|i| Value::String("s".repeat(i % 70))).collect()),
            // A map of sequences, inside `Some`.
            7 => Value::Some(Box::new(Value::Map(
                (0..n64)
                    .map(|i| {
                        (
                            Value::I64(-(i as i64)),
                            Value::Seq(vec![Value::F64(0.5); (i % 5) as usize]),
                        )
                    })
                    .collect(),
            ))),
            _ => Value::Seq(vec![Value::Char('€'); n]),
        }
    }
    const KINDS: usize = 9;

    /// For every kind of value, at limit `L`: the largest value the check
    /// accepts decodes (and round-trips) with the decoder's limit at `L`, and
    /// one element more is refused by both; in between, the footprint's
    /// encoded size is the encoding's length and its peak is exactly what
    /// the decoder's limit sees.
    fn boundary_at<const L: usize>() {
        let limit = L as u64;
        for kind in 0..KINDS {
            let key = format!("key-{kind}");
            let mut n = 0;
            while check_entry(&key, &grow(kind, n + 1), limit).is_ok() {
                n += 1;
            }
            let at = grow(kind, n);
            let past = grow(kind, n + 1);
            let bytes = entry_bytes(&key, &at);
            let fp = entry_footprint(&key, &at).expect("shallow");
            assert_eq!(fp.encoded, bytes.len() as u64, "kind {kind}, n {n}");
            assert!(fp.size() <= limit, "kind {kind}, n {n}");
            assert_eq!(
                decode_within::<L>(&bytes).expect("at the limit decodes"),
                Entry(key.clone(), at),
                "kind {kind}, n {n}"
            );
            match check_entry(&key, &past, limit) {
                Err(Error::ValueTooLarge {
                    key: k,
                    size,
                    limit: l,
                }) => {
                    assert_eq!((k.as_str(), l), (key.as_str(), limit));
                    assert!(size > limit);
                }
                other => panic!("kind {kind}, n {}: {other:?}", n + 1),
            }
            let bytes = entry_bytes(&key, &past);
            let fp = entry_footprint(&key, &past).expect("shallow");
            assert_eq!(fp.encoded, bytes.len() as u64, "kind {kind}, n {}", n + 1);
            // Past the limit: the decoder refuses it, or (when only the
            // encoded length is past) `from_bytes`'s payload limit does.
            if fp.peak > limit {
                assert!(
                    matches!(decode_within::<L>(&bytes), Err(DecodeError::LimitExceeded)),
                    "kind {kind}, n {}",
                    n + 1
                );
            } else {
                assert!(fp.encoded > limit, "kind {kind}, n {}", n + 1);
                decode_within::<L>(&bytes).expect("within the budget");
            }
        }
    }

    #[test]
    fn the_size_check_is_exactly_the_decoders_limit_at_every_boundary() {
        boundary_at::<40>();
        boundary_at::<100>();
        boundary_at::<333>();
        boundary_at::<1000>();
        boundary_at::<4096>();
        boundary_at::<20_000>();
    }

    /// Deterministic pseudo-random values of every kind, nested up to `depth`.
    fn arbitrary(seed: &mut u64, depth: usize) -> Value {
        let mut next = || {
            *seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            *seed >> 33
        };
        let pick = next() % if depth == 0 { 11 } else { 15 };
        let small = next() % 300;
        let big = next() << 40 | next();
        match pick {
            0 => Value::Unit,
            1 => Value::Bool(small % 2 == 0),
            2 => Value::I64(if small % 2 == 0 {
                -(big as i64)
            } else {
                small as i64
            }),
            3 => Value::U64(if small % 3 == 0 { big } else { small }),
            4 => Value::I128(-(i128::from(big) << (small % 70))),
            5 => Value::U128(u128::from(big) << (small % 70)),
            6 => Value::F64(small as f64 / 7.0),
            7 => Value::Char(char::from_u32(small as u32 * 97).unwrap_or('x')),
            8 => Value::String("ü".repeat(small as usize % 40)),
            9 => Value::Bytes(vec![1; small as usize]),
            10 => Value::None,
            11 => Value::Some(Box::new(arbitrary(seed, depth - 1))),
            12 => Value::Seq((0..small % 6).map(|_| arbitrary(seed, depth - 1)).collect()),
            13 => Value::Map(
                (0..small % 5)
                    .map(|_| (arbitrary(seed, 0), arbitrary(seed, depth - 1)))
                    .collect(),
            ),
            _ => Value::Enum {
                variant: "variant".repeat(small as usize % 3),
                value: Box::new(arbitrary(seed, depth - 1)),
            },
        }
    }

    fn agrees_at<const L: usize>(key: &str, value: &Value) {
        let bytes = entry_bytes(key, value);
        let fp = entry_footprint(key, value).expect("shallow");
        assert_eq!(fp.encoded, bytes.len() as u64, "{value}");
        assert_eq!(
            decode_within::<L>(&bytes).is_ok(),
            fp.peak <= L as u64,
            "limit {L}, peak {}: {value}",
            fp.peak
        );
        assert_eq!(
            check_entry(key, value, L as u64).is_ok(),
            fp.peak <= L as u64 && bytes.len() <= L
        );
    }

    #[test]
    fn the_size_check_agrees_with_the_decoder_on_arbitrary_values() {
        let mut seed = 8;
        for i in 0..2000 {
            let value = arbitrary(&mut seed, 1 + i % 5);
            let key = "k".repeat(i % 4);
            agrees_at::<64>(&key, &value);
            agrees_at::<256>(&key, &value);
            agrees_at::<1024>(&key, &value);
            agrees_at::<4096>(&key, &value);
        }
    }

    #[test]
    fn the_depth_check_is_the_encoders_and_decoders_limit() {
        let at = nested_some(MAX_DEPTH);
        assert!(check_context_value("k", &at).is_ok());
        assert_eq!(decode(&encode(&at)).expect("decodes"), at);
        match check_context_value("k", &nested_some(MAX_DEPTH + 1)) {
            Err(Error::ValueTooDeep { key, limit }) => {
                assert_eq!((key.as_str(), limit as usize), ("k", MAX_DEPTH));
            }
            other => panic!("{other:?}"),
        }
        // An enum's value and a tuple variant's fields are one and two
        // levels down.
        let mut v = Value::Unit;
        for _ in 0..MAX_DEPTH / 2 {
            v = Value::Enum {
                variant: "t".into(),
                value: Box::new(Value::Seq(vec![v])),
            };
        }
        assert!(check_context_value("k", &v).is_ok());
        let v = Value::Some(Box::new(v));
        assert!(check_context_value("k", &v).is_err());
        assert!(bincode::encode_to_vec(&v, config::standard()).is_err());
    }

    #[test]
    fn to_value_refuses_only_containers_no_checkpoint_can_hold() {
        // The largest lengths the early check lets through: with an empty key
        // at the top level, they fit exactly; one more cannot fit anywhere.
        for (slot, unit) in [(SEQ_SLOT, "elements"), (MAP_SLOT, "entries"), (1, "bytes")] {
            let limit = (MAX_PAYLOAD_U64 - CONTAINER_FLOOR) / slot as u64;
            assert!(check_len("x", unit, limit as usize, slot).is_ok());
            let err = check_len("x", unit, limit as usize + 1, slot).expect_err("refused");
            assert_eq!(
                err.too_large,
                Some(TooLarge {
                    size: limit + 1,
                    limit
                })
            );
            let mut fp = Footprint::string(0);
            fp.then(Footprint::item(1, 1));
            fp.then(if slot == 1 {
                Footprint::string(limit as usize)
            } else {
                container(limit as usize, slot)
            });
            assert!(fp.peak <= MAX_PAYLOAD_U64, "{unit}");
            assert!(fp.peak + slot as u64 > MAX_PAYLOAD_U64, "{unit}");
        }
        assert_eq!(SEQ_SLOT, 32, "the documented cost of a sequence element");
        // `to_value` reports it (`Context::set` turns it into `ValueTooLarge`).
        let err = to_value(&vec![0u8; 1 << 25]).expect_err("too long");
        assert!(err.message.contains("33554432 elements"), "{}", err.message);
        match to_context_value("blob", &vec![0u8; 1 << 25]) {
            Err(Error::ValueTooLarge { key, size, limit }) => {
                assert_eq!(
                    (key.as_str(), size, limit),
                    ("blob", 1 << 25, (1 << 25) - 1)
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
