//! [`Packed`]: a sequence whose elements are all the same primitive, kept as
//! one vector of that primitive (tags 15 to 25 of the wire format).

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

/// A sequence of one primitive type, stored as a vector of it: what a
/// `Vec<u8>`, a `Vec<f32>`, a `[u16; 4]` or a tuple of `i64`s becomes
/// (see the [wire format](super#wire-format)). `f32` elements keep their
/// 4 bytes: they are not widened.
///
/// A packed sequence is never empty once encoded: an empty sequence is
/// always [`Value::Seq`](super::Value::Seq), so `Packed` holding an empty
/// vector encodes, and decodes back, as an empty `Seq`.
#[derive(Clone, Debug)]
#[allow(missing_docs)] // one variant per primitive, named after it
pub enum Packed {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
}

/// Calls `$body` with `$v` bound to the vector of whichever variant `$p` is.
macro_rules! with_vec {
    ($p:expr, $v:ident => $body:expr) => {
        match $p {
            Packed::U8($v) => $body,
            Packed::I8($v) => $body,
            Packed::U16($v) => $body,
            Packed::I16($v) => $body,
            Packed::U32($v) => $body,
            Packed::I32($v) => $body,
            Packed::U64($v) => $body,
            Packed::I64($v) => $body,
            Packed::F32($v) => $body,
            Packed::F64($v) => $body,
            Packed::Bool($v) => $body,
        }
    };
}
pub(super) use with_vec;

/// The element type of a packed sequence: its index (the tag is
/// `PACKED_BASE + index`), its width in bytes and its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F32,
    F64,
    Bool,
}

impl Kind {
    pub(crate) const ALL: [Kind; 11] = [
        Kind::U8,
        Kind::I8,
        Kind::U16,
        Kind::I16,
        Kind::U32,
        Kind::I32,
        Kind::U64,
        Kind::I64,
        Kind::F32,
        Kind::F64,
        Kind::Bool,
    ];

    /// The wire tag of a packed sequence of this kind.
    pub(crate) fn tag(self) -> u8 {
        super::tag::PACKED_BASE + self as u8
    }

    /// The kind a wire tag stands for, if it is a packed tag.
    pub(crate) fn from_tag(tag: u8) -> Option<Kind> {
        tag.checked_sub(super::tag::PACKED_BASE)
            .and_then(|i| Self::ALL.get(usize::from(i)).copied())
    }

    /// Bytes per element.
    pub(crate) fn width(self) -> usize {
        match self {
            Kind::U8 | Kind::I8 | Kind::Bool => 1,
            Kind::U16 | Kind::I16 => 2,
            Kind::U32 | Kind::I32 | Kind::F32 => 4,
            Kind::U64 | Kind::I64 | Kind::F64 => 8,
        }
    }

    /// The element type's name (`"u8"`, ..., `"bool"`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::U8 => "u8",
            Kind::I8 => "i8",
            Kind::U16 => "u16",
            Kind::I16 => "i16",
            Kind::U32 => "u32",
            Kind::I32 => "i32",
            Kind::U64 => "u64",
            Kind::I64 => "i64",
            Kind::F32 => "f32",
            Kind::F64 => "f64",
            Kind::Bool => "bool",
        }
    }
}

impl Packed {
    /// The element type.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Packed::U8(_) => Kind::U8,
            Packed::I8(_) => Kind::I8,
            Packed::U16(_) => Kind::U16,
            Packed::I16(_) => Kind::I16,
            Packed::U32(_) => Kind::U32,
            Packed::I32(_) => Kind::I32,
            Packed::U64(_) => Kind::U64,
            Packed::I64(_) => Kind::I64,
            Packed::F32(_) => Kind::F32,
            Packed::F64(_) => Kind::F64,
            Packed::Bool(_) => Kind::Bool,
        }
    }

    /// The element type's name: `"u8"`, `"i8"`, `"u16"`, `"i16"`, `"u32"`,
    /// `"i32"`, `"u64"`, `"i64"`, `"f32"`, `"f64"` or `"bool"`.
    #[must_use]
    pub fn element_type(&self) -> &'static str {
        self.kind().name()
    }

    /// The number of elements.
    #[must_use]
    pub fn len(&self) -> usize {
        with_vec!(self, v => v.len())
    }

    /// Whether there are no elements.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the little-endian payload of `kind` (`data.len()` a multiple of
    /// its width; a bool byte other than 0 or 1 is `None`).
    pub(crate) fn from_le(kind: Kind, data: &[u8]) -> Option<Packed> {
        Some(match kind {
            Kind::U8 => Packed::U8(data.to_vec()),
            Kind::I8 => Packed::I8(le_elements(data).collect()),
            Kind::U16 => Packed::U16(le_elements(data).collect()),
            Kind::I16 => Packed::I16(le_elements(data).collect()),
            Kind::U32 => Packed::U32(le_elements(data).collect()),
            Kind::I32 => Packed::I32(le_elements(data).collect()),
            Kind::U64 => Packed::U64(le_elements(data).collect()),
            Kind::I64 => Packed::I64(le_elements(data).collect()),
            Kind::F32 => Packed::F32(le_elements(data).collect()),
            Kind::F64 => Packed::F64(le_elements(data).collect()),
            Kind::Bool => Packed::Bool(
                data.iter()
                    .map(|&b| match b {
                        0 => Some(false),
                        1 => Some(true),
                        _ => None,
                    })
                    .collect::<Option<_>>()?,
            ),
        })
    }
}

/// A number an element of a packed payload is, read from its
/// little-endian bytes.
pub(crate) trait FromLe: Copy + 'static {
    /// Its width in bytes.
    const WIDTH: usize;
    /// Reads it from `chunk`, exactly [`FromLe::WIDTH`] bytes.
    fn from_le_chunk(chunk: &[u8]) -> Self;
}

macro_rules! from_le {
    ($($ty:ty),*) => {
        $(impl FromLe for $ty {
            const WIDTH: usize = size_of::<$ty>();
            fn from_le_chunk(chunk: &[u8]) -> Self {
                let mut b = [0u8; size_of::<$ty>()];
                b.copy_from_slice(chunk);
                <$ty>::from_le_bytes(b)
            }
        })*
    };
}

from_le!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// The elements of a little-endian packed payload of `T`s (its length a
/// multiple of their width).
pub(crate) fn le_elements<T: FromLe>(data: &[u8]) -> impl ExactSizeIterator<Item = T> + '_ {
    data.chunks_exact(T::WIDTH).map(T::from_le_chunk)
}

/// Compares two slices of floats element by element with `total_cmp`,
/// then by length.
fn cmp_floats<T>(a: &[T], b: &[T], total_cmp: fn(&T, &T) -> Ordering) -> Ordering {
    a.iter()
        .zip(b)
        .map(|(x, y)| total_cmp(x, y))
        .find(|o| o.is_ne())
        .unwrap_or_else(|| a.len().cmp(&b.len()))
}

/// By element type (in tag order), then element by element; floats with
/// [`f32::total_cmp`] / [`f64::total_cmp`], like [`Value`](super::Value).
impl Ord for Packed {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Packed::U8(a), Packed::U8(b)) => a.cmp(b),
            (Packed::I8(a), Packed::I8(b)) => a.cmp(b),
            (Packed::U16(a), Packed::U16(b)) => a.cmp(b),
            (Packed::I16(a), Packed::I16(b)) => a.cmp(b),
            (Packed::U32(a), Packed::U32(b)) => a.cmp(b),
            (Packed::I32(a), Packed::I32(b)) => a.cmp(b),
            (Packed::U64(a), Packed::U64(b)) => a.cmp(b),
            (Packed::I64(a), Packed::I64(b)) => a.cmp(b),
            (Packed::F32(a), Packed::F32(b)) => cmp_floats(a, b, f32::total_cmp),
            (Packed::F64(a), Packed::F64(b)) => cmp_floats(a, b, f64::total_cmp),
            (Packed::Bool(a), Packed::Bool(b)) => a.cmp(b),
            _ => (self.kind() as u8).cmp(&(other.kind() as u8)),
        }
    }
}

impl PartialOrd for Packed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Packed {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Packed {}

impl Hash for Packed {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u8(self.kind() as u8);
        match self {
            Packed::F32(v) => v.iter().for_each(|x| x.to_bits().hash(state)),
            Packed::F64(v) => v.iter().for_each(|x| x.to_bits().hash(state)),
            Packed::U8(v) => v.hash(state),
            Packed::I8(v) => v.hash(state),
            Packed::U16(v) => v.hash(state),
            Packed::I16(v) => v.hash(state),
            Packed::U32(v) => v.hash(state),
            Packed::I32(v) => v.hash(state),
            Packed::U64(v) => v.hash(state),
            Packed::I64(v) => v.hash(state),
            Packed::Bool(v) => v.hash(state),
        }
    }
}
