//! Encoded bytes back into a [`Value`] ([`decode_value`]), and the
//! structural check of encoded bytes that a checkpoint's decoder runs on
//! every value without building one ([`validate`]).

use std::collections::BTreeMap;

use super::packed::{Kind, Packed};
use super::wire::{Cursor, WireError};
use super::{MAX_DEPTH, Value, tag};

/// Decodes one value that takes all of `bytes`, nested at most `max_depth`
/// levels. Any order of map entries is accepted (duplicates are not).
pub(crate) fn decode_value(bytes: &[u8], max_depth: usize) -> Result<Value, WireError> {
    let mut cursor = Cursor::new(bytes);
    let value = read_value(&mut cursor, 0, max_depth)?;
    if cursor.remaining() != 0 {
        return Err(WireError::Invalid("bytes after the value"));
    }
    Ok(value)
}

fn read_value(c: &mut Cursor<'_>, depth: usize, max: usize) -> Result<Value, WireError> {
    if depth > max {
        return Err(WireError::TooDeep);
    }
    Ok(match c.byte()? {
        tag::UNIT => Value::Unit,
        tag::BOOL => Value::Bool(c.bool()?),
        tag::I64 => Value::I64(c.i64()?),
        tag::U64 => Value::U64(c.varint()?),
        tag::I128 => Value::I128(c.i128()?),
        tag::U128 => Value::U128(c.u128()?),
        tag::F64 => Value::F64(c.f64()?),
        tag::CHAR => Value::Char(c.char()?),
        tag::STRING => Value::String(c.str()?.to_owned()),
        tag::BYTES => Value::Bytes(c.bytes()?.to_vec()),
        tag::NONE => Value::None,
        tag::SOME => Value::Some(Box::new(read_value(c, depth + 1, max)?)),
        tag::SEQ => {
            let n = c.len(1)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(read_value(c, depth + 1, max)?);
            }
            Value::Seq(items)
        }
        tag::MAP => {
            let n = c.len(2)?;
            let mut map = BTreeMap::new();
            for _ in 0..n {
                let key = read_value(c, depth + 1, max)?;
                let value = read_value(c, depth + 1, max)?;
                if map.insert(key, value).is_some() {
                    return Err(WireError::Invalid("a duplicate key in a map"));
                }
            }
            Value::Map(map)
        }
        tag::ENUM => {
            let variant = c.str()?.to_owned();
            let value = read_value(c, depth + 1, max)?;
            Value::Enum {
                variant,
                value: Box::new(value),
            }
        }
        other => match Kind::from_tag(other) {
            Some(kind) => {
                let data = packed_data(c, kind)?;
                if depth + 1 > max {
                    return Err(WireError::TooDeep);
                }
                Value::Packed(
                    Packed::from_le(kind, data)
                        .ok_or(WireError::Invalid("a bool that is neither 0 nor 1"))?,
                )
            }
            None => return Err(WireError::Tag(other)),
        },
    })
}

/// The payload of a packed sequence of `kind` (its count read, never 0).
pub(crate) fn packed_data<'a>(c: &mut Cursor<'a>, kind: Kind) -> Result<&'a [u8], WireError> {
    let n = c.len(kind.width())?;
    if n == 0 {
        return Err(WireError::Invalid(
            "an empty packed sequence (an empty sequence is a `Seq`)",
        ));
    }
    c.take(n * kind.width())
}

/// Checks that the next value of `c` is in the canonical encoding this build
/// writes: known tags, valid UTF-8 and chars, bools 0 or 1, varints in
/// their shortest form, map entries in strictly increasing order of their
/// encoded keys, packed sequences not empty, nesting within
/// [`MAX_DEPTH`]. Builds nothing; returns the deepest level reached.
pub(crate) fn validate(c: &mut Cursor<'_>) -> Result<usize, WireError> {
    check(c, 0)
}

fn check(c: &mut Cursor<'_>, depth: usize) -> Result<usize, WireError> {
    if depth > MAX_DEPTH {
        return Err(WireError::TooDeep);
    }
    match c.byte()? {
        tag::UNIT | tag::NONE => {}
        tag::BOOL => {
            c.bool()?;
        }
        tag::I64 | tag::U64 => {
            c.varint()?;
        }
        tag::I128 | tag::U128 => {
            c.varint128()?;
        }
        tag::F64 => {
            c.take(8)?;
        }
        tag::CHAR => {
            c.char()?;
        }
        tag::STRING => {
            c.str()?;
        }
        tag::BYTES => {
            c.bytes()?;
        }
        tag::SOME => return check(c, depth + 1),
        tag::SEQ => {
            let n = c.len(1)?;
            let mut deepest = depth;
            for _ in 0..n {
                deepest = deepest.max(check(c, depth + 1)?);
            }
            return Ok(deepest);
        }
        tag::MAP => {
            let n = c.len(2)?;
            let mut deepest = depth;
            let mut previous: Option<&[u8]> = None;
            for _ in 0..n {
                let start = c.pos();
                deepest = deepest.max(check(c, depth + 1)?);
                let key = c.since(start);
                if previous.is_some_and(|p| p >= key) {
                    return Err(WireError::Invalid(
                        "map keys out of order or repeated (they are sorted by their encoding)",
                    ));
                }
                previous = Some(key);
                deepest = deepest.max(check(c, depth + 1)?);
            }
            return Ok(deepest);
        }
        tag::ENUM => {
            c.str()?;
            return check(c, depth + 1);
        }
        other => {
            let kind = Kind::from_tag(other).ok_or(WireError::Tag(other))?;
            let data = packed_data(c, kind)?;
            if depth + 1 > MAX_DEPTH {
                return Err(WireError::TooDeep);
            }
            if kind == Kind::Bool && data.iter().any(|&b| b > 1) {
                return Err(WireError::Invalid("a bool that is neither 0 nor 1"));
            }
            return Ok(depth + 1);
        }
    }
    Ok(depth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::EncodedValue;
    use crate::value::roundtrip::{arbitrary, every_kind};

    fn check_all(bytes: &[u8]) -> Result<usize, WireError> {
        let mut c = Cursor::new(bytes);
        let depth = validate(&mut c)?;
        if c.remaining() != 0 {
            return Err(WireError::Invalid("bytes after the value"));
        }
        Ok(depth)
    }

    #[test]
    fn what_the_writer_writes_validates_and_decodes_back() {
        let mut seed = 3;
        for i in 0..2000 {
            let value = if i == 0 {
                every_kind()
            } else {
                arbitrary(&mut seed, 1 + i % 5)
            };
            let encoded = EncodedValue::from_value(&value);
            assert_eq!(check_all(encoded.bytes()), Ok(encoded.depth()), "{value}");
            assert_eq!(decode_value(encoded.bytes(), MAX_DEPTH), Ok(value));
        }
    }

    #[test]
    fn validate_refuses_every_non_canonical_or_invalid_encoding() {
        let refused = [
            (
                &[tag::U64, 251, 5, 0][..],
                "a varint longer than its shortest form",
            ),
            (
                &[tag::MAP, 2, tag::U64, 2, 0, tag::U64, 1, 0],
                "keys out of order",
            ),
            (
                &[tag::MAP, 2, tag::U64, 1, 0, tag::U64, 1, 0],
                "a repeated key",
            ),
            (&[15, 0], "an empty packed sequence"),
            (&[25, 2, 1, 2], "a packed bool that is 2"),
            (&[17, 2, 1, 0, 1], "a packed u16 cut short"),
            (&[26], "tag 26"),
            (&[tag::BOOL, 2], "a bool that is 2"),
            (&[tag::STRING, 2, 0xc3, 0x28], "invalid UTF-8"),
            (
                &[tag::ENUM, 1, 0xff, tag::UNIT],
                "a variant name that is not UTF-8",
            ),
            (&[tag::CHAR, 0xed, 0xa0, 0x80], "a surrogate char"),
            (&[tag::SEQ, 3, tag::UNIT], "a count beyond the bytes"),
        ];
        for (bytes, what) in refused {
            assert!(check_all(bytes).is_err(), "{what}: {bytes:?}");
            // decode_value (for bytes of unknown origin) refuses the invalid
            // ones too; it accepts any key order.
        }
        assert!(decode_value(&[tag::MAP, 2, tag::U64, 2, 0, tag::U64, 1, 0], MAX_DEPTH).is_ok());
        assert!(decode_value(&[25, 2, 1, 2], MAX_DEPTH).is_err());
        // Depth: MAX_DEPTH `Some`s around a unit is the deepest; one more is not.
        let mut deepest = vec![tag::SOME; MAX_DEPTH];
        deepest.push(tag::UNIT);
        assert_eq!(check_all(&deepest), Ok(MAX_DEPTH));
        deepest.insert(0, tag::SOME);
        assert_eq!(check_all(&deepest), Err(WireError::TooDeep));
        let mut packed = vec![tag::SOME; MAX_DEPTH];
        packed.extend([15, 1, 7]);
        assert_eq!(
            check_all(&packed),
            Err(WireError::TooDeep),
            "its elements are one deeper"
        );
    }
}
