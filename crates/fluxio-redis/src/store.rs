//! [`RedisStore`]: the connection, the commands, and the trait implementation.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use fluxio_core::store::{Checkpoint, CheckpointStore, Lease};
use fluxio_core::{Error, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisResult};

use crate::config::{RedisStoreBuilder, px};
use crate::error::RedisStoreError;
use crate::redact::Redacted;
use crate::scripts;

/// A [`CheckpointStore`] in Redis: checkpoints, leases and fencing shared by
/// every process that connects to the same server with the same key prefix.
///
/// Cheap to clone: clones share one auto-reconnecting, multiplexed
/// connection (redis-rs's `ConnectionManager`), which carries any number of
/// concurrent calls. Its `Debug` shows the URL with the password replaced
/// by `***`.
///
/// Every method is one round trip: one command, or one Lua script run with
/// `EVALSHA` (the scripts are loaded when connecting; a server that lost them
/// gets them again, once, through redis-rs's `Script`). See the
/// [crate documentation](crate) for the key layout and the guarantees.
///
/// # Errors
/// Every method fails with [`Error::Store`] (backend `"redis"`, source a
/// [`RedisStoreError`] keeping the redis-rs error) when the server reports an
/// error, the connection fails, or no reply comes within the command
/// timeout; besides the errors the [`CheckpointStore`] method documents.
///
/// # Cancel safety
/// Each method sends a single command or script, which the server applies
/// atomically: dropping the future (or a timeout) leaves the data as it was
/// before or after the operation, never half-way. Whether a dropped or
/// timed-out write was applied is unknown until the next read. A dropped
/// `acquire_lease` may leave a lease nobody holds: it expires after its
/// time-to-live.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    url: Redacted,
    key_prefix: String,
    ttl: Duration,
    ttl_ms: u64,
    command_timeout: Duration,
    client: Client,
    manager_config: ConnectionManagerConfig,
    conn: RwLock<Conn>,
}

/// The current connection, and how many times it was replaced.
struct Conn {
    generation: u64,
    manager: ConnectionManager,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.inner.url.url)
            .field("key_prefix", &self.inner.key_prefix)
            .field("ttl", &self.inner.ttl)
            .field("command_timeout", &self.inner.command_timeout)
            .finish()
    }
}

/// The operation names in errors.
mod op {
    pub(super) const CONNECT: &str = "connect";
    pub(super) const SAVE: &str = "save";
    pub(super) const LOAD: &str = "load";
    pub(super) const DELETE: &str = "delete";
    pub(super) const EXISTS: &str = "exists";
    pub(super) const ACQUIRE: &str = "acquire_lease";
    pub(super) const RENEW: &str = "renew_lease";
    pub(super) const RELEASE: &str = "release_lease";
    pub(super) const SAVE_FENCED: &str = "save_fenced";
    pub(super) const DELETE_FENCED: &str = "delete_fenced";
}

impl RedisStore {
    /// Connects to `url` with the default settings: checkpoints kept one day
    /// after their last save, keys under `fluxio:checkpoint`, a 10 s command
    /// timeout.
    ///
    /// `url` is `redis://[user:password@]host[:port][/db]`, or `rediss://...`
    /// for TLS (verified against Mozilla's root certificates; see
    /// [`RedisStoreBuilder::tls_root_certificates`] for a private CA).
    ///
    /// # Errors
    /// As [`RedisStoreBuilder::connect`].
    pub async fn connect(url: impl Into<String>) -> Result<RedisStore> {
        Self::builder(url).connect().await
    }

    /// Settings for a store at `url`, to change before
    /// [`connect`](RedisStoreBuilder::connect).
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(url)
    }

    pub(crate) async fn connect_with(
        config: RedisStoreBuilder,
        url: Redacted,
        ttl_ms: u64,
    ) -> Result<RedisStore, RedisStoreError> {
        let timeout = config.command_timeout;
        let failed = |e| RedisStoreError::redis(op::CONNECT, None, &url, e);
        if is_tls(&config.url) {
            install_crypto_provider();
        }
        let client = match config.tls_root_certificates {
            Some(pem) => Client::build_with_tls(
                config.url.as_str(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                },
            ),
            None => Client::open(config.url.as_str()),
        }
        .map_err(failed)?;
        // Each attempt is bounded by the timeout; few, quick retries, so a
        // server that is down is reported at once (with its real error) rather
        // than after minutes of backoff. A later call retries again.
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(1));
        let connecting = async {
            let mut manager =
                ConnectionManager::new_with_config(client.clone(), manager_config.clone()).await?;
            let mut load = redis::pipe();
            for src in scripts::ALL {
                load.cmd("SCRIPT").arg("LOAD").arg(src);
            }
            load.query_async::<()>(&mut manager).await?;
            Ok::<_, redis::RedisError>(manager)
        };
        let manager = match tokio::time::timeout(timeout, connecting).await {
            Ok(manager) => manager.map_err(failed)?,
            Err(_) => return Err(RedisStoreError::timeout(op::CONNECT, None, &url, timeout)),
        };
        tracing::debug!(url = %url.url, key_prefix = %config.key_prefix, "connected to redis");
        Ok(RedisStore {
            inner: Arc::new(Inner {
                url,
                key_prefix: config.key_prefix,
                ttl: config.ttl,
                ttl_ms,
                command_timeout: timeout,
                client,
                manager_config,
                conn: RwLock::new(Conn {
                    generation: 0,
                    manager,
                }),
            }),
        })
    }

    /// The server's URL, with the password replaced by `***`.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.inner.url.url
    }

    /// The prefix of every key.
    #[must_use]
    pub fn key_prefix(&self) -> &str {
        &self.inner.key_prefix
    }

    /// How long a checkpoint is kept after its last save.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// How long one call may take.
    #[must_use]
    pub fn command_timeout(&self) -> Duration {
        self.inner.command_timeout
    }

    /// The key holding the checkpoint of `run_id`: `{prefix}:{run_id}`. Its
    /// value is exactly [`Checkpoint::to_bytes`].
    #[must_use]
    pub fn checkpoint_key(&self, run_id: &str) -> String {
        format!("{}:{run_id}", self.inner.key_prefix)
    }

    /// The key holding the fencing token of the lease on `run_id`, while
    /// leased: `{prefix}.lease:{run_id}`.
    #[must_use]
    pub fn lease_key(&self, run_id: &str) -> String {
        format!("{}.lease:{run_id}", self.inner.key_prefix)
    }

    /// The counter the fencing tokens of `run_id` are drawn from:
    /// `{prefix}.epoch:{run_id}`.
    #[must_use]
    pub fn epoch_key(&self, run_id: &str) -> String {
        format!("{}.epoch:{run_id}", self.inner.key_prefix)
    }

    /// The current connection and its generation.
    fn connection(&self) -> (u64, ConnectionManager) {
        let conn = self
            .inner
            .conn
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        (conn.generation, conn.manager.clone())
    }

    /// After a timeout: replaces the connection of `generation` (unless
    /// another call already did) by a new one, made on the next call. The old
    /// one may be dead without knowing it (a half-open TCP connection), and
    /// redis-rs only replaces a connection that reported an error.
    fn replace_connection(&self, generation: u64) {
        let mut conn = self
            .inner
            .conn
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if conn.generation != generation {
            return;
        }
        match ConnectionManager::new_lazy_with_config(
            self.inner.client.clone(),
            self.inner.manager_config.clone(),
        ) {
            Ok(manager) => {
                conn.manager = manager;
                conn.generation += 1;
                tracing::warn!(
                    url = %self.inner.url.url,
                    timeout = ?self.inner.command_timeout,
                    "redis did not reply in time; reconnecting"
                );
            }
            Err(e) => {
                tracing::warn!(
                    url = %self.inner.url.url,
                    error = %self.inner.url.scrub(&e.to_string()),
                    "cannot reconnect to redis"
                )
            }
        }
    }

    /// Runs `call` (made on the connection of `generation`) under the command
    /// timeout, mapping its errors.
    async fn exec<T: Send>(
        &self,
        operation: &'static str,
        key: &str,
        generation: u64,
        call: impl Future<Output = RedisResult<T>> + Send,
    ) -> Result<T, RedisStoreError> {
        let timeout = self.inner.command_timeout;
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if e.is_timeout() {
                    self.replace_connection(generation);
                }
                Err(RedisStoreError::redis(
                    operation,
                    Some(key.to_owned()),
                    &self.inner.url,
                    e,
                ))
            }
            Err(_) => {
                self.replace_connection(generation);
                Err(RedisStoreError::timeout(
                    operation,
                    Some(key.to_owned()),
                    &self.inner.url,
                    timeout,
                ))
            }
        }
    }

    /// Runs one command.
    async fn query<T: redis::FromRedisValue + Send>(
        &self,
        operation: &'static str,
        key: &str,
        cmd: redis::Cmd,
    ) -> Result<T, RedisStoreError> {
        let (generation, mut conn) = self.connection();
        let call = async move { cmd.query_async(&mut conn).await };
        self.exec(operation, key, generation, call).await
    }

    /// Runs one script.
    async fn invoke<T: redis::FromRedisValue + Send>(
        &self,
        operation: &'static str,
        key: &str,
        script: redis::ScriptInvocation<'static>,
    ) -> Result<T, RedisStoreError> {
        let (generation, mut conn) = self.connection();
        let call = async move { script.invoke_async(&mut conn).await };
        self.exec(operation, key, generation, call).await
    }

    /// The epoch's time-to-live: it outlives the checkpoint and every lease
    /// drawn from it, so tokens keep growing while either may still be around.
    fn epoch_px(&self, lease_ms: u64) -> u64 {
        self.inner.ttl_ms.max(lease_ms)
    }
}

fn lease_lost(lease: &Lease) -> Error {
    Error::LeaseLost {
        run_id: lease.run_id().to_owned(),
        token: lease.token(),
    }
}

fn is_tls(url: &str) -> bool {
    url.get(..9)
        .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
}

/// redis-rs builds rustls without a crypto provider; install ring's as the
/// process default, unless the application installed one.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one meanwhile, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[async_trait::async_trait]
impl CheckpointStore for RedisStore {
    /// One `SET {prefix}:{run_id} <bytes> PX <ttl>`.
    async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
        let bytes = checkpoint.to_bytes()?;
        let key = self.checkpoint_key(&checkpoint.run_id);
        let mut cmd = redis::cmd("SET");
        cmd.arg(&key).arg(bytes).arg("PX").arg(self.inner.ttl_ms);
        Ok(self.query::<()>(op::SAVE, &key, cmd).await?)
    }

    /// One `GET`; the bytes are decoded with [`Checkpoint::from_bytes`], so
    /// undecodable bytes are [`Error::CorruptCheckpoint`] and stay in place.
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let key = self.checkpoint_key(run_id);
        let mut cmd = redis::cmd("GET");
        cmd.arg(&key);
        let bytes: Option<Vec<u8>> = self.query(op::LOAD, &key, cmd).await?;
        bytes
            .map(|b| Checkpoint::from_bytes(run_id, &b))
            .transpose()
    }

    /// One `DEL`.
    async fn delete(&self, run_id: &str) -> Result<()> {
        let key = self.checkpoint_key(run_id);
        let mut cmd = redis::cmd("DEL");
        cmd.arg(&key);
        Ok(self.query::<()>(op::DELETE, &key, cmd).await?)
    }

    /// One `EXISTS`.
    async fn exists(&self, run_id: &str) -> Result<bool> {
        let key = self.checkpoint_key(run_id);
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(&key);
        let n: u64 = self.query(op::EXISTS, &key, cmd).await?;
        Ok(n > 0)
    }

    /// One script: when `{prefix}.lease:{run_id}` exists, `RunIdInUse`;
    /// otherwise `INCR {prefix}.epoch:{run_id}` (refreshing its expiry) and
    /// `SET` the lease to the new token with `PX ttl`.
    async fn acquire_lease(&self, run_id: &str, ttl: Duration) -> Result<Lease> {
        let (lease_key, lease_ms) = (self.lease_key(run_id), px(ttl));
        let mut script = scripts::ACQUIRE_SCRIPT.prepare_invoke();
        script
            .key(&lease_key)
            .key(self.epoch_key(run_id))
            .arg(lease_ms)
            .arg(self.epoch_px(lease_ms));
        let token: u64 = self.invoke(op::ACQUIRE, &lease_key, script).await?;
        if token == 0 {
            return Err(Error::RunIdInUse {
                run_id: run_id.to_owned(),
            });
        }
        Ok(Lease::new(run_id, token))
    }

    /// One script: `PEXPIRE` the lease if it still holds this token.
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        let (lease_key, lease_ms) = (self.lease_key(lease.run_id()), px(ttl));
        let mut script = scripts::RENEW_SCRIPT.prepare_invoke();
        script
            .key(&lease_key)
            .key(self.epoch_key(lease.run_id()))
            .arg(lease.token())
            .arg(lease_ms)
            .arg(self.epoch_px(lease_ms));
        let renewed: u8 = self.invoke(op::RENEW, &lease_key, script).await?;
        if renewed == 1 {
            Ok(())
        } else {
            Err(lease_lost(lease))
        }
    }

    /// One script: `DEL` the lease if it still holds this token.
    async fn release_lease(&self, lease: Lease) -> Result<()> {
        let lease_key = self.lease_key(lease.run_id());
        let mut script = scripts::RELEASE_SCRIPT.prepare_invoke();
        script.key(&lease_key).arg(lease.token());
        Ok(self.invoke::<()>(op::RELEASE, &lease_key, script).await?)
    }

    /// One script: if the lease holds this token, the `SET` of
    /// [`save`](CheckpointStore::save); otherwise `LeaseLost` and nothing
    /// written.
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        if lease.run_id() != checkpoint.run_id {
            return Err(lease_lost(lease));
        }
        let bytes = checkpoint.to_bytes()?;
        let key = self.checkpoint_key(&checkpoint.run_id);
        let mut script = scripts::SAVE_FENCED_SCRIPT.prepare_invoke();
        script
            .key(self.lease_key(lease.run_id()))
            .key(&key)
            .arg(lease.token())
            .arg(bytes)
            .arg(self.inner.ttl_ms);
        let saved: u8 = self.invoke(op::SAVE_FENCED, &key, script).await?;
        if saved == 1 {
            Ok(())
        } else {
            Err(lease_lost(lease))
        }
    }

    /// One script: if the lease holds this token, the `DEL` of
    /// [`delete`](CheckpointStore::delete); otherwise `LeaseLost`.
    async fn delete_fenced(&self, run_id: &str, lease: &Lease) -> Result<()> {
        if lease.run_id() != run_id {
            return Err(lease_lost(lease));
        }
        let key = self.checkpoint_key(run_id);
        let mut script = scripts::DELETE_FENCED_SCRIPT.prepare_invoke();
        script
            .key(self.lease_key(run_id))
            .key(&key)
            .arg(lease.token());
        let deleted: u8 = self.invoke(op::DELETE_FENCED, &key, script).await?;
        if deleted == 1 {
            Ok(())
        } else {
            Err(lease_lost(lease))
        }
    }
}
