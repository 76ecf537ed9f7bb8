//! The primitives of packed sequences ([`Prim`], [`Primitive`]) and [`Probe`], the
//! serializer that tells whether a sequence's element is one of them, so the
//! [`WireWriter`](super::ser::WireWriter) can pack the sequence.

use serde::ser::{self, Impossible, Serialize};

use super::packed::Kind;

use super::ser::VALUE_TOKEN;

/// One element of a packed sequence.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Prim {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
}

/// A primitive a slice of which is written as one packed sequence.
pub(crate) trait Primitive: Copy + 'static {
    const KIND: Kind;
    fn put_all(items: &[Self], out: &mut Vec<u8>);
}

macro_rules! primitive {
    ($($ty:ty => $kind:ident, |$x:ident| $bytes:expr;)*) => {
        $(impl Primitive for $ty {
            const KIND: Kind = Kind::$kind;
            fn put_all(items: &[Self], out: &mut Vec<u8>) {
                // Sized first, then filled in fixed-width chunks: a loop the
                // compiler turns into wide copies.
                const W: usize = size_of::<$ty>();
                let start = out.len();
                out.resize(start + items.len() * W, 0);
                for (chunk, &$x) in out[start..].chunks_exact_mut(W).zip(items) {
                    chunk.copy_from_slice(&$bytes);
                }
            }
        })*
    };
}

primitive! {
    i8 => I8, |x| x.to_le_bytes();
    u16 => U16, |x| x.to_le_bytes();
    i16 => I16, |x| x.to_le_bytes();
    u32 => U32, |x| x.to_le_bytes();
    i32 => I32, |x| x.to_le_bytes();
    u64 => U64, |x| x.to_le_bytes();
    i64 => I64, |x| x.to_le_bytes();
    f32 => F32, |x| x.to_bits().to_le_bytes();
    f64 => F64, |x| x.to_bits().to_le_bytes();
    bool => Bool, |x| [u8::from(x)];
}

impl Primitive for u8 {
    const KIND: Kind = Kind::U8;
    fn put_all(items: &[Self], out: &mut Vec<u8>) {
        out.extend_from_slice(items);
    }
}

/// Not a primitive of a packed sequence.
#[derive(Debug)]
pub(crate) struct NotPrim;

impl std::fmt::Display for NotPrim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a packable primitive")
    }
}

impl std::error::Error for NotPrim {}

impl ser::Error for NotPrim {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        NotPrim
    }
}

/// A serializer that only says which primitive a value is (newtype structs
/// are transparent, as everywhere); anything else is [`NotPrim`].
pub(crate) struct Probe;

macro_rules! probe_prim {
    ($($method:ident($ty:ty) => $variant:ident),*) => {
        $(fn $method(self, v: $ty) -> Result<Prim, NotPrim> {
            Ok(Prim::$variant(v))
        })*
    };
}

macro_rules! probe_not {
    ($($method:ident($($arg:ty),*)),*) => {
        $(fn $method(self, $(_: $arg),*) -> Result<Prim, NotPrim> {
            Err(NotPrim)
        })*
    };
}

impl ser::Serializer for Probe {
    type Ok = Prim;
    type Error = NotPrim;
    type SerializeSeq = Impossible<Prim, NotPrim>;
    type SerializeTuple = Impossible<Prim, NotPrim>;
    type SerializeTupleStruct = Impossible<Prim, NotPrim>;
    type SerializeTupleVariant = Impossible<Prim, NotPrim>;
    type SerializeMap = Impossible<Prim, NotPrim>;
    type SerializeStruct = Impossible<Prim, NotPrim>;
    type SerializeStructVariant = Impossible<Prim, NotPrim>;

    probe_prim! {
        serialize_bool(bool) => Bool, serialize_i8(i8) => I8, serialize_i16(i16) => I16,
        serialize_i32(i32) => I32, serialize_i64(i64) => I64, serialize_u8(u8) => U8,
        serialize_u16(u16) => U16, serialize_u32(u32) => U32, serialize_u64(u64) => U64,
        serialize_f32(f32) => F32, serialize_f64(f64) => F64
    }

    probe_not! {
        serialize_i128(i128), serialize_u128(u128), serialize_char(char), serialize_str(&str),
        serialize_bytes(&[u8]), serialize_none(), serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str)
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<Prim, NotPrim> {
        Err(NotPrim)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<Prim, NotPrim> {
        if name == VALUE_TOKEN {
            return Err(NotPrim);
        }
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Prim, NotPrim> {
        Err(NotPrim)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, NotPrim> {
        Err(NotPrim)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, NotPrim> {
        Err(NotPrim)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, NotPrim> {
        Err(NotPrim)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, NotPrim> {
        Err(NotPrim)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, NotPrim> {
        Err(NotPrim)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, NotPrim> {
        Err(NotPrim)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, NotPrim> {
        Err(NotPrim)
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}
