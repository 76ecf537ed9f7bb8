//! Connecting to Redis, and one call on the connection: within the command
//! timeout, once more on a new connection after the first failed on a
//! dropped one, and a new connection after a timeout. Errors show the URL
//! only redacted.

use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use fluxio_core::store::{MAX_LEASE_TTL, RedactedUrl};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, ErrorKind, Pipeline, RedisFuture, RedisResult, ServerErrorKind, Value};
use tokio::time::Instant;

use crate::builder::RedisStoreBuilder;
use crate::error::{RedisStoreError, is_connection_error, op};
use crate::scripts;
use crate::store::{Inner, RedisStore};

/// The current connection, and how many times it was replaced.
pub(crate) struct Conn {
    pub(crate) generation: u64,
    pub(crate) handle: Handle,
}

/// What the store is connected to: one server, or a Redis Cluster.
pub(crate) enum Backend {
    /// One server: the client and settings a replacement connection is
    /// made with.
    Single {
        client: Box<Client>,
        config: Box<ConnectionManagerConfig>,
    },
    /// A Redis Cluster: its connection follows the cluster's slots
    /// (`MOVED`/`ASK`) and reconnects to each node by itself. `nodes`: a
    /// client of each node the store was given, for the wake-ups'
    /// subscription (`PUBLISH` reaches every node of a cluster).
    Cluster { nodes: Vec<Client> },
}

/// A connection the calls share: to one server (redis-rs's
/// `ConnectionManager`) or to a cluster (its `ClusterConnection`, which
/// routes each command by its first key, a script by its first `KEYS`).
#[derive(Clone)]
pub(crate) enum Handle {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Handle {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Handle::Single(c) => c.req_packed_command(cmd),
            Handle::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Handle::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Handle::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Handle::Single(c) => c.get_db(),
            Handle::Cluster(c) => c.get_db(),
        }
    }
}

/// Loads every script into the server (into every primary of a cluster:
/// redis-rs sends `SCRIPT LOAD` to all of them).
async fn load_scripts(handle: &mut Handle) -> RedisResult<()> {
    match handle {
        Handle::Single(_) => {
            let mut load = redis::pipe();
            for src in scripts::ALL {
                load.cmd("SCRIPT").arg("LOAD").arg(src);
            }
            load.query_async::<()>(handle).await
        }
        Handle::Cluster(_) => {
            for src in scripts::ALL {
                redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(src)
                    .query_async::<()>(handle)
                    .await?;
            }
            Ok(())
        }
    }
}

impl RedisStore {
    /// Connects with the settings of `config` (validated: `url` is its URL,
    /// redacted, and `retention_ms` its completed retention, 0 for none) and
    /// loads the Lua scripts.
    pub(crate) async fn connect_with(
        config: RedisStoreBuilder,
        url: RedactedUrl,
        retention_ms: u64,
    ) -> Result<RedisStore, RedisStoreError> {
        let timeout = config.command_timeout;
        let failed = |e| RedisStoreError::redis(op::CONNECT, None, &url, e);
        if is_tls(&config.url) {
            install_crypto_provider();
        }
        let (backend, connecting) = match &config.cluster_nodes {
            Some(nodes) => {
                let mut builder = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(2)
                    .min_retry_wait(100)
                    .max_retry_wait(1000);
                if let Some(pem) = config.tls_root_certificates.clone() {
                    builder = builder.certs(redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(pem),
                    });
                }
                let client = builder.build().map_err(failed)?;
                let clients = nodes
                    .iter()
                    .map(|node| open_client(node, config.tls_root_certificates.clone()))
                    .collect::<RedisResult<Vec<Client>>>()
                    .map_err(failed)?;
                let connecting: std::pin::Pin<
                    Box<dyn Future<Output = RedisResult<Handle>> + Send>,
                > = Box::pin(async move {
                    let mut handle = Handle::Cluster(client.get_async_connection().await?);
                    load_scripts(&mut handle).await?;
                    Ok(handle)
                });
                (Backend::Cluster { nodes: clients }, connecting)
            }
            None => {
                let client = open_client(&config.url, config.tls_root_certificates.clone())
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
                let (c, m) = (client.clone(), manager_config.clone());
                let connecting: std::pin::Pin<
                    Box<dyn Future<Output = RedisResult<Handle>> + Send>,
                > = Box::pin(async move {
                    let mut handle =
                        Handle::Single(ConnectionManager::new_with_config(c, m).await?);
                    load_scripts(&mut handle).await?;
                    Ok(handle)
                });
                (
                    Backend::Single {
                        client: Box::new(client),
                        config: Box::new(manager_config),
                    },
                    connecting,
                )
            }
        };
        let handle = match tokio::time::timeout(timeout, connecting).await {
            Ok(handle) => handle.map_err(failed)?,
            Err(_) => return Err(RedisStoreError::timeout(op::CONNECT, None, &url, timeout)),
        };
        tracing::debug!(url = %url.url, key_prefix = %config.key_prefix, "connected to redis");
        Ok(RedisStore {
            inner: Arc::new(Inner {
                url,
                key_prefix: config.key_prefix,
                completed_retention: config.completed_retention,
                keep_completed: config.keep_completed,
                retention_ms,
                command_timeout: timeout,
                wait_for_replicas: config.wait_for_replicas,
                backend,
                conn: RwLock::new(Conn {
                    generation: 0,
                    handle,
                }),
            }),
        })
    }

    /// The deadline of a call starting now: the command timeout from now
    /// (a timeout past the clock's range, like `Duration::MAX`, is a year).
    pub(crate) fn deadline(&self) -> Instant {
        let now = Instant::now();
        now.checked_add(self.inner.command_timeout)
            .or_else(|| now.checked_add(MAX_LEASE_TTL))
            .unwrap_or(now)
    }

    /// The current connection and its generation.
    fn connection(&self) -> (u64, Handle) {
        let conn = self
            .inner
            .conn
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        (conn.generation, conn.handle.clone())
    }

    /// After a timeout: replaces the connection of `generation` (unless
    /// another call already did) by a new one, made on the next call. The old
    /// one may be dead without knowing it (a half-open TCP connection), and
    /// redis-rs only replaces a connection that reported an error. A
    /// cluster's connection is kept: redis-rs reconnects to each node by
    /// itself, and refreshes the slots when a node stops answering.
    fn replace_connection(&self, generation: u64) {
        let Backend::Single { client, config } = &self.inner.backend else {
            return;
        };
        let mut conn = self
            .inner
            .conn
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if conn.generation != generation {
            return;
        }
        match ConnectionManager::new_lazy_with_config((**client).clone(), (**config).clone()) {
            Ok(manager) => {
                conn.handle = Handle::Single(manager);
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

    /// Runs `attempt` on the current connection until `deadline`, mapping its
    /// errors; once more (on the connection redis-rs reopens meanwhile) when
    /// the first attempt failed on the connection rather than on the server.
    ///
    /// Only for operations that may be sent twice: every method's command or
    /// script is idempotent, checks the lease's token, or (acquire,
    /// `begin_run`) carries a nonce that makes a repeat return the first
    /// attempt's lease, or (`finish_run`) leaves its result for a repeat.
    async fn exec<T, F, Fut>(
        &self,
        operation: &'static str,
        key: &str,
        deadline: Instant,
        mut attempt: F,
    ) -> Result<T, RedisStoreError>
    where
        T: Send,
        F: FnMut(Handle) -> Fut + Send,
        Fut: Future<Output = RedisResult<T>> + Send,
    {
        let mut retried = false;
        loop {
            let (generation, conn) = self.connection();
            let error = match tokio::time::timeout_at(deadline, attempt(conn)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
                Err(_) => {
                    self.replace_connection(generation);
                    return Err(RedisStoreError::timeout(
                        operation,
                        Some(key.to_owned()),
                        &self.inner.url,
                        self.inner.command_timeout,
                    ));
                }
            };
            if error.is_timeout() {
                self.replace_connection(generation);
            } else if !retried && is_connection_error(&error) {
                // redis-rs learns that a connection died from the call that
                // failed on it, and reconnects for the next one: that is this.
                retried = true;
                tracing::debug!(
                    url = %self.inner.url.url,
                    operation,
                    error = %self.inner.url.scrub(&error.to_string()),
                    "redis connection failed; sending the call again"
                );
                continue;
            }
            return Err(RedisStoreError::redis(
                operation,
                Some(key.to_owned()),
                &self.inner.url,
                error,
            ));
        }
    }

    /// Runs one command (see [`exec`](Self::exec)).
    pub(crate) async fn query<T: redis::FromRedisValue + Send>(
        &self,
        operation: &'static str,
        key: &str,
        deadline: Instant,
        cmd: &redis::Cmd,
    ) -> Result<T, RedisStoreError> {
        self.exec(operation, key, deadline, move |mut conn| async move {
            cmd.query_async(&mut conn).await
        })
        .await
    }

    /// Runs one script (see [`exec`](Self::exec)).
    pub(crate) async fn invoke<T: redis::FromRedisValue + Send>(
        &self,
        operation: &'static str,
        key: &str,
        deadline: Instant,
        script: &redis::ScriptInvocation<'static>,
    ) -> Result<T, RedisStoreError> {
        self.exec(operation, key, deadline, move |mut conn| async move {
            script.invoke_async(&mut conn).await
        })
        .await
    }

    /// Runs one script that writes a checkpoint of the run `run_id` (see
    /// [`exec`](Self::exec)); with
    /// [`wait_for_replicas`](RedisStoreBuilder::wait_for_replicas), as a
    /// pipeline of the script and `WAIT` (one round trip), and returns how
    /// many replicas acknowledged it, to check with
    /// [`replicated`](Self::replicated) once the script's reply says it
    /// wrote. A server that lost the script gets it (`SCRIPT LOAD`) and the
    /// pipeline again. On a cluster the pipeline is one round trip too:
    /// redis-rs routes a pipeline by its first command with a key (the
    /// script, by its first `KEYS`, to the primary of the run's slot) and
    /// `WAIT`, which has none, goes along with it, so it counts the
    /// replicas of the primary that applied the write.
    pub(crate) async fn invoke_write<T: redis::FromRedisValue + Send>(
        &self,
        operation: &'static str,
        key: &str,
        deadline: Instant,
        script: &redis::ScriptInvocation<'static>,
    ) -> Result<(T, Option<u64>), RedisStoreError> {
        let Some((replicas, timeout)) = self.inner.wait_for_replicas else {
            let reply = self.invoke(operation, key, deadline, script).await?;
            return Ok((reply, None));
        };
        let mut pipe = redis::pipe();
        pipe.invoke_script(script)
            .cmd("WAIT")
            .arg(replicas)
            .arg(crate::builder::px(timeout));
        let pipe = &pipe;
        let (reply, acked): (T, u64) = self
            .exec(operation, key, deadline, move |mut conn| async move {
                match pipe.query_async(&mut conn).await {
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        script.load_async(&mut conn).await?;
                        pipe.query_async(&mut conn).await
                    }
                    reply => reply,
                }
            })
            .await?;
        Ok((reply, Some(acked)))
    }

    /// `Ok` unless the write of run `run_id` at `key`, which `acked`
    /// replicas acknowledged (`None`: not waited for), needed more.
    pub(crate) fn replicated(
        &self,
        operation: &'static str,
        key: &str,
        run_id: &str,
        acked: Option<u64>,
    ) -> Result<(), RedisStoreError> {
        match (self.inner.wait_for_replicas, acked) {
            (Some(wait), Some(acked)) if acked < u64::from(wait.0) => {
                Err(RedisStoreError::replicas(
                    operation,
                    key.to_owned(),
                    &self.inner.url,
                    run_id,
                    wait,
                    acked,
                ))
            }
            _ => Ok(()),
        }
    }
}

/// A client of the server at `url`, trusting the CA `pem` when given.
fn open_client(url: &str, pem: Option<Vec<u8>>) -> RedisResult<Client> {
    match pem {
        Some(pem) => Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            },
        ),
        None => Client::open(url),
    }
}

fn is_tls(url: &str) -> bool {
    url.get(..9)
        .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
}

/// redis-rs builds rustls without a crypto provider; install ring's as the
/// process default, unless the application installed one. (rustls 0.23.48
/// deprecates ring's provider for lacking post-quantum key exchange; an
/// application that wants it installs aws-lc-rs's before connecting.)
#[allow(deprecated)]
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one meanwhile, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
