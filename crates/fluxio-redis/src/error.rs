//! The source of every [`Error::Store`](fluxio_core::Error::Store) this crate returns,
//! and what kind of failure (a timeout, a connection failure) each is.

use std::fmt;
use std::time::Duration;

use fluxio_core::store::{RedactedUrl, StoreErrorKind};
use redis::{ErrorKind, RedisError};

/// The `backend` of this crate's [`Error::Store`](fluxio_core::Error::Store).
pub const BACKEND: &str = "redis";

/// The operation names in errors.
pub(crate) mod op {
    pub(crate) const CONNECT: &str = "connect";
    pub(crate) const SAVE: &str = "save";
    pub(crate) const LOAD: &str = "load";
    pub(crate) const HISTORY: &str = "history";
    pub(crate) const DELETE: &str = "delete";
    pub(crate) const EXISTS: &str = "exists";
    pub(crate) const ACQUIRE: &str = "acquire_lease";
    pub(crate) const RENEW: &str = "renew_lease";
    pub(crate) const RELEASE: &str = "release_lease";
    pub(crate) const SAVE_FENCED: &str = "save_fenced";
    pub(crate) const DELETE_FENCED: &str = "delete_fenced";
    pub(crate) const MARK: &str = "mark";
    pub(crate) const LIST: &str = "list_runs";
    pub(crate) const REINDEX: &str = "reindex";
    pub(crate) const BEGIN: &str = "begin_run";
    pub(crate) const FINISH: &str = "finish_run";
    pub(crate) const SEND_SIGNAL: &str = "send_signal";
    pub(crate) const TAKE_SIGNAL: &str = "take_signal";
    pub(crate) const SIGNALS: &str = "signals";
    pub(crate) const DUE_RUNS: &str = "due_runs";
    pub(crate) const CLAIM_DUE: &str = "claim_due";
    pub(crate) const SET_DUE: &str = "set_due";
    pub(crate) const CLOCK: &str = "clock_ms";
    pub(crate) const WATCH: &str = "watch";
}

/// Why a [`RedisStore`](crate::RedisStore) call failed.
///
/// Returned as the `source` of [`Error::Store`](fluxio_core::Error::Store)
/// with backend `"redis"`; downcast to it for details. Its `Display` names
/// the operation, the key and the URL with the password replaced by `***`,
/// and its source is the redis-rs error, when there is one. Neither ever
/// contains the URL's password.
///
/// ```
/// use fluxio_redis::RedisStoreError;
///
/// fn is_redis_timeout(err: &fluxio_core::Error) -> bool {
///     match err {
///         fluxio_core::Error::Store { source, .. } => source
///             .downcast_ref::<RedisStoreError>()
///             .is_some_and(|e| e.kind().is_timeout()),
///         _ => false,
///     }
/// }
/// # let _ = is_redis_timeout;
/// ```
#[derive(Debug)]
pub struct RedisStoreError {
    operation: &'static str,
    key: Option<String>,
    url: String,
    cause: Cause,
}

#[derive(Debug)]
enum Cause {
    Redis(redis::RedisError),
    Timeout(Duration),
    Setting {
        setting: &'static str,
        reason: String,
    },
    /// Fewer replicas than asked for acknowledged a write in time (`WAIT`).
    Replicas {
        run_id: String,
        wanted: u32,
        acked: u64,
        timeout: Duration,
    },
}

impl RedisStoreError {
    pub(crate) fn redis(
        operation: &'static str,
        key: Option<String>,
        url: &RedactedUrl,
        error: redis::RedisError,
    ) -> Self {
        // redis-rs never puts the password in its messages today; if a future
        // version did, keep the kind and drop the text.
        let error = if url.leaks(&format!("{error} {error:?}")) {
            redis::RedisError::from((
                error.kind(),
                "redis error (its message contained the password and was redacted)",
                url.scrub(&error.to_string()),
            ))
        } else {
            error
        };
        RedisStoreError {
            operation,
            key,
            url: url.url.clone(),
            cause: Cause::Redis(error),
        }
    }

    pub(crate) fn timeout(
        operation: &'static str,
        key: Option<String>,
        url: &RedactedUrl,
        timeout: Duration,
    ) -> Self {
        RedisStoreError {
            operation,
            key,
            url: url.url.clone(),
            cause: Cause::Timeout(timeout),
        }
    }

    pub(crate) fn setting(
        setting: &'static str,
        reason: impl Into<String>,
        url: &RedactedUrl,
    ) -> Self {
        RedisStoreError {
            operation: "configure",
            key: None,
            url: url.url.clone(),
            cause: Cause::Setting {
                setting,
                reason: reason.into(),
            },
        }
    }

    /// A write of the run `run_id` that the primary applied but fewer than
    /// `wanted` replicas acknowledged within `timeout` (`WAIT` answered
    /// `acked`).
    pub(crate) fn replicas(
        operation: &'static str,
        key: String,
        url: &RedactedUrl,
        run_id: &str,
        (wanted, timeout): (u32, Duration),
        acked: u64,
    ) -> Self {
        RedisStoreError {
            operation,
            key: Some(key),
            url: url.url.clone(),
            cause: Cause::Replicas {
                run_id: run_id.to_owned(),
                wanted,
                acked,
                timeout,
            },
        }
    }

    /// The store operation that failed: `"save"`, `"load"`, `"acquire_lease"`,
    /// `"connect"`, `"configure"`, ...
    #[must_use]
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// The Redis key the operation acted on, if any.
    #[must_use]
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The server's URL, with the password replaced by `***`.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether this is a timeout, a connection failure or another failure:
    /// the `kind` of the [`Error::Store`](fluxio_core::Error::Store) it
    /// arrives in.
    #[must_use]
    pub fn kind(&self) -> StoreErrorKind {
        match &self.cause {
            Cause::Timeout(_) => StoreErrorKind::Timeout,
            Cause::Redis(e) if e.is_timeout() => StoreErrorKind::Timeout,
            Cause::Redis(e) if is_connection_error(e) => StoreErrorKind::Connection,
            Cause::Redis(_) | Cause::Setting { .. } | Cause::Replicas { .. } => {
                StoreErrorKind::Other
            }
        }
    }

    /// For a write that too few replicas acknowledged (see
    /// [`RedisStoreBuilder::wait_for_replicas`](crate::RedisStoreBuilder::wait_for_replicas)):
    /// how many did, and how many were asked for.
    #[must_use]
    pub fn replicas_acknowledged(&self) -> Option<(u64, u32)> {
        match &self.cause {
            Cause::Replicas { acked, wanted, .. } => Some((*acked, *wanted)),
            _ => None,
        }
    }

    /// The setting that was rejected, for a configuration error.
    #[must_use]
    pub fn setting_name(&self) -> Option<&'static str> {
        match &self.cause {
            Cause::Setting { setting, .. } => Some(setting),
            _ => None,
        }
    }

    /// The redis-rs error, when the client or the server reported one.
    #[must_use]
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        match &self.cause {
            Cause::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for RedisStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Cause::Setting { setting, reason } = &self.cause {
            return write!(f, "invalid setting `{setting}` for {}: {reason}", self.url);
        }
        f.write_str(self.operation)?;
        if let Some(key) = &self.key {
            write!(f, " `{key}`")?;
        }
        write!(f, " on {}: ", self.url)?;
        match &self.cause {
            Cause::Redis(e) => write!(f, "{e}"),
            Cause::Timeout(t) => write!(f, "no reply within the command timeout ({t:?})"),
            Cause::Setting { .. } => Ok(()),
            Cause::Replicas {
                run_id,
                wanted,
                acked,
                timeout,
            } => write!(
                f,
                "the write of run `{run_id}` was acknowledged by {acked} of the {wanted} \
                 replicas asked for within {timeout:?} (`WAIT`); the primary applied it, \
                 and a failover now may lose it"
            ),
        }
    }
}

impl std::error::Error for RedisStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            Cause::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<RedisStoreError> for fluxio_core::Error {
    fn from(e: RedisStoreError) -> Self {
        fluxio_core::Error::store_with_kind(BACKEND, e.kind(), e)
    }
}

/// Whether `e` is a failure of the connection (dropped, reset, an I/O
/// error, a reply that cannot be parsed): the next call goes to a new
/// connection. Not an error reply of the server, and not a timeout (which
/// used up the call's time).
pub(crate) fn is_connection_error(e: &RedisError) -> bool {
    if e.is_timeout() || matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension) {
        return false;
    }
    e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error()
}

#[cfg(test)]
mod tests {
    use std::io;

    use redis::{ErrorKind, RedisError};

    use super::is_connection_error;

    #[test]
    fn connection_errors_are_told_from_replies_and_timeouts() {
        let io = |kind| RedisError::from(io::Error::from(kind));
        assert!(is_connection_error(&io(io::ErrorKind::BrokenPipe)));
        assert!(is_connection_error(&io(io::ErrorKind::ConnectionReset)));
        assert!(is_connection_error(&io(io::ErrorKind::UnexpectedEof)));
        assert!(!is_connection_error(&io(io::ErrorKind::TimedOut)));
        let reply = RedisError::from((
            ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "ERR",
        ));
        assert!(!is_connection_error(&reply));
        let noscript = RedisError::from((
            ErrorKind::Server(redis::ServerErrorKind::NoScript),
            "NOSCRIPT",
        ));
        assert!(!is_connection_error(&noscript));
        let parse = RedisError::from((ErrorKind::Parse, "bad reply"));
        assert!(is_connection_error(&parse));
    }
}
