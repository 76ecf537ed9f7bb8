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
//!   [`MAX_PAYLOAD`](crate::store::MAX_PAYLOAD) (1 GiB) per checkpoint, and it
//!   budgets what it builds, not just the bytes it reads: every element of a
//!   sequence costs `size_of::<Value>()` (32) bytes of that budget, every map
//!   entry twice that, a string or byte buffer its length plus 8, an integer
//!   its width. So a `Vec<u8>` (a sequence, one `Value` per byte) holds at most
//!   about 2<sup>25</sup> elements (32 MiB); store large binary data with
//!   `serde_bytes` (one byte per byte), or outside the context.
//!
//! [`Context::set`](crate::Context::set) (and [`ctx!`](crate::ctx),
//! [`Context::update`](crate::Context::update)) refuse a value past either
//! limit with [`Error::ValueTooDeep`](crate::Error::ValueTooDeep) or
//! [`Error::ValueTooLarge`](crate::Error::ValueTooLarge), naming the
//! key, on every store alike; [`to_context_value`] and
//! [`check_context_value`] are the same checks for other callers.
//! [`Checkpoint::to_bytes`](crate::store::Checkpoint::to_bytes) checks the
//! whole checkpoint the same way, so a checkpoint it encodes always decodes.

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
mod read;
#[cfg(test)]
mod roundtrip;
mod ser;
mod wire;

pub use de::from_value;
pub(crate) use decode::validate;
pub(crate) use encode::{decode_legacy, decode_string};
pub(crate) use encoded::{EncodedValue, check_entry, encode_entry};
pub use error::ValueError;
pub use limits::{check_context_value, to_context_value};
pub use packed::Packed;
pub(crate) use read::{Encoded, from_encoded};
pub use ser::to_value;
pub(crate) use wire::{Cursor, WireError, varint_len};

/// Maximum nesting depth of a [`Value`] accepted by the bincode encoder and
/// decoder, and by [`Context::set`](crate::Context::set).
///
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
