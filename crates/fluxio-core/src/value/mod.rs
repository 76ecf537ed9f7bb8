//! Context values: their self-describing wire format, the [`Value`] tree
//! that describes one without its Rust type, and the limits.
//!
//! A [`Context`](crate::Context) keeps every value as its encoding, the
//! bytes a checkpoint stores:
//!
//! * on write ([`Context::set`](crate::Context::set)), a serde type is
//!   serialized straight into bytes by a byte-writing
//!   [`serde::Serializer`]; no [`Value`] is built, and the limits below are
//!   enforced while writing;
//! * on read ([`Context::get`](crate::Context::get)), it is deserialized
//!   straight from the bytes by a self-describing [`serde::Deserializer`]
//!   (`deserialize_any` works, so untagged and internally tagged enums and
//!   flattened structs read back);
//! * a [`Value`] is built only when one is asked for
//!   ([`Context::value`](crate::Context::value), `iter`, a diff), and then
//!   kept beside the bytes: values nobody inspects cost their encoded size.
//!   [`to_value`] and [`from_value`] convert between serde types and
//!   [`Value`]s the same way.
//!
//! The round trip is lossless for every type of the serde data model
//! (128-bit integers, `-0.0` and NaN payloads, `f32`s in sequences kept as
//! `f32`s, `Option<Option<T>>`, byte buffers, maps with non-string keys, all
//! enum variant kinds...). Decoding untrusted or corrupt bytes never panics:
//! the nesting depth is bounded by [`MAX_DEPTH`], unknown tags are rejected
//! and lengths are never trusted beyond the bytes present.
//!
//! ## Wire format
//!
//! One tag byte, then the payload. Integers are bincode 2's `standard()`
//! varints (a value below 251 is one byte; 251, 252, 253 and 254 announce a
//! little-endian `u16`, `u32`, `u64` and `u128`), signed ones zigzagged;
//! a length is such a varint; strings are a length and UTF-8 bytes.
//!
//! | tag | variant  | payload                                   |
//! |-----|----------|-------------------------------------------|
//! | 0   | `Unit`   | —                                         |
//! | 1   | `Bool`   | one byte, 0 or 1                          |
//! | 2   | `I64`    | zigzag varint                             |
//! | 3   | `U64`    | varint                                    |
//! | 4   | `I128`   | zigzag varint (128-bit)                   |
//! | 5   | `U128`   | varint (128-bit)                          |
//! | 6   | `F64`    | 8 bytes, the raw IEEE-754 bits, LE        |
//! | 7   | `Char`   | its UTF-8 bytes (1 to 4)                  |
//! | 8   | `String` | length + UTF-8 bytes                      |
//! | 9   | `Bytes`  | length + bytes                            |
//! | 10  | `None`   | —                                         |
//! | 11  | `Some`   | a value                                   |
//! | 12  | `Seq`    | count + values                            |
//! | 13  | `Map`    | count + key/value pairs, in canonical order |
//! | 14  | `Enum`   | variant name (a string) + a value         |
//! | 15 to 25 | `Packed` | count (at least 1) + the elements, fixed width, little endian: 15 `u8`, 16 `i8`, 17 `u16`, 18 `i16`, 19 `u32`, 20 `i32`, 21 `u64`, 22 `i64`, 23 `f32`, 24 `f64` (raw bits), 25 `bool` (one byte, 0 or 1) |
//!
//! The tags are part of the checkpoint format and are never renumbered
//! (tags 0 to 14 are those of checkpoint formats 1 and 2; 15 to 25 came with
//! format 3). The encoding is **canonical**: one value has one encoding, so
//! equal values have equal bytes, which context equality, diffs, cache keys
//! and the golden files rely on:
//!
//! * varints take their shortest form;
//! * a map's (and a struct's) entries are written in increasing order of
//!   their keys' encoded bytes (a shorter key first when one is a prefix of
//!   the other), each key once; serializing a map that yields one key twice
//!   keeps the last value;
//! * a sequence whose elements are all one of the eleven primitives is
//!   packed, with that primitive's tag: the writer starts packing at the
//!   first element and falls back to `Seq` at the first element of another
//!   type (a tuple `(1u8, 2u16)` is a `Seq`); newtype structs are
//!   transparent (`Vec<Meters(u32)>` is packed `u32`); an empty sequence is
//!   always an empty `Seq`. A [`Value::Seq`] stays a `Seq` when written, a
//!   [`Value::Packed`] packed, so a [`Value`] reads back as itself;
//! * outside a packed sequence, `f32` is widened to `F64` (exactly), and
//!   narrower integers to `I64`/`U64`.
//!
//! A checkpoint's decoder checks all of this (tags, UTF-8, chars, bools,
//! shortest varints, key order, non-empty packed sequences, depth) without
//! building a value, then copies the bytes as they are.
//!
//! ## Limits
//!
//! A checkpoint must be readable by the decoder that reads it back, and the
//! writer and the decoder enforce the same limits:
//!
//! * **depth**: at most [`MAX_DEPTH`] (128) levels of `Some`, sequences
//!   (packed ones included), maps and enums (a struct is a map, so a field of
//!   a struct is one level down);
//! * **size**: a key and its value's encoding take at most
//!   [`MAX_PAYLOAD`] (1 GiB), and a whole
//!   checkpoint's payload too. A value costs its encoded size, about its
//!   data's: a plain `Vec<u8>` one byte per byte (like `serde_bytes`), a
//!   `Vec<f32>` four bytes per element, a string its length plus a byte or
//!   few, a struct its fields plus their names.
//!
//! [`Context::set`](crate::Context::set) (and [`ctx!`](crate::ctx),
//! [`Context::update`](crate::Context::update), `Route::with`, a stream
//! stage's result) refuse a value past either limit as soon as the writer
//! reaches it (a sequence, string or byte buffer of known length before any
//! of it is copied), with [`Error::ValueTooDeep`](crate::Error::ValueTooDeep)
//! or [`Error::ValueTooLarge`](crate::Error::ValueTooLarge) naming the key,
//! on every store alike; [`to_context_value`] and [`check_context_value`]
//! are the same checks for other callers. A [`Value`] given to
//! [`Context::set_value`](crate::Context::set_value) is not checked there;
//! [`Checkpoint::to_bytes`](crate::store::Checkpoint::to_bytes) checks every
//! entry (in O(keys): each entry knows its size and depth) and the whole
//! payload before writing, so a checkpoint it encodes always decodes.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

// One file per idea: this one holds the `Value` tree with its equality,
// ordering, hashing and `From` conversions, and the module docs with the
// wire format and the limits; `packed` the packed sequences; `wire` the
// integer and string encodings and the bounds-checked cursor; `ser` the
// writer (serde types and values into bytes, `to_value`, `Serialize` for
// `Value`); `fast` its slice fast path (the crate's one `unsafe`); `read`
// bytes into serde types; `decode` bytes into values, and the canonical
// check a checkpoint's decoder runs; `de` values into serde types
// (`from_value`, `Deserialize` for `Value`); `encoded` how a context holds a
// value; `limits` the public checks; `encode` bincode's `Encode`/`Decode`
// for `Value` and the decoder of format 1 and 2 checkpoints' values;
// `display` the rendering for humans; `error` `ValueError`; `roundtrip`
// (tests) the round trips through all of them.
mod de;
mod decode;
mod display;
mod encode;
mod encoded;
mod error;
mod fast;
mod limits;
mod packed;
mod prim;
mod read;
#[cfg(test)]
mod roundtrip;
mod ser;
mod wire;

pub use de::from_value;
pub(crate) use decode::validate;
pub(crate) use encode::{decode_legacy, decode_string};
pub(crate) use encoded::{EncodedValue, check_entry, encode_entry, encode_within};
pub use error::ValueError;
pub use limits::{check_context_value, to_context_value};
pub use packed::Packed;
pub(crate) use read::{Encoded, from_encoded};
pub use ser::to_value;
pub(crate) use wire::{Cursor, WireError, varint_len};

/// Maximum nesting depth of a context value: what
/// [`Context::set`](crate::Context::set) accepts, a checkpoint's encoder
/// writes and its decoder reads.
///
/// The largest checkpoint payload this build writes and decodes (1 GiB):
/// [`Checkpoint::to_bytes`](crate::store::Checkpoint::to_bytes) refuses a
/// larger checkpoint, and a context value whose key and encoding alone take
/// more (see [the limits](self#limits)) is refused when it is set. Also
/// [`store::MAX_PAYLOAD`](crate::store::MAX_PAYLOAD).
pub const MAX_PAYLOAD: usize = 1 << 30;

/// The root value is at depth 0 and every `Some`, `Seq`, `Map` or `Enum`
/// increases the depth of its children by one; a value nested deeper than
/// `MAX_DEPTH` is rejected with an error (instead of overflowing the stack on
/// corrupt input): [`Error::ValueTooDeep`](crate::Error::ValueTooDeep) when
/// it is set on a context.
pub const MAX_DEPTH: usize = 128;

/// Upper bound on capacities pre-allocated from lengths read from untrusted
/// input by the bincode decoder; containers grow beyond it only as elements
/// are actually decoded.
const PREALLOC_LIMIT: usize = 256;

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
    /// The first packed tag: `PACKED_BASE + kind` for the eleven kinds
    /// (`packed::Kind`), 15 (`u8`) to 25 (`bool`).
    pub(super) const PACKED_BASE: u8 = 15;
    pub(super) const PACKED_LAST: u8 = 25;
}

/// A value of the serde data model, as a context's value reads without its
/// Rust type (see the [module documentation](self)).
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
    /// A float; `f32` is widened losslessly (except in a
    /// [`Value::Packed`] sequence of `f32`s).
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
    /// Sequences, tuples and tuple structs (those whose elements are all one
    /// primitive type are [`Value::Packed`]).
    Seq(Vec<Value>),
    /// Maps (with keys of any type) and structs (keys are
    /// `Value::String(field_name)`).
    Map(BTreeMap<Value, Value>),
    /// An enum variant.
    Enum {
        /// The variant name.
        variant: String,
        /// `Unit` for unit variants, the inner value for newtype variants,
        /// `Seq` (or `Packed`) for tuple variants and `Map` for struct
        /// variants.
        value: Box<Value>,
    },
    /// A non-empty sequence whose elements are all one primitive type (a
    /// `Vec<u8>`, a `Vec<f32>`, a `[u64; 4]`...), kept as a vector of it.
    Packed(Packed),
}

impl Value {
    /// A short name of the variant, for error messages: `"unit"`, `"bool"`,
    /// `"i64"`, `"u64"`, `"i128"`, `"u128"`, `"f64"`, `"char"`, `"string"`,
    /// `"bytes"`, `"none"`, `"some"`, `"seq"` (also for a packed
    /// sequence), `"map"` or `"enum"`.
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
            Value::Packed(_) => "seq",
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
            Value::Packed(p) => p.kind().tag(),
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
            (Value::Packed(a), Value::Packed(b)) => a.cmp(b),
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
            Value::Packed(p) => p.hash(state),
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

/// `Value::Enum { variant, value }`.
#[cfg(test)]
fn enum_value(variant: &str, value: Value) -> Value {
    Value::Enum {
        variant: variant.to_owned(),
        value: Box::new(value),
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;
    use std::collections::{BTreeSet, HashSet};

    use super::roundtrip::every_kind;
    use super::*;

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
                "none", "some", "map", "enum", "enum", "enum", "enum", "seq"
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
}
