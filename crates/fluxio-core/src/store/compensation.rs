//! A run's compensation (contract rule 35): [`Compensation`], which every
//! checkpoint written while a run that failed for good undoes its completed
//! stages carries.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A run compensating: why, the compensators it runs (in the order they
/// run: the compensated stages' reverse order), and how far it got. Every
/// checkpoint written while it compensates carries it, and so does the
/// run's last one: a crash, a failing compensator or a cancel leaves the
/// run where `next` says, and whoever continues it (a resume, recovery, an
/// operator's retry) runs the compensator at `next`, never one before it.
/// Written in checkpoint format 8.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Compensation {
    /// The failure that started it (the stage's error, or what gave up).
    pub reason: String,
    /// The compensators to run, in the order they run.
    pub steps: Vec<CompensationStep>,
    /// The index in `steps` of the next compensator to run:
    /// `steps.len()` once all of them completed.
    pub next: u32,
}

/// One compensator of a [`Compensation`]: the stage it undoes and where
/// that stage is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompensationStep {
    /// The compensated stage's position (its `CALL`'s, as
    /// [`StageInfo::position`](crate::StageInfo::position)).
    pub position: u32,
    /// The compensated stage's name.
    pub stage: String,
    /// The compensating stage's name.
    pub compensator: String,
}

impl CompensationStep {
    /// The compensator `compensator` of the stage `stage` at `position`.
    #[must_use]
    pub fn new(position: u32, stage: impl Into<String>, compensator: impl Into<String>) -> Self {
        CompensationStep {
            position,
            stage: stage.into(),
            compensator: compensator.into(),
        }
    }
}

impl Compensation {
    /// A compensation of `steps` for `reason`, none run yet.
    #[must_use]
    pub fn new(reason: impl Into<String>, steps: Vec<CompensationStep>) -> Self {
        Compensation {
            reason: reason.into(),
            steps,
            next: 0,
        }
    }

    /// Whether every compensator completed.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.next as usize >= self.steps.len()
    }

    /// The compensator that runs next, if any.
    #[must_use]
    pub fn current(&self) -> Option<&CompensationStep> {
        self.steps.get(self.next as usize)
    }
}

impl fmt::Display for Compensation {
    /// `compensated 2 of 3: cancel_hotel (for book_hotel), ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let done = (self.next as usize).min(self.steps.len());
        write!(f, "compensated {done} of {}", self.steps.len())?;
        for (i, s) in self.steps.iter().enumerate() {
            let sep = if i == 0 { ": " } else { ", " };
            write!(f, "{sep}{} (for {})", s.compensator, s.stage)?;
        }
        Ok(())
    }
}
