//! A run's journal (contract rules 18 and 20): the run's checkpoints in
//! order, each numbered ([`Checkpoint::seq`]) and each written as the keys
//! that changed since the one before it ([`Change::Delta`]), or, at the
//! first checkpoint and at every compaction point, as the whole context
//! ([`Change::Full`]).
//!
//! A store keeps the journal as it likes: a row per checkpoint (SQLite,
//! Postgres), a list item per checkpoint (Redis), a list of values
//! (in-memory), or, for a store with only the four required methods, the
//! whole journal in one blob ([`Checkpoint::to_bytes`] writes
//! [`Checkpoint::earlier`] too). Loading the latest checkpoint reads from
//! the last full one on: at most [`COMPACT_EVERY`] checkpoints, and about
//! twice the context's size.

use serde::{Deserialize, Serialize};

use super::Checkpoint;
use crate::context::Snapshot;
use crate::error::{Error, Result};

/// The longest run of deltas a durable run writes before it writes its
/// whole context again (a compaction point): a load reads at most this many
/// checkpoints. A run also compacts when its deltas since the last full
/// checkpoint add up to more bytes than that checkpoint's context.
pub const COMPACT_EVERY: u32 = 32;

/// How a checkpoint's context differs from the context of the run's
/// previous checkpoint (number [`seq`](Checkpoint::seq)` - 1`): what a store
/// that keeps the journal writes.
///
/// ```
/// use fluxio_core::store::Change;
/// use fluxio_core::Context;
/// # fn main() -> fluxio_core::Result<()> {
/// let before = Context::new().set("a", 1)?.set("b", 2)?;
/// let after = before.clone().set("a", 10)?.remove("b").set("c", 3)?;
/// let change = Change::between(&before.snapshot(), &after.snapshot());
/// assert_eq!(
///     change,
///     Change::Delta { written: vec!["a".into(), "c".into()], removed: vec!["b".into()] }
/// );
/// assert!(Change::between(&after.snapshot(), &after.snapshot()).is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Change {
    /// The whole context: the run's first checkpoint, a compaction point,
    /// or a checkpoint built by hand.
    #[default]
    Full,
    /// Only these keys changed since the previous checkpoint.
    Delta {
        /// The keys set (added or changed), in key order; their values are
        /// the checkpoint's context's.
        written: Vec<String>,
        /// The keys removed, in key order.
        removed: Vec<String>,
    },
}

impl Change {
    /// The delta from `before` to `after`. Parts the two snapshots share
    /// are skipped, so it costs about what changed.
    #[must_use]
    pub fn between(before: &Snapshot, after: &Snapshot) -> Change {
        let (written, removed) = after.changes_since(before);
        Change::Delta { written, removed }
    }

    /// A delta that changes nothing (a checkpoint that moves the run on, or
    /// marks it failed or cancelled, with the context as it was).
    #[must_use]
    pub fn none() -> Change {
        Change::Delta {
            written: Vec::new(),
            removed: Vec::new(),
        }
    }

    /// Whether the whole context is written.
    #[must_use]
    pub fn is_full(&self) -> bool {
        matches!(self, Change::Full)
    }

    /// Whether this is a delta that changes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        matches!(self, Change::Delta { written, removed } if written.is_empty() && removed.is_empty())
    }
}

/// Where a store that keeps the journal may cut it when it appends
/// `next`: the checkpoints numbered below the returned one can be dropped.
/// It is the last full checkpoint at or before `next.keep_from` among
/// `full` (the numbers of the stored full checkpoints that stay, in any
/// order), or `next.seq` when `next` is full and nothing stored qualifies;
/// `None` when nothing may be dropped. Every store cuts there, so a
/// journal never starts with a delta.
#[must_use]
pub fn cut_point(next: &Checkpoint, full: impl IntoIterator<Item = u32>) -> Option<u32> {
    if next.keep_from == 0 {
        return None;
    }
    let stored = full
        .into_iter()
        .filter(|&s| s < next.seq && s <= next.keep_from)
        .max();
    match stored {
        Some(s) => Some(s),
        None if next.change.is_full() && next.keep_from >= next.seq => Some(next.seq),
        None => None,
    }
}

/// The error of a delta whose predecessor the store does not hold: the run
/// was deleted while its owner still wrote to it ([`Error::RunDeleted`]).
#[must_use]
pub fn missing_predecessor(key: &str, seq: u32) -> Error {
    Error::RunDeleted {
        run_id: key.to_owned(),
        seq,
    }
}

/// Up to this many checkpoints, [`append`] grows a journal by one.
const SHORT_JOURNAL: usize = 4;

/// Appends `next` to `journal` (a run's checkpoints, oldest first): the
/// checkpoints numbered `next.seq` or later are replaced (a write that was
/// sent again, or a fresh run under the same key), the ones before the
/// [`cut_point`] dropped; the oldest one left is the journal's base, whole
/// (its context is whole in memory). What a store that keeps the journal
/// as values does on a save.
///
/// `next` is checked first as a store of bytes checks it when it encodes
/// it ([`Checkpoint::entry_bytes`]), so the limits are the same on every
/// store (contract rule 17): a value given to
/// [`Context::set_value`](crate::Context::set_value) past them is refused
/// here too.
///
/// # Errors
/// [`missing_predecessor`] when `next` is a delta and the journal has no
/// checkpoint `next.seq - 1`; the errors of [`Checkpoint::check`] for a
/// checkpoint a store of bytes would refuse ([`Error::ValueTooDeep`] and
/// [`Error::ValueTooLarge`] naming the key, [`Error::CheckpointTooLarge`],
/// [`Error::CorruptCheckpoint`]). The journal is then left as it was.
pub fn append(journal: &mut Vec<Checkpoint>, mut next: Checkpoint) -> Result<()> {
    next.check_entry()?;
    let kept = journal.partition_point(|e| e.seq < next.seq);
    if !next.change.is_full() && kept.checked_sub(1).map(|i| journal[i].seq + 1) != Some(next.seq) {
        return Err(missing_predecessor(&next.key(), next.seq));
    }
    journal.truncate(kept);
    if let Some(cut) = cut_point(
        &next,
        journal.iter().filter(|e| e.change.is_full()).map(|e| e.seq),
    ) {
        journal.retain(|e| e.seq >= cut);
    }
    next.earlier.clear();
    // A short journal grows one checkpoint at a time: a `Vec`'s first
    // growth makes room for four, and a run waiting in its second stage
    // would hold twice the checkpoints it has (rule 24's parked runs).
    if journal.len() == journal.capacity() && journal.len() < SHORT_JOURNAL {
        journal.reserve_exact(1);
    }
    journal.push(next);
    // The oldest checkpoint kept holds its whole context in memory: it is
    // the journal's base, whatever it was written as.
    if let Some(head) = journal.first_mut() {
        head.change = Change::Full;
    }
    Ok(())
}

/// The run whose journal is `stored` (its latest checkpoint, carrying the
/// earlier ones in [`Checkpoint::earlier`]) with `next` [appended](append):
/// what a store that keeps the journal in one blob saves.
///
/// # Errors
/// As [`append`].
pub fn appended(stored: Option<Checkpoint>, next: Checkpoint) -> Result<Checkpoint> {
    // the run's mailbox stays with the run, on its latest checkpoint
    let (mut journal, signals) = match stored {
        Some(mut cp) => {
            let signals = std::mem::take(&mut cp.signals);
            (cp.into_journal(), signals)
        }
        None => (Vec::new(), Vec::new()),
    };
    // a fresh run (its first checkpoint) starts with an empty mailbox
    let signals = if next.seq == 0 { Vec::new() } else { signals };
    append(&mut journal, next)?;
    let mut latest = journal.pop().ok_or_else(|| Error::Internal {
        message: "a journal is empty right after an append".to_owned(),
    })?;
    latest.earlier = journal;
    latest.signals = signals;
    Ok(latest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Context;

    fn entry(seq: u32, change: Change, keep_from: u32) -> Checkpoint {
        let mut cp =
            Checkpoint::new("r", "v", seq, "s", Context::new().snapshot()).in_pipeline("p");
        cp.seq = seq;
        cp.change = change;
        cp.keep_from = keep_from;
        cp
    }

    fn seqs(cp: &Checkpoint) -> Vec<u32> {
        cp.clone().into_journal().iter().map(|e| e.seq).collect()
    }

    #[test]
    fn rule18_appending_replaces_a_resent_write_refuses_a_gap_and_cuts_at_a_full_checkpoint() {
        let mut run = appended(None, entry(0, Change::Full, 0)).expect("first");
        for seq in 1..5 {
            run = appended(Some(run), entry(seq, Change::none(), 0)).expect("delta");
        }
        assert_eq!(seqs(&run), [0, 1, 2, 3, 4]);
        // checkpoint 3 sent again (its first write's answer was lost)
        run = appended(Some(run), entry(3, Change::none(), 0)).expect("again");
        assert_eq!(seqs(&run), [0, 1, 2, 3]);
        let gap = appended(Some(run.clone()), entry(5, Change::none(), 0)).expect_err("a gap");
        assert!(gap.to_string().contains("checkpoint 4"), "{gap}");
        assert!(appended(None, entry(1, Change::none(), 0)).is_err());
        // a full checkpoint at 4 asking to keep from 2: 0 is the last full
        // one at or before 2, so nothing goes yet
        run = appended(Some(run), entry(4, Change::Full, 2)).expect("full");
        assert_eq!(seqs(&run), [0, 1, 2, 3, 4]);
        run = appended(Some(run), entry(5, Change::none(), 4)).expect("delta");
        assert_eq!(seqs(&run), [4, 5], "cut at the full checkpoint 4");
        // a fresh run under the same key replaces everything
        run = appended(Some(run), entry(0, Change::Full, 0)).expect("fresh");
        assert_eq!(seqs(&run), [0]);
    }
}
