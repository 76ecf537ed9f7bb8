//! [`ValueError`]: a failed conversion between a serde type and a
//! [`Value`](super::Value).

use std::fmt;

use serde::{de, ser};

/// Error converting between a serde type and a [`Value`](super::Value) (see
/// [`to_value`](super::to_value) and [`from_value`](super::from_value)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValueError {
    /// Human-readable description of what went wrong (lowercase, e.g.
    /// `invalid type: string "x", expected u64`).
    pub message: String,
    /// Set when the writer refused a value past a limit, so that
    /// [`Context::set`](crate::Context::set) can report
    /// [`Error::ValueTooLarge`](crate::Error::ValueTooLarge) or
    /// [`Error::ValueTooDeep`](crate::Error::ValueTooDeep).
    pub(super) refusal: Option<Refusal>,
}

/// A limit the writer stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The bytes written (with the key's), once past `limit`.
    TooLarge { size: u64, limit: u64 },
    /// Nested deeper than [`MAX_DEPTH`](super::MAX_DEPTH).
    TooDeep,
}

impl ValueError {
    /// Creates an error with the given message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            refusal: None,
        }
    }

    pub(super) fn refused(refusal: Refusal) -> Self {
        let message = match refusal {
            Refusal::TooLarge { size, limit } => format!(
                "the value takes more than a checkpoint can hold \
                 ({size} bytes encoded so far, at most {limit})"
            ),
            Refusal::TooDeep => format!(
                "the value is nested deeper than MAX_DEPTH ({})",
                super::MAX_DEPTH
            ),
        };
        Self {
            message,
            refusal: Some(refusal),
        }
    }

    /// The message of this error.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl ser::Error for ValueError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::new(msg.to_string())
    }
}

impl de::Error for ValueError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::new(msg.to_string())
    }
}
