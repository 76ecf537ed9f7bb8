//! The tail of a run's journal: [`Tail`] numbers each checkpoint a run writes and decides whether it is whole or a delta, and which checkpoints the store may cut (`history_depth`).

use crate::context::{Lineage, Snapshot};
use crate::store::{COMPACT_EVERY, Change, Checkpoint};

/// The end of a durable run's journal as this process wrote (or loaded) it:
/// the next checkpoint's number and the context of the last one, so that
/// the next checkpoint writes only what changed.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    next_seq: u32,
    last: Option<Snapshot>,
    /// The version of the last one: a checkpoint of another version (a
    /// resume on changed code) is written whole.
    version: String,
    /// Bytes of the deltas written since the last whole checkpoint: past
    /// that one's size (at least 4 KiB), the next one is whole again.
    delta_bytes: u64,
    /// The context of the last whole checkpoint (or of the loaded one),
    /// and its size once it was needed: counting it is O(keys), so it is
    /// counted only when the deltas pass 4 KiB.
    full: Option<Snapshot>,
    full_bytes: Option<u64>,
    /// Keep at most about this many checkpoints of history (`None`: all).
    depth: Option<u32>,
    /// With a `depth`: the whole checkpoints this process wrote that the
    /// history has not yet passed by `depth` (oldest first), and the last
    /// checkpoint stored before it took the run over (whose whole ones it
    /// does not know). See [`keep_from`](Self::keep_from).
    fulls: std::collections::VecDeque<u32>,
    resumed_at: Option<u32>,
    /// The epoch the run's context took at the last checkpoint written (0:
    /// unknown): a context that still has it changed since `last` only in
    /// the entries that bear it (see [`Lineage`]).
    pub(super) since: u64,
}

impl Tail {
    /// The journal of a fresh run: its first checkpoint is whole.
    pub(crate) fn fresh(depth: Option<u32>) -> Self {
        Tail {
            depth,
            ..Tail::default()
        }
    }

    /// The journal of a stored run whose latest checkpoint is `cp`.
    pub(crate) fn after(cp: &Checkpoint, depth: Option<u32>) -> Self {
        Tail {
            next_seq: cp.seq.saturating_add(1),
            last: Some(cp.context.clone()),
            version: cp.version.clone(),
            full: Some(cp.context.clone()),
            depth,
            resumed_at: Some(cp.seq),
            ..Tail::default()
        }
    }

    /// The [`keep_from`](Checkpoint::keep_from) of checkpoint `seq`: with a
    /// `depth` of n, `seq - n` when that is a whole checkpoint, the one
    /// place the store's cut (the last whole checkpoint at or before
    /// `keep_from`) moves; else 0 (no cut), so stores trim rarely. The
    /// whole checkpoints written before this process took the run over
    /// are unknown: the n checkpoints after that point all ask. Since
    /// whole checkpoints are at most [`COMPACT_EVERY`] apart, a run then
    /// keeps between n + 1 and n + [`COMPACT_EVERY`] checkpoints.
    fn keep_from(&mut self, seq: u32) -> u32 {
        let Some(edge) = self.depth.and_then(|n| seq.checked_sub(n)) else {
            return 0;
        };
        while self.fulls.front().is_some_and(|&f| f < edge) {
            self.fulls.pop_front();
        }
        let cuts = self.fulls.front() == Some(&edge) || self.resumed_at.is_some_and(|r| edge <= r);
        if cuts { edge } else { 0 }
    }

    /// Numbers `cp` and says what it writes: the whole context at the
    /// run's first checkpoint, at every [`COMPACT_EVERY`]th one and once
    /// the deltas since the last whole one outweigh it; else what changed.
    /// Returns the delta's size (0 for a whole checkpoint).
    ///
    /// `lineage` is the context's (see [`Lineage`]): when it still has the
    /// epoch it took at the last checkpoint written, the delta is read off
    /// its entries' marks.
    pub(crate) fn stamp(&mut self, cp: &mut Checkpoint, lineage: Lineage) -> u64 {
        cp.seq = self.next_seq;
        cp.keep_from = self.keep_from(cp.seq);
        let since = self.since;
        let delta = self
            .last
            .as_ref()
            .filter(|_| cp.seq % COMPACT_EVERY != 0 && cp.version == self.version)
            .map(|last| {
                (since != 0 && lineage.before == since)
                    .then(|| cp.context.changes_marked(last, since))
                    .flatten()
                    .map_or_else(
                        || Change::between(last, &cp.context),
                        |written| Change::Delta {
                            written,
                            removed: Vec::new(),
                        },
                    )
            })
            .map(|change| {
                let size = match &change {
                    Change::Delta { written, removed } => {
                        written
                            .iter()
                            .chain(removed)
                            .map(|k| k.len() as u64 + 2)
                            .sum::<u64>()
                            + written
                                .iter()
                                .filter_map(|k| cp.context.encoded(k))
                                .map(|v| v.bytes().len() as u64)
                                .sum::<u64>()
                    }
                    Change::Full => 0,
                };
                (change, size)
            })
            .filter(|(_, size)| {
                let total = self.delta_bytes + size;
                total <= 4096 || total <= self.full_size()
            });
        match delta {
            Some((change, size)) => {
                cp.change = change;
                size
            }
            None => {
                cp.change = Change::Full;
                0
            }
        }
    }

    /// The size of the last whole checkpoint's context, counted once.
    fn full_size(&mut self) -> u64 {
        let full = &self.full;
        *self
            .full_bytes
            .get_or_insert_with(|| full.as_ref().map_or(0, context_size))
    }

    /// `cp`, numbered by [`stamp`](Self::stamp), was written.
    /// `lineage.after` is the epoch the context took there (see
    /// [`Lineage`]).
    pub(crate) fn advance(
        &mut self,
        seq: u32,
        context: Snapshot,
        full: bool,
        delta: u64,
        version: &str,
        lineage: Lineage,
    ) {
        self.next_seq = seq.saturating_add(1);
        self.since = lineage.after;
        if self.version != version {
            version.clone_into(&mut self.version);
        }
        if full {
            if self.depth.is_some() {
                self.fulls.push_back(seq);
            }
            self.full = Some(context.clone());
            self.full_bytes = None;
            self.delta_bytes = 0;
        } else {
            self.delta_bytes += delta;
        }
        self.last = Some(context);
    }
}

/// About how many bytes a whole checkpoint of `context` takes.
pub(super) fn context_size(context: &Snapshot) -> u64 {
    context
        .entries()
        .map(|(k, v)| k.len() as u64 + 2 + v.bytes().len() as u64)
        .sum()
}
