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

#[cfg(test)]
mod tests {
    use super::{Natural, as_natural, as_slice};
    use crate::value::Value;

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
        let v = vec![1u8, 2, 3];
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
