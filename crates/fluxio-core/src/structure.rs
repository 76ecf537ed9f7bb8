//! What a checkpoint records about the code that wrote it, beyond the
//! version: the pipeline's shape and each stage's code hash (contract rule
//! 13).
//!
//! The version says *whether* the code changed; a [`Structure`] says *what*
//! changed, so a refused resume can name the stages, and a resume that opts
//! in to code changes ([`ResumeOptions::allow_code_changes`]) can check that
//! only stage bodies changed and the program around them did not.
//!
//! [`ResumeOptions::allow_code_changes`]: crate::ResumeOptions::allow_code_changes

pub(crate) mod changes;

pub use changes::Changes;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A pipeline's shape and its stages' code hashes, as stored in every
/// checkpoint (format 2).
///
/// ```
/// use fluxio_core::Structure;
/// let s = Structure::default();
/// assert!(s.changes_to(&s).is_empty());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Structure {
    /// The shape in a canonical text: stage names in order, parallel and
    /// fire-and-forget blocks with their branches, routing blocks with their
    /// keys and bodies, and `auto` when auto-parallelism is on. Stages that
    /// auto-parallelism folds into a parallel block (by their declared
    /// `reads` and `writes`) show as that block, since they compile to it.
    /// Two pipelines have the same shape exactly when these texts are
    /// equal, and then their checkpoints have the same positions (see
    /// [`Program::position`](crate::compile::Program::position)).
    pub shape: String,
    /// Every stage's name and the hash of its own tokens (see
    /// `fluxio-macros`), in order of appearance, each name once.
    pub stages: Vec<StageCode>,
}

/// The string `Debug` quoted at the start of `text` (which starts with
/// `"`), unescaped, and what follows it.
fn skip_quoted(text: &str) -> (String, &str) {
    let mut out = String::new();
    let mut chars = text.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (out, &text[i + 1..]),
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, 't')) => out.push('\t'),
                Some((_, 'r')) => out.push('\r'),
                Some((_, '0')) => out.push('\0'),
                Some((_, 'u')) => {
                    // `\u{...}`
                    let mut hex = String::new();
                    for (_, h) in chars.by_ref() {
                        match h {
                            '{' => {}
                            '}' => break,
                            h => hex.push(h),
                        }
                    }
                    if let Some(c) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                        out.push(c);
                    }
                }
                Some((_, other)) => out.push(other),
                None => break,
            },
            c => out.push(c),
        }
    }
    (out, "")
}

/// One stage's name and code hash in a [`Structure`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StageCode {
    /// The stage's name.
    pub name: String,
    /// The SHA-256 of the stage's normalized tokens.
    pub hash: [u8; 32],
}

impl StageCode {
    /// The stage `name` whose code hashes to `hash`.
    #[must_use]
    pub fn new(name: impl Into<String>, hash: [u8; 32]) -> Self {
        StageCode {
            name: name.into(),
            hash,
        }
    }
}

impl Structure {
    /// A structure of the given shape text and stages, e.g. to build a
    /// checkpoint by hand in a test; pipelines compute theirs
    /// ([`Pipeline::structure`](crate::Pipeline::structure)).
    #[must_use]
    pub fn new(shape: impl Into<String>, stages: Vec<StageCode>) -> Self {
        Structure {
            shape: shape.into(),
            stages,
        }
    }

    /// The names of the pipeline's waits (contract rule 26), in order, as
    /// the shape records them: what a signal to one of its runs may name.
    ///
    /// ```
    /// use fluxio_core::Structure;
    /// let s = Structure::new(
    ///     r#"[a, wait("ok": bool -> "ok", "no": () -> "x"; deadline none; timeout default), routes{"wait(": [b]}]"#,
    ///     Vec::new(),
    /// );
    /// assert_eq!(s.wait_names(), ["ok", "no"]);
    /// ```
    #[must_use]
    pub fn wait_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        let mut rest = self.shape.as_str();
        while let Some(c) = rest.chars().next() {
            if c == '"' {
                // a quoted route key or name: skipped whole
                rest = skip_quoted(rest).1;
            } else if let Some(after) = rest.strip_prefix("wait(") {
                // `"name": type -> "key", ...; deadline ...; timeout ...)`
                rest = after;
                loop {
                    rest = rest.trim_start_matches([' ', ',']);
                    if !rest.starts_with('"') {
                        break;
                    }
                    let (name, after) = skip_quoted(rest);
                    names.push(name);
                    // the type and the key, up to the next entry or the `;`
                    let (_, after) = after.split_once("-> ").unwrap_or(("", after));
                    rest = skip_quoted(after).1;
                }
            } else {
                rest = &rest[c.len_utf8()..];
            }
        }
        names
    }

    /// What changed from `self` (the code that wrote a checkpoint) to
    /// `new` (the code asked to continue it).
    #[must_use]
    pub fn changes_to(&self, new: &Structure) -> Changes {
        let old: BTreeMap<&str, &[u8; 32]> = self
            .stages
            .iter()
            .map(|s| (s.name.as_str(), &s.hash))
            .collect();
        let now: BTreeMap<&str, &[u8; 32]> = new
            .stages
            .iter()
            .map(|s| (s.name.as_str(), &s.hash))
            .collect();
        let mut changes = Changes::default();
        for s in &new.stages {
            match old.get(s.name.as_str()) {
                Some(hash) if **hash != s.hash => changes.code_changed.push(s.name.clone()),
                Some(_) => {}
                None => changes.added.push(s.name.clone()),
            }
        }
        changes.removed = self
            .stages
            .iter()
            .filter(|s| !now.contains_key(s.name.as_str()))
            .map(|s| s.name.clone())
            .collect();
        if self.shape != new.shape {
            changes.shape = Some((self.shape.clone(), new.shape.clone()));
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(name: &str, byte: u8) -> StageCode {
        StageCode {
            name: name.to_owned(),
            hash: [byte; 32],
        }
    }

    fn structure(shape: &str, stages: Vec<StageCode>) -> Structure {
        Structure {
            shape: shape.to_owned(),
            stages,
        }
    }

    #[test]
    fn a_changed_body_is_named_and_keeps_the_shape() {
        let old = structure("[a, b]", vec![code("a", 1), code("b", 2)]);
        let new = structure("[a, b]", vec![code("a", 1), code("b", 3)]);
        let c = old.changes_to(&new);
        assert_eq!(c.code_changed, ["b"]);
        assert!(c.same_shape());
        assert_eq!(c.to_string(), "the code of stage `b` changed");
    }

    #[test]
    fn added_and_removed_stages_and_the_shape_are_listed() {
        let old = structure("[a, b]", vec![code("a", 1), code("b", 2)]);
        let new = structure("[a, c]", vec![code("a", 9), code("c", 2)]);
        let c = old.changes_to(&new);
        assert_eq!(
            (c.code_changed.clone(), c.added.clone(), c.removed.clone()),
            (
                vec!["a".to_owned()],
                vec!["c".to_owned()],
                vec!["b".to_owned()]
            )
        );
        assert!(!c.same_shape());
        let text = c.to_string();
        for part in [
            "`a` changed",
            "added: `c`",
            "removed: `b`",
            "[a, b] to [a, c]",
        ] {
            assert!(text.contains(part), "{text}");
        }
    }
}
