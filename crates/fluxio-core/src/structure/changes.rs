//! How a pipeline's code differs from the code that wrote a checkpoint: [`Changes`], which a version error carries (rule 13).

use std::fmt;

/// How a pipeline's code differs from the code that wrote a checkpoint:
/// carried by [`Error::CheckpointVersion`](crate::Error::CheckpointVersion).
///
/// Its `Display` is one line for humans, e.g. ``the code of stage `charge`
/// changed``.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Changes {
    /// Stages in both whose code hash differs.
    pub code_changed: Vec<String>,
    /// Stages only the new code has.
    pub added: Vec<String>,
    /// Stages only the old code had.
    pub removed: Vec<String>,
    /// The old and the new shape, when they differ.
    pub shape: Option<(String, String)>,
    /// Steps a checkpoint stands at whose position is no step of the same
    /// name in the new code: the compiled shape differs where the
    /// [`Structure`](crate::structure::Structure) could not tell (a checkpoint written by a fluxio that
    /// recorded ips, resumed on code whose schemas moved them).
    pub moved: Vec<String>,
}

impl Changes {
    /// Whether nothing that a [`Structure`](crate::structure::Structure) records changed (the version may
    /// still differ: it also covers what a structure leaves out, such as a
    /// route key's position).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.code_changed.is_empty()
            && self.added.is_empty()
            && self.removed.is_empty()
            && self.shape.is_none()
            && self.moved.is_empty()
    }

    /// Whether only stage bodies changed: the case a resume may opt in to.
    #[must_use]
    pub fn same_shape(&self) -> bool {
        self.shape.is_none()
            && self.added.is_empty()
            && self.removed.is_empty()
            && self.moved.is_empty()
    }
}

pub(super) fn names(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|n| format!("`{n}`")).collect();
    quoted.join(", ")
}

impl fmt::Display for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.code_changed.is_empty() {
            let s = if self.code_changed.len() == 1 {
                ""
            } else {
                "s"
            };
            parts.push(format!(
                "the code of stage{s} {} changed",
                names(&self.code_changed)
            ));
        }
        if !self.added.is_empty() {
            parts.push(format!("stages added: {}", names(&self.added)));
        }
        if !self.removed.is_empty() {
            parts.push(format!("stages removed: {}", names(&self.removed)));
        }
        if let Some((old, new)) = &self.shape {
            parts.push(format!("the shape changed from {old} to {new}"));
        }
        if !self.moved.is_empty() {
            parts.push(format!(
                "the shape changed: the checkpoint's step {} is not at its place in this code",
                names(&self.moved)
            ));
        }
        if parts.is_empty() {
            f.write_str("no stage or shape changed")
        } else {
            f.write_str(&parts.join("; "))
        }
    }
}
