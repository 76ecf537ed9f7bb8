//! Settings of a [`RedisStore`] and their validation.

use std::fmt;
use std::time::Duration;

use fluxio_core::Result;

use crate::RedisStore;
use crate::error::RedisStoreError;
use fluxio_core::store::RedactedUrl;

/// How long a checkpoint is kept after its last save, unless set: one day.
pub const DEFAULT_TTL: Duration = Duration::from_secs(86_400);
/// The key prefix unless set: checkpoints live at `fluxio:checkpoint:{run_id}`.
pub const DEFAULT_KEY_PREFIX: &str = "fluxio:checkpoint";
/// How long one store call may take, unless set: ten seconds.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest time-to-live accepted (about 8,900 years), well inside what
/// Redis accepts for `PX`.
const MAX_TTL_MS: u64 = 1 << 48;

/// Settings for [`RedisStore`]: made by [`RedisStore::builder`], used by
/// [`connect`](Self::connect).
///
/// Its `Debug` shows the URL with the password replaced by `***`; it has no
/// `Display`.
///
/// ```no_run
/// # async fn f() -> fluxio_core::Result<()> {
/// use std::time::Duration;
/// use fluxio_redis::RedisStore;
///
/// let store = RedisStore::builder("rediss://app:secret@redis.internal:6380/0")
///     .ttl(Duration::from_secs(7 * 86_400))
///     .key_prefix("billing:checkpoint")
///     .command_timeout(Duration::from_secs(2))
///     .connect()
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `.connect().await`"]
pub struct RedisStoreBuilder {
    pub(crate) url: String,
    pub(crate) ttl: Duration,
    pub(crate) key_prefix: String,
    pub(crate) command_timeout: Duration,
    pub(crate) tls_root_certificates: Option<Vec<u8>>,
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &RedactedUrl::new(&self.url).url)
            .field("ttl", &self.ttl)
            .field("key_prefix", &self.key_prefix)
            .field("command_timeout", &self.command_timeout)
            .field(
                "tls_root_certificates",
                &self.tls_root_certificates.is_some(),
            )
            .finish()
    }
}

impl RedisStoreBuilder {
    pub(crate) fn new(url: impl Into<String>) -> Self {
        RedisStoreBuilder {
            url: url.into(),
            ttl: DEFAULT_TTL,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            tls_root_certificates: None,
        }
    }

    /// How long a checkpoint is kept after its last save (default
    /// [`DEFAULT_TTL`], one day): every save sets the key's expiry to `ttl`
    /// from now, so a run that stopped is forgotten `ttl` after its last
    /// checkpoint. Millisecond precision; at least 1 ms.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The prefix of every key (default [`DEFAULT_KEY_PREFIX`]): the
    /// checkpoint of `run_id` is `{prefix}:{run_id}`. Stores with different
    /// prefixes never see each other's checkpoints or leases, unless one
    /// prefix is another followed by `:` (`app` and `app:eu`: run `eu:1` of
    /// the first is run `1` of the second) or `.` (`app` and `app.lease`).
    /// Not empty.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// How long one store call may take, connecting included (default
    /// [`DEFAULT_COMMAND_TIMEOUT`], ten seconds), and its one repeat after a
    /// dropped connection included. A call that gets no reply in time fails
    /// with [`Error::Store`](fluxio_core::Error::Store) and the store opens a
    /// new connection for the next call. Not zero.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// For `rediss://` URLs: trust the certificate authorities in `pem` (PEM,
    /// one or more certificates) instead of the built-in public roots
    /// (Mozilla's, from `webpki-roots`). For servers with a private CA.
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificates = Some(pem.into());
        self
    }

    /// Validates the settings, connects, and loads the store's Lua scripts
    /// into the server.
    ///
    /// # Errors
    /// [`Error::Store`](fluxio_core::Error::Store) (backend `"redis"`, source
    /// a [`RedisStoreError`]): an empty `key_prefix`, a zero `ttl` or
    /// `command_timeout` (the message names the setting), a URL redis-rs
    /// rejects, a server that cannot be reached or authenticated with, or no
    /// reply within the command timeout.
    pub async fn connect(self) -> Result<RedisStore> {
        let url = RedactedUrl::new(&self.url);
        let ttl_ms = self.validate(&url)?;
        Ok(RedisStore::connect_with(self, url, ttl_ms).await?)
    }

    /// The checkpoint time-to-live in milliseconds, once every setting is valid.
    fn validate(&self, url: &RedactedUrl) -> Result<u64, RedisStoreError> {
        let invalid = |setting, reason: &str| RedisStoreError::setting(setting, reason, url);
        if self.key_prefix.is_empty() {
            return Err(invalid("key_prefix", "must not be empty"));
        }
        if self.ttl.is_zero() {
            return Err(invalid("ttl", "must be greater than zero"));
        }
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        if ttl_ms == 0 {
            return Err(invalid("ttl", "must be at least 1 ms"));
        }
        if ttl_ms > MAX_TTL_MS {
            return Err(invalid("ttl", "must be at most 2^48 ms"));
        }
        if self.command_timeout.is_zero() {
            return Err(invalid("command_timeout", "must be greater than zero"));
        }
        Ok(ttl_ms)
    }
}

/// `d` in whole milliseconds for `PX`/`PEXPIRE`, at least 1 and at most
/// [`MAX_TTL_MS`].
pub(crate) fn px(d: Duration) -> u64 {
    u64::try_from(d.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, MAX_TTL_MS)
}
