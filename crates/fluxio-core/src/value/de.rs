//! [`Value`]s into serde types: [`from_value`] and the `Deserializer` for
//! `&Value`, and `Deserialize` for `Value` itself.

use std::collections::BTreeMap;
use std::collections::btree_map;
use std::fmt;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeSeed, EnumAccess, MapAccess, SeqAccess, Unexpected, VariantAccess, Visitor,
};

use super::packed::{Kind, Packed, with_vec};
use super::{PREALLOC_LIMIT, Value, ValueError};

/// Private newtype-struct name used by `impl Deserialize for Value` so that
/// [`from_value`] (and the context's reader) can hand a [`Value::Enum`] over
/// as an enum and a [`Value::Packed`] as packed. Every other deserializer
/// sees an ordinary (transparent) newtype struct.
pub(super) const VALUE_TOKEN: &str = "$fluxio_core::value::Value";

/// The variant names with which a packed sequence is handed to
/// `impl Deserialize for Value` as an enum (one per [`Kind`], in order),
/// its payload the sequence itself.
pub(super) const PACKED_VARIANTS: [&str; 11] = [
    "$fluxio_core::value::Packed::u8",
    "$fluxio_core::value::Packed::i8",
    "$fluxio_core::value::Packed::u16",
    "$fluxio_core::value::Packed::i16",
    "$fluxio_core::value::Packed::u32",
    "$fluxio_core::value::Packed::i32",
    "$fluxio_core::value::Packed::u64",
    "$fluxio_core::value::Packed::i64",
    "$fluxio_core::value::Packed::f32",
    "$fluxio_core::value::Packed::f64",
    "$fluxio_core::value::Packed::bool",
];

/// Drives `visitor` over primitive elements, requiring every one to be
/// consumed.
pub(super) fn visit_prims<'de, V, I, P>(items: I, visitor: V) -> Result<V::Value, ValueError>
where
    V: Visitor<'de>,
    I: ExactSizeIterator<Item = P>,
    P: de::IntoDeserializer<'de, ValueError>,
{
    let len = items.len();
    let mut access = Prims { items };
    let out = visitor.visit_seq(&mut access)?;
    all_consumed(out, len, access.items.len(), "elements in sequence")
}

/// `out`, if the visitor consumed all `len` items (`remaining` are left);
/// else serde's `invalid_length` error, saying how many `what` it took.
pub(super) fn all_consumed<T>(
    out: T,
    len: usize,
    remaining: usize,
    what: &str,
) -> Result<T, ValueError> {
    if remaining == 0 {
        Ok(out)
    } else {
        Err(de::Error::invalid_length(
            len,
            &format!("{} {what}", len - remaining).as_str(),
        ))
    }
}

/// `SeqAccess` over primitives.
struct Prims<I> {
    items: I,
}

impl<'de, I, P> SeqAccess<'de> for Prims<I>
where
    I: ExactSizeIterator<Item = P>,
    P: de::IntoDeserializer<'de, ValueError>,
{
    type Error = ValueError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, ValueError> {
        match self.items.next() {
            Some(p) => seed.deserialize(p.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

impl Value {
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
            Value::Packed(_) => Unexpected::Seq,
        }
    }
}

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
    all_consumed(out, items.len(), access.iter.len(), "elements in sequence")
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
    all_consumed(out, map.len(), access.iter.len(), "entries in map")
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
        take_value(&mut self.value, seed, "map value requested before its key")
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// Deserializes the value a `MapAccess` holds for the key it gave last,
/// or fails with `missing` if it holds none.
fn take_value<'de, V: DeserializeSeed<'de>>(
    value: &mut Option<&'de Value>,
    seed: V,
    missing: &'static str,
) -> Result<V::Value, ValueError> {
    match value.take() {
        Some(value) => seed.deserialize(value),
        None => Err(ValueError::new(missing)),
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
                .deserialize(BorrowedStrDeserializer::<ValueError>::new(variant))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, ValueError> {
        take_value(&mut self.value, seed, "enum value requested twice")
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
        let variant = seed.deserialize(BorrowedStrDeserializer::<ValueError>::new(self.variant))?;
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
        visit_variant_seq(self.value, visitor, "tuple variant")
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ValueError> {
        match self.value {
            Some(Value::Map(map)) => visit_map_ref(map, visitor),
            value => visit_variant_seq(value, visitor, "struct variant"),
        }
    }
}

/// Drives `visitor` over a variant payload that is a sequence (plain or
/// packed); anything else, or no payload, is an error expecting `expected`.
fn visit_variant_seq<'de, V: Visitor<'de>>(
    value: Option<&'de Value>,
    visitor: V,
    expected: &'static str,
) -> Result<V::Value, ValueError> {
    match value {
        Some(Value::Seq(items)) => visit_seq_ref(items, visitor),
        Some(Value::Packed(p)) => with_vec!(p, v => visit_prims(v.iter().copied(), visitor)),
        Some(other) => Err(de::Error::invalid_type(other.unexpected(), &expected)),
        None => Err(de::Error::invalid_type(Unexpected::UnitVariant, &expected)),
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
            Value::Packed(p) => with_vec!(p, v => visit_prims(v.iter().copied(), visitor)),
        }
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ValueError> {
        match self {
            Value::Packed(Packed::U8(v)) => visitor.visit_borrowed_bytes(v),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ValueError> {
        self.deserialize_bytes(visitor)
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
                Value::Packed(p) => visitor.visit_enum(EnumRef {
                    variant: PACKED_VARIANTS[p.kind() as usize],
                    value: Some(self),
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
        seq tuple tuple_struct map struct identifier ignored_any
    }
}

/// The `visit_*` methods of [`ValueVisitor`] for values that one variant
/// holds, each converting its input into what that variant holds.
macro_rules! visit_into {
    ($($method:ident($ty:ty) => $variant:ident),*) => {
        $(fn $method<E: de::Error>(self, v: $ty) -> Result<Value, E> {
            Ok(Value::$variant(v.into()))
        })*
    };
}

/// Visitor building a [`Value`] from any self-describing input.
struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    visit_into! {
        visit_bool(bool) => Bool, visit_i64(i64) => I64, visit_i128(i128) => I128,
        visit_u64(u64) => U64, visit_u128(u128) => U128, visit_f32(f32) => F64,
        visit_f64(f64) => F64, visit_char(char) => Char, visit_str(&str) => String,
        visit_string(String) => String, visit_bytes(&[u8]) => Bytes,
        visit_byte_buf(Vec<u8>) => Bytes
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
        if let Some(i) = PACKED_VARIANTS.iter().position(|p| *p == variant) {
            let packed = match Kind::ALL[i] {
                Kind::U8 => Packed::U8(access.newtype_variant()?),
                Kind::I8 => Packed::I8(access.newtype_variant()?),
                Kind::U16 => Packed::U16(access.newtype_variant()?),
                Kind::I16 => Packed::I16(access.newtype_variant()?),
                Kind::U32 => Packed::U32(access.newtype_variant()?),
                Kind::I32 => Packed::I32(access.newtype_variant()?),
                Kind::U64 => Packed::U64(access.newtype_variant()?),
                Kind::I64 => Packed::I64(access.newtype_variant()?),
                Kind::F32 => Packed::F32(access.newtype_variant()?),
                Kind::F64 => Packed::F64(access.newtype_variant()?),
                Kind::Bool => Packed::Bool(access.newtype_variant()?),
            };
            return Ok(Value::Packed(packed));
        }
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

impl<'de> serde::de::IntoDeserializer<'de, ValueError> for &'de Value {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use crate::value::roundtrip::{Inner, Shape};
    use crate::value::{Value, enum_value, from_value, to_value};

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
}
