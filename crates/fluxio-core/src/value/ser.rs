//! Serde types straight into the wire format: [`WireWriter`], the byte-writing
//! `serde::Serializer` behind [`Context::set`](crate::Context::set) (no
//! [`Value`] is built), the same writer for a [`Value`], and `Serialize` for
//! `Value` itself.
//!
//! The writer enforces the limits while it writes: a value nested past
//! [`MAX_DEPTH`] or growing past its byte budget stops the write at once.

use serde::ser::{self, Serialize};

use super::error::Refusal;
use super::packed::{Kind, Packed};
use super::prim::{NotPrim, Prim, Primitive, Probe};
use super::wire::{
    put_str, put_varint, put_varint128, varint_len, varint128_len, zigzag, zigzag128,
};
use super::{Value, ValueError, fast, tag};

/// Private newtype-struct name with which `impl Serialize for Value` marks a
/// [`Value`]: the [`WireWriter`] writes the marked value exactly (a `Seq` stays a
/// `Seq`, an `Enum` an `Enum`); every other serializer sees a transparent
/// newtype around the value's natural serde form.
pub(super) const VALUE_TOKEN: &str = "$fluxio_core::value::Value";

/// Writes values in the wire format into a buffer, within a byte budget and
/// (unless told otherwise) [`MAX_DEPTH`].
#[derive(Debug)]
pub(crate) struct WireWriter {
    pub(crate) buf: Vec<u8>,
    /// Bytes already spent outside `buf` (the key of a context entry).
    base: u64,
    /// The most `base + buf.len()` may reach.
    limit: u64,
    /// The deepest level allowed.
    max_depth: usize,
    /// The depth of the value written next (the root is 0).
    depth: usize,
    /// The deepest level written.
    pub(crate) deepest: usize,
}

/// What a writer that stopped says.
type Result<T, E = ValueError> = std::result::Result<T, E>;

impl WireWriter {
    /// A writer whose output may take `limit - base` bytes, nested at most
    /// `max_depth` levels.
    pub(crate) fn new(base: u64, limit: u64, max_depth: usize) -> Self {
        WireWriter {
            buf: Vec::new(),
            base,
            limit,
            max_depth,
            depth: 0,
            deepest: 0,
        }
    }

    /// Refuses `n` more bytes past the budget.
    #[inline]
    fn room(&self, n: usize) -> Result<()> {
        let size = self.base + self.buf.len() as u64 + n as u64;
        if size > self.limit {
            return Err(ValueError::refused(Refusal::TooLarge {
                size,
                limit: self.limit,
            }));
        }
        Ok(())
    }

    /// Refuses a value at `depth` past the deepest level allowed.
    #[inline]
    fn at(&mut self, depth: usize) -> Result<()> {
        if depth > self.max_depth {
            return Err(ValueError::refused(Refusal::TooDeep));
        }
        self.deepest = self.deepest.max(depth);
        Ok(())
    }

    #[inline]
    fn head(&mut self, tag: u8, payload: usize) -> Result<()> {
        self.at(self.depth)?;
        self.room(1 + payload)?;
        self.buf.push(tag);
        Ok(())
    }

    fn str_value(&mut self, tag: u8, s: &[u8]) -> Result<()> {
        self.head(tag, varint_len(s.len() as u64) + s.len())?;
        self.buf.reserve(varint_len(s.len() as u64) + s.len());
        put_str(&mut self.buf, s);
        Ok(())
    }

    fn u64_value(&mut self, v: u64) -> Result<()> {
        self.head(tag::U64, varint_len(v))?;
        put_varint(&mut self.buf, v);
        Ok(())
    }

    fn i64_value(&mut self, v: i64) -> Result<()> {
        let v = zigzag(v);
        self.head(tag::I64, varint_len(v))?;
        put_varint(&mut self.buf, v);
        Ok(())
    }

    fn f64_value(&mut self, v: f64) -> Result<()> {
        self.head(tag::F64, 8)?;
        self.buf.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }

    /// Writes `value` one level down.
    fn child<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.depth += 1;
        let out = value.serialize(&mut *self);
        self.depth -= 1;
        out
    }

    /// Writes the tag of an enum variant and its name; its payload follows
    /// one level down.
    fn variant(&mut self, variant: &str) -> Result<()> {
        self.str_value(tag::ENUM, variant.as_bytes())?;
        self.at(self.depth + 1)
    }

    /// Writes the tag of a tuple or struct variant and its name, and steps
    /// down to its fields (the variant's writer steps back up at the end).
    fn variant_fields(&mut self, variant: &str) -> Result<()> {
        self.variant(variant)?;
        self.depth += 1;
        Ok(())
    }

    // ---- containers ----------------------------------------------------------

    /// Starts a sequence or map at the current depth, `len` items long if
    /// known, each at least `min` bytes: the tag and the count are written
    /// by [`WireWriter::close`].
    fn open(&mut self, len: Option<usize>, min: usize) -> Result<Frame> {
        self.at(self.depth)?;
        let reserved = varint_len(len.unwrap_or(0) as u64);
        self.room(1 + reserved + len.unwrap_or(0).saturating_mul(min))?;
        if len.is_some_and(|n| n > 0) {
            self.at(self.depth + 1)?;
        }
        let start = self.buf.len();
        self.buf.resize(start + 1 + reserved, 0);
        Ok(Frame {
            start,
            data: start + 1 + reserved,
            count: 0,
        })
    }

    /// Writes the tag and the count of a container started by [`WireWriter::open`].
    fn close(&mut self, frame: &Frame, tag: u8) -> Result<()> {
        self.buf[frame.start] = tag;
        let mut count = Vec::with_capacity(9);
        put_varint(&mut count, frame.count as u64);
        let reserved = frame.data - frame.start - 1;
        if count.len() == reserved {
            self.buf[frame.start + 1..frame.data].copy_from_slice(&count);
        } else {
            self.room(count.len().saturating_sub(reserved))?;
            self.buf.splice(frame.start + 1..frame.data, count);
        }
        Ok(())
    }

    /// Writes a whole slice of primitives as one packed sequence (an empty
    /// one as an empty `Seq`).
    fn packed_slice<P: Primitive>(&mut self, items: &[P]) -> Result<()> {
        if items.is_empty() {
            self.head(tag::SEQ, 1)?;
            self.buf.push(0);
            return Ok(());
        }
        let bytes = items.len().saturating_mul(P::KIND.width());
        self.head(P::KIND.tag(), varint_len(items.len() as u64) + bytes)?;
        self.at(self.depth + 1)?;
        self.buf.reserve(varint_len(items.len() as u64) + bytes);
        put_varint(&mut self.buf, items.len() as u64);
        P::put_all(items, &mut self.buf);
        Ok(())
    }

    /// Tries the slice fast path for every primitive.
    fn try_slice<I>(&mut self, iter: &I) -> Option<Result<()>> {
        macro_rules! try_kinds {
            ($($ty:ty),*) => {
                $(if let Some(items) = fast::as_slice::<I, $ty>(iter) {
                    return Some(self.packed_slice(items));
                })*
            };
        }
        try_kinds!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, bool);
        None
    }

    // ---- a Value, exactly ----------------------------------------------------

    /// Writes `value` exactly: the encoding that decodes back to it.
    pub(crate) fn value(&mut self, value: &Value) -> Result<()> {
        match value {
            Value::Unit => self.head(tag::UNIT, 0),
            Value::None => self.head(tag::NONE, 0),
            Value::Bool(v) => {
                self.head(tag::BOOL, 1)?;
                self.buf.push(u8::from(*v));
                Ok(())
            }
            Value::I64(v) => self.i64_value(*v),
            Value::U64(v) => self.u64_value(*v),
            Value::I128(v) => {
                let v = zigzag128(*v);
                self.head(tag::I128, varint128_len(v))?;
                put_varint128(&mut self.buf, v);
                Ok(())
            }
            Value::U128(v) => {
                self.head(tag::U128, varint128_len(*v))?;
                put_varint128(&mut self.buf, *v);
                Ok(())
            }
            Value::F64(v) => self.f64_value(*v),
            Value::Char(c) => {
                self.head(tag::CHAR, c.len_utf8())?;
                let mut b = [0u8; 4];
                self.buf.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                Ok(())
            }
            Value::String(s) => self.str_value(tag::STRING, s.as_bytes()),
            Value::Bytes(b) => self.str_value(tag::BYTES, b),
            Value::Some(v) => {
                self.head(tag::SOME, 0)?;
                self.depth += 1;
                let out = self.value(v);
                self.depth -= 1;
                out
            }
            Value::Seq(items) => {
                let mut frame = self.open(Some(items.len()), 1)?;
                self.depth += 1;
                for item in items {
                    self.value(item)?;
                    frame.count += 1;
                }
                self.depth -= 1;
                self.close(&frame, tag::SEQ)
            }
            Value::Map(map) => {
                let mut entries = Entries::new(self.open(Some(map.len()), 2)?);
                self.depth += 1;
                for (k, v) in map {
                    let key_start = self.buf.len();
                    self.value(k)?;
                    entries.key(&self.buf, key_start);
                    self.value(v)?;
                    entries.value(self.buf.len());
                }
                self.depth -= 1;
                entries.finish(self)
            }
            Value::Enum { variant, value } => {
                self.variant(variant)?;
                self.depth += 1;
                let out = self.value(value);
                self.depth -= 1;
                out
            }
            Value::Packed(p) => super::packed::with_vec!(p, v => self.packed_slice(v)),
        }
    }
}

/// A container being written: where its tag goes, where its items start,
/// and how many there are so far.
#[derive(Debug)]
struct Frame {
    start: usize,
    data: usize,
    count: usize,
}

/// A map being written: its entries' places, to put them in the canonical
/// order (by the bytes of their encoded keys) at the end.
#[derive(Debug)]
struct Entries {
    frame: Frame,
    /// `(key start, key end, entry end)` of every entry.
    spans: Vec<(usize, usize, usize)>,
    /// Whether the keys so far came in strictly increasing order.
    sorted: bool,
    /// The span of the key written last, waiting for its value.
    key: Option<(usize, usize)>,
}

impl Entries {
    fn new(frame: Frame) -> Self {
        Entries {
            frame,
            spans: Vec::new(),
            sorted: true,
            key: None,
        }
    }

    /// A key was written from `start` to the end of `buf`.
    fn key(&mut self, buf: &[u8], start: usize) {
        let end = buf.len();
        if let Some(&(ps, pe, _)) = self.spans.last() {
            if buf[ps..pe] >= buf[start..end] {
                self.sorted = false;
            }
        }
        self.key = Some((start, end));
    }

    /// Its value was written, up to `end`.
    fn value(&mut self, end: usize) {
        if let Some((ks, ke)) = self.key.take() {
            self.spans.push((ks, ke, end));
            self.frame.count += 1;
        }
    }

    /// Puts the entries in order (the last of equal keys wins) and writes the
    /// map's tag and count.
    fn finish(mut self, w: &mut WireWriter) -> Result<()> {
        if !self.sorted {
            let data = self.frame.data;
            let region = w.buf.split_off(data);
            let key = |&(ks, ke, _): &(usize, usize, usize)| &region[ks - data..ke - data];
            self.spans.sort_by(|a, b| key(a).cmp(key(b)));
            let mut kept: Vec<(usize, usize, usize)> = Vec::with_capacity(self.spans.len());
            for span in self.spans {
                match kept.last_mut() {
                    Some(last) if key(last) == key(&span) => *last = span,
                    _ => kept.push(span),
                }
            }
            for &(ks, _, end) in &kept {
                w.buf.extend_from_slice(&region[ks - data..end - data]);
            }
            self.frame.count = kept.len();
        }
        w.close(&self.frame, tag::MAP)
    }
}

impl Prim {
    fn kind(self) -> Kind {
        match self {
            Prim::U8(_) => Kind::U8,
            Prim::I8(_) => Kind::I8,
            Prim::U16(_) => Kind::U16,
            Prim::I16(_) => Kind::I16,
            Prim::U32(_) => Kind::U32,
            Prim::I32(_) => Kind::I32,
            Prim::U64(_) => Kind::U64,
            Prim::I64(_) => Kind::I64,
            Prim::F32(_) => Kind::F32,
            Prim::F64(_) => Kind::F64,
            Prim::Bool(_) => Kind::Bool,
        }
    }

    /// Its little-endian bytes, as a packed element.
    fn put(self, out: &mut Vec<u8>) {
        match self {
            Prim::U8(v) => out.push(v),
            Prim::I8(v) => out.extend(v.to_le_bytes()),
            Prim::U16(v) => out.extend(v.to_le_bytes()),
            Prim::I16(v) => out.extend(v.to_le_bytes()),
            Prim::U32(v) => out.extend(v.to_le_bytes()),
            Prim::I32(v) => out.extend(v.to_le_bytes()),
            Prim::U64(v) => out.extend(v.to_le_bytes()),
            Prim::I64(v) => out.extend(v.to_le_bytes()),
            Prim::F32(v) => out.extend(v.to_bits().to_le_bytes()),
            Prim::F64(v) => out.extend(v.to_bits().to_le_bytes()),
            Prim::Bool(v) => out.push(u8::from(v)),
        }
    }

    /// Writes it as a value of its own, as a generic sequence holds it.
    fn write_generic(self, w: &mut WireWriter) -> Result<()> {
        match self {
            Prim::U8(v) => w.u64_value(v.into()),
            Prim::U16(v) => w.u64_value(v.into()),
            Prim::U32(v) => w.u64_value(v.into()),
            Prim::U64(v) => w.u64_value(v),
            Prim::I8(v) => w.i64_value(v.into()),
            Prim::I16(v) => w.i64_value(v.into()),
            Prim::I32(v) => w.i64_value(v.into()),
            Prim::I64(v) => w.i64_value(v),
            Prim::F32(v) => w.f64_value(v.into()),
            Prim::F64(v) => w.f64_value(v),
            Prim::Bool(v) => {
                w.head(tag::BOOL, 1)?;
                w.buf.push(u8::from(v));
                Ok(())
            }
        }
    }
}

/// The `serialize_*` methods of the primitives: `widened` ones write the
/// 64-bit value they fit in, `as_is` ones their own, `as_value` ones the
/// [`Value`] variant that holds them.
macro_rules! serialize_prims {
    (
        widened: $($wm:ident($wt:ty) => $wf:ident),*;
        as_is: $($am:ident($at:ty) => $af:ident),*;
        as_value: $($vm:ident($vt:ty) => $variant:ident),*
    ) => {
        $(fn $wm(self, v: $wt) -> Result<()> {
            self.$wf(v.into())
        })*
        $(fn $am(self, v: $at) -> Result<()> {
            self.$af(v)
        })*
        $(fn $vm(self, v: $vt) -> Result<()> {
            self.value(&Value::$variant(v))
        })*
    };
}

// ---- the serializer -----------------------------------------------------------

impl<'w> ser::Serializer for &'w mut WireWriter {
    type Ok = ();
    type Error = ValueError;
    type SerializeSeq = SeqWriter<'w>;
    type SerializeTuple = SeqWriter<'w>;
    type SerializeTupleStruct = SeqWriter<'w>;
    type SerializeTupleVariant = SeqWriter<'w>;
    type SerializeMap = MapWriter<'w>;
    type SerializeStruct = MapWriter<'w>;
    type SerializeStructVariant = MapWriter<'w>;

    fn serialize_bool(self, v: bool) -> Result<()> {
        Prim::Bool(v).write_generic(self)
    }

    serialize_prims! {
        widened: serialize_i8(i8) => i64_value, serialize_i16(i16) => i64_value,
        serialize_i32(i32) => i64_value, serialize_u8(u8) => u64_value,
        serialize_u16(u16) => u64_value, serialize_u32(u32) => u64_value,
        serialize_f32(f32) => f64_value;
        as_is: serialize_i64(i64) => i64_value, serialize_u64(u64) => u64_value,
        serialize_f64(f64) => f64_value;
        as_value: serialize_i128(i128) => I128, serialize_u128(u128) => U128,
        serialize_char(char) => Char
    }

    fn serialize_str(self, v: &str) -> Result<()> {
        self.str_value(tag::STRING, v.as_bytes())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        self.str_value(tag::BYTES, v)
    }

    fn serialize_none(self) -> Result<()> {
        self.head(tag::NONE, 0)
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        self.head(tag::SOME, 0)?;
        self.child(value)
    }

    fn serialize_unit(self) -> Result<()> {
        self.head(tag::UNIT, 0)
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<()> {
        self.head(tag::UNIT, 0)
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
    ) -> Result<()> {
        self.variant(variant)?;
        self.room(1)?;
        self.buf.push(tag::UNIT);
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<()> {
        if name == VALUE_TOKEN {
            if let Some(v) = downcast_value(value) {
                return self.value(v);
            }
        }
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<()> {
        self.variant(variant)?;
        self.child(value)
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<SeqWriter<'w>> {
        SeqWriter::open(self, len, false)
    }

    fn serialize_tuple(self, len: usize) -> Result<SeqWriter<'w>> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<SeqWriter<'w>> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<SeqWriter<'w>> {
        self.variant_fields(variant)?;
        SeqWriter::open(self, Some(len), true)
    }

    fn serialize_map(self, len: Option<usize>) -> Result<MapWriter<'w>> {
        MapWriter::open(self, len, false)
    }

    fn serialize_struct(self, _name: &'static str, len: usize) -> Result<MapWriter<'w>> {
        self.serialize_map(Some(len))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<MapWriter<'w>> {
        self.variant_fields(variant)?;
        MapWriter::open(self, Some(len), true)
    }

    fn collect_seq<I>(self, iter: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: Serialize,
    {
        let iter = iter.into_iter();
        if let Some(done) = self.try_slice(&iter) {
            return done;
        }
        let len = match iter.size_hint() {
            (lo, Some(hi)) if lo == hi => Some(lo),
            _ => None,
        };
        let mut seq = ser::Serializer::serialize_seq(self, len)?;
        for item in iter {
            ser::SerializeSeq::serialize_element(&mut seq, &item)?;
        }
        ser::SerializeSeq::end(seq)
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

/// The [`Value`] inside the private newtype `impl Serialize for Value`
/// writes, when `value` is one.
fn downcast_value<T: ?Sized>(value: &T) -> Option<&Value> {
    fast::as_natural(value).map(|n| n.0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SeqMode {
    /// No element yet.
    Empty,
    /// Every element so far was this primitive.
    Packed(Kind),
    /// The elements are written as values of their own.
    Generic,
}

/// [`serde::ser::SerializeSeq`] (and tuples, tuple structs and tuple
/// variants) for the [`WireWriter`]: packed while every element is the same
/// primitive, generic from the first one that is not.
#[derive(Debug)]
pub(crate) struct SeqWriter<'w> {
    w: &'w mut WireWriter,
    frame: Frame,
    mode: SeqMode,
    /// A tuple variant's fields: one level below the variant.
    variant: bool,
}

impl<'w> SeqWriter<'w> {
    /// Starts a sequence `len` elements long if known (a tuple variant's
    /// fields if `variant`).
    fn open(w: &'w mut WireWriter, len: Option<usize>, variant: bool) -> Result<Self> {
        let frame = w.open(len, 1)?;
        Ok(SeqWriter {
            w,
            frame,
            mode: SeqMode::Empty,
            variant,
        })
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        if self.mode != SeqMode::Generic {
            match value.serialize(Probe) {
                Ok(prim) => match self.mode {
                    SeqMode::Packed(kind) if kind == prim.kind() => {
                        self.w.room(kind.width())?;
                        prim.put(&mut self.w.buf);
                        self.frame.count += 1;
                        return Ok(());
                    }
                    SeqMode::Empty => {
                        self.w.at(self.w.depth + 1)?;
                        self.w.room(prim.kind().width())?;
                        prim.put(&mut self.w.buf);
                        self.mode = SeqMode::Packed(prim.kind());
                        self.frame.count += 1;
                        return Ok(());
                    }
                    _ => self.unpack()?,
                },
                Err(NotPrim) => self.unpack()?,
            }
        }
        self.w.child(value)?;
        self.frame.count += 1;
        Ok(())
    }

    /// From packed to generic: the elements written so far become values of
    /// their own.
    fn unpack(&mut self) -> Result<()> {
        if let SeqMode::Packed(kind) = self.mode {
            let data = self.w.buf.split_off(self.frame.data);
            let Some(packed) = Packed::from_le(kind, &data) else {
                return Err(ValueError::new("fluxio bug: unreadable packed elements"));
            };
            self.w.depth += 1;
            let out = super::packed::with_vec!(&packed, v => v
                .iter()
                .try_for_each(|&x| prim_of(x).write_generic(self.w)));
            self.w.depth -= 1;
            out?;
        }
        self.mode = SeqMode::Generic;
        Ok(())
    }

    fn finish(self) -> Result<()> {
        let tag = match self.mode {
            SeqMode::Packed(kind) => kind.tag(),
            SeqMode::Empty | SeqMode::Generic => tag::SEQ,
        };
        self.w.close(&self.frame, tag)?;
        if self.variant {
            self.w.depth -= 1;
        }
        Ok(())
    }
}

/// A primitive as a [`Prim`].
fn prim_of<P: Into<Prim>>(x: P) -> Prim {
    x.into()
}

macro_rules! into_prim {
    ($($ty:ty => $variant:ident),*) => {
        $(impl From<$ty> for Prim {
            fn from(v: $ty) -> Prim {
                Prim::$variant(v)
            }
        })*
    };
}

into_prim!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f32 => F32, f64 => F64, bool => Bool);

/// The serde traits of a writer's container, each method handing over to
/// the writer's own (`element` or `field`, then `finish`).
macro_rules! container_impls {
    ($writer:ident: $($trait:ident::$method:ident($($key:ident: $key_ty:ty,)?) => $own:ident),*) => {
        $(impl ser::$trait for $writer<'_> {
            type Ok = ();
            type Error = ValueError;

            fn $method<T: Serialize + ?Sized>(
                &mut self,
                $($key: $key_ty,)?
                value: &T,
            ) -> Result<()> {
                self.$own($($key,)? value)
            }

            fn end(self) -> Result<()> {
                self.finish()
            }
        })*
    };
}

container_impls!(SeqWriter:
    SerializeSeq::serialize_element() => element,
    SerializeTuple::serialize_element() => element,
    SerializeTupleStruct::serialize_field() => element,
    SerializeTupleVariant::serialize_field() => element);

/// [`serde::ser::SerializeMap`] (and structs and struct variants) for the
/// [`WireWriter`]: entries in the canonical order, the last of equal keys
/// winning.
#[derive(Debug)]
pub(crate) struct MapWriter<'w> {
    w: &'w mut WireWriter,
    entries: Entries,
    /// A struct variant's fields: one level below the variant.
    variant: bool,
}

impl<'w> MapWriter<'w> {
    /// Starts a map `len` entries long if known (a struct variant's fields
    /// if `variant`).
    fn open(w: &'w mut WireWriter, len: Option<usize>, variant: bool) -> Result<Self> {
        let entries = Entries::new(w.open(len, 2)?);
        Ok(MapWriter {
            w,
            entries,
            variant,
        })
    }

    fn key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        if self.entries.key.is_some() {
            return Err(ValueError::new(
                "serialize_key called twice without serialize_value",
            ));
        }
        let start = self.w.buf.len();
        self.w.child(key)?;
        self.entries.key(&self.w.buf, start);
        Ok(())
    }

    fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        if self.entries.key.is_none() {
            return Err(ValueError::new(
                "serialize_value called without a preceding serialize_key",
            ));
        }
        self.w.child(value)?;
        self.entries.value(self.w.buf.len());
        Ok(())
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Result<()> {
        let start = self.w.buf.len();
        self.w.depth += 1;
        let out = self.w.str_value(tag::STRING, name.as_bytes());
        self.w.depth -= 1;
        out?;
        self.entries.key(&self.w.buf, start);
        self.value(value)
    }

    fn finish(self) -> Result<()> {
        if self.entries.key.is_some() {
            return Err(ValueError::new("map ended with a key but no value"));
        }
        let variant = self.variant;
        let w = self.w;
        self.entries.finish(w)?;
        if variant {
            w.depth -= 1;
        }
        Ok(())
    }
}

impl ser::SerializeMap for MapWriter<'_> {
    type Ok = ();
    type Error = ValueError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        self.key(key)
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.value(value)
    }

    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        value: &V,
    ) -> Result<()> {
        if self.entries.key.is_some() {
            return Err(ValueError::new(
                "serialize_entry called after serialize_key without serialize_value",
            ));
        }
        self.key(key)?;
        self.value(value)
    }

    fn end(self) -> Result<()> {
        self.finish()
    }
}

container_impls!(MapWriter:
    SerializeStruct::serialize_field(key: &'static str,) => field,
    SerializeStructVariant::serialize_field(key: &'static str,) => field);

// ---- Serialize for Value ----------------------------------------------------------

/// A [`Value`] in its natural serde form, inside the private newtype that
/// marks it (see [`VALUE_TOKEN`]).
#[derive(Debug)]
pub(super) struct Natural<'a>(pub(super) &'a Value);

/// `Value::Enum` as a one-entry map `{variant: value}`.
struct EnumEntry<'a> {
    variant: &'a str,
    value: &'a Value,
}

impl Serialize for EnumEntry<'_> {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use ser::SerializeMap as _;
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(self.variant, self.value)?;
        map.end()
    }
}

impl Serialize for Natural<'_> {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
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
            Value::Enum { variant, value } => EnumEntry { variant, value }.serialize(serializer),
            Value::Packed(p) => super::packed::with_vec!(p, v => serializer.collect_seq(v)),
        }
    }
}

/// Serializes a value in its natural serde form (an `Enum` as a one-entry
/// map `{variant: value}`, a packed sequence as a sequence), inside a
/// private newtype struct that formats treat as transparent, so that the
/// context's writer (and [`to_value`]) keep it exactly.
impl Serialize for Value {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_newtype_struct(VALUE_TOKEN, &Natural(self))
    }
}

/// Converts any serializable value into a [`Value`]: the value
/// [`Context::set`](crate::Context::set) stores, decoded.
///
/// Integers narrower than 64 bits are widened (`i8..i64` to `I64`, `u8..u64`
/// to `U64`), `f32` to `F64`, except in a sequence whose elements are all of
/// one primitive type, which is a [`Value::Packed`] of that type; newtype
/// structs are transparent; structs become maps keyed by field name (fields
/// skipped by serde are absent).
///
/// # Errors
///
/// Fails if the type's `Serialize` implementation reports an error or
/// misuses the serializer API (e.g. a map value without a key), or if the
/// value is larger than any checkpoint can hold
/// ([`MAX_PAYLOAD`](super::MAX_PAYLOAD) bytes encoded).
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, ValueError> {
    let mut w = WireWriter::new(0, super::MAX_PAYLOAD as u64, usize::MAX);
    value.serialize(&mut w)?;
    super::decode::decode_value(&w.buf, usize::MAX).map_err(|e| {
        ValueError::new(format!(
            "fluxio bug: the writer wrote an invalid value: {e}"
        ))
    })
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
