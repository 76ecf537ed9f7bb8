//! Encoded bytes straight into serde types: [`from_encoded`] and its
//! `serde::Deserializer` (self-describing: `deserialize_any` works), behind
//! [`Context::get`](crate::Context::get). It reads as the `&Value`
//! deserializer does, without building a [`Value`](super::Value).

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, SeqAccess, Unexpected,
    VariantAccess, Visitor,
};

use super::de::{PACKED_VARIANTS, VALUE_TOKEN, all_consumed, visit_prims};
use super::decode::packed_data;
use super::packed::{Kind, le_elements};
use super::wire::{Cursor, WireError};
use super::{ValueError, tag};

impl From<WireError> for ValueError {
    fn from(e: WireError) -> Self {
        ValueError::new(e.to_string())
    }
}

type Result<T, E = ValueError> = std::result::Result<T, E>;

/// Deserializes a `T` from one encoded value taking all of `bytes`,
/// borrowing from them where `T` allows.
pub(crate) fn from_encoded<'de, T: de::Deserialize<'de>>(bytes: &'de [u8]) -> Result<T> {
    let mut reader = Reader {
        c: Cursor::new(bytes),
    };
    let out = T::deserialize(&mut reader)?;
    if reader.c.remaining() != 0 {
        return Err(ValueError::new("bytes left after the value"));
    }
    Ok(out)
}

/// One encoded value, as a deserializer (for serde's `MapDeserializer`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Encoded<'de>(pub(crate) &'de [u8]);

/// The reader: a cursor at the next value.
#[derive(Debug)]
pub(crate) struct Reader<'de> {
    c: Cursor<'de>,
}

impl<'de> Reader<'de> {
    /// What the value at the cursor is, for an `invalid type` error.
    fn unexpected(&mut self) -> Unexpected<'de> {
        let Ok(t) = self.c.byte() else {
            return Unexpected::Other("nothing");
        };
        let c = &mut self.c;
        match t {
            tag::UNIT => Unexpected::Unit,
            tag::BOOL => c.bool().map_or(Unexpected::Other("bool"), Unexpected::Bool),
            tag::I64 => c.i64().map_or(Unexpected::Other("i64"), Unexpected::Signed),
            tag::U64 => c
                .varint()
                .map_or(Unexpected::Other("u64"), Unexpected::Unsigned),
            tag::I128 => Unexpected::Other("i128"),
            tag::U128 => Unexpected::Other("u128"),
            tag::F64 => c.f64().map_or(Unexpected::Other("f64"), Unexpected::Float),
            tag::CHAR => c.char().map_or(Unexpected::Other("char"), Unexpected::Char),
            tag::STRING => c.str().map_or(Unexpected::Other("string"), Unexpected::Str),
            tag::BYTES => c
                .bytes()
                .map_or(Unexpected::Other("bytes"), Unexpected::Bytes),
            tag::NONE | tag::SOME => Unexpected::Option,
            tag::MAP => Unexpected::Map,
            tag::ENUM => Unexpected::Enum,
            _ => Unexpected::Seq,
        }
    }

    fn invalid<T>(&mut self, expected: &dyn de::Expected) -> Result<T> {
        Err(de::Error::invalid_type(self.unexpected(), expected))
    }

    fn seq<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value> {
        let len = self.c.len(1)?;
        let mut access = Items { r: self, left: len };
        let out = visitor.visit_seq(&mut access)?;
        all_consumed(out, len, access.left, "elements in sequence")
    }

    fn map<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value> {
        let len = self.c.len(2)?;
        let mut access = Items { r: self, left: len };
        let out = visitor.visit_map(&mut access)?;
        all_consumed(out, len, access.left, "entries in map")
    }

    /// A packed sequence of `kind` (its tag read) as a sequence of its
    /// primitives.
    fn packed<V: Visitor<'de>>(&mut self, kind: Kind, visitor: V) -> Result<V::Value> {
        let data = packed_data(&mut self.c, kind)?;
        match kind {
            Kind::U8 => visit_prims(data.iter().copied(), visitor),
            Kind::I8 => visit_prims(le_elements::<i8>(data), visitor),
            Kind::U16 => visit_prims(le_elements::<u16>(data), visitor),
            Kind::I16 => visit_prims(le_elements::<i16>(data), visitor),
            Kind::U32 => visit_prims(le_elements::<u32>(data), visitor),
            Kind::I32 => visit_prims(le_elements::<i32>(data), visitor),
            Kind::U64 => visit_prims(le_elements::<u64>(data), visitor),
            Kind::I64 => visit_prims(le_elements::<i64>(data), visitor),
            Kind::F32 => visit_prims(le_elements::<f32>(data), visitor),
            Kind::F64 => visit_prims(le_elements::<f64>(data), visitor),
            Kind::Bool => visit_prims(data.iter().map(|&b| b != 0), visitor),
        }
    }
}

impl<'de> de::Deserializer<'de> for &mut Reader<'de> {
    type Error = ValueError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let c = &mut self.c;
        match c.byte()? {
            tag::UNIT => visitor.visit_unit(),
            tag::BOOL => visitor.visit_bool(c.bool()?),
            tag::I64 => visitor.visit_i64(c.i64()?),
            tag::U64 => visitor.visit_u64(c.varint()?),
            tag::I128 => visitor.visit_i128(c.i128()?),
            tag::U128 => visitor.visit_u128(c.u128()?),
            tag::F64 => visitor.visit_f64(c.f64()?),
            tag::CHAR => visitor.visit_char(c.char()?),
            tag::STRING => visitor.visit_borrowed_str(c.str()?),
            tag::BYTES => visitor.visit_borrowed_bytes(c.bytes()?),
            tag::NONE => visitor.visit_none(),
            tag::SOME => visitor.visit_some(self),
            tag::SEQ => self.seq(visitor),
            tag::MAP => self.map(visitor),
            tag::ENUM => {
                let variant = c.str()?;
                visitor.visit_map(EnumAsMap {
                    variant: Some(variant),
                    r: self,
                })
            }
            other => match Kind::from_tag(other) {
                Some(kind) => self.packed(kind, visitor),
                None => Err(WireError::Tag(other).into()),
            },
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.c.peek()? {
            tag::NONE | tag::UNIT => {
                self.c.byte()?;
                visitor.visit_none()
            }
            tag::SOME => {
                self.c.byte()?;
                visitor.visit_some(self)
            }
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.c.peek()? {
            tag::UNIT | tag::NONE => {
                self.c.byte()?;
                visitor.visit_unit()
            }
            _ => self.invalid(&visitor),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        if name != VALUE_TOKEN {
            return visitor.visit_newtype_struct(self);
        }
        // `impl Deserialize for Value`: enums as enums, packed sequences as
        // packed (see `PACKED_VARIANTS`), so that a `Value` reads back exactly.
        let t = self.c.peek()?;
        if t == tag::ENUM {
            self.c.byte()?;
            let variant = self.c.str()?;
            return visitor.visit_enum(Variant {
                variant,
                r: Some(self),
            });
        }
        match Kind::from_tag(t) {
            Some(kind) => visitor.visit_enum(Variant {
                variant: PACKED_VARIANTS[kind as usize],
                r: Some(self),
            }),
            None => self.deserialize_any(visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        match self.c.peek()? {
            tag::ENUM => {
                self.c.byte()?;
                let variant = self.c.str()?;
                visitor.visit_enum(Variant {
                    variant,
                    r: Some(self),
                })
            }
            tag::STRING => {
                self.c.byte()?;
                let variant = self.c.str()?;
                visitor.visit_enum(Variant { variant, r: None })
            }
            tag::MAP => {
                // `{variant: value}`, one entry with a string key
                let mut probe = self.c.clone();
                probe.byte()?;
                if probe.len(2)? == 1 && probe.byte()? == tag::STRING {
                    let variant = probe.str()?;
                    self.c = probe;
                    return visitor.visit_enum(Variant {
                        variant,
                        r: Some(self),
                    });
                }
                Err(de::Error::invalid_type(Unexpected::Map, &visitor))
            }
            _ => self.invalid(&visitor),
        }
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        if self.c.peek()? == Kind::U8.tag() {
            self.c.byte()?;
            return visitor.visit_borrowed_bytes(packed_data(&mut self.c, Kind::U8)?);
        }
        self.deserialize_any(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_bytes(visitor)
    }

    fn is_human_readable(&self) -> bool {
        false
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        seq tuple tuple_struct map struct identifier ignored_any
    }
}

/// The items of a sequence, or the entries of a map.
struct Items<'a, 'de> {
    r: &'a mut Reader<'de>,
    left: usize,
}

impl<'de> Items<'_, 'de> {
    /// The next item (a map's next key), if any is left.
    fn next<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.r).map(Some)
    }
}

impl<'de> SeqAccess<'de> for Items<'_, 'de> {
    type Error = ValueError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        self.next(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> MapAccess<'de> for Items<'_, 'de> {
    type Error = ValueError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        self.next(seed)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        seed.deserialize(&mut *self.r)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

/// An enum variant seen as a one-entry map `{variant: value}` (what
/// `deserialize_any` gives for an enum, as the `&Value` deserializer does).
struct EnumAsMap<'a, 'de> {
    variant: Option<&'de str>,
    r: &'a mut Reader<'de>,
}

impl<'de> MapAccess<'de> for EnumAsMap<'_, 'de> {
    type Error = ValueError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        match self.variant.take() {
            Some(variant) => seed
                .deserialize(BorrowedStrDeserializer::<ValueError>::new(variant))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        seed.deserialize(&mut *self.r)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(usize::from(self.variant.is_some()))
    }
}

/// A variant and, unless it was given as a bare string, the reader at its
/// payload.
struct Variant<'a, 'de> {
    variant: &'de str,
    r: Option<&'a mut Reader<'de>>,
}

impl<'a, 'de> EnumAccess<'de> for Variant<'a, 'de> {
    type Error = ValueError;
    type Variant = Payload<'a, 'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Payload<'a, 'de>)> {
        let variant = seed.deserialize(BorrowedStrDeserializer::<ValueError>::new(self.variant))?;
        Ok((variant, Payload(self.r)))
    }
}

/// A variant's payload (`None` for a variant given as a bare string).
struct Payload<'a, 'de>(Option<&'a mut Reader<'de>>);

impl<'de> VariantAccess<'de> for Payload<'_, 'de> {
    type Error = ValueError;

    fn unit_variant(self) -> Result<()> {
        match self.0 {
            None => Ok(()),
            Some(r) if r.c.peek()? == tag::UNIT => {
                r.c.byte()?;
                Ok(())
            }
            Some(r) => r.invalid(&"unit variant"),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value> {
        match self.0 {
            Some(r) => seed.deserialize(r),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"newtype variant",
            )),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value> {
        let Some(r) = self.0 else {
            return Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"tuple variant",
            ));
        };
        let t = r.c.peek()?;
        if t == tag::SEQ {
            r.c.byte()?;
            return r.seq(visitor);
        }
        match Kind::from_tag(t) {
            Some(kind) => {
                r.c.byte()?;
                r.packed(kind, visitor)
            }
            None => r.invalid(&"tuple variant"),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        let Some(r) = self.0 else {
            return Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"struct variant",
            ));
        };
        let t = r.c.peek()?;
        match t {
            tag::MAP => {
                r.c.byte()?;
                r.map(visitor)
            }
            tag::SEQ => {
                r.c.byte()?;
                r.seq(visitor)
            }
            _ => match Kind::from_tag(t) {
                Some(kind) => {
                    r.c.byte()?;
                    r.packed(kind, visitor)
                }
                None => r.invalid(&"struct variant"),
            },
        }
    }
}

// ---- one encoded value as a deserializer ---------------------------------------

macro_rules! whole {
    ($($method:ident$(($($arg:ident: $ty:ty),*))?),*) => {
        $(fn $method<V: Visitor<'de>>(self, $($($arg: $ty,)*)? visitor: V) -> Result<V::Value> {
            let mut reader = Reader { c: Cursor::new(self.0) };
            let out = (&mut reader).$method($($($arg,)*)? visitor)?;
            if reader.c.remaining() != 0 {
                return Err(ValueError::new("bytes left after the value"));
            }
            Ok(out)
        })*
    };
}

impl<'de> de::Deserializer<'de> for Encoded<'de> {
    type Error = ValueError;

    whole! {
        deserialize_any, deserialize_option, deserialize_unit,
        deserialize_unit_struct(name: &'static str),
        deserialize_newtype_struct(name: &'static str),
        deserialize_enum(name: &'static str, variants: &'static [&'static str]),
        deserialize_bytes, deserialize_byte_buf
    }

    fn is_human_readable(&self) -> bool {
        false
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        seq tuple tuple_struct map struct identifier ignored_any
    }
}

impl<'de> IntoDeserializer<'de, ValueError> for Encoded<'de> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fmt::Debug;

    use serde::de::DeserializeOwned;

    use super::from_encoded;
    use crate::value::roundtrip::{Inner, Shape, every_kind};
    use crate::value::{EncodedValue, Packed, Value, enum_value, from_value};

    /// Reads `value` as a `T` from its bytes and from the `Value`: the same
    /// result, or an error both times (with the same message).
    fn same<T: DeserializeOwned + PartialEq + Debug>(value: &Value) {
        let encoded = EncodedValue::from_value(value);
        let from_bytes = from_encoded::<T>(encoded.bytes());
        let from_tree = from_value::<T>(value);
        match (&from_bytes, &from_tree) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{value}"),
            (Err(a), Err(b)) => assert_eq!(a.message, b.message, "{value}"),
            _ => panic!(
                "{value} as {}: {from_bytes:?} vs {from_tree:?}",
                std::any::type_name::<T>()
            ),
        }
    }

    #[test]
    fn the_reader_reads_as_from_value_does_lenient_and_strict_alike() {
        let values = [
            Value::from("x"),
            Value::from("Empty"),
            Value::from("Circle"),
            Value::U64(300),
            Value::U64(3),
            Value::I64(-200),
            Value::I128(-3),
            Value::Unit,
            Value::None,
            Value::Bool(true),
            Value::Seq(vec![]),
            Value::Seq(vec![Value::U64(1), Value::U64(2)]),
            Value::Seq(vec![Value::U64(256)]),
            Value::Seq(vec![Value::U64(1), Value::U64(2), Value::U64(3)]),
            Value::Packed(Packed::U8(vec![1, 2])),
            Value::Packed(Packed::I16(vec![-1, 2])),
            Value::Packed(Packed::F32(vec![0.5])),
            Value::Map(BTreeMap::new()),
            Value::Map([(Value::from("Circle"), Value::U64(9))].into()),
            Value::Map([(Value::from("V"), Value::U64(1))].into()),
            enum_value("Rect", Value::U64(1)),
            enum_value("Empty", Value::U64(1)),
            enum_value("Pair", Value::Packed(Packed::I16(vec![3, 4]))),
            enum_value("Poly", Value::Seq(vec![Value::U64(3), Value::None])),
            enum_value("V", Value::U64(1)),
            every_kind(),
        ];
        for v in &values {
            same::<u64>(v);
            same::<u8>(v);
            same::<i8>(v);
            same::<i64>(v);
            same::<i128>(v);
            same::<f64>(v);
            same::<bool>(v);
            same::<()>(v);
            same::<String>(v);
            same::<Option<u8>>(v);
            same::<Option<Option<u8>>>(v);
            same::<Vec<u32>>(v);
            same::<Vec<u8>>(v);
            same::<serde_bytes::ByteBuf>(v);
            same::<(u8, u8)>(v);
            same::<Shape>(v);
            same::<Inner>(v);
            same::<BTreeMap<String, u64>>(v);
            same::<Value>(v);
        }
    }
}
