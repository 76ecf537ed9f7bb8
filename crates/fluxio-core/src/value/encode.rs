//! bincode's `Encode` and `Decode` for [`Value`] (the wire format in the
//! [module documentation](super#wire-format)), the decoder of the values of
//! format 1 and 2 checkpoints, and the string decoder every part of those
//! checkpoints uses.

use std::collections::BTreeMap;

use bincode::de::read::Reader;
use bincode::de::{Decode, Decoder};
use bincode::enc::{Encode, Encoder};
use bincode::error::{AllowedEnumVariants, DecodeError, EncodeError};

use super::packed::{Kind, Packed};
use super::ser::WireWriter;
use super::{MAX_DEPTH, PREALLOC_LIMIT, Value, tag};

/// Largest step by which a byte buffer grows while decoding, when the reader
/// cannot show whether the claimed bytes are there.
const BYTE_CHUNK: usize = 64 * 1024;

/// Smallest such step.
const FIRST_CHUNK: usize = 256;

/// Encodes the value as [`Context::set`](crate::Context::set) stores it
/// (see the module documentation): the canonical encoding, maps in the
/// order of their encoded keys. Fails if the value is nested deeper than
/// [`MAX_DEPTH`], since it could not be decoded again.
impl Encode for Value {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> Result<(), EncodeError> {
        let mut w = WireWriter::new(0, u64::MAX, MAX_DEPTH);
        w.value(self)
            .map_err(|e| EncodeError::OtherString(e.message))?;
        bincode::enc::write::Writer::write(encoder.writer(), &w.buf)
    }
}

fn decode_len<D: Decoder>(decoder: &mut D) -> Result<usize, DecodeError> {
    let len = u64::decode(decoder)?;
    usize::try_from(len).map_err(|_| DecodeError::OutsideUsizeRange(len))
}

/// Decodes a length-prefixed byte buffer like bincode's `Vec<u8>` (same wire
/// format), but never allocates the claimed length up front: bincode's own
/// `Vec<u8>` and `String` decoders allocate whatever length the input claims
/// (up to the configured limit, 1 GiB for checkpoints) before reading a byte.
///
/// When the reader can show the bytes (a slice), they are copied only if
/// they are all there. Otherwise (an `io::Read`, or a claim beyond the
/// input) the buffer grows in steps as large as what was read so far
/// (between [`FIRST_CHUNK`] and [`BYTE_CHUNK`]), so a false claim fails
/// after allocating at most about twice the bytes the input held.
fn decode_bytes<D: Decoder>(decoder: &mut D) -> Result<Vec<u8>, DecodeError> {
    let len = decode_len(decoder)?;
    decode_raw(decoder, len)
}

/// `len` bytes, read as [`decode_bytes`] reads them.
fn decode_raw<D: Decoder>(decoder: &mut D, len: usize) -> Result<Vec<u8>, DecodeError> {
    decoder.claim_container_read::<u8>(len)?;
    if let Some(available) = decoder.reader().peek_read(len) {
        let bytes = available.to_vec();
        decoder.reader().consume(len);
        return Ok(bytes);
    }
    let mut bytes = Vec::new();
    while bytes.len() < len {
        let start = bytes.len();
        let step = (len - start).min(start.clamp(FIRST_CHUNK, BYTE_CHUNK));
        bytes.resize(start + step, 0);
        decoder.reader().read(&mut bytes[start..])?;
    }
    Ok(bytes)
}

/// Decodes a `String` in bincode's wire format (length + UTF-8 bytes) without
/// trusting the claimed length; see [`decode_bytes`]. Used for every string
/// of a checkpoint, not only those inside values.
pub(crate) fn decode_string<D: Decoder>(decoder: &mut D) -> Result<String, DecodeError> {
    String::from_utf8(decode_bytes(decoder)?).map_err(|e| DecodeError::Utf8 {
        inner: e.utf8_error(),
    })
}

fn decode_value<D: Decoder>(
    decoder: &mut D,
    depth: usize,
    packed: bool,
) -> Result<Value, DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::OtherString(format!(
            "value nested deeper than MAX_DEPTH ({MAX_DEPTH})"
        )));
    }
    let tag = u8::decode(decoder)?;
    Ok(match tag {
        tag::UNIT => Value::Unit,
        tag::BOOL => Value::Bool(bool::decode(decoder)?),
        tag::I64 => Value::I64(i64::decode(decoder)?),
        tag::U64 => Value::U64(u64::decode(decoder)?),
        tag::I128 => Value::I128(i128::decode(decoder)?),
        tag::U128 => Value::U128(u128::decode(decoder)?),
        tag::F64 => Value::F64(f64::decode(decoder)?),
        tag::CHAR => Value::Char(char::decode(decoder)?),
        tag::STRING => Value::String(decode_string(decoder)?),
        tag::BYTES => Value::Bytes(decode_bytes(decoder)?),
        tag::NONE => Value::None,
        tag::SOME => Value::Some(Box::new(decode_value(decoder, depth + 1, packed)?)),
        tag::SEQ => {
            let len = decode_len(decoder)?;
            decoder.claim_container_read::<Value>(len)?;
            let mut items = Vec::with_capacity(len.min(PREALLOC_LIMIT));
            for _ in 0..len {
                decoder.unclaim_bytes_read(size_of::<Value>());
                items.push(decode_value(decoder, depth + 1, packed)?);
            }
            Value::Seq(items)
        }
        tag::MAP => {
            let len = decode_len(decoder)?;
            decoder.claim_container_read::<(Value, Value)>(len)?;
            let mut map = BTreeMap::new();
            for _ in 0..len {
                decoder.unclaim_bytes_read(size_of::<(Value, Value)>());
                let key = decode_value(decoder, depth + 1, packed)?;
                let value = decode_value(decoder, depth + 1, packed)?;
                if map.insert(key, value).is_some() {
                    return Err(DecodeError::Other("duplicate key in Value::Map"));
                }
            }
            Value::Map(map)
        }
        tag::ENUM => {
            let variant = decode_string(decoder)?;
            let value = decode_value(decoder, depth + 1, packed)?;
            Value::Enum {
                variant,
                value: Box::new(value),
            }
        }
        other if packed && Kind::from_tag(other).is_some() => {
            let kind = Kind::from_tag(other).ok_or(DecodeError::Other("a packed tag"))?;
            let len = decode_len(decoder)?;
            if len == 0 {
                return Err(DecodeError::Other("an empty packed sequence"));
            }
            if depth + 1 > MAX_DEPTH {
                return Err(DecodeError::OtherString(format!(
                    "value nested deeper than MAX_DEPTH ({MAX_DEPTH})"
                )));
            }
            let bytes = len
                .checked_mul(kind.width())
                .ok_or(DecodeError::OutsideUsizeRange(len as u64))?;
            let data = decode_raw(decoder, bytes)?;
            Value::Packed(
                Packed::from_le(kind, &data)
                    .ok_or(DecodeError::Other("a bool that is neither 0 nor 1"))?,
            )
        }
        unknown => {
            return Err(DecodeError::UnexpectedVariant {
                type_name: "fluxio_core::value::Value",
                allowed: if packed {
                    &AllowedEnumVariants::Range {
                        min: tag::UNIT as u32,
                        max: tag::PACKED_LAST as u32,
                    }
                } else {
                    &AllowedEnumVariants::Range {
                        min: tag::UNIT as u32,
                        max: tag::ENUM as u32,
                    }
                },
                found: u32::from(unknown),
            });
        }
    })
}

/// Decodes a value written by the `Encode` implementation (or by an older
/// build: map entries may come in any order). Corrupt input gives a
/// [`DecodeError`], never a panic: unknown tags are rejected, nesting deeper
/// than [`MAX_DEPTH`] is rejected, duplicate map keys are rejected, and
/// buffers only grow with input actually read.
impl<Context> Decode<Context> for Value {
    fn decode<D: Decoder<Context = Context>>(decoder: &mut D) -> Result<Self, DecodeError> {
        decode_value(decoder, 0, true)
    }
}

/// A value of a format 1 or 2 checkpoint: tags 0 to 14 only (packed
/// sequences came with format 3).
pub(crate) fn decode_legacy<D: Decoder>(decoder: &mut D) -> Result<Value, DecodeError> {
    decode_value(decoder, 0, false)
}

bincode::impl_borrow_decode!(Value);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bincode::config;
    use bincode::error::DecodeError;

    use super::{BYTE_CHUNK, FIRST_CHUNK};
    use crate::value::roundtrip::{
        Outer, Shape, decode, encode, every_kind, nested_some, sample_outer,
    };
    use crate::value::{MAX_DEPTH, Packed, Value, enum_value, from_value, tag, to_value};

    #[test]
    fn wire_format_is_pinned() {
        assert_eq!(encode(&Value::Unit), [0]);
        assert_eq!(encode(&Value::Bool(true)), [1, 1]);
        assert_eq!(encode(&Value::I64(-1)), [2, 1]);
        assert_eq!(encode(&Value::U64(5)), [3, 5]);
        assert_eq!(encode(&Value::F64(1.0)), [6, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f]);
        assert_eq!(encode(&Value::Char('a')), [7, b'a']);
        assert_eq!(encode(&Value::from("ab")), [8, 2, b'a', b'b']);
        assert_eq!(encode(&Value::Bytes(vec![7])), [9, 1, 7]);
        assert_eq!(encode(&Value::None), [10]);
        assert_eq!(encode(&Value::Some(Box::new(Value::Unit))), [11, 0]);
        assert_eq!(encode(&Value::Seq(vec![Value::Unit])), [12, 1, 0]);
        let map: BTreeMap<Value, Value> = [(Value::Unit, Value::None)].into();
        assert_eq!(encode(&Value::Map(map)), [13, 1, 0, 10]);
        assert_eq!(encode(&enum_value("E", Value::Unit)), [14, 1, b'E', 0]);
        assert_eq!(encode(&Value::I128(1)), [4, 2]);
        assert_eq!(encode(&Value::U128(1)), [5, 1]);
        // Packed sequences: the tag, the count, then fixed-width little
        // endian elements.
        assert_eq!(
            encode(&Value::Packed(Packed::U8(vec![1, 2]))),
            [15, 2, 1, 2]
        );
        assert_eq!(encode(&Value::Packed(Packed::I8(vec![-1]))), [16, 1, 0xff]);
        assert_eq!(
            encode(&Value::Packed(Packed::U16(vec![258]))),
            [17, 1, 2, 1]
        );
        assert_eq!(
            encode(&Value::Packed(Packed::I16(vec![-2]))),
            [18, 1, 0xfe, 0xff]
        );
        assert_eq!(
            encode(&Value::Packed(Packed::U32(vec![1]))),
            [19, 1, 1, 0, 0, 0]
        );
        assert_eq!(
            encode(&Value::Packed(Packed::I32(vec![-1]))),
            [20, 1, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            encode(&Value::Packed(Packed::U64(vec![1]))),
            [21, 1, 1, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            encode(&Value::Packed(Packed::I64(vec![1]))),
            [22, 1, 1, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            encode(&Value::Packed(Packed::F32(vec![1.0]))),
            [23, 1, 0, 0, 0x80, 0x3f]
        );
        assert_eq!(
            encode(&Value::Packed(Packed::F64(vec![1.0]))),
            [24, 1, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f]
        );
        assert_eq!(
            encode(&Value::Packed(Packed::Bool(vec![true, false]))),
            [25, 2, 1, 0]
        );
        // Empty, it is an empty `Seq`.
        assert_eq!(encode(&Value::Packed(Packed::U8(vec![]))), [12, 0]);
        // Maps in the order of their encoded keys: "b" (8, 1, b) before
        // "aa" (8, 2, a, a), the reverse of `Value`'s order.
        let map: BTreeMap<Value, Value> = [
            (Value::from("aa"), Value::Unit),
            (Value::from("b"), Value::Unit),
        ]
        .into();
        assert_eq!(
            encode(&Value::Map(map)),
            [13, 2, 8, 1, b'b', 0, 8, 2, b'a', b'a', 0]
        );
    }

    #[test]
    fn bincode_round_trip_of_every_kind_and_within_a_limit() {
        // `Encode` writes the wire format (bincode's `standard()` integers)
        // whatever the configuration; `Decode` reads it with `standard()`.
        let value = every_kind();
        assert_eq!(decode(&encode(&value)).expect("decode"), value);
        let legacy = bincode::encode_to_vec(&value, config::legacy()).expect("encode legacy");
        assert_eq!(legacy, encode(&value));

        let limited = config::standard().with_limit::<4096>();
        let (back, _): (Value, usize) =
            bincode::decode_from_slice(&encode(&value), limited).expect("decode limited");
        assert_eq!(back, value);
    }

    #[test]
    fn derived_bincode_types_can_hold_values() {
        #[derive(bincode::Encode, bincode::Decode, Debug, PartialEq)]
        struct Checkpoint {
            seq: u64,
            context: BTreeMap<String, Value>,
            last: Value,
            history: Vec<Value>,
        }
        let checkpoint = Checkpoint {
            seq: 9,
            context: [
                (
                    "outer".to_owned(),
                    to_value(&sample_outer()).expect("to_value"),
                ),
                (
                    "shape".to_owned(),
                    to_value(&Shape::Rect(1, "r".into())).expect("to_value"),
                ),
            ]
            .into(),
            last: every_kind(),
            history: vec![Value::None, Value::U64(1)],
        };
        let bytes = bincode::encode_to_vec(&checkpoint, config::standard()).expect("encode");
        let (back, read): (Checkpoint, usize) =
            bincode::decode_from_slice(&bytes, config::standard()).expect("decode");
        assert_eq!(read, bytes.len());
        assert_eq!(back, checkpoint);
        let (borrowed, _): (Checkpoint, usize) =
            bincode::borrow_decode_from_slice(&bytes, config::standard()).expect("borrow decode");
        assert_eq!(borrowed, checkpoint);
        let outer: Outer = from_value(&back.context["outer"]).expect("from_value");
        assert_eq!(outer, sample_outer());
    }

    #[test]
    fn depth_limit_boundary() {
        let deepest_ok = nested_some(MAX_DEPTH);
        assert_eq!(decode(&encode(&deepest_ok)).expect("decode"), deepest_ok);

        let too_deep = nested_some(MAX_DEPTH + 1);
        assert!(bincode::encode_to_vec(&too_deep, config::standard()).is_err());

        let mut bytes = vec![tag::SOME; MAX_DEPTH + 1];
        bytes.push(tag::UNIT);
        let err = decode(&bytes).expect_err("too deep");
        assert!(err.to_string().contains("MAX_DEPTH"), "{err}");

        // Sequences count too.
        let mut bytes = Vec::new();
        for _ in 0..=MAX_DEPTH {
            bytes.extend([tag::SEQ, 1]);
        }
        bytes.push(tag::UNIT);
        assert!(decode(&bytes).is_err());
    }

    #[test]
    fn ten_thousand_nested_some_tags_error_without_overflow() {
        let mut bytes = vec![tag::SOME; 10_000];
        bytes.push(tag::UNIT);
        let err = decode(&bytes).expect_err("must be rejected");
        assert!(err.to_string().contains("MAX_DEPTH"), "{err}");
        // Same with an unterminated chain of enums.
        let mut bytes = Vec::new();
        for _ in 0..10_000 {
            bytes.extend([tag::ENUM, 1, b'E']);
        }
        assert!(decode(&bytes).is_err());
    }

    #[test]
    fn unknown_tags_error() {
        for bad in [26u8, 99, 200, 255] {
            let err = decode(&[bad]).expect_err("unknown tag");
            let text = err.to_string();
            assert!(text.contains(&bad.to_string()), "{text}");
            assert!(
                matches!(err, DecodeError::UnexpectedVariant { found, .. } if found == u32::from(bad))
            );
        }
        // Nested unknown tag.
        assert!(decode(&[tag::SEQ, 1, 42]).is_err());
    }

    #[test]
    fn invalid_payloads_error() {
        assert!(decode(&[]).is_err());
        assert!(decode(&[tag::BOOL, 2]).is_err());
        assert!(decode(&[tag::CHAR, 0xff]).is_err());
        assert!(decode(&[tag::STRING, 2, 0xc3, 0x28]).is_err()); // invalid UTF-8
        assert!(decode(&[tag::STRING, 5, b'a']).is_err()); // truncated
        assert!(decode(&[tag::F64, 0, 0]).is_err());
        // Duplicate map keys.
        let err = decode(&[tag::MAP, 2, tag::UNIT, tag::UNIT, tag::UNIT, tag::NONE])
            .expect_err("duplicate key");
        assert!(err.to_string().contains("duplicate"), "{err}");
    }

    #[test]
    fn huge_claimed_lengths_do_not_allocate_or_panic() {
        let huge = |tag: u8| {
            let mut bytes = vec![tag, 253]; // varint marker for a u64
            bytes.extend(u64::MAX.to_le_bytes());
            bytes.extend([tag::UNIT, tag::UNIT, tag::UNIT]);
            bytes
        };
        for t in [tag::STRING, tag::BYTES, tag::SEQ, tag::MAP] {
            let err = decode(&huge(t)).expect_err("claimed length exceeds input");
            assert!(
                matches!(
                    err,
                    DecodeError::UnexpectedEnd { .. } | DecodeError::OutsideUsizeRange(_)
                ),
                "{err}"
            );
        }
        let limited = config::standard().with_limit::<1024>();
        let res: Result<(Value, usize), _> = bincode::decode_from_slice(&huge(tag::BYTES), limited);
        assert!(matches!(res, Err(DecodeError::LimitExceeded)));
        let res: Result<(Value, usize), _> = bincode::decode_from_slice(&huge(tag::SEQ), limited);
        assert!(matches!(res, Err(DecodeError::LimitExceeded)));
    }

    #[test]
    fn byte_buffers_decode_from_readers_that_cannot_peek() {
        // `io::Read` sources cannot show whether the claimed bytes are there:
        // buffers grow step by step, across the step sizes.
        let sizes = [
            0,
            1,
            FIRST_CHUNK - 1,
            FIRST_CHUNK,
            FIRST_CHUNK + 1,
            3 * FIRST_CHUNK + 7,
            BYTE_CHUNK,
            BYTE_CHUNK + 1,
            5 * BYTE_CHUNK / 2,
        ];
        for size in sizes {
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let text = "ü".repeat(size / 2) + &"x".repeat(size % 2);
            for value in [Value::Bytes(bytes.clone()), Value::String(text.clone())] {
                let encoded = encode(&value);
                let back: Value =
                    bincode::decode_from_std_read(&mut &encoded[..], config::standard())
                        .expect("decodes from a reader");
                assert_eq!(back, value, "size {size}");
                assert_eq!(decode(&encoded).expect("decodes from a slice"), value);
            }
        }
        // A claim beyond the input fails from a reader too.
        let mut claim = vec![tag::BYTES, 252];
        claim.extend(((1u32 << 30) - 1).to_le_bytes());
        claim.extend([1, 2, 3]);
        let res: Result<Value, _> =
            bincode::decode_from_std_read(&mut &claim[..], config::standard());
        assert!(res.is_err());
        assert!(decode(&claim).is_err());
    }

    /// Tiny deterministic xorshift64 RNG.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % (n as u64)).expect("fits")
        }
    }

    #[test]
    fn random_mutations_never_panic() {
        let mut context = BTreeMap::new();
        context.insert(
            Value::from("outer"),
            to_value(&sample_outer()).expect("to_value"),
        );
        context.insert(Value::from("all"), every_kind());
        context.insert(
            Value::from("shapes"),
            to_value(&vec![
                Shape::Empty,
                Shape::Poly {
                    sides: 3,
                    label: Some("t".into()),
                },
            ])
            .expect("to_value"),
        );
        let original = encode(&Value::Map(context));
        assert!(original.len() > 200);

        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let (mut ok, mut failed) = (0u32, 0u32);
        for _ in 0..20_000 {
            let mut bytes = original.clone();
            for _ in 0..=rng.below(3) {
                match rng.below(4) {
                    0 => bytes.truncate(rng.below(bytes.len() + 1)),
                    1 if !bytes.is_empty() => {
                        let i = rng.below(bytes.len());
                        bytes[i] ^= 1 << rng.below(8);
                    }
                    2 if !bytes.is_empty() => {
                        let i = rng.below(bytes.len());
                        bytes[i] = rng.next().to_le_bytes()[0];
                    }
                    _ => {
                        let i = rng.below(bytes.len() + 1);
                        bytes.insert(i, rng.next().to_le_bytes()[0]);
                    }
                }
            }
            let outcome = std::panic::catch_unwind(|| {
                bincode::decode_from_slice::<Value, _>(&bytes, config::standard())
            });
            match outcome {
                Ok(Ok((value, _))) => {
                    ok += 1;
                    // Whatever decodes re-encodes to a decodable value.
                    let again = encode(&value);
                    assert_eq!(decode(&again).expect("re-decode"), value);
                    let _ = value.to_string();
                }
                Ok(Err(_)) => failed += 1,
                Err(_) => panic!("decode panicked on input {bytes:?}"),
            }
        }
        assert_eq!(ok + failed, 20_000);
        assert!(
            ok > 0,
            "some mutations (e.g. in payload bytes) should still decode"
        );
        assert!(failed > 0, "some mutations should be rejected");
    }
}
