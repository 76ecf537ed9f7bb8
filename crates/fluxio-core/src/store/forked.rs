//! Where a forked run came from (contract rule 20): [`ForkOrigin`], which
//! the first checkpoint of a run started by
//! [`Pipeline::fork_with`](crate::Pipeline::fork_with) carries.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The run and step a run was forked from, and the keys its context was
/// changed at before it started: what an operator did, kept in the new
/// run's history ([`History::forked_from`](crate::History::forked_from)).
/// Written in checkpoint format 8 on the forked run's first checkpoint only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ForkOrigin {
    /// The forked run's store key (`pipeline/run_id`).
    pub run: String,
    /// The step it was forked at, as the fork named it (a stage name or a
    /// step number).
    pub step: String,
    /// The keys the fork set or changed, in key order.
    pub set: Vec<String>,
    /// The keys the fork removed, in key order.
    pub removed: Vec<String>,
}

impl ForkOrigin {
    /// A fork of `run` at `step` with the context as it was.
    #[must_use]
    pub fn new(run: impl Into<String>, step: impl Into<String>) -> Self {
        ForkOrigin {
            run: run.into(),
            step: step.into(),
            set: Vec::new(),
            removed: Vec::new(),
        }
    }

    /// Whether the fork changed the context.
    #[must_use]
    pub fn patched(&self) -> bool {
        !self.set.is_empty() || !self.removed.is_empty()
    }
}

impl fmt::Display for ForkOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "forked from {} at {}", self.run, self.step)?;
        if !self.set.is_empty() {
            write!(f, ", set {}", self.set.join(", "))?;
        }
        if !self.removed.is_empty() {
            write!(f, ", removed {}", self.removed.join(", "))?;
        }
        Ok(())
    }
}
