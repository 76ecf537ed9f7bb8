//! Settings of a [`RedisStore`] and their validation.

use std::fmt;
use std::time::Duration;

use fluxio_core::Result;

use crate::RedisStore;
use crate::error::RedisStoreError;
use fluxio_core::store::RedactedUrl;

/// How long a completed run's checkpoint is kept after it completed, unless
/// set: one day. Runs that did not complete (running, failed, abandoned,
/// cancelled) never expire: they are kept until deleted.
pub const DEFAULT_COMPLETED_RETENTION: Duration = Duration::from_secs(86_400);

/// How long the fencing epoch of a run whose checkpoint is gone, or was
/// never written, is kept after its last use: one day, or the completed
/// retention if longer.
pub(crate) const EPOCH_GRACE_MS: u64 = 86_400_000;
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
///     .completed_retention(Some(Duration::from_secs(7 * 86_400)))
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
    pub(crate) completed_retention: Option<Duration>,
    pub(crate) keep_completed: Option<usize>,
    pub(crate) key_prefix: String,
    pub(crate) command_timeout: Duration,
    pub(crate) tls_root_certificates: Option<Vec<u8>>,
    pub(crate) wait_for_replicas: Option<(u32, Duration)>,
    /// The seed nodes of a Redis Cluster; `None`: one server at `url`.
    pub(crate) cluster_nodes: Option<Vec<String>>,
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &RedactedUrl::new(&self.url).url)
            .field("completed_retention", &self.completed_retention)
            .field("keep_completed", &self.keep_completed)
            .field("key_prefix", &self.key_prefix)
            .field("command_timeout", &self.command_timeout)
            .field(
                "cluster_nodes",
                &self.cluster_nodes.as_ref().map(|nodes| {
                    nodes
                        .iter()
                        .map(|n| RedactedUrl::new(n).url)
                        .collect::<Vec<_>>()
                }),
            )
            .field(
                "tls_root_certificates",
                &self.tls_root_certificates.is_some(),
            )
            .field("wait_for_replicas", &self.wait_for_replicas)
            .finish()
    }
}

impl RedisStoreBuilder {
    pub(crate) fn new(url: impl Into<String>) -> Self {
        RedisStoreBuilder {
            url: url.into(),
            completed_retention: Some(DEFAULT_COMPLETED_RETENTION),
            keep_completed: None,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            tls_root_certificates: None,
            wait_for_replicas: None,
            cluster_nodes: None,
        }
    }

    pub(crate) fn new_cluster(nodes: Vec<String>) -> Self {
        let mut builder = Self::new(nodes.first().cloned().unwrap_or_default());
        builder.cluster_nodes = Some(nodes);
        builder
    }

    /// How long a completed run's checkpoint is kept after it completed
    /// (default [`DEFAULT_COMPLETED_RETENTION`], one day): the completed
    /// checkpoint is written with that expiry, and Redis deletes it then.
    /// `None` keeps completed runs until they are deleted. Every other run
    /// (running, failed, abandoned by a dead worker, cancelled) is kept
    /// until deleted, whatever this says, so that it can still be resumed
    /// or inspected. Millisecond precision; at least 1 ms.
    pub fn completed_retention(mut self, retention: Option<Duration>) -> Self {
        self.completed_retention = retention;
        self
    }

    /// Keep at most the `n` newest completed runs of each pipeline
    /// (contract rule 20's keep-the-last-N retention; default `None`: keep
    /// every completed run until its
    /// [`completed_retention`](Self::completed_retention) is up). When a
    /// run completes (a `save` or `save_fenced` of a completed checkpoint),
    /// the oldest completed runs of the same pipeline beyond the newest `n`
    /// are deleted, each whole, by the script that writes the completion:
    /// atomically with it. The pipeline of a run is the part of its key
    /// before the first `/` (empty for a bare run id). Running, failed and
    /// cancelled runs are never touched, and neither is a run that has been
    /// written again (a fresh run under the same key) since it completed.
    /// `Some(0)` deletes each run as it completes. As
    /// [`InMemoryStore::keep_completed`](fluxio_core::store::InMemoryStore::keep_completed).
    ///
    /// The completed runs are indexed per pipeline in a sorted set,
    /// `{prefix}.completed:{pipeline}` (see the [crate docs](crate)). Stores
    /// that share a key prefix should share this setting and
    /// `completed_retention`: a store without it does not index the runs
    /// it completes, so they are not counted (kept, never trimmed).
    pub fn keep_completed(mut self, n: Option<usize>) -> Self {
        self.keep_completed = n;
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

    /// After every checkpoint write, wait until at least `replicas` replicas
    /// acknowledge it, for at most `timeout` (default: no waiting). The write
    /// is followed by `WAIT replicas timeout` in the same round trip (a
    /// pipeline of the script and `WAIT`), and when fewer replicas
    /// acknowledged in time, the call fails with
    /// [`Error::Store`](fluxio_core::Error::Store) whose
    /// [`RedisStoreError`] names the run, the operation and both numbers
    /// ([`replicas_acknowledged`](RedisStoreError::replicas_acknowledged)).
    /// On a Redis Cluster ([`RedisStore::cluster_builder`](crate::RedisStore::cluster_builder)),
    /// `WAIT` goes to the primary of the run's hash slot, the node that
    /// applied the write, and counts that primary's replicas.
    ///
    /// The checkpoint writes are those of `save`, `save_fenced`, `cancel`,
    /// `begin_run` (also when it only took the lease) and `finish_run`: the
    /// ones a resumed run reads. Leases (`acquire_lease`, `renew_lease`,
    /// `release_lease`) and deletes are not waited for, and neither is a
    /// write the store refused (a lost lease, a cancelled run: that error
    /// is returned).
    ///
    /// What it guarantees: a write that returned `Ok` was in the memory of
    /// at least `replicas` replicas when it returned. What it does not:
    /// `WAIT` does not make Redis strongly consistent. On a failed `WAIT`
    /// the write is *not* undone: the primary applied it, it may reach the
    /// replicas later, and a read sees it; the error says only that it is
    /// not known to be replicated (the pipeline's run then stops with that
    /// error, and resuming it reads whatever the store holds). After a
    /// failover, a write acknowledged by `replicas` replicas can still be
    /// lost: when the promoted replica is not one of those that
    /// acknowledged it (Sentinel and Cluster promote the most up-to-date
    /// replica they can reach, which is usually, not always, one of them),
    /// or when the replicas that had it restart without persistence before
    /// they are promoted. It narrows the window in which an acknowledged
    /// checkpoint is lost to a failover; it does not close it. (`WAITAOF`
    /// would add fsync on the replicas; it is not used.)
    ///
    /// `WAIT` blocks the connection it is sent on until it returns, and a
    /// store's calls share one connection: while a replica is missing,
    /// every call of the store may wait behind a write up to `timeout`.
    /// `replicas` at least 1; `timeout` at least 1 ms and shorter than the
    /// [`command_timeout`](Self::command_timeout).
    ///
    /// ```no_run
    /// # async fn f() -> fluxio_core::Result<()> {
    /// use std::time::Duration;
    /// use fluxio_redis::RedisStore;
    ///
    /// let store = RedisStore::builder("redis://redis.internal:6379")
    ///     .wait_for_replicas(1, Duration::from_millis(500))
    ///     .connect()
    ///     .await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_for_replicas = Some((replicas, timeout));
        self
    }

    /// Validates the settings, connects, and loads the store's Lua scripts
    /// into the server.
    ///
    /// # Errors
    /// [`Error::Store`](fluxio_core::Error::Store) (backend `"redis"`, source
    /// a [`RedisStoreError`]): an empty `key_prefix` (or, on a cluster, one
    /// with `{` or `}`, or no node), a zero `completed_retention` or
    /// `command_timeout`, a `wait_for_replicas` asking for no replica or
    /// with a timeout under 1 ms or not below the command timeout (the
    /// message names the setting), a URL redis-rs
    /// rejects, a server that cannot be reached or authenticated with, or no
    /// reply within the command timeout.
    pub async fn connect(self) -> Result<RedisStore> {
        let url = RedactedUrl::new(&self.url);
        let retention_ms = self.validate(&url)?;
        Ok(RedisStore::connect_with(self, url, retention_ms).await?)
    }

    /// The completed retention in milliseconds (0 for none), once every
    /// setting is valid.
    fn validate(&self, url: &RedactedUrl) -> Result<u64, RedisStoreError> {
        let invalid = |setting, reason: &str| RedisStoreError::setting(setting, reason, url);
        if self.key_prefix.is_empty() {
            return Err(invalid("key_prefix", "must not be empty"));
        }
        if let Some(nodes) = &self.cluster_nodes {
            if nodes.is_empty() {
                return Err(invalid("cluster_nodes", "must name at least one node"));
            }
            if self.key_prefix.contains(['{', '}']) {
                return Err(invalid(
                    "key_prefix",
                    "must not contain `{` or `}` on a cluster (the store's hash tags)",
                ));
            }
        }
        let retention_ms = match self.completed_retention {
            None => 0,
            Some(retention) => {
                let ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
                if ms == 0 {
                    return Err(invalid(
                        "completed_retention",
                        "must be at least 1 ms (`None` keeps completed runs)",
                    ));
                }
                if ms > MAX_TTL_MS {
                    return Err(invalid("completed_retention", "must be at most 2^48 ms"));
                }
                ms
            }
        };
        if self.command_timeout.is_zero() {
            return Err(invalid("command_timeout", "must be greater than zero"));
        }
        if let Some((replicas, timeout)) = self.wait_for_replicas {
            if replicas == 0 {
                return Err(invalid(
                    "wait_for_replicas",
                    "must ask for at least 1 replica",
                ));
            }
            if timeout.as_millis() == 0 {
                // `WAIT n 0` would wait forever
                return Err(invalid(
                    "wait_for_replicas",
                    "the timeout must be at least 1 ms",
                ));
            }
            if timeout >= self.command_timeout {
                return Err(invalid(
                    "wait_for_replicas",
                    "the timeout must be shorter than the command timeout",
                ));
            }
        }
        Ok(retention_ms)
    }
}

/// `d` in whole milliseconds for `PX`/`PEXPIRE`, at least 1 and at most
/// [`MAX_TTL_MS`].
pub(crate) fn px(d: Duration) -> u64 {
    u64::try_from(d.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, MAX_TTL_MS)
}
