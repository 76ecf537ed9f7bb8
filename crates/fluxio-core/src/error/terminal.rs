//! Failures that are final (rule 35): a stage says that no retry can help.

use std::fmt;

use super::BoxError;

/// A stage's failure that no retry can fix: a fraud rejection, an invalid
/// card, an order that does not exist. Return it from a stage and the run
/// fails **for good**: the [`Retry`](crate::middleware::Retry) middleware
/// does not call the stage again (whatever its `retry_if`), a
/// [`RecoveryWorker`](crate::recovery::RecoveryWorker) never picks the run up, and
/// [`Pipeline::start`](crate::Pipeline::start) and
/// [`resume`](crate::Pipeline::resume) return
/// [`Error::FailedForGood`](crate::Error::FailedForGood) without running
/// anything. The run's failure checkpoint records it (checkpoint format 8).
///
/// A stage returning `anyhow::Result` may return an `anyhow::Error` whose
/// chain holds a `TerminalError` (`anyhow::Error::new(TerminalError::new(e))`,
/// with any `.context(..)` around it); a stage returning a boxed error wraps
/// the anyhow error instead: `TerminalError::new(anyhow_error)`.
///
/// The error it wraps stays reachable: the first call returns
/// [`Error::Stage`](crate::Error::Stage) with this as its source, and
/// [`Error::stage_error`](crate::Error::stage_error) looks through it.
///
/// ```
/// use fluxio_core::{Error, TerminalError};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("card {0} is invalid")]
/// struct InvalidCard(String);
///
/// // in a stage: `return Err(TerminalError::new(InvalidCard(card)).into());`
/// let err = Error::Stage {
///     stage: "charge".into(),
///     source: Box::new(TerminalError::new(InvalidCard("4111".into()))),
/// };
/// assert!(err.is_terminal());
/// assert_eq!(err.stage_error::<InvalidCard>().map(|c| c.0.as_str()), Some("4111"));
/// assert_eq!(err.to_string(), "stage `charge` failed: card 4111 is invalid");
/// ```
pub struct TerminalError {
    inner: BoxError,
}

impl TerminalError {
    /// Marks `error` as final.
    pub fn new(error: impl Into<BoxError>) -> Self {
        TerminalError {
            inner: error.into(),
        }
    }

    /// The error it wraps.
    #[must_use]
    pub fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.inner
    }

    /// The error it wraps, by value.
    #[must_use]
    pub fn into_inner(self) -> BoxError {
        self.inner
    }
}

impl fmt::Debug for TerminalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TerminalError").field(&self.inner).finish()
    }
}

impl fmt::Display for TerminalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner, f)
    }
}

impl std::error::Error for TerminalError {
    // the wrapped error's own causes: the wrapper says nothing of its own,
    // so a message with causes shows the inner error once
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.source()
    }
}

/// Whether `e` or one of its causes is a [`TerminalError`].
pub(crate) fn is_terminal(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.is::<TerminalError>() {
            return true;
        }
        cause = c.source();
    }
    false
}
