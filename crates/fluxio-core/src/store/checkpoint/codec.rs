//! The binary encoding of checkpoints: the frame (magic, format version, CRC-32, length),
//! format 4's journal entries, and the decoders of formats 1 to 3.

use std::collections::BTreeMap;

use bincode::de::{Decode, Decoder};
use bincode::enc::{Encode, Encoder};
use bincode::error::{AllowedEnumVariants, DecodeError, EncodeError};

use std::sync::Arc;

use crate::context::Snapshot;
use crate::error::{BoxError, Error, Result};
use crate::structure::{StageCode, Structure};

use crate::store::branch::decode_records;
use crate::store::journal::Change;
use crate::store::waits::{Payload, Pending, Signal, SignalState, WaitName};
use crate::value::{Cursor, EncodedValue, WireError, decode_legacy, decode_string, varint_len};

use super::*;

/// The format `entries` (and a blob's `mailbox`) are written in: format 8
/// when one of them failed for good or was forked, format 7
/// when one of them is a queue's, format 6
/// when one of them has a deadline or is paused, else format 5 when one of them sleeps
/// or waits, or the mailbox holds a signal, else format 4, which builds
/// before waits read (see [`FORMAT_VERSION`]).
pub(super) fn format_of(entries: &[&Checkpoint], mailbox: &[Signal]) -> u16 {
    let waits = |cp: &&Checkpoint| cp.pending.is_some() || cp.status.is_pending();
    if entries
        .iter()
        .any(|cp| cp.failed_for_good || cp.forked_from.is_some() || cp.compensation.is_some())
    {
        FORMAT_VERSION
    } else if entries.iter().any(|cp| cp.queue.is_some()) {
        QUEUE_FORMAT_VERSION
    } else if entries
        .iter()
        .any(|cp| cp.deadline_ms.is_some() || cp.status == RunStatus::Paused)
    {
        DEADLINE_FORMAT_VERSION
    } else if mailbox.is_empty() && !entries.iter().any(waits) {
        PLAIN_FORMAT_VERSION
    } else {
        WAITS_FORMAT_VERSION
    }
}

/// The payload length of `entries` (and, in a blob, the run's `mailbox`)
/// encoded as one blob, and its format, checking that the blob would
/// decode: it starts with a whole checkpoint and its numbers follow each
/// other. With `head_whole`, the first is written whole whatever its
/// change says (its context is whole in memory), as
/// [`Checkpoint::to_bytes`] does.
pub(super) fn payload_size(
    key: &str,
    entries: &[&Checkpoint],
    head_whole: bool,
    mailbox: &[Signal],
) -> Result<(u64, u16)> {
    let format = format_of(entries, mailbox);
    let mut size = varint_len(entries.len() as u64) as u64;
    for (i, entry) in entries.iter().enumerate() {
        let follows = match i.checked_sub(1) {
            None => true,
            Some(before) => entries[before].seq.checked_add(1) == Some(entry.seq),
        };
        let delta = !(entry.change.is_full() || (head_whole && i == 0));
        let same_code = i.checked_sub(1).is_none_or(|before| {
            (&entries[before].version, &entries[before].structure)
                == (&entry.version, &entry.structure)
        });
        if delta && !same_code {
            return Err(Error::CorruptCheckpoint {
                run_id: key.to_owned(),
                reason: format!(
                    "checkpoint {} is a delta written by other code than the checkpoint \
                     before it (a change of version is written whole)",
                    entry.seq
                ),
                source: None,
            });
        }
        if !follows {
            return Err(Error::CorruptCheckpoint {
                run_id: key.to_owned(),
                reason: format!(
                    "its journal does not read back: checkpoint {} does not follow checkpoint {}",
                    entry.seq,
                    entries[i - 1].seq
                ),
                source: None,
            });
        }
        size = size.saturating_add(entry.entry_size(head_whole && i == 0, format)?);
    }
    if format >= WAITS_FORMAT_VERSION {
        size += varint_len(mailbox.len() as u64) as u64;
        for signal in mailbox {
            let string = |s: &str| (varint_len(s.len() as u64) + s.len()) as u64;
            size = size.saturating_add(
                string(&signal.name)
                    + signal.payload.bytes().len() as u64
                    + varint_len(signal.sent_at_ms) as u64
                    + string(&signal.sender)
                    + 1,
            );
        }
    }
    if size > MAX_PAYLOAD as u64 {
        return Err(Error::CheckpointTooLarge {
            run_id: key.to_owned(),
            size,
            limit: MAX_PAYLOAD as u64,
        });
    }
    Ok((size, format))
}

/// `entries` in one frame (see [`Checkpoint::to_bytes`]), written once into
/// a buffer of the exact size.
pub(super) fn frame(
    key: &str,
    entries: &[&Checkpoint],
    head_whole: bool,
    mailbox: &[Signal],
) -> Result<Vec<u8>> {
    let (size, format) = payload_size(key, entries, head_whole, mailbox)?;
    let mut out = Vec::with_capacity(HEADER + size as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&format.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // the CRC, below
    out.extend_from_slice(&size.to_le_bytes());
    let encoded = bincode::encode_into_std_write(
        Blob {
            entries,
            head_whole,
            format,
            mailbox,
        },
        &mut out,
        bincode::config::standard(),
    );
    encoded.map_err(|e| Error::Internal {
        message: format!("encoding a checkpoint into memory failed: {e}"),
    })?;
    if out.len() != HEADER + size as usize {
        return Err(Error::Internal {
            message: format!(
                "checkpoint of run `{key}`: {} payload bytes written, {size} counted",
                out.len() - HEADER
            ),
        });
    }
    let crc = checksum(format, &out[HEADER..]);
    out[6..10].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// The header's checks: the payload of `bytes` and its format version.
pub(super) fn unframe<'b>(run_id: &str, bytes: &'b [u8]) -> Result<(u16, &'b [u8])> {
    let corrupt = |reason: String| Error::CorruptCheckpoint {
        run_id: run_id.to_owned(),
        reason,
        source: None,
    };
    let magic = bytes.len() >= MAGIC.len() && bytes[..MAGIC.len()] == MAGIC;
    // The version first: another format may have another header.
    if magic && bytes.len() >= 6 {
        let format = u16::from_le_bytes([bytes[4], bytes[5]]);
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&format) {
            let age = if format > FORMAT_VERSION {
                "newer"
            } else {
                "older"
            };
            return Err(corrupt(format!(
                "written in checkpoint format {format} ({age} than the formats \
                 this build reads: format {OLDEST_FORMAT_VERSION} to format {FORMAT_VERSION})"
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
    let format = u16::from_le_bytes([header[4], header[5]]);
    if checksum(format, payload) != crc {
        return Err(corrupt("checksum mismatch".to_owned()));
    }
    Ok((format, payload))
}

/// The checkpoints of `parts` (see [`Checkpoint::from_entries`]), folded:
/// all of them when `keep` is set, else only the latest; and the mailbox
/// of the last part that holds one (a blob's).
pub(super) fn decode_parts<B: AsRef<[u8]>>(
    run_id: &str,
    parts: impl IntoIterator<Item = B>,
    keep: bool,
) -> Result<(Vec<Checkpoint>, Vec<Signal>)> {
    let corrupt = |reason: String| Error::CorruptCheckpoint {
        run_id: run_id.to_owned(),
        reason,
        source: None,
    };
    let mut journal: Vec<Checkpoint> = Vec::new();
    let mut mailbox = Vec::new();
    for part in parts {
        let (format, payload) = unframe(run_id, part.as_ref())?;
        // Allocation stays proportional to `payload`: strings and byte buffers
        // are copied only once their bytes are known to be there, containers
        // pre-allocate at most a few hundred slots, and values nest at most
        // `MAX_DEPTH` deep (see `decode_v4`, `Format2`, and `crate::value`).
        let decoded = match format {
            PLAIN_FORMAT_VERSION
            | WAITS_FORMAT_VERSION
            | DEADLINE_FORMAT_VERSION
            | QUEUE_FORMAT_VERSION
            | FORMAT_VERSION => {
                let (decoded, signals) = decode_v4(payload, journal.last(), format)
                    .map_err(|e| undecodable_v3(run_id, e))?;
                if !signals.is_empty() {
                    mailbox = signals;
                }
                decoded
            }
            3 => vec![decode_v3(payload).map_err(|e| undecodable_v3(run_id, e))?],
            _ => {
                let decoded = if format == 1 {
                    bincode::decode_from_slice(payload, config())
                        .map(|(Format1(cp), used)| (cp, used))
                } else {
                    bincode::decode_from_slice(payload, config())
                        .map(|(Format2(cp), used)| (cp, used))
                };
                let (cp, used) = decoded.map_err(|e| undecodable(run_id, e))?;
                if used != payload.len() {
                    return Err(corrupt(format!("{} trailing bytes", payload.len() - used)));
                }
                vec![cp]
            }
        };
        for cp in decoded {
            if cp.key() != run_id {
                return Err(corrupt(format!("it belongs to run `{}`", cp.key())));
            }
            if !cp.change.is_full() && journal.last().is_none() {
                return Err(corrupt(format!(
                    "checkpoint {} is a delta with no checkpoint before it",
                    cp.seq
                )));
            }
            if !keep {
                journal.clear();
            }
            journal.push(cp);
        }
    }
    Ok((journal, mailbox))
}

/// [`Error::CorruptCheckpoint`] for a payload the decoder refused. A message
/// fluxio's own decoders wrote (a value nested past `MAX_DEPTH`, a duplicate
/// key) is the reason itself; an error of bincode's (the bytes end early, an
/// invalid tag or UTF-8) is kept as the source.
#[cold]
pub(super) fn undecodable(run_id: &str, e: DecodeError) -> Error {
    corrupt(
        run_id,
        match e {
            DecodeError::OtherString(own) => Ok(own),
            DecodeError::Other(own) => Ok(own.to_owned()),
            e => Err(Box::new(e)),
        },
    )
}

/// [`Error::CorruptCheckpoint`]: `cannot decode: ` and the decoder's own
/// message, or `cannot decode the payload` with the decoder's error as the
/// source.
#[cold]
fn corrupt(run_id: &str, found: std::result::Result<String, BoxError>) -> Error {
    let (reason, source) = match found {
        Ok(own) => (format!("cannot decode: {own}"), None),
        Err(e) => ("cannot decode the payload".to_owned(), Some(e)),
    };
    Error::CorruptCheckpoint {
        run_id: run_id.to_owned(),
        reason,
        source,
    }
}

/// The header's CRC-32 (IEEE) of a `format` checkpoint's `payload`: from
/// format 3 on it covers the format version too, so that a damaged version
/// number (3 read as 2, say: the two payloads look alike) is a checksum
/// mismatch; formats 1 and 2 covered the payload only.
pub(crate) fn checksum(format: u16, payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    if format >= 3 {
        crc.update(&format.to_le_bytes());
    }
    crc.update(payload);
    crc.finalize()
}

/// [`Error::CorruptCheckpoint`] for a format 3 payload the decoder refused,
/// as [`undecodable`] says it: what the value module found wrong (a value
/// nested past `MAX_DEPTH`, keys out of order...) is the reason; bytes that
/// end early or an unknown tag are the source.
#[cold]
pub(super) fn undecodable_v3(run_id: &str, e: WireError) -> Error {
    corrupt(
        run_id,
        match e {
            WireError::Invalid(_) | WireError::TooDeep => Ok(e.to_string()),
            WireError::End | WireError::Tag(_) => Err(Box::new(e)),
        },
    )
}

/// The context of a format 1 or 2 checkpoint: a `u64` count, then key and
/// value pairs, with the keys read by [`decode_string`] and the values by
/// the decoder of those formats, then encoded as a context holds them.
pub(super) fn decode_snapshot<D: Decoder>(decoder: &mut D) -> Result<Snapshot, DecodeError> {
    let len = u64::decode(decoder)?;
    let mut entries = BTreeMap::new();
    for _ in 0..len {
        let key = decode_string(decoder)?;
        let value = decode_legacy(decoder)?;
        if entries.contains_key(&key) {
            return Err(DecodeError::Other("duplicate key in context snapshot"));
        }
        entries.insert(key, EncodedValue::from_value(&value));
    }
    Ok(Snapshot::from_sorted(entries.into_iter().collect()))
}

/// `Option<String>` in bincode's wire format (a `0`/`1` byte, then the string).
pub(super) fn decode_opt_string<D: Decoder>(
    decoder: &mut D,
) -> Result<Option<String>, DecodeError> {
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

/// A format 4 or 5 payload: the number of checkpoints, then each, then
/// in format 5 the run's mailbox (see [`Checkpoint::to_bytes`]).
pub(super) struct Blob<'a> {
    entries: &'a [&'a Checkpoint],
    /// The first is written whole.
    head_whole: bool,
    format: u16,
    mailbox: &'a [Signal],
}

impl Encode for Blob<'_> {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> std::result::Result<(), EncodeError> {
        use bincode::enc::write::Writer as _;
        (self.entries.len() as u64).encode(encoder)?;
        for (i, cp) in self.entries.iter().enumerate() {
            encode_entry(cp, self.head_whole && i == 0, self.format, encoder)?;
        }
        if self.format >= WAITS_FORMAT_VERSION {
            (self.mailbox.len() as u64).encode(encoder)?;
            for signal in self.mailbox {
                signal.name.encode(encoder)?;
                // the payload's wire encoding, self-delimiting
                encoder.writer().write(signal.payload.bytes())?;
                signal.sent_at_ms.encode(encoder)?;
                signal.sender.encode(encoder)?;
                signal_state_tag(signal.state).encode(encoder)?;
            }
        }
        Ok(())
    }
}

fn signal_state_tag(state: SignalState) -> u8 {
    match state {
        SignalState::Delivered => 0,
        SignalState::Consumed => 1,
        SignalState::Closed => 2,
    }
}

/// One checkpoint of format 4, field by field (see [`Checkpoint::to_bytes`]).
pub(super) fn encode_entry<E: Encoder>(
    cp: &Checkpoint,
    whole: bool,
    format: u16,
    encoder: &mut E,
) -> std::result::Result<(), EncodeError> {
    // the fields in order, as a tuple writes them
    (
        &cp.pipeline,
        &cp.run_id,
        &cp.version,
        cp.seq,
        cp.keep_from,
        cp.ip,
        &cp.step,
        cp.status,
        &cp.error_message,
        cp.created_at_ms,
        cp.updated_at_ms,
        cp.attempt,
    )
        .encode(encoder)?;
    let delta = !whole && !cp.change.is_full();
    match &cp.structure {
        // a delta has the structure of the checkpoint before it
        _ if delta => 2u8.encode(encoder)?,
        None => 0u8.encode(encoder)?,
        Some(structure) => {
            1u8.encode(encoder)?;
            structure.shape.encode(encoder)?;
            encode_pairs(encoder, &structure.stages, |s| (&s.name, &s.hash))?;
        }
    }
    (cp.branches.len() as u64).encode(encoder)?;
    for record in &cp.branches {
        record.encode(encoder)?;
    }
    match &cp.change {
        Change::Delta { written, removed } if !whole => {
            1u8.encode(encoder)?;
            // `entry_size` checked that the context holds every written key
            let values: Vec<(String, EncodedValue)> = written
                .iter()
                .filter_map(|k| cp.context.encoded(k).map(|v| (k.clone(), v.clone())))
                .collect();
            Snapshot::from_sorted(values).encode(encoder)?;
            (removed.len() as u64).encode(encoder)?;
            for key in removed {
                key.encode(encoder)?;
            }
        }
        // a whole checkpoint, or one written whole
        _ => {
            0u8.encode(encoder)?;
            cp.context.encode(encoder)?;
        }
    }
    if format >= WAITS_FORMAT_VERSION {
        match &cp.pending {
            None => 0u8.encode(encoder)?,
            Some(pending) => {
                1u8.encode(encoder)?;
                pending.until_ms.encode(encoder)?;
                encode_pairs(encoder, &pending.waits, |w| (&w.name, &w.payload))?;
            }
        }
    }
    if format >= DEADLINE_FORMAT_VERSION {
        cp.deadline_ms.encode(encoder)?;
    }
    if format >= QUEUE_FORMAT_VERSION {
        match &cp.queue {
            None => 0u8.encode(encoder)?,
            Some(entry) => {
                1u8.encode(encoder)?;
                entry.queue.encode(encoder)?;
                entry.key.encode(encoder)?;
                entry.priority.encode(encoder)?;
                entry.queued.encode(encoder)?;
            }
        }
    }
    if format >= FORMAT_VERSION {
        cp.failed_for_good.encode(encoder)?;
        match &cp.forked_from {
            None => 0u8.encode(encoder)?,
            Some(origin) => {
                1u8.encode(encoder)?;
                origin.run.encode(encoder)?;
                origin.step.encode(encoder)?;
                origin.set.encode(encoder)?;
                origin.removed.encode(encoder)?;
            }
        }
        match &cp.compensation {
            None => 0u8.encode(encoder)?,
            Some(c) => {
                1u8.encode(encoder)?;
                c.reason.encode(encoder)?;
                (c.steps.len() as u64).encode(encoder)?;
                for step in &c.steps {
                    step.position.encode(encoder)?;
                    step.stage.encode(encoder)?;
                    step.compensator.encode(encoder)?;
                }
                c.next.encode(encoder)?;
            }
        }
    }
    Ok(())
}

/// `items` as their count, then each item's `pair` of values in order: a
/// structure's stages (name, hash), a pending step's waits (name, payload
/// type).
fn encode_pairs<T, A: Encode, B: Encode, E: Encoder>(
    encoder: &mut E,
    items: &[T],
    pair: impl Fn(&T) -> (&A, &B),
) -> std::result::Result<(), EncodeError> {
    (items.len() as u64).encode(encoder)?;
    for item in items {
        let (a, b) = pair(item);
        a.encode(encoder)?;
        b.encode(encoder)?;
    }
    Ok(())
}

/// A format 2 checkpoint: format 3's fields, its values in the tags 0 to
/// 14. Read without bincode's `String` decoder, which allocates the claimed
/// length before reading (see `value::decode_string`).
pub(super) struct Format2(Checkpoint);

impl<C> Decode<C> for Format2 {
    fn decode<D: Decoder<Context = C>>(decoder: &mut D) -> std::result::Result<Self, DecodeError> {
        let pipeline = decode_string(decoder)?;
        let head = decode_head(
            decoder,
            "format 2 has no sleeping, waiting or paused status",
        )?;
        Ok(Format2(Checkpoint {
            pipeline,
            error_message: decode_opt_string(decoder)?,
            created_at_ms: u64::decode(decoder)?,
            updated_at_ms: u64::decode(decoder)?,
            attempt: u32::decode(decoder)?,
            structure: decode_structure(decoder)?,
            ..head
        }))
    }
}

/// A format 3 payload (see [`Checkpoint::to_bytes`]), read with the value
/// module's bounds-checked [`Cursor`]: every context value is validated
/// (`value::validate`) and its bytes copied, no `Value` built.
pub(super) fn decode_v3(payload: &[u8]) -> std::result::Result<Checkpoint, WireError> {
    let mut c = Cursor::new(payload);
    let string = |c: &mut Cursor<'_>| c.str().map(str::to_owned);
    let pipeline = string(&mut c)?;
    let run_id = string(&mut c)?;
    let version = string(&mut c)?;
    let ip = c.varint_u32()?;
    let step = string(&mut c)?;
    let context = Snapshot::read_wire(&mut c)?;
    let status = decode_status(&mut c)?;
    if status.is_pending() || status == RunStatus::Paused {
        return Err(WireError::Invalid(
            "a sleeping, waiting or paused run before format 5",
        ));
    }
    let cp = Checkpoint {
        pipeline,
        status,
        error_message: opt_string(&mut c)?,
        created_at_ms: c.varint()?,
        updated_at_ms: c.varint()?,
        attempt: c.varint_u32()?,
        structure: decode_structure_v3(&mut c)?,
        branches: branch_records(&mut c, status)?,
        ..Checkpoint::new(run_id, version, ip, step, context)
    };
    if c.remaining() != 0 {
        return Err(WireError::Invalid("trailing bytes after the checkpoint"));
    }
    Ok(cp)
}

/// An option of a string: a `0`/`1` byte, then the string.
fn opt_string(c: &mut Cursor<'_>) -> std::result::Result<Option<String>, WireError> {
    match c.byte()? {
        0 => Ok(None),
        1 => Ok(Some(c.str()?.to_owned())),
        _ => Err(WireError::Invalid("an option tag other than 0 or 1")),
    }
}

/// The branch records of a checkpoint of `status`: only one that is
/// running, failed, needing attention, paused or (unpaused, rule 30)
/// sleeping has any.
fn branch_records(
    c: &mut Cursor<'_>,
    status: RunStatus,
) -> std::result::Result<Vec<BranchRecord>, WireError> {
    let branches = decode_records(c)?;
    if !branches.is_empty()
        && !matches!(
            status,
            RunStatus::Running
                | RunStatus::Failed
                | RunStatus::NeedsAttention
                | RunStatus::Paused
                | RunStatus::Sleeping
        )
    {
        return Err(WireError::Invalid(
            "branch records in a checkpoint that is completed, cancelled or waiting",
        ));
    }
    Ok(branches)
}

/// A format 4 payload (see [`Checkpoint::to_bytes`]): its checkpoints,
/// each delta applied to the context before it (`before`, the last
/// checkpoint of an earlier part, for the first).
pub(super) fn decode_v4(
    payload: &[u8],
    mut before: Option<&Checkpoint>,
    format: u16,
) -> std::result::Result<(Vec<Checkpoint>, Vec<Signal>), WireError> {
    let mut c = Cursor::new(payload);
    let count = c.len(16)?;
    let mut out: Vec<Checkpoint> = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let cp = decode_entry(&mut c, out.last().or(before), format)?;
        out.push(cp);
        before = None;
    }
    let mailbox = if format >= WAITS_FORMAT_VERSION {
        decode_mailbox(&mut c)?
    } else {
        Vec::new()
    };
    if c.remaining() != 0 {
        return Err(WireError::Invalid("trailing bytes after the checkpoints"));
    }
    Ok((out, mailbox))
}

/// A blob's mailbox: the signal count, then each signal's name, payload
/// (a value's wire encoding, validated), time, sender and state.
fn decode_mailbox(c: &mut Cursor<'_>) -> std::result::Result<Vec<Signal>, WireError> {
    let count = c.len(4)?;
    let mut mailbox: Vec<Signal> = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let name = c.str()?.to_owned();
        let start = c.pos();
        crate::value::validate(c)?;
        let payload = Payload::from_stored("", c.since(start))
            .map_err(|_| WireError::Invalid("a signal payload over the limit"))?;
        let sent_at_ms = c.varint()?;
        let sender = c.str()?.to_owned();
        let state = match c.byte()? {
            0 => SignalState::Delivered,
            1 => SignalState::Consumed,
            2 => SignalState::Closed,
            _ => return Err(WireError::Invalid("an unknown signal state")),
        };
        if mailbox.iter().any(|s| s.name == name) {
            return Err(WireError::Invalid("two signals for one wait name"));
        }
        mailbox.push(Signal {
            name,
            payload,
            sent_at_ms,
            sender,
            state,
        });
    }
    Ok(mailbox)
}

/// A format 5 checkpoint's pending step: `0`, or `1`, the `until` option
/// and the names with their payload types.
fn decode_pending(c: &mut Cursor<'_>) -> std::result::Result<Option<Pending>, WireError> {
    match c.byte()? {
        0 => Ok(None),
        1 => {
            let until_ms = match c.byte()? {
                0 => None,
                1 => Some(c.varint()?),
                _ => return Err(WireError::Invalid("an option tag other than 0 or 1")),
            };
            let count = c.len(2)?;
            let mut waits = Vec::with_capacity(count.min(64));
            for _ in 0..count {
                let name = c.str()?.to_owned();
                let payload = c.str()?.to_owned();
                waits.push(WaitName::new(name, payload));
            }
            Ok(Some(Pending::wait(waits, until_ms)))
        }
        _ => Err(WireError::Invalid("an option tag other than 0 or 1")),
    }
}

/// One checkpoint of format 4, on top of `before`.
pub(super) fn decode_entry(
    c: &mut Cursor<'_>,
    before: Option<&Checkpoint>,
    format: u16,
) -> std::result::Result<Checkpoint, WireError> {
    let string = |c: &mut Cursor<'_>| c.str().map(str::to_owned);
    let pipeline = string(c)?;
    let run_id = string(c)?;
    let version = string(c)?;
    let seq = c.varint_u32()?;
    let keep_from = c.varint_u32()?;
    if keep_from > seq {
        return Err(WireError::Invalid("a checkpoint kept from a later one"));
    }
    if let Some(before) = before {
        if before.seq.checked_add(1) != Some(seq) {
            return Err(WireError::Invalid(
                "checkpoints whose numbers do not follow each other",
            ));
        }
    }
    let ip = c.varint_u32()?;
    let step = string(c)?;
    let status = decode_status(c)?;
    if status.is_pending() && format < WAITS_FORMAT_VERSION {
        return Err(WireError::Invalid(
            "a sleeping or waiting run before format 5",
        ));
    }
    if status == RunStatus::Paused && format < DEADLINE_FORMAT_VERSION {
        return Err(WireError::Invalid("a paused run before format 6"));
    }
    let error_message = opt_string(c)?;
    let created_at_ms = c.varint()?;
    let updated_at_ms = c.varint()?;
    let attempt = c.varint_u32()?;
    // 2: a delta's, the structure of the checkpoint before it (checked below)
    let structure_tag = c.byte()?;
    let structure = match structure_tag {
        2 => before.and_then(|b| b.structure.clone()),
        tag => structure_body(c, tag)?,
    };
    let branches = branch_records(c, status)?;
    let (context, change) = match c.byte()? {
        0 => (Snapshot::read_wire(c)?, Change::Full),
        1 => {
            let Some(before) = before else {
                return Err(WireError::Invalid("a delta with no checkpoint before it"));
            };
            let (written, removed) = crate::store::branch::writes_and_removals(c)?;
            if removed
                .iter()
                .any(|key| before.context.encoded(key).is_none())
            {
                return Err(WireError::Invalid(
                    "a delta removes a key the context does not hold",
                ));
            }
            let context = before.context.apply(&written, &removed);
            let written = written.entries().map(|(k, _)| k.to_owned()).collect();
            (context, Change::Delta { written, removed })
        }
        _ => return Err(WireError::Invalid("a change tag other than 0 or 1")),
    };
    let pending = if format >= WAITS_FORMAT_VERSION {
        decode_pending(c)?
    } else {
        None
    };
    // format 6: the run's deadline
    let deadline_ms = if format >= DEADLINE_FORMAT_VERSION {
        match c.byte()? {
            0 => None,
            1 => Some(c.varint()?),
            _ => return Err(WireError::Invalid("an option tag other than 0 or 1")),
        }
    } else {
        None
    };
    // format 7: the run's queue (rule 31)
    let queue = if format >= QUEUE_FORMAT_VERSION {
        decode_queue(c)?
    } else {
        None
    };
    // format 8: whether it failed for good (rule 35)
    let (failed_for_good, forked_from, compensation) = if format >= FORMAT_VERSION {
        let failed = match c.byte()? {
            0 => false,
            1 => true,
            _ => return Err(WireError::Invalid("a bool other than 0 or 1")),
        };
        (failed, decode_origin(c)?, decode_compensation(c)?)
    } else {
        (false, None, None)
    };
    if status.is_pending() && pending.is_none() {
        return Err(WireError::Invalid(
            "a sleeping or waiting run that says not what it waits for",
        ));
    }
    let same_code = before.is_some_and(|b| b.version == version);
    let delta = !change.is_full();
    if (structure_tag == 2) != delta || (delta && !same_code) {
        return Err(WireError::Invalid(
            "a delta with a structure of its own, of another version than the checkpoint \
             before it, or a whole checkpoint without its structure",
        ));
    }
    Ok(Checkpoint {
        pipeline,
        run_id,
        version,
        ip,
        step,
        context,
        status,
        error_message,
        created_at_ms,
        updated_at_ms,
        attempt,
        structure,
        branches,
        seq,
        change,
        keep_from,
        pending: pending.map(Box::new),
        deadline_ms,
        queue,
        failed_for_good,
        forked_from,
        compensation,
        signals: Vec::new(),
        earlier: Vec::new(),
    })
}

/// A format 8 checkpoint's fork origin: an option tag, then the forked
/// run's key, the step, and the keys set and removed (each a count and
/// strings).
fn decode_origin(
    c: &mut Cursor<'_>,
) -> std::result::Result<Option<Box<crate::store::ForkOrigin>>, WireError> {
    match c.byte()? {
        0 => return Ok(None),
        1 => {}
        _ => return Err(WireError::Invalid("an option tag other than 0 or 1")),
    }
    let mut origin = crate::store::ForkOrigin::new(c.str()?, c.str()?);
    for keys in [&mut origin.set, &mut origin.removed] {
        let n = c.varint()?;
        // each key takes at least its length byte: a count past what is
        // left is refused before anything is allocated for it
        if n > c.remaining() as u64 {
            return Err(WireError::Invalid("more keys than bytes left"));
        }
        for _ in 0..n {
            keys.push(c.str()?.to_owned());
        }
    }
    Ok(Some(Box::new(origin)))
}

/// A format 8 checkpoint's compensation (rule 35): an option tag, then
/// the reason, the steps (position, stage, compensator) and the next one.
fn decode_compensation(
    c: &mut Cursor<'_>,
) -> std::result::Result<Option<Box<crate::store::Compensation>>, WireError> {
    match c.byte()? {
        0 => return Ok(None),
        1 => {}
        _ => return Err(WireError::Invalid("an option tag other than 0 or 1")),
    }
    let reason = c.str()?.to_owned();
    let n = c.varint()?;
    // each step takes at least three bytes: a count past what is left is
    // refused before anything is allocated for it
    if n > c.remaining() as u64 / 3 {
        return Err(WireError::Invalid(
            "more compensation steps than bytes left",
        ));
    }
    let mut steps = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let position = c.varint_u32()?;
        let stage = c.str()?.to_owned();
        let compensator = c.str()?.to_owned();
        steps.push(crate::store::CompensationStep::new(
            position,
            stage,
            compensator,
        ));
    }
    let next = c.varint_u32()?;
    if next as usize > steps.len() {
        return Err(WireError::Invalid(
            "a compensation's next step past its steps",
        ));
    }
    let mut comp = crate::store::Compensation::new(reason, steps);
    comp.next = next;
    Ok(Some(Box::new(comp)))
}

/// A format 7 checkpoint's queue entry (rule 31): an option tag, then the
/// queue's name, the key (an option), the priority and whether it is still
/// queued.
fn decode_queue(
    c: &mut Cursor<'_>,
) -> std::result::Result<Option<Box<crate::store::QueueEntry>>, WireError> {
    match c.byte()? {
        0 => return Ok(None),
        1 => {}
        _ => return Err(WireError::Invalid("an option tag other than 0 or 1")),
    }
    let queue = c.str()?.to_owned();
    let key = opt_string(c)?;
    let priority = c.byte()?;
    let queued = match c.byte()? {
        0 => false,
        1 => true,
        _ => return Err(WireError::Invalid("a bool other than 0 or 1")),
    };
    let mut entry = crate::store::QueueEntry::new(queue, key, priority);
    entry.queued = queued;
    Ok(Some(Box::new(entry)))
}

pub(super) fn decode_status(c: &mut Cursor<'_>) -> std::result::Result<RunStatus, WireError> {
    Ok(match c.varint_u32()? {
        0 => RunStatus::Running,
        1 => RunStatus::Failed,
        2 => RunStatus::Completed,
        3 => RunStatus::Cancelled,
        4 => RunStatus::NeedsAttention,
        5 => RunStatus::Sleeping,
        6 => RunStatus::Waiting,
        7 => RunStatus::Paused,
        _ => return Err(WireError::Invalid("an unknown run status")),
    })
}

pub(super) fn decode_structure_v3(
    c: &mut Cursor<'_>,
) -> std::result::Result<Option<Arc<Structure>>, WireError> {
    let tag = c.byte()?;
    structure_body(c, tag)
}

/// The structure option after its tag `tag` (0 or 1).
pub(super) fn structure_body(
    c: &mut Cursor<'_>,
    tag: u8,
) -> std::result::Result<Option<Arc<Structure>>, WireError> {
    Ok(match tag {
        0 => None,
        1 => {
            let shape = c.str()?.to_owned();
            let n = c.len(33)?;
            let mut stages = Vec::with_capacity(n);
            for _ in 0..n {
                let name = c.str()?.to_owned();
                let mut hash = [0u8; 32];
                hash.copy_from_slice(c.take(32)?);
                stages.push(StageCode { name, hash });
            }
            Some(Arc::new(Structure { shape, stages }))
        }
        _ => return Err(WireError::Invalid("an option tag other than 0 or 1")),
    })
}

/// An option of a [`Structure`]: a `0`/`1` byte, the shape, the stage count
/// and each stage's name and hash. The count is not trusted for the
/// allocation: stages are pushed as they are read.
pub(super) fn decode_structure<D: Decoder>(
    decoder: &mut D,
) -> std::result::Result<Option<Arc<Structure>>, DecodeError> {
    match u8::decode(decoder)? {
        0 => return Ok(None),
        1 => {}
        found => {
            return Err(DecodeError::UnexpectedVariant {
                type_name: "Option<Structure>",
                allowed: &AllowedEnumVariants::Range { min: 0, max: 1 },
                found: u32::from(found),
            });
        }
    }
    let mut structure = Structure {
        shape: decode_string(decoder)?,
        stages: Vec::new(),
    };
    let count = u64::decode(decoder)?;
    for _ in 0..count {
        structure.stages.push(StageCode {
            name: decode_string(decoder)?,
            hash: <[u8; 32]>::decode(decoder)?,
        });
    }
    Ok(Some(Arc::new(structure)))
}

/// A format 1 checkpoint: no pipeline name and no structure, and an `error`
/// flag after the status. A flag that disagrees with the status, and the
/// cancelled status (format 2 added it), are corrupt: no build of fluxio
/// wrote them.
pub(super) struct Format1(pub(super) Checkpoint);

impl<C> Decode<C> for Format1 {
    fn decode<D: Decoder<Context = C>>(decoder: &mut D) -> std::result::Result<Self, DecodeError> {
        let head = decode_head(
            decoder,
            "format 1 has no sleeping, waiting or paused status",
        )?;
        let status = head.status;
        if status == RunStatus::Cancelled {
            return Err(DecodeError::Other("format 1 has no cancelled status"));
        }
        if status == RunStatus::NeedsAttention {
            return Err(DecodeError::Other("format 1 has no needs-attention status"));
        }
        if bool::decode(decoder)? != (status == RunStatus::Failed) {
            return Err(DecodeError::Other(
                "the error flag disagrees with the status",
            ));
        }
        Ok(Format1(Checkpoint {
            error_message: decode_opt_string(decoder)?,
            created_at_ms: u64::decode(decoder)?,
            updated_at_ms: u64::decode(decoder)?,
            attempt: u32::decode(decoder)?,
            ..head
        }))
    }
}

/// What formats 1 and 2 write first (after format 2's pipeline): the run
/// id, version, ip, step, context and status, as a checkpoint; refused with
/// `pending` for a sleeping or waiting status, which neither has.
fn decode_head<D: Decoder>(
    decoder: &mut D,
    pending: &'static str,
) -> std::result::Result<Checkpoint, DecodeError> {
    let run_id = decode_string(decoder)?;
    let version = decode_string(decoder)?;
    let ip = u32::decode(decoder)?;
    let step = decode_string(decoder)?;
    let context = decode_snapshot(decoder)?;
    let status = RunStatus::decode(decoder)?;
    if status.is_pending() || status == RunStatus::Paused {
        return Err(DecodeError::Other(pending));
    }
    Ok(Checkpoint {
        status,
        ..Checkpoint::new(run_id, version, ip, step, context)
    })
}

bincode::impl_borrow_decode!(Format1);
bincode::impl_borrow_decode!(Format2);
