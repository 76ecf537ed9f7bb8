//! Records of finished parallel branches (contract rule 19).
//!
//! When a branch of a top-level parallel block finishes in a durable run,
//! the run saves its block's checkpoint again with one more
//! [`BranchRecord`]: the keys the branch wrote and their values. Saving it
//! is the branch's completion: a resume after a crash or a failure inside
//! the block rebuilds the recorded branches from their records instead of
//! running them, runs the others, and merges all of them in block order
//! with the merge-conflict check of an uninterrupted run.

use bincode::de::{Decode, Decoder};
use bincode::enc::{Encode, Encoder};
use bincode::error::{AllowedEnumVariants, DecodeError, EncodeError};
use serde::{Deserialize, Serialize};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::value::{Footprint, Value, decode_string, entry_footprint};

/// A finished branch of the parallel block at a checkpoint: what it wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BranchRecord {
    /// The branch's index in its block, from 0 in declaration order.
    pub branch: u32,
    /// The branch's name (its first stage), for humans and errors.
    pub name: String,
    /// Every key the branch wrote, in key order, with its new value, or
    /// `None` when the branch removed the key.
    pub writes: Vec<(String, Option<Value>)>,
}

impl BranchRecord {
    /// The record of `branch`, which finished as `done` (a fork of the
    /// block's context): the keys `done` wrote and their values.
    #[must_use]
    pub fn of(branch: u32, name: &str, done: &Context) -> BranchRecord {
        BranchRecord {
            branch,
            name: name.to_owned(),
            writes: done
                .written()
                .map(|key| (key.to_owned(), done.value(key).cloned()))
                .collect(),
        }
    }

    /// The branch as it finished: `base` (the block's context) forked under
    /// the branch's name, with the recorded writes applied, so that a merge
    /// sees the same written keys as it would have seen from the branch.
    #[must_use]
    pub fn replay(&self, base: &Context) -> Context {
        self.writes.iter().fold(
            base.fork(self.name.as_str()),
            |ctx, (key, value)| match value {
                Some(value) => ctx.set_value(key.as_str(), value.clone()),
                None => ctx.remove(key),
            },
        )
    }

    /// What decoding this record costs, refusing a value that is too deep
    /// or alone too large as [`Checkpoint::check`](super::Checkpoint::check)
    /// does.
    pub(crate) fn footprint(&self, limit: u64) -> Result<Footprint> {
        let mut fp = Footprint::int(4, self.branch.into());
        fp.then(Footprint::string(self.name.len()));
        fp.then(Footprint::int(8, (self.writes.len() as u64).into()));
        for (key, value) in &self.writes {
            match value {
                Some(value) => {
                    let entry = entry_footprint(key, value)?;
                    if entry.size() > limit {
                        return Err(Error::ValueTooLarge {
                            key: key.clone(),
                            size: entry.size(),
                            limit,
                        });
                    }
                    fp.then(Footprint::item(1, 1)); // the option's tag
                    fp.then(entry);
                }
                None => {
                    fp.then(Footprint::string(key.len()));
                    fp.then(Footprint::item(1, 1));
                }
            }
        }
        Ok(fp)
    }
}

/// `branch`, `name`, the number of writes, then each key and an option of
/// its value (a `0`/`1` byte, then the value in [`Value`]'s encoding).
impl Encode for BranchRecord {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> std::result::Result<(), EncodeError> {
        self.branch.encode(encoder)?;
        self.name.encode(encoder)?;
        (self.writes.len() as u64).encode(encoder)?;
        for (key, value) in &self.writes {
            key.encode(encoder)?;
            match value {
                None => 0u8.encode(encoder)?,
                Some(value) => {
                    1u8.encode(encoder)?;
                    value.encode(encoder)?;
                }
            }
        }
        Ok(())
    }
}

/// Reads what `Encode` writes; counts are not trusted for allocations.
impl<C> Decode<C> for BranchRecord {
    fn decode<D: Decoder<Context = C>>(decoder: &mut D) -> std::result::Result<Self, DecodeError> {
        let branch = u32::decode(decoder)?;
        let name = decode_string(decoder)?;
        let count = u64::decode(decoder)?;
        let mut writes: Vec<(String, Option<Value>)> = Vec::new();
        for _ in 0..count {
            let key = decode_string(decoder)?;
            let value = match u8::decode(decoder)? {
                0 => None,
                1 => Some(Value::decode(decoder)?),
                found => {
                    return Err(DecodeError::UnexpectedVariant {
                        type_name: "Option<Value>",
                        allowed: &AllowedEnumVariants::Range { min: 0, max: 1 },
                        found: u32::from(found),
                    });
                }
            };
            if writes.last().is_some_and(|(last, _)| *last >= key) {
                return Err(DecodeError::Other(
                    "a branch record's keys are not in strictly increasing order",
                ));
            }
            writes.push((key, value));
        }
        Ok(BranchRecord {
            branch,
            name,
            writes,
        })
    }
}

/// The records of a checkpoint: a count, then each record. Records of one
/// checkpoint have strictly increasing branch indexes.
pub(crate) fn decode_records<D: Decoder>(
    decoder: &mut D,
) -> std::result::Result<Vec<BranchRecord>, DecodeError> {
    let count = u64::decode(decoder)?;
    let mut records: Vec<BranchRecord> = Vec::new();
    for _ in 0..count {
        let record = BranchRecord::decode(decoder)?;
        if records
            .last()
            .is_some_and(|last| last.branch >= record.branch)
        {
            return Err(DecodeError::Other(
                "branch records are not in strictly increasing branch order",
            ));
        }
        records.push(record);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            record.writes,
            [
                ("gone".to_owned(), None),
                ("x".to_owned(), Some(Value::from("new")))
            ]
        );
        let replayed = record.replay(&base);
        assert_eq!(replayed, done);
        assert_eq!(replayed.branch(), Some("b"));
        assert_eq!(
            replayed.written().collect::<Vec<_>>(),
            done.written().collect::<Vec<_>>()
        );
    }
}
