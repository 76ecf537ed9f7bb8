//! The one `unsafe` of fluxio: seeing through a serde iterator to the slice
//! it walks, so that a `Vec<u8>` (`Vec<f32>`, `&[u64]`...) is written with one
//! copy instead of one serializer call per element.
//!
//! Serde hands a sequence to [`Serializer::collect_seq`](serde::Serializer::collect_seq)
//! as an iterator of unknown type; `Vec<T>`, `[T]`, `Box<[T]>` and their
//! references pass `std::slice::Iter<'_, T>`. Rust cannot ask a non-`'static`
//! generic type what it is, so the check compares the
//! [`typeid`](https://docs.rs/typeid) of the two types (a `TypeId` with
//! lifetimes erased, as erased-serde uses), and only then reads the
//! iterator as what it is.
#![allow(unsafe_code)]

use std::slice;

use super::packed::{FromLe, le_elements};
use super::ser::Natural;

/// The slice `iter` walks, when `I` is `std::slice::Iter<'_, P>`; `None`
/// for every other iterator type.
pub(super) fn as_slice<'b, I, P: 'static>(iter: &'b I) -> Option<&'b [P]> {
    if typeid::of::<I>() != typeid::of::<slice::Iter<'static, P>>() {
        return None;
    }
    // SAFETY: `typeid::of` tells types apart by everything but lifetimes, so
    // `I` is `slice::Iter<'a, P>` for some lifetime `'a`. `iter: &'b I`
    // implies `I: 'b`, so `'a: 'b`; `slice::Iter` is covariant in its
    // lifetime, so a `slice::Iter<'a, P>` is a valid `slice::Iter<'b, P>`
    // (same type, same layout, shorter lifetime). The cast pointer comes
    // from a reference, so it is aligned, non-null and valid for `'b`, and
    // the returned slice borrows no longer than `iter` does.
    let iter = unsafe { &*std::ptr::from_ref(iter).cast::<slice::Iter<'b, P>>() };
    Some(iter.as_slice())
}

/// The marked [`Value`] inside `impl Serialize for Value`'s private newtype,
/// when `T` is that marker type ([`Natural`]).
pub(super) fn as_natural<'b, T: ?Sized>(value: &'b T) -> Option<&'b Natural<'b>> {
    if typeid::of::<T>() != typeid::of::<Natural<'static>>() {
        return None;
    }
    // SAFETY: as in `as_slice`: `T` is `Natural<'a>` for some `'a: 'b` (from
    // `value: &'b T`), `Natural` is covariant in its lifetime, and a `T`
    // equal to the sized `Natural` makes `&T` a thin pointer, so the cast
    // keeps the address, the layout and a lifetime no longer than `value`'s.
    Some(unsafe { &*std::ptr::from_ref(value).cast::<Natural<'b>>() })
}

/// `bytes`, a packed sequence of `P`, as a `T` when `T` is `Vec<P>` for one
/// of the packed primitives `P`: one allocation of the exact size, filled
/// from the little-endian payload, instead of one deserializer call per
/// element. `None` when `T` is another type or the bytes are another value.
pub(super) fn packed_vec<T>(bytes: &[u8]) -> Option<T> {
    use super::packed::Kind;
    use super::wire::Cursor;
    let mut c = Cursor::new(bytes);
    let kind = Kind::from_tag(c.byte().ok()?)?;
    let data = super::decode::packed_data(&mut c, kind).ok()?;
    if c.remaining() != 0 {
        return None;
    }
    match kind {
        Kind::U8 => is::<Vec<u8>, T>().then(|| data.to_vec()).and_then(cast),
        Kind::I8 => le_vec::<i8, T>(data),
        Kind::U16 => le_vec::<u16, T>(data),
        Kind::I16 => le_vec::<i16, T>(data),
        Kind::U32 => le_vec::<u32, T>(data),
        Kind::I32 => le_vec::<i32, T>(data),
        Kind::U64 => le_vec::<u64, T>(data),
        Kind::I64 => le_vec::<i64, T>(data),
        Kind::F32 => le_vec::<f32, T>(data),
        Kind::F64 => le_vec::<f64, T>(data),
        Kind::Bool => None,
    }
}

/// Whether `T` is `V` (checked before building a `V` to cast).
fn is<V: 'static, T>() -> bool {
    typeid::of::<T>() == typeid::of::<V>()
}

/// The little-endian payload of `P`s as a `T`, when `T` is `Vec<P>`.
fn le_vec<P: FromLe, T>(data: &[u8]) -> Option<T> {
    is::<Vec<P>, T>()
        .then(|| le_elements::<P>(data).collect())
        .and_then(cast::<Vec<P>, T>)
}

/// `v` as a `T`, when `T` is `V`.
fn cast<V: 'static, T>(v: V) -> Option<T> {
    if !is::<V, T>() {
        return None;
    }
    let v = std::mem::ManuallyDrop::new(v);
    // SAFETY: `V` is `'static`, so it has no lifetime for `typeid::of` to
    // erase: `T` and `V` are the same type. `transmute_copy` moves the bits
    // of `v` into a `T` of the same size and alignment; `ManuallyDrop`
    // keeps the original from being dropped, so ownership moves exactly
    // once.
    Some(unsafe { std::mem::transmute_copy::<V, T>(&v) })
}

#[cfg(test)]
mod tests {
    use super::{Natural, as_natural, as_slice, packed_vec};
    use crate::value::{EncodedValue, Packed, Value};

    #[test]
    fn a_packed_sequence_reads_whole_into_a_vec_of_its_type_only() {
        let bytes = |p: Packed| EncodedValue::from_value(&Value::Packed(p)).bytes().to_vec();
        let u8s = bytes(Packed::U8(vec![1, 2, 3]));
        assert_eq!(packed_vec::<Vec<u8>>(&u8s), Some(vec![1, 2, 3]));
        assert_eq!(packed_vec::<Vec<i8>>(&u8s), None);
        assert_eq!(packed_vec::<String>(&u8s), None);
        assert_eq!(packed_vec::<Vec<u8>>(&u8s[..u8s.len() - 1]), None);
        let f32s = bytes(Packed::F32(vec![0.5, -0.0, f32::from_bits(0x7fc0_0001)]));
        let back = packed_vec::<Vec<f32>>(&f32s)
            .map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        assert_eq!(
            back,
            Some(vec![0.5f32.to_bits(), (-0.0f32).to_bits(), 0x7fc0_0001])
        );
        assert_eq!(packed_vec::<Vec<f64>>(&f32s), None);
        let i64s = bytes(Packed::I64(vec![i64::MIN, -1]));
        assert_eq!(packed_vec::<Vec<i64>>(&i64s), Some(vec![i64::MIN, -1]));
        assert_eq!(packed_vec::<Vec<u64>>(&i64s), None);
        let bools = bytes(Packed::Bool(vec![true]));
        assert_eq!(
            packed_vec::<Vec<bool>>(&bools),
            None,
            "bools take the serde path"
        );
        let generic = EncodedValue::from_value(&Value::Seq(vec![Value::U64(1)]));
        assert_eq!(packed_vec::<Vec<u64>>(generic.bytes()), None);
    }

    #[test]
    fn only_the_value_marker_is_seen_through() {
        let v = Value::U64(7);
        let n = Natural(&v);
        assert!(as_natural(&n).is_some_and(|n| std::ptr::eq(n.0, &v)));
        assert!(as_natural(&v).is_none());
        assert!(as_natural(&7u64).is_none());
        assert!(as_natural("str").is_none());
    }

    #[test]
    fn only_a_slice_iterator_of_that_element_type_is_seen_through() {
        let v: Vec<u8> = (1..=3).collect();
        let it = v.iter();
        assert_eq!(as_slice::<_, u8>(&it), Some(&[1u8, 2, 3][..]));
        assert!(std::ptr::eq(
            as_slice::<_, u8>(&it).map_or(std::ptr::null(), <[u8]>::as_ptr),
            v.as_ptr()
        ));
        // Another element type, another iterator type: no.
        assert_eq!(as_slice::<_, i8>(&it), None);
        assert_eq!(as_slice::<_, u16>(&it), None);
        let deque: std::collections::VecDeque<u8> = v.iter().copied().collect();
        assert_eq!(as_slice::<_, u8>(&deque.iter()), None);
        assert_eq!(as_slice::<_, u8>(&v.iter().copied()), None);
        // A partly consumed iterator shows what is left.
        let mut it = v.iter();
        it.next();
        assert_eq!(as_slice::<_, u8>(&it), Some(&[2u8, 3][..]));
        // Non-'static data.
        let floats = [0.5f32, -0.0];
        let borrowed: &[f32] = &floats;
        assert_eq!(as_slice::<_, f32>(&borrowed.iter()), Some(borrowed));
        let empty: Vec<u64> = Vec::new();
        assert_eq!(as_slice::<_, u64>(&empty.iter()), Some(&[][..]));
    }
}
