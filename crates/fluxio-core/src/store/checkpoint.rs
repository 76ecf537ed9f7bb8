//! The checkpoint record and its binary encoding.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::context::Snapshot;
use crate::error::{Error, Result};

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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
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
    /// Never panics: a truncated, bit-flipped, foreign or newer-format payload,
    /// or one whose run id is not `run_id`, is an [`Error::CorruptCheckpoint`]
    /// naming `run_id` and what was wrong.
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
        if bytes.len() < HEADER {
            return Err(corrupt(format!(
                "{} bytes is shorter than the {HEADER}-byte header",
                bytes.len()
            )));
        }
        let (header, payload) = bytes.split_at(HEADER);
        if header[..4] != MAGIC {
            return Err(corrupt(
                "not a fluxio checkpoint (bad magic bytes)".to_owned(),
            ));
        }
        let format = u16::from_le_bytes([header[4], header[5]]);
        if format != FORMAT_VERSION {
            return Err(corrupt(format!(
                "written in checkpoint format {format}, this build reads format {FORMAT_VERSION}"
            )));
        }
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
        if crc32fast::hash(payload) != crc {
            return Err(corrupt("checksum mismatch".to_owned()));
        }
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

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
