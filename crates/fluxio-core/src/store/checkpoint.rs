//! The checkpoint record and its binary encoding.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use bincode::de::{Decode, Decoder};
use bincode::error::{AllowedEnumVariants, DecodeError};
use serde::de::value::MapDeserializer;
use serde::{Deserialize, Serialize};

use crate::context::Snapshot;
use crate::error::{Error, Result};
use crate::value::{OwnedValue, Value, ValueError, decode_string};

/// Where a run stands.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    bincode::Encode,
    bincode::Decode,
)]
#[non_exhaustive]
pub enum RunStatus {
    /// The run is (or was, when it crashed) executing the stage at `ip`.
    Running,
    /// The stage at `ip` failed; `error_message` says how. A resume retries it.
    Failed,
    /// The run finished; the snapshot is its final context.
    Completed,
}

/// The state of one run, saved before every stage call.
///
/// It is a plain serde type (so it can be inspected as JSON, say) and has a
/// documented binary encoding, [`Checkpoint::to_bytes`], that byte-oriented
/// stores persist.
///
/// Its `bincode::Decode` is written by hand (the wire format is exactly the
/// derived one): every string is read without trusting its claimed length,
/// so corrupt bytes claiming a 1 GiB string fail without allocating it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, bincode::Encode)]
pub struct Checkpoint {
    /// The run this checkpoint belongs to.
    pub run_id: String,
    /// The version of the pipeline that wrote it.
    pub version: String,
    /// The instruction pointer to continue from: the `CHECKPOINT` instruction
    /// of the stage (or block) about to run, or the program's length once
    /// completed.
    pub ip: u32,
    /// The name of the stage at `ip` (empty once completed), for humans.
    pub step: String,
    /// The context the stage at `ip` starts from (the final context once completed).
    pub context: Snapshot,
    /// Running, failed or completed.
    pub status: RunStatus,
    /// Whether the run failed at `ip`.
    pub error: bool,
    /// The failure's message, when `error` is set.
    pub error_message: Option<String>,
    /// When the run started, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// When this checkpoint was written, in milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
    /// Which attempt of the stage at `ip` this is: 1 on the first run, one
    /// more on every resume that retries it (after a failure or a crash).
    pub attempt: u32,
}

/// The first four bytes of every encoded checkpoint.
pub const MAGIC: [u8; 4] = *b"FXCP";
/// The format version this build writes (and the newest it reads).
pub const FORMAT_VERSION: u16 = 1;
/// The largest checkpoint payload this build decodes (1 GiB).
pub const MAX_PAYLOAD: usize = 1 << 30;
const HEADER: usize = 4 + 2 + 4 + 8;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_PAYLOAD>()
}

impl Checkpoint {
    /// Encodes the checkpoint.
    ///
    /// Layout (all integers little endian):
    ///
    /// | bytes | content |
    /// |---|---|
    /// | 4 | magic `FXCP` |
    /// | 2 | format version (`1`) |
    /// | 4 | CRC-32 (IEEE) of the payload |
    /// | 8 | payload length |
    /// | n | payload: the checkpoint in bincode 2's `standard` configuration, context values as [`Value`](crate::Value) |
    ///
    /// # Errors
    /// [`Error::CorruptCheckpoint`] when the payload exceeds [`MAX_PAYLOAD`].
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let payload =
            bincode::encode_to_vec(self, config()).map_err(|e| Error::CorruptCheckpoint {
                run_id: self.run_id.clone(),
                reason: format!("cannot encode: {e}"),
            })?;
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(&payload);
        Ok(out)
    }

    /// Decodes bytes written by [`Checkpoint::to_bytes`], stored under `run_id`.
    ///
    /// Never panics, and allocates in proportion to `bytes`, whatever lengths
    /// the bytes claim: a truncated, bit-flipped or foreign payload, one in
    /// another (older or newer) format version, or one whose run id is not
    /// `run_id`, is an [`Error::CorruptCheckpoint`] naming `run_id` and what
    /// was wrong (for another format, both version numbers). The checksum
    /// guards against accidents, not against crafted bytes; those are
    /// decoded just as safely.
    ///
    /// ```
    /// use fluxio_core::store::Checkpoint;
    /// let err = Checkpoint::from_bytes("run-1", b"{\"json\": true}").unwrap_err();
    /// assert!(err.to_string().contains("run-1"));
    /// ```
    ///
    /// # Errors
    /// As above.
    pub fn from_bytes(run_id: &str, bytes: &[u8]) -> Result<Checkpoint> {
        let corrupt = |reason: String| Error::CorruptCheckpoint {
            run_id: run_id.to_owned(),
            reason,
        };
        let magic = bytes.len() >= MAGIC.len() && bytes[..MAGIC.len()] == MAGIC;
        // The version first: another format may have another header.
        if magic && bytes.len() >= 6 {
            let format = u16::from_le_bytes([bytes[4], bytes[5]]);
            if format != FORMAT_VERSION {
                let age = if format > FORMAT_VERSION {
                    "newer"
                } else {
                    "older"
                };
                return Err(corrupt(format!(
                    "written in checkpoint format {format} ({age} than format \
                     {FORMAT_VERSION}, the only format this build reads)"
                )));
            }
        }
        if bytes.len() < HEADER {
            return Err(corrupt(format!(
                "{} bytes is shorter than the {HEADER}-byte header",
                bytes.len()
            )));
        }
        if !magic {
            return Err(corrupt(
                "not a fluxio checkpoint (bad magic bytes)".to_owned(),
            ));
        }
        let (header, payload) = bytes.split_at(HEADER);
        let crc = u32::from_le_bytes([header[6], header[7], header[8], header[9]]);
        let mut len_bytes = [0u8; 8];
        len_bytes.copy_from_slice(&header[10..18]);
        let len = u64::from_le_bytes(len_bytes);
        if len != payload.len() as u64 {
            return Err(corrupt(format!(
                "header says {len} payload bytes, found {}",
                payload.len()
            )));
        }
        if payload.len() > MAX_PAYLOAD {
            return Err(corrupt(format!(
                "payload of {} bytes exceeds the {MAX_PAYLOAD}-byte limit",
                payload.len()
            )));
        }
        if crc32fast::hash(payload) != crc {
            return Err(corrupt("checksum mismatch".to_owned()));
        }
        // Allocation stays proportional to `payload`: strings and byte buffers
        // are copied only once their bytes are known to be there, containers
        // pre-allocate at most a few hundred slots, and values nest at most
        // `MAX_DEPTH` deep (see `Decode for Checkpoint` and `crate::value`).
        let (cp, used): (Checkpoint, usize) = bincode::decode_from_slice(payload, config())
            .map_err(|e| corrupt(format!("cannot decode: {e}")))?;
        if used != payload.len() {
            return Err(corrupt(format!("{} trailing bytes", payload.len() - used)));
        }
        if cp.run_id != run_id {
            return Err(corrupt(format!("it belongs to run `{}`", cp.run_id)));
        }
        Ok(cp)
    }
}

/// The context of a checkpoint, in [`Snapshot`]'s wire format (a `u64`
/// count, then key and value pairs), with the keys read by [`decode_string`].
///
/// The entries are collected first (rejecting a duplicate key, as
/// `Snapshot`'s own decoder does) and then moved into the snapshot through
/// its `Deserialize`, which builds it in one pass: inserting them one by one
/// through `Context::set_value` would clone a node per key.
fn decode_snapshot<D: Decoder>(decoder: &mut D) -> Result<Snapshot, DecodeError> {
    let len = u64::decode(decoder)?;
    let mut entries = BTreeMap::new();
    for _ in 0..len {
        let key = decode_string(decoder)?;
        let value = Value::decode(decoder)?;
        if entries.insert(key, value).is_some() {
            return Err(DecodeError::Other("duplicate key in context snapshot"));
        }
    }
    let entries = entries.into_iter().map(|(k, v)| (k, OwnedValue(v)));
    Snapshot::deserialize(MapDeserializer::<_, ValueError>::new(entries))
        .map_err(|e| DecodeError::OtherString(format!("context snapshot: {e}")))
}

/// `Option<String>` in bincode's wire format (a `0`/`1` byte, then the string).
fn decode_opt_string<D: Decoder>(decoder: &mut D) -> Result<Option<String>, DecodeError> {
    match u8::decode(decoder)? {
        0 => Ok(None),
        1 => decode_string(decoder).map(Some),
        found => Err(DecodeError::UnexpectedVariant {
            type_name: "Option<String>",
            allowed: &AllowedEnumVariants::Range { min: 0, max: 1 },
            found: u32::from(found),
        }),
    }
}

/// Reads exactly what the derived `Encode` writes, field by field, but
/// without bincode's `String` decoder, which allocates the claimed length
/// before reading (see `value::decode_string`).
impl<C> Decode<C> for Checkpoint {
    fn decode<D: Decoder<Context = C>>(decoder: &mut D) -> std::result::Result<Self, DecodeError> {
        Ok(Checkpoint {
            run_id: decode_string(decoder)?,
            version: decode_string(decoder)?,
            ip: u32::decode(decoder)?,
            step: decode_string(decoder)?,
            context: decode_snapshot(decoder)?,
            status: RunStatus::decode(decoder)?,
            error: bool::decode(decoder)?,
            error_message: decode_opt_string(decoder)?,
            created_at_ms: u64::decode(decoder)?,
            updated_at_ms: u64::decode(decoder)?,
            attempt: u32::decode(decoder)?,
        })
    }
}

bincode::impl_borrow_decode!(Checkpoint);

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
