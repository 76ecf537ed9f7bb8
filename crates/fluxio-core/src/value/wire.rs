//! The integer and string encodings of the wire format (bincode 2's
//! `standard()` configuration: varints, zigzag, little endian), and
//! [`Cursor`], the bounds-checked reader every decoder of encoded values
//! uses.

use std::fmt;

/// One byte of a varint below this is the value itself.
const SINGLE_MAX: u8 = 250;
const U16_MARK: u8 = 251;
const U32_MARK: u8 = 252;
const U64_MARK: u8 = 253;
const U128_MARK: u8 = 254;

/// Appends bincode's varint of `v`.
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, v: u64) {
    if v <= u64::from(SINGLE_MAX) {
        out.push(v as u8);
    } else if v <= u64::from(u16::MAX) {
        out.push(U16_MARK);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v <= u64::from(u32::MAX) {
        out.push(U32_MARK);
        out.extend_from_slice(&(v as u32).to_le_bytes());
    } else {
        out.push(U64_MARK);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Appends bincode's varint of a 128-bit `v`.
pub(crate) fn put_varint128(out: &mut Vec<u8>, v: u128) {
    match u64::try_from(v) {
        Ok(small) => put_varint(out, small),
        Err(_) => {
            out.push(U128_MARK);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// Bytes of bincode's varint of `v`.
pub(crate) fn varint_len(v: u64) -> usize {
    if v <= u64::from(SINGLE_MAX) {
        1
    } else if v <= u64::from(u16::MAX) {
        3
    } else if v <= u64::from(u32::MAX) {
        5
    } else {
        9
    }
}

/// Bytes of bincode's varint of a 128-bit `v`.
pub(crate) fn varint128_len(v: u128) -> usize {
    u64::try_from(v).map_or(17, varint_len)
}

/// Bincode's zigzag mapping of a signed integer.
#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Bincode's zigzag mapping of a signed 128-bit integer.
pub(crate) fn zigzag128(v: i128) -> u128 {
    ((v << 1) ^ (v >> 127)) as u128
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn unzigzag128(v: u128) -> i128 {
    ((v >> 1) as i128) ^ -((v & 1) as i128)
}

/// Appends a length-prefixed string or byte buffer.
#[inline]
pub(crate) fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Why bytes are not a valid encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WireError {
    /// The bytes end before the value does.
    End,
    /// Nested deeper than [`MAX_DEPTH`](super::MAX_DEPTH).
    TooDeep,
    /// Anything else, said in words.
    Invalid(&'static str),
    /// A tag no build of fluxio writes.
    Tag(u8),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::End => f.write_str("the bytes end inside a value"),
            WireError::TooDeep => write!(
                f,
                "value nested deeper than MAX_DEPTH ({})",
                super::MAX_DEPTH
            ),
            WireError::Invalid(what) => f.write_str(what),
            WireError::Tag(tag) => write!(f, "unknown value tag {tag}"),
        }
    }
}

impl std::error::Error for WireError {}

/// A reader over encoded bytes: every read is bounds-checked, a length is
/// never trusted beyond the bytes present, and varints must be in their
/// shortest form (so that one value has one encoding).
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    /// Bytes read so far.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The bytes from `start` to the current position.
    pub(crate) fn since(&self, start: usize) -> &'a [u8] {
        &self.bytes[start..self.pos]
    }

    pub(crate) fn peek(&self) -> Result<u8, WireError> {
        self.bytes.get(self.pos).copied().ok_or(WireError::End)
    }

    #[inline]
    pub(crate) fn byte(&mut self) -> Result<u8, WireError> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    /// The next `n` bytes.
    #[inline]
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::End);
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A varint of up to 128 bits, in its shortest form.
    pub(crate) fn varint128(&mut self) -> Result<u128, WireError> {
        const LONG: WireError = WireError::Invalid("a varint longer than its shortest form");
        let v = match self.byte()? {
            b @ 0..=SINGLE_MAX => return Ok(u128::from(b)),
            U16_MARK => {
                let v = u16::from_le_bytes(self.array()?);
                (v > u16::from(SINGLE_MAX)).then_some(u128::from(v))
            }
            U32_MARK => {
                let v = u32::from_le_bytes(self.array()?);
                (v > u32::from(u16::MAX)).then_some(u128::from(v))
            }
            U64_MARK => {
                let v = u64::from_le_bytes(self.array()?);
                (v > u64::from(u32::MAX)).then_some(u128::from(v))
            }
            U128_MARK => {
                let v = u128::from_le_bytes(self.array()?);
                (v > u128::from(u64::MAX)).then_some(v)
            }
            _ => return Err(WireError::Invalid("an invalid varint marker")),
        };
        v.ok_or(LONG)
    }

    /// A varint of at most 64 bits.
    pub(crate) fn varint(&mut self) -> Result<u64, WireError> {
        u64::try_from(self.varint128()?)
            .map_err(|_| WireError::Invalid("a 128-bit varint where 64 bits fit"))
    }

    /// A varint that fits a `u32`.
    pub(crate) fn varint_u32(&mut self) -> Result<u32, WireError> {
        u32::try_from(self.varint()?).map_err(|_| WireError::Invalid("an integer past u32::MAX"))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, WireError> {
        Ok(unzigzag(self.varint()?))
    }

    pub(crate) fn i128(&mut self) -> Result<i128, WireError> {
        Ok(unzigzag128(self.varint128()?))
    }

    pub(crate) fn u128(&mut self) -> Result<u128, WireError> {
        self.varint128()
    }

    pub(crate) fn f64(&mut self) -> Result<f64, WireError> {
        Ok(f64::from_bits(u64::from_le_bytes(self.array()?)))
    }

    pub(crate) fn bool(&mut self) -> Result<bool, WireError> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Invalid("a bool that is neither 0 nor 1")),
        }
    }

    /// A char: its UTF-8 bytes, as bincode writes it.
    pub(crate) fn char(&mut self) -> Result<char, WireError> {
        let width = match self.peek()? {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return Err(WireError::Invalid("an invalid char")),
        };
        let bytes = self.take(width)?;
        let s = std::str::from_utf8(bytes).map_err(|_| WireError::Invalid("an invalid char"))?;
        s.chars()
            .next()
            .ok_or(WireError::Invalid("an invalid char"))
    }

    /// A length that the bytes left can hold at `min` bytes per item.
    pub(crate) fn len(&mut self, min: usize) -> Result<usize, WireError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| WireError::End)?;
        if n.saturating_mul(min) > self.remaining() {
            return Err(WireError::End);
        }
        Ok(n)
    }

    /// Length-prefixed bytes.
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.len(1)?;
        self.take(n)
    }

    /// A length-prefixed UTF-8 string.
    pub(crate) fn str(&mut self) -> Result<&'a str, WireError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| WireError::Invalid("invalid UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_bincodes_and_only_the_shortest_form_reads() {
        for v in [
            0u64,
            1,
            250,
            251,
            u64::from(u16::MAX),
            u64::from(u16::MAX) + 1,
            u64::from(u32::MAX),
            u64::from(u32::MAX) + 1,
            u64::MAX,
        ] {
            let mut ours = Vec::new();
            put_varint(&mut ours, v);
            let theirs = bincode::encode_to_vec(v, bincode::config::standard()).expect("encodes");
            assert_eq!(ours, theirs, "{v}");
            assert_eq!(ours.len(), varint_len(v));
            assert_eq!(Cursor::new(&ours).varint(), Ok(v));
        }
        for v in [i64::MIN, -1, 0, 1, i64::MAX] {
            let mut ours = Vec::new();
            put_varint(&mut ours, zigzag(v));
            let theirs = bincode::encode_to_vec(v, bincode::config::standard()).expect("encodes");
            assert_eq!(ours, theirs, "{v}");
            assert_eq!(Cursor::new(&ours).i64(), Ok(v));
        }
        for v in [i128::MIN, -1, 0, i128::MAX] {
            let mut ours = Vec::new();
            put_varint128(&mut ours, zigzag128(v));
            let theirs = bincode::encode_to_vec(v, bincode::config::standard()).expect("encodes");
            assert_eq!(ours, theirs, "{v}");
            assert_eq!(Cursor::new(&ours).i128(), Ok(v));
        }
        // 5 in three bytes is not the shortest form.
        assert!(Cursor::new(&[251, 5, 0]).varint().is_err());
        assert!(Cursor::new(&[252, 5, 0, 0, 0]).varint().is_err());
        assert!(Cursor::new(&[255]).varint().is_err());
        assert_eq!(Cursor::new(&[251, 5]).varint(), Err(WireError::End));
    }

    #[test]
    fn lengths_are_never_trusted_beyond_the_bytes() {
        let mut bytes = Vec::new();
        put_varint(&mut bytes, u64::MAX);
        assert_eq!(Cursor::new(&bytes).bytes(), Err(WireError::End));
        assert_eq!(Cursor::new(&[3, b'a', b'b']).bytes(), Err(WireError::End));
        assert_eq!(Cursor::new(&[2, b'a', b'b']).str(), Ok("ab"));
        assert!(Cursor::new(&[2, 0xc3, 0x28]).str().is_err());
        assert_eq!(Cursor::new(&[2, 1, 1]).len(2), Err(WireError::End));
        assert_eq!(Cursor::new(&[1, 1, 1]).len(2), Ok(1));
        for c in ['a', 'é', '€', '🦀'] {
            let mut b = [0u8; 4];
            assert_eq!(Cursor::new(c.encode_utf8(&mut b).as_bytes()).char(), Ok(c));
        }
        assert!(Cursor::new(&[0xed, 0xa0, 0x80]).char().is_err()); // a surrogate
        assert!(Cursor::new(&[0xc3]).char().is_err());
    }
}
