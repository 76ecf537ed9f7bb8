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
    /// Set when [`to_value`](super::to_value) refused a sequence, map,
    /// string or byte buffer too large for any checkpoint, so that
    /// [`Context::set`](crate::Context::set) can report [`Error::ValueTooLarge`](crate::Error::ValueTooLarge).
    pub(super) too_large: Option<TooLarge>,
}

/// A container [`to_value`](super::to_value) refused: its length and the
/// most it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TooLarge {
    pub(super) size: u64,
    pub(super) limit: u64,
}

impl ValueError {
    /// Creates an error with the given message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            too_large: None,
        }
    }

    pub(super) fn too_large(what: &str, unit: &str, size: usize, limit: u64) -> Self {
        Self {
            message: format!(
                "{what} of {size} {unit} is larger than a checkpoint can hold (at most {limit})"
            ),
            too_large: Some(TooLarge {
                size: size as u64,
                limit,
            }),
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
