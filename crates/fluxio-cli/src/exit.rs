//! How a command ends ([`Exit`]) and why it failed ([`Failure`]): one line
//! on standard error and the exit code a script can test.

use std::fmt;

use fluxio_core::Error;
use fluxio_core::store::{RedactedUrl, StoreErrorKind};

/// The exit code of the `fluxio` command (see the crate docs' table).
///
/// ```
/// use fluxio_cli::Exit;
///
/// assert_eq!(Exit::Store.code(), 3);
/// let code: std::process::ExitCode = Exit::Failed.into();
/// # let _ = code;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exit {
    /// 0: done.
    Ok,
    /// 1: the operation failed (no such run, a run in the wrong state, a
    /// store that cannot list...).
    Failed,
    /// 2: bad arguments (a malformed run key too), or a confirmation that
    /// needs `--yes` because there is no terminal to ask on.
    Usage,
    /// 3: a bad or unsupported store URL, or a store that cannot be reached
    /// or does not answer.
    Store,
}

impl Exit {
    /// The process exit code: 0, 1, 2 or 3.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Store => 3,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}

/// A command that did not succeed: its exit code and the line that says why
/// (empty: nothing to say, as when standard output was closed early).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) exit: Exit,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn failed(message: impl fmt::Display) -> Self {
        Failure {
            exit: Exit::Failed,
            message: message.to_string(),
        }
    }

    pub(crate) fn usage(message: impl fmt::Display) -> Self {
        Failure {
            exit: Exit::Usage,
            message: message.to_string(),
        }
    }

    pub(crate) fn store(message: impl fmt::Display) -> Self {
        Failure {
            exit: Exit::Store,
            message: message.to_string(),
        }
    }

    /// A fluxio error: an unreachable or silent store is [`Exit::Store`], a
    /// malformed run key [`Exit::Usage`], anything else [`Exit::Failed`];
    /// the message keeps the causes.
    pub(crate) fn of(error: &Error) -> Self {
        let message = match error {
            Error::CheckpointNotFound { run_id } => {
                format!("no run `{}` in the store", crate::render::shown(run_id))
            }
            Error::Unsupported { operation, store } => {
                format!("this store ({store}) cannot {operation}")
            }
            other => other.message_with_causes(),
        };
        match error.store_error_kind() {
            Some(StoreErrorKind::Connection | StoreErrorKind::Timeout) => Failure::store(message),
            // a malformed RUN, or a setting out of range, is bad input,
            // wherever it was caught
            _ if matches!(
                error,
                Error::InvalidRunId { .. } | Error::InvalidSetting { .. }
            ) =>
            {
                Failure::usage(message)
            }
            _ => Failure::failed(message),
        }
    }

    /// The line for standard error, with every form of the store URL's
    /// password masked: one line, whatever the message (a library's
    /// message of several lines is joined with spaces, other control
    /// characters are escaped).
    pub(crate) fn line(&self, url: Option<&RedactedUrl>) -> String {
        let message = match url {
            Some(url) => url.scrub(&self.message),
            None => self.message.clone(),
        };
        format!("fluxio: {}", one_line(&message))
    }
}

/// `text` on one line: its lines trimmed and joined with a space, blank
/// ones dropped, any other control character escaped (`\u{1b}`).
pub(crate) fn one_line(text: &str) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    crate::render::escape_controls(&joined)
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure::of(&error)
    }
}

impl From<std::io::Error> for Failure {
    /// Standard output closed early (`fluxio runs list | head`) ends the
    /// command quietly; any other write error fails it.
    fn from(error: std::io::Error) -> Self {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            Failure {
                exit: Exit::Ok,
                message: String::new(),
            }
        } else {
            Failure::failed(format_args!("cannot write the output: {error}"))
        }
    }
}

impl From<serde_json::Error> for Failure {
    fn from(error: serde_json::Error) -> Self {
        if error.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe) {
            return Failure::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        }
        Failure::failed(format_args!("cannot write the JSON output: {error}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_exit_codes() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let cases = [
            (
                Error::store_with_kind("redis", StoreErrorKind::Connection, refused),
                Exit::Store,
            ),
            (
                Error::store_with_kind("redis", StoreErrorKind::Timeout, "no answer"),
                Exit::Store,
            ),
            (Error::store("redis", "WRONGTYPE"), Exit::Failed),
            (
                Error::CheckpointNotFound {
                    run_id: "orders/9".into(),
                },
                Exit::Failed,
            ),
            (
                Error::InvalidRunId {
                    run_id: String::new(),
                    reason: "it is empty",
                },
                Exit::Usage,
            ),
        ];
        for (error, exit) in cases {
            assert_eq!(Failure::of(&error).exit, exit, "{error}");
        }
        let missing = Failure::of(&Error::CheckpointNotFound {
            run_id: "orders/9".into(),
        });
        assert_eq!(missing.message, "no run `orders/9` in the store");
        let odd = Failure::of(&Error::CheckpointNotFound {
            run_id: "orders/\u{202e}9".into(),
        });
        assert_eq!(odd.message, r#"no run `"orders/\u{202e}9"` in the store"#);
        let setting = Failure::of(&Error::InvalidSetting {
            setting: "timeout",
            message: "too long".into(),
        });
        assert_eq!(setting.exit, Exit::Usage);
    }

    #[test]
    fn every_line_is_one_line() {
        let failure = Failure::store("cannot open:\n  response was [invalid]\n\n\u{1b}[31m end");
        assert_eq!(
            failure.line(None),
            r"fluxio: cannot open: response was [invalid] \u{1b}[31m end"
        );
    }

    #[test]
    fn lines_are_scrubbed_of_the_password() {
        let url = RedactedUrl::new("redis://u:hunter2@h");
        let failure = Failure::failed("auth failed for \"hunter2\"");
        assert_eq!(failure.line(Some(&url)), "fluxio: auth failed for \"***\"");
    }

    #[test]
    fn a_closed_pipe_ends_quietly() {
        let closed = Failure::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!((closed.exit, closed.message.as_str()), (Exit::Ok, ""));
        let full = Failure::from(std::io::Error::other("disk full"));
        assert_eq!(full.exit, Exit::Failed);
    }
}
