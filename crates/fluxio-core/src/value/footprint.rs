//! The limits: what the checkpoint decoder accepts, counted as it counts
//! (see the [module documentation](super#limits)).

use serde::Serialize;

use super::error::TooLarge;
use super::{MAX_DEPTH, Value, ValueError, to_value};
use crate::error::Error;
use crate::store::MAX_PAYLOAD;

/// [`MAX_PAYLOAD`] as the `u64` sizes are counted in.
const MAX_PAYLOAD_U64: u64 = MAX_PAYLOAD as u64;

/// What the decoder charges before the first item of a top-level container:
/// its key's length (8), the value's tag (1) and the container's length (8).
const CONTAINER_FLOOR: u64 = 8 + 1 + 8;

/// What the decoder charges per sequence element while reading a sequence.
pub(super) const SEQ_SLOT: usize = size_of::<Value>();

/// What the decoder charges per map entry while reading a map.
pub(super) const MAP_SLOT: usize = size_of::<(Value, Value)>();

/// Refuses, before anything is built, a container of `len` items of `slot`
/// bytes each that no checkpoint can hold: the decoder charges `len * slot`
/// bytes for it on top of its key's 8-byte length and its own tag and length
/// (see [`Footprint`]), and the whole checkpoint must stay within
/// [`MAX_PAYLOAD`]. A container this check lets through may still be refused
/// by [`check_context_value`], which counts everything.
pub(super) fn check_len(what: &str, unit: &str, len: usize, slot: usize) -> Result<(), ValueError> {
    let limit = (MAX_PAYLOAD_U64 - CONTAINER_FLOOR) / slot as u64;
    if len as u64 > limit {
        return Err(ValueError::too_large(what, unit, len, limit));
    }
    Ok(())
}

/// What reading a part of a checkpoint costs, counted exactly as the decoder
/// counts it against its limit (bincode's `claim_bytes_read`): every integer
/// its width (a `u64` 8 bytes, however few its varint takes), every string
/// or byte buffer 8 plus its length, and a sequence (map) of `n` items
/// `n * size_of::<Value>()` (`size_of::<(Value, Value)>()`) bytes up front,
/// given back item by item as the items are read (see `decode_value`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Footprint {
    /// Bytes of the encoding.
    pub(crate) encoded: u64,
    /// What the decoder has charged once the part is read.
    pub(crate) net: u64,
    /// The most the decoder charges while reading it (at least `net`).
    pub(crate) peak: u64,
}

impl Footprint {
    /// A part the decoder charges `claim` for, `encoded` bytes long.
    pub(crate) fn item(claim: u64, encoded: u64) -> Self {
        Footprint {
            encoded,
            net: claim,
            peak: claim,
        }
    }

    /// An integer of `width` bytes holding `v` (zigzagged when signed).
    pub(crate) fn int(width: u64, v: u128) -> Self {
        Self::item(width, varint_len(v))
    }

    /// A string or byte buffer of `len` bytes.
    pub(crate) fn string(len: usize) -> Self {
        let (claim, encoded) = string_parts(len);
        Self::item(claim, encoded)
    }

    /// `self`, then `next`.
    pub(crate) fn then(&mut self, next: Footprint) {
        self.peak = self.peak.max(self.net.saturating_add(next.peak));
        self.net = self.net.saturating_add(next.net);
        self.encoded = self.encoded.saturating_add(next.encoded);
    }

    /// What must stay within the decoder's limit: the larger of the bytes
    /// read and the most charged.
    pub(crate) fn size(&self) -> u64 {
        self.peak.max(self.encoded)
    }
}

/// Bytes of bincode's varint encoding of `v`.
fn varint_len(v: u128) -> u64 {
    if v <= 250 {
        1
    } else if v <= u128::from(u16::MAX) {
        3
    } else if v <= u128::from(u32::MAX) {
        5
    } else if v <= u128::from(u64::MAX) {
        9
    } else {
        17
    }
}

/// Bincode's zigzag mapping of a signed integer to an unsigned one.
fn zigzag(v: i128) -> u128 {
    if v < 0 {
        (!(v as u128)) * 2 + 1
    } else {
        (v as u128) * 2
    }
}

/// A value nested deeper than [`MAX_DEPTH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooDeep;

/// A sequence or map of `len` items: its length, and the up-front charge.
fn container(len: usize, slot: usize) -> Footprint {
    let charge = 8u64.saturating_add((len as u64).saturating_mul(slot as u64));
    Footprint::item(charge, varint_len(len as u128))
}

/// The footprint of `value` in a checkpoint, mirroring `decode_value`
/// step by step (and refusing the same depth).
pub(crate) fn footprint(value: &Value) -> Result<Footprint, TooDeep> {
    footprint_at(value, 0)
}

fn footprint_at(value: &Value, depth: usize) -> Result<Footprint, TooDeep> {
    if depth > MAX_DEPTH {
        return Err(TooDeep);
    }
    if let Some(fp) = scalar_footprint(value) {
        return Ok(fp);
    }
    // Every child is one level down: a scalar child needs no further check.
    let child = |v: &Value| match scalar_footprint(v) {
        Some(fp) if depth < MAX_DEPTH => Ok(fp),
        _ => footprint_at(v, depth + 1),
    };
    let mut fp = Footprint::item(1, 1); // the tag
    match value {
        Value::Some(v) => fp.then(child(v)?),
        Value::Seq(items) => {
            fp.then(container(items.len(), SEQ_SLOT));
            for item in items {
                fp.net -= SEQ_SLOT as u64;
                match scalar_footprint(item) {
                    // The common case (a `Vec<u8>`, say) without the recursion.
                    Some(c) if depth < MAX_DEPTH => {
                        fp.net += c.net;
                        fp.peak = fp.peak.max(fp.net);
                        fp.encoded += c.encoded;
                    }
                    _ => fp.then(footprint_at(item, depth + 1)?),
                }
            }
        }
        Value::Map(map) => {
            fp.then(container(map.len(), MAP_SLOT));
            for (key, value) in map {
                fp.net -= MAP_SLOT as u64;
                fp.then(child(key)?);
                fp.then(child(value)?);
            }
        }
        Value::Enum { variant, value } => {
            fp.then(Footprint::string(variant.len()));
            fp.then(child(value)?);
        }
        // Returned by `scalar_footprint` above.
        Value::Unit
        | Value::None
        | Value::Bool(_)
        | Value::I64(_)
        | Value::U64(_)
        | Value::I128(_)
        | Value::U128(_)
        | Value::F64(_)
        | Value::Char(_)
        | Value::String(_)
        | Value::Bytes(_) => {}
    }
    Ok(fp)
}

/// The footprint of a value without children, tag included; `None` for
/// `Some`, sequences, maps and enums.
#[inline]
fn scalar_footprint(value: &Value) -> Option<Footprint> {
    let (claim, encoded) = match value {
        Value::Unit | Value::None => (0, 0),
        Value::Bool(_) => (1, 1),
        Value::I64(v) => (8, varint_len(zigzag((*v).into()))),
        Value::U64(v) => (8, varint_len((*v).into())),
        Value::I128(v) => (16, varint_len(zigzag(*v))),
        Value::U128(v) => (16, varint_len(*v)),
        Value::F64(_) => (8, 8),
        Value::Char(c) => (c.len_utf8() as u64, c.len_utf8() as u64),
        Value::String(v) => string_parts(v.len()),
        Value::Bytes(v) => string_parts(v.len()),
        Value::Some(_) | Value::Seq(_) | Value::Map(_) | Value::Enum { .. } => return None,
    };
    Some(Footprint::item(1 + claim, 1 + encoded))
}

/// What a string or byte buffer of `len` bytes is charged, and its length.
fn string_parts(len: usize) -> (u64, u64) {
    let len = len as u64;
    (8 + len, varint_len(len.into()) + len)
}

/// The footprint of `key` and `value` as one entry of a checkpoint's context.
///
/// # Errors
/// [`Error::ValueTooDeep`] naming `key`.
pub(crate) fn entry_footprint(key: &str, value: &Value) -> crate::Result<Footprint> {
    let mut fp = Footprint::string(key.len());
    fp.then(footprint(value).map_err(|TooDeep| too_deep(key))?);
    Ok(fp)
}

fn too_deep(key: &str) -> Error {
    Error::ValueTooDeep {
        key: key.to_owned(),
        limit: MAX_DEPTH as u32,
    }
}

/// [`check_context_value`] against any `limit` (the unit tests check it
/// against the decoder at small limits).
fn check_entry(key: &str, value: &Value, limit: u64) -> crate::Result<()> {
    let size = entry_footprint(key, value)?.size();
    if size > limit {
        return Err(Error::ValueTooLarge {
            key: key.to_owned(),
            size,
            limit,
        });
    }
    Ok(())
}

/// Whether `value` may be stored under `key` in a context: the check behind
/// [`Context::set`](crate::Context::set), for a value converted already (as
/// [`Context::set_value`](crate::Context::set_value), which does not check,
/// takes it). See the [module documentation](crate::value#limits).
///
/// ```
/// use fluxio_core::value::{check_context_value, MAX_DEPTH};
/// use fluxio_core::{Error, Value};
///
/// let mut deep = Value::Unit;
/// for _ in 0..=MAX_DEPTH {
///     deep = Value::Some(Box::new(deep));
/// }
/// let err = check_context_value("tree", &deep).unwrap_err();
/// assert!(matches!(err, Error::ValueTooDeep { ref key, limit: 128 } if key == "tree"));
/// assert!(check_context_value("small", &Value::from("ok")).is_ok());
/// ```
///
/// # Errors
/// [`Error::ValueTooDeep`] when `value` nests deeper than [`MAX_DEPTH`];
/// [`Error::ValueTooLarge`] when the key and value alone take more than
/// [`MAX_PAYLOAD`] of a checkpoint's decoding
/// budget (`size` and `limit` in bytes). Both name `key`.
pub fn check_context_value(key: &str, value: &Value) -> crate::Result<()> {
    check_entry(key, value, MAX_PAYLOAD_U64)
}

/// Converts `value` for storing under `key` in a context: [`to_value`], then
/// [`check_context_value`]. [`Context::set`](crate::Context::set) is this
/// plus the insertion.
///
/// A sequence or map whose length alone is past what any checkpoint can hold
/// (more than about 2<sup>25</sup> elements of a sequence), and a string or
/// byte buffer longer than [`MAX_PAYLOAD`], is
/// refused before any of it is converted.
///
/// # Errors
/// [`Error::Serialize`] when `value`'s `Serialize` impl fails;
/// [`Error::ValueTooLarge`] when it is too large, with `size` and `limit` in
/// elements (entries, bytes) when one sequence (map, string) is past what any
/// checkpoint can hold, in bytes of the checkpoint's decoding budget
/// otherwise; [`Error::ValueTooDeep`] when it nests deeper than
/// [`MAX_DEPTH`]. All name `key`.
pub fn to_context_value<T: Serialize + ?Sized>(key: &str, value: &T) -> crate::Result<Value> {
    let v = to_value(value).map_err(|e| match e.too_large {
        Some(TooLarge { size, limit }) => Error::ValueTooLarge {
            key: key.to_owned(),
            size,
            limit,
        },
        None => Error::Serialize {
            key: key.to_owned(),
            source: Box::new(e),
        },
    })?;
    check_context_value(key, &v)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use bincode::config;
    use bincode::de::{Decode, Decoder};
    use bincode::error::DecodeError;

    use super::*;
    use crate::value::decode_string;
    use crate::value::roundtrip::{decode, encode, nested_some};

    // ---- limits: the footprint is the decoder's own count -----------------

    /// A context entry as a checkpoint holds it: the key, then the value.
    #[derive(Debug, PartialEq)]
    struct Entry(String, Value);

    impl<C> Decode<C> for Entry {
        fn decode<D: Decoder<Context = C>>(d: &mut D) -> Result<Self, DecodeError> {
            Ok(Entry(decode_string(d)?, Value::decode(d)?))
        }
    }

    fn entry_bytes(key: &str, value: &Value) -> Vec<u8> {
        bincode::encode_to_vec((key, value), config::standard()).expect("encodable")
    }

    /// Decodes an entry with the decoder's limit set to `L`.
    fn decode_within<const L: usize>(bytes: &[u8]) -> Result<Entry, DecodeError> {
        let (entry, used) =
            bincode::decode_from_slice::<Entry, _>(bytes, config::standard().with_limit::<L>())?;
        assert_eq!(used, bytes.len());
        Ok(entry)
    }

    /// Values growing with `n`, one kind per way of reaching the limit.
    fn grow(kind: usize, n: usize) -> Value {
        let n64 = n as u64;
        match kind {
            0 => Value::Seq(vec![Value::Unit; n]),
            1 => Value::Seq(vec![Value::U64(u64::MAX); n]),
            2 => Value::Map(
                (0..n64)
                    .map(|i| (Value::U64(i), Value::Bool(true)))
                    .collect(),
            ),
            3 => Value::String("é".repeat(n / 2) + &"x".repeat(n % 2)),
            4 => Value::Bytes(vec![7; n]),
            5 => Value::Enum {
                variant: "v".repeat(n),
                value: Box::new(Value::I128(i128::MIN)),
            },
            // Strings inside a sequence: the budget grows with each one read
            // while the sequence's up-front charge shrinks.
            6 => Value::Seq((0..n).map(|i| Value::String("s".repeat(i % 70))).collect()),
            // A map of sequences, inside `Some`.
            7 => Value::Some(Box::new(Value::Map(
                (0..n64)
                    .map(|i| {
                        (
                            Value::I64(-(i as i64)),
                            Value::Seq(vec![Value::F64(0.5); (i % 5) as usize]),
                        )
                    })
                    .collect(),
            ))),
            _ => Value::Seq(vec![Value::Char('€'); n]),
        }
    }
    const KINDS: usize = 9;

    /// For every kind of value, at limit `L`: the largest value the check
    /// accepts decodes (and round-trips) with the decoder's limit at `L`, and
    /// one element more is refused by both; in between, the footprint's
    /// encoded size is the encoding's length and its peak is exactly what
    /// the decoder's limit sees.
    fn boundary_at<const L: usize>() {
        let limit = L as u64;
        for kind in 0..KINDS {
            let key = format!("key-{kind}");
            let mut n = 0;
            while check_entry(&key, &grow(kind, n + 1), limit).is_ok() {
                n += 1;
            }
            let at = grow(kind, n);
            let past = grow(kind, n + 1);
            let bytes = entry_bytes(&key, &at);
            let fp = entry_footprint(&key, &at).expect("shallow");
            assert_eq!(fp.encoded, bytes.len() as u64, "kind {kind}, n {n}");
            assert!(fp.size() <= limit, "kind {kind}, n {n}");
            assert_eq!(
                decode_within::<L>(&bytes).expect("at the limit decodes"),
                Entry(key.clone(), at),
                "kind {kind}, n {n}"
            );
            match check_entry(&key, &past, limit) {
                Err(Error::ValueTooLarge {
                    key: k,
                    size,
                    limit: l,
                }) => {
                    assert_eq!((k.as_str(), l), (key.as_str(), limit));
                    assert!(size > limit);
                }
                other => panic!("kind {kind}, n {}: {other:?}", n + 1),
            }
            let bytes = entry_bytes(&key, &past);
            let fp = entry_footprint(&key, &past).expect("shallow");
            assert_eq!(fp.encoded, bytes.len() as u64, "kind {kind}, n {}", n + 1);
            // Past the limit: the decoder refuses it, or (when only the
            // encoded length is past) `from_bytes`'s payload limit does.
            if fp.peak > limit {
                assert!(
                    matches!(decode_within::<L>(&bytes), Err(DecodeError::LimitExceeded)),
                    "kind {kind}, n {}",
                    n + 1
                );
            } else {
                assert!(fp.encoded > limit, "kind {kind}, n {}", n + 1);
                decode_within::<L>(&bytes).expect("within the budget");
            }
        }
    }

    #[test]
    fn the_size_check_is_exactly_the_decoders_limit_at_every_boundary() {
        boundary_at::<40>();
        boundary_at::<100>();
        boundary_at::<333>();
        boundary_at::<1000>();
        boundary_at::<4096>();
        boundary_at::<20_000>();
    }

    /// Deterministic pseudo-random values of every kind, nested up to `depth`.
    fn arbitrary(seed: &mut u64, depth: usize) -> Value {
        let mut next = || {
            *seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            *seed >> 33
        };
        let pick = next() % if depth == 0 { 11 } else { 15 };
        let small = next() % 300;
        let big = next() << 40 | next();
        match pick {
            0 => Value::Unit,
            1 => Value::Bool(small % 2 == 0),
            2 => Value::I64(if small % 2 == 0 {
                -(big as i64)
            } else {
                small as i64
            }),
            3 => Value::U64(if small % 3 == 0 { big } else { small }),
            4 => Value::I128(-(i128::from(big) << (small % 70))),
            5 => Value::U128(u128::from(big) << (small % 70)),
            6 => Value::F64(small as f64 / 7.0),
            7 => Value::Char(char::from_u32(small as u32 * 97).unwrap_or('x')),
            8 => Value::String("ü".repeat(small as usize % 40)),
            9 => Value::Bytes(vec![1; small as usize]),
            10 => Value::None,
            11 => Value::Some(Box::new(arbitrary(seed, depth - 1))),
            12 => Value::Seq((0..small % 6).map(|_| arbitrary(seed, depth - 1)).collect()),
            13 => Value::Map(
                (0..small % 5)
                    .map(|_| (arbitrary(seed, 0), arbitrary(seed, depth - 1)))
                    .collect(),
            ),
            _ => Value::Enum {
                variant: "variant".repeat(small as usize % 3),
                value: Box::new(arbitrary(seed, depth - 1)),
            },
        }
    }

    fn agrees_at<const L: usize>(key: &str, value: &Value) {
        let bytes = entry_bytes(key, value);
        let fp = entry_footprint(key, value).expect("shallow");
        assert_eq!(fp.encoded, bytes.len() as u64, "{value}");
        assert_eq!(
            decode_within::<L>(&bytes).is_ok(),
            fp.peak <= L as u64,
            "limit {L}, peak {}: {value}",
            fp.peak
        );
        assert_eq!(
            check_entry(key, value, L as u64).is_ok(),
            fp.peak <= L as u64 && bytes.len() <= L
        );
    }

    #[test]
    fn the_size_check_agrees_with_the_decoder_on_arbitrary_values() {
        let mut seed = 8;
        for i in 0..2000 {
            let value = arbitrary(&mut seed, 1 + i % 5);
            let key = "k".repeat(i % 4);
            agrees_at::<64>(&key, &value);
            agrees_at::<256>(&key, &value);
            agrees_at::<1024>(&key, &value);
            agrees_at::<4096>(&key, &value);
        }
    }

    #[test]
    fn the_depth_check_is_the_encoders_and_decoders_limit() {
        let at = nested_some(MAX_DEPTH);
        assert!(check_context_value("k", &at).is_ok());
        assert_eq!(decode(&encode(&at)).expect("decodes"), at);
        match check_context_value("k", &nested_some(MAX_DEPTH + 1)) {
            Err(Error::ValueTooDeep { key, limit }) => {
                assert_eq!((key.as_str(), limit as usize), ("k", MAX_DEPTH));
            }
            other => panic!("{other:?}"),
        }
        // An enum's value and a tuple variant's fields are one and two
        // levels down.
        let mut v = Value::Unit;
        for _ in 0..MAX_DEPTH / 2 {
            v = Value::Enum {
                variant: "t".into(),
                value: Box::new(Value::Seq(vec![v])),
            };
        }
        assert!(check_context_value("k", &v).is_ok());
        let v = Value::Some(Box::new(v));
        assert!(check_context_value("k", &v).is_err());
        assert!(bincode::encode_to_vec(&v, config::standard()).is_err());
    }

    #[test]
    fn to_value_refuses_only_containers_no_checkpoint_can_hold() {
        // The largest lengths the early check lets through: with an empty key
        // at the top level, they fit exactly; one more cannot fit anywhere.
        for (slot, unit) in [(SEQ_SLOT, "elements"), (MAP_SLOT, "entries"), (1, "bytes")] {
            let limit = (MAX_PAYLOAD_U64 - CONTAINER_FLOOR) / slot as u64;
            assert!(check_len("x", unit, limit as usize, slot).is_ok());
            let err = check_len("x", unit, limit as usize + 1, slot).expect_err("refused");
            assert_eq!(
                err.too_large,
                Some(TooLarge {
                    size: limit + 1,
                    limit
                })
            );
            let mut fp = Footprint::string(0);
            fp.then(Footprint::item(1, 1));
            fp.then(if slot == 1 {
                Footprint::string(limit as usize)
            } else {
                container(limit as usize, slot)
            });
            assert!(fp.peak <= MAX_PAYLOAD_U64, "{unit}");
            assert!(fp.peak + slot as u64 > MAX_PAYLOAD_U64, "{unit}");
        }
        assert_eq!(SEQ_SLOT, 32, "the documented cost of a sequence element");
        // `to_value` reports it (`Context::set` turns it into `ValueTooLarge`).
        let err = to_value(&vec![0u8; 1 << 25]).expect_err("too long");
        assert!(err.message.contains("33554432 elements"), "{}", err.message);
        match to_context_value("blob", &vec![0u8; 1 << 25]) {
            Err(Error::ValueTooLarge { key, size, limit }) => {
                assert_eq!(
                    (key.as_str(), size, limit),
                    ("blob", 1 << 25, (1 << 25) - 1)
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
