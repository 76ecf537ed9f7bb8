//! Serde types into [`Value`]s: [`to_value`] and its serializer, and
//! `Serialize` for `Value` itself.

use std::collections::BTreeMap;

use serde::ser::{self, Serialize, SerializeMap as _};

use super::footprint::{MAP_SLOT, SEQ_SLOT, check_len};
use super::{PREALLOC_LIMIT, Value, ValueError, enum_value};

/// Private newtype-struct name used by `impl Serialize for Value` so that
/// [`to_value`] can rebuild a [`Value::Enum`] exactly. Every other serializer
/// sees an ordinary (transparent) newtype struct wrapping a one-entry map.
const ENUM_TOKEN: &str = "$fluxio_core::value::Enum";

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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Serialize;
    use serde::ser::{self, SerializeMap as _};

    use crate::value::{Value, to_value};

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
}
