//! Where a run stands: [`RunStatus`], which every checkpoint carries and the error type names.

use serde::{Deserialize, Serialize};

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
    /// The run was cancelled (contract rule 14): `ip`, the context, the
    /// attempt and any `error_message` are those of the checkpoint it was
    /// cancelled at. It never runs again under this run id: resume and
    /// replay refuse it, and fenced writes of its owner are refused, until
    /// the run is deleted (a fresh `invoke` deletes it).
    Cancelled,
    /// Recovery gave up on the run at `ip` (contract rule 22): recovery
    /// workers tried it as many times as their policy allows
    /// ([`attempt`](crate::store::Checkpoint::attempt) says how many) and now leave it
    /// alone. `error_message` is the last failure, when there was one. An
    /// operator's [`retry_run`](super::retry_run) hands it back to the
    /// workers; an explicit resume retries it like a failed run.
    NeedsAttention,
    /// The run reached a sleep (contract rule 25) and gave its lease back:
    /// it continues from `ip` on whichever worker claims it after its wake
    /// time ([`pending`](crate::store::Checkpoint::pending) says when).
    /// Nothing of it is held in any process meanwhile.
    Sleeping,
    /// The run reached a wait (contract rule 26) and gave its lease back:
    /// it continues from `ip` once a signal it waits for is delivered, or
    /// its deadline passes ([`pending`](crate::store::Checkpoint::pending)
    /// says which names, and until when).
    Waiting,
    /// The run was paused (contract rule 30): it stopped before its next
    /// stage, and no worker continues it until it is unpaused. `ip`, the
    /// context and [`pending`](crate::store::Checkpoint::pending) are those
    /// of the checkpoint it was paused at. Its owner's fenced writes are
    /// refused with [`Error::Paused`](crate::Error::Paused), as a
    /// cancelled run's are. Written in checkpoint format 6.
    Paused,
}

impl RunStatus {
    /// Whether the run is parked in time: sleeping or waiting.
    #[must_use]
    pub fn is_pending(self) -> bool {
        matches!(self, RunStatus::Sleeping | RunStatus::Waiting)
    }

    /// Whether a run stored with this status refuses its owner's fenced
    /// writes: cancelled (rule 14) or paused (rule 30).
    #[must_use]
    pub fn fences_owner(self) -> bool {
        matches!(self, RunStatus::Cancelled | RunStatus::Paused)
    }
}
