//! Records of finished parallel branches (contract rule 19).
//!
//! When a branch of a top-level parallel block finishes in a durable run,
//! the run saves its block's checkpoint again with one more
//! [`BranchRecord`]: the keys the branch wrote and their values. Saving it
//! is the branch's completion: a resume after a crash or a failure inside
//! the block rebuilds the recorded branches from their records instead of
//! running them, runs the others, and merges all of them in block order
//! with the merge-conflict check of an uninterrupted run.

use bincode::enc::{Encode, Encoder};
use bincode::error::EncodeError;
use serde::{Deserialize, Serialize};

use crate::context::{Context, Snapshot};
use crate::error::Result;
use crate::value::{Cursor, WireError, check_entry, varint_len};

/// A finished branch of the parallel block at a checkpoint: what it wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BranchRecord {
    /// The branch's index in its block, from 0 in declaration order.
    pub branch: u32,
    /// The branch's name (its first stage), for humans and errors.
    pub name: String,
    /// The keys the branch set, with their new values.
    pub written: Snapshot,
    /// The keys the branch removed, in key order.
    pub removed: Vec<String>,
}

impl BranchRecord {
    /// The record of `branch`, which finished as `done` (a fork of the
    /// block's context): the keys `done` wrote, with their values (shared,
    /// not copied), and the ones it removed.
    #[must_use]
    pub fn of(branch: u32, name: &str, done: &Context) -> BranchRecord {
        let mut written = Vec::new();
        let mut removed = Vec::new();
        for key in done.written() {
            match done.encoded(key) {
                Some(value) => written.push((key.to_owned(), value.clone())),
                None => removed.push(key.to_owned()),
            }
        }
        BranchRecord {
            branch,
            name: name.to_owned(),
            written: Snapshot::from_sorted(written),
            removed,
        }
    }

    /// The branch as it finished: `base` (the block's context) forked under
    /// the branch's name, with the recorded writes applied, so that a merge
    /// sees the same written keys as it would have seen from the branch.
    #[must_use]
    pub fn replay(&self, base: &Context) -> Context {
        let ctx = self
            .written
            .entries()
            .fold(base.fork(self.name.as_str()), |ctx, (key, value)| {
                ctx.set_encoded(key.to_owned(), value.clone())
            });
        self.removed.iter().fold(ctx, |ctx, key| ctx.remove(key))
    }

    /// The length of this record's encoding, refusing a value that is too
    /// deep or, with its key, larger than `limit`, as
    /// [`Checkpoint::check`](super::Checkpoint::check) does for the context.
    pub(crate) fn size(&self, limit: u64) -> Result<u64> {
        let string = |s: &str| (varint_len(s.len() as u64) + s.len()) as u64;
        let int = |v: u64| varint_len(v) as u64;
        let mut size = int(self.branch.into())
            + string(&self.name)
            + int(self.written.len() as u64)
            + int(self.removed.len() as u64);
        for (key, value) in self.written.entries() {
            size = size.saturating_add(check_entry(key, value, limit)?);
        }
        for key in &self.removed {
            size += string(key);
        }
        Ok(size)
    }

    /// Reads a record as `Encode` writes it, validating every value (as the
    /// context's are) and the key order; a key both written and removed is
    /// refused.
    pub(crate) fn decode(c: &mut Cursor<'_>) -> std::result::Result<Self, WireError> {
        let branch = c.varint_u32()?;
        let name = c.str()?.to_owned();
        let (written, removed) = writes_and_removals(c)?;
        Ok(BranchRecord {
            branch,
            name,
            written,
            removed,
        })
    }
}

/// The written keys with their values (as a context's), then the removed
/// keys, strictly increasing and none of them written: how a branch record
/// and a delta checkpoint say what changed.
pub(crate) fn writes_and_removals(
    c: &mut Cursor<'_>,
) -> std::result::Result<(Snapshot, Vec<String>), WireError> {
    let written = Snapshot::read_wire(c)?;
    let count = c.len(1)?;
    let mut removed: Vec<String> = Vec::new();
    for _ in 0..count {
        let key = c.str()?;
        if removed.last().is_some_and(|last| last.as_str() >= key) {
            return Err(WireError::Invalid("removed keys out of order or repeated"));
        }
        if written.get(key).is_some() {
            return Err(WireError::Invalid("a key both written and removed"));
        }
        removed.push(key.to_owned());
    }
    Ok((written, removed))
}

/// `branch`, `name`, the written keys as a context is written (count, then
/// each key and its value's encoding), then the count and the removed keys.
impl Encode for BranchRecord {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> std::result::Result<(), EncodeError> {
        self.branch.encode(encoder)?;
        self.name.encode(encoder)?;
        self.written.encode(encoder)?;
        (self.removed.len() as u64).encode(encoder)?;
        for key in &self.removed {
            key.encode(encoder)?;
        }
        Ok(())
    }
}

/// The records of a format 3 checkpoint: a count, then each record, in
/// strictly increasing branch order.
pub(crate) fn decode_records(
    c: &mut Cursor<'_>,
) -> std::result::Result<Vec<BranchRecord>, WireError> {
    let count = c.len(4)?;
    let mut records: Vec<BranchRecord> = Vec::new();
    for _ in 0..count {
        let record = BranchRecord::decode(c)?;
        if records
            .last()
            .is_some_and(|last| last.branch >= record.branch)
        {
            return Err(WireError::Invalid(
                "branch records out of branch order or repeated",
            ));
        }
        records.push(record);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Value;

    #[test]
    fn a_record_replays_the_writes_and_removals_of_its_branch() {
        let base = Context::new()
            .set("a", 1)
            .and_then(|c| c.set("gone", true))
            .expect("set")
            .clear_written();
        let done = base.fork("b").set("x", "new").expect("set").remove("gone");
        let record = BranchRecord::of(1, "b", &done);
        assert_eq!(
            record
                .written
                .iter()
                .map(|(k, v)| (k, v.into_owned()))
                .collect::<Vec<_>>(),
            [("x", Value::from("new"))]
        );
        assert_eq!(record.removed, ["gone"]);
        let replayed = record.replay(&base);
        assert_eq!(replayed, done);
        assert_eq!(replayed.branch(), Some("b"));
        assert_eq!(
            replayed.written().collect::<Vec<_>>(),
            done.written().collect::<Vec<_>>()
        );
    }
}
