//! [`RedisStore`]: its keys, and the trait implementation, a command or
//! Lua script per method.

use std::borrow::Cow;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fluxio_core::store::{
    Begin, Begun, Checkpoint, CheckpointStore, Claimed, Decision, Delivery, DueFilter, DueRun,
    Lease, Mark, RedactedUrl, RunEvents, RunFilter, RunPage, RunStatus, Signal, Take,
    check_lease_ttl, marked_checkpoint, missing_predecessor,
};
use fluxio_core::{Error, Result};
use redis::ScriptInvocation;

use crate::builder::{RedisStoreBuilder, px};
use crate::connection::{Backend, Conn};
use crate::error::op;
use crate::index::summary_args;
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
/// gets them again, once, through redis-rs's `Script`); `load` and `history` read the
/// journal's meta before its entries, `cancel` loads the checkpoint
/// before its script (and again if the script finds it changed),
/// `due_runs` on a cluster sends a script per bucket at once, and `watch`
/// subscribes on a connection of its own. A call that fails because the
/// connection dropped (a server restart, a reset) is sent once more on a new
/// connection, within the same command timeout. See the
/// [crate documentation](crate) for the key layout and the guarantees.
///
/// # Errors
/// Every method fails with [`Error::Store`] (backend `"redis"`, source a
/// [`RedisStoreError`](crate::RedisStoreError) keeping the redis-rs error)
/// when the server reports an error, the connection fails, or no reply comes
/// within the command timeout; besides the errors the [`CheckpointStore`]
/// method documents.
///
/// # Cancel safety
/// Each method writes with a single command or script (at most twice, the
/// second time only after the connection dropped), which the server applies
/// atomically: dropping the future (or a timeout) leaves the data as it was
/// before or after the operation, never half-way. Whether a dropped or
/// timed-out write was applied is unknown until the next read. A dropped
/// `acquire_lease` or `begin_run` may leave a lease nobody holds, and its
/// nonce: both expire after the lease's time-to-live.
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) url: RedactedUrl,
    pub(crate) key_prefix: String,
    pub(crate) completed_retention: Option<Duration>,
    /// How many completed runs of each pipeline to keep; `None`: all.
    pub(crate) keep_completed: Option<usize>,
    /// `completed_retention` in milliseconds; 0 for none.
    pub(crate) retention_ms: u64,
    pub(crate) command_timeout: Duration,
    /// `WAIT` after every checkpoint write: how many replicas, how long.
    pub(crate) wait_for_replicas: Option<(u32, Duration)>,
    pub(crate) backend: Backend,
    pub(crate) conn: RwLock<Conn>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.inner.url.url)
            .field("key_prefix", &self.inner.key_prefix)
            .field("completed_retention", &self.inner.completed_retention)
            .field("keep_completed", &self.inner.keep_completed)
            .field("command_timeout", &self.inner.command_timeout)
            .field("cluster", &self.is_cluster())
            .field("wait_for_replicas", &self.inner.wait_for_replicas)
            .finish()
    }
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

    /// Settings for a store on a Redis Cluster reached through `nodes`
    /// (`redis://host:port` URLs of some of its nodes, `rediss://` for TLS;
    /// every node with the same user and password), to change before
    /// [`connect`](RedisStoreBuilder::connect). The store keeps the
    /// cluster's key layout, where every key of a run and the index entries
    /// its writes touch share one hash slot (see the
    /// [crate documentation](crate#redis-cluster)); its [`url`](Self::url)
    /// is the first node's.
    ///
    /// ```no_run
    /// # async fn f() -> fluxio_core::Result<()> {
    /// use fluxio_redis::RedisStore;
    ///
    /// let store = RedisStore::cluster_builder(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    ///     .key_prefix("billing")
    ///     .connect()
    ///     .await?;
    /// assert!(store.is_cluster());
    /// # Ok(()) }
    /// ```
    pub fn cluster_builder<I, S>(nodes: I) -> RedisStoreBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisStoreBuilder::new_cluster(nodes.into_iter().map(Into::into).collect())
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

    /// How long a completed run's checkpoint is kept after it completed;
    /// `None` keeps it until deleted. Other runs are always kept until
    /// deleted (see [`RedisStoreBuilder::completed_retention`]).
    #[must_use]
    pub fn completed_retention(&self) -> Option<Duration> {
        self.inner.completed_retention
    }

    /// How many completed runs of each pipeline are kept (`None`: all);
    /// see [`RedisStoreBuilder::keep_completed`].
    #[must_use]
    pub fn keep_completed(&self) -> Option<usize> {
        self.inner.keep_completed
    }

    /// How long one call may take.
    #[must_use]
    pub fn command_timeout(&self) -> Duration {
        self.inner.command_timeout
    }

    /// The key holding the journal of `run_id`: `{prefix}:{run_id}`, a hash
    /// with a field per checkpoint number holding its
    /// [`Checkpoint::entry_bytes`], and meta fields (see the
    /// [crate documentation](crate)); a string there is a run of an earlier
    /// build, exactly its [`Checkpoint::to_bytes`].
    #[must_use]
    pub fn checkpoint_key(&self, run_id: &str) -> String {
        format!("{}:{run_id}", self.run_prefix(run_id))
    }

    /// The sorted set of the completed runs of `pipeline` (the part of a
    /// run's key before its first `/`, empty for a bare run id):
    /// `{prefix}.completed:{pipeline}`, a member per completed run (its
    /// key), scored by when it completed (the server's clock, in ms). Kept
    /// by a store built with
    /// [`keep_completed`](RedisStoreBuilder::keep_completed), which deletes
    /// the runs beyond the newest `n` from it.
    #[must_use]
    pub fn completed_key(&self, pipeline: &str) -> String {
        format!("{}.completed:{pipeline}", self.pipeline_prefix(pipeline))
    }

    /// [`completed_key`](Self::completed_key) of the pipeline of the run
    /// key `run_key`.
    fn completed_key_of(&self, run_key: &str) -> String {
        self.completed_key(pipeline_of(run_key))
    }

    /// Whether the store is connected to a Redis Cluster (made by
    /// [`RedisStore::cluster_builder`]), and so keeps the cluster's key
    /// layout (see the [crate documentation](crate#redis-cluster)).
    #[must_use]
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.backend, Backend::Cluster { .. })
    }

    /// The prefix of the keys of the runs of `pipeline`: the key prefix
    /// `P` on one server; on a cluster, `{P#b}` where `b` is the
    /// pipeline's bucket ([`cluster_bucket`]), a hash tag, so that every key
    /// of the pipeline's runs, and the index keys their scripts touch, are in
    /// one hash slot.
    pub(crate) fn pipeline_prefix(&self, pipeline: &str) -> Cow<'_, str> {
        if self.is_cluster() {
            Cow::Owned(self.bucket_prefix(cluster_bucket(pipeline)))
        } else {
            Cow::Borrowed(&self.inner.key_prefix)
        }
    }

    /// The prefix of the keys of bucket `bucket` on a cluster: `{P#b}`.
    pub(crate) fn bucket_prefix(&self, bucket: u32) -> String {
        format!("{{{}#{bucket}}}", self.inner.key_prefix)
    }

    /// [`pipeline_prefix`](Self::pipeline_prefix) of the pipeline of the
    /// run key `run_key`.
    pub(crate) fn run_prefix(&self, run_key: &str) -> Cow<'_, str> {
        self.pipeline_prefix(pipeline_of(run_key))
    }

    /// The number of completed runs per pipeline to keep, as the save
    /// scripts take it: `none` for all.
    fn keep_arg(&self) -> String {
        self.inner
            .keep_completed
            .map_or_else(|| "none".to_owned(), |n| n.to_string())
    }

    /// The key holding the fencing token of the lease on `run_id`, while
    /// leased: `{prefix}.lease:{run_id}`.
    #[must_use]
    pub fn lease_key(&self, run_id: &str) -> String {
        format!("{}.lease:{run_id}", self.run_prefix(run_id))
    }

    /// The key that marks `run_id` cancelled (contract rule 14), while its
    /// checkpoint is: `{prefix}.cancelled:{run_id}`. Written with the
    /// checkpoint, with the same expiry, by the scripts that write it, and
    /// checked by fenced saves.
    #[must_use]
    pub fn cancelled_key(&self, run_id: &str) -> String {
        format!("{}.cancelled:{run_id}", self.run_prefix(run_id))
    }

    /// The counter the fencing tokens of `run_id` are drawn from:
    /// `{prefix}.epoch:{run_id}`.
    #[must_use]
    pub fn epoch_key(&self, run_id: &str) -> String {
        format!("{}.epoch:{run_id}", self.run_prefix(run_id))
    }

    /// The key holding the nonce of the `acquire_lease` or `begin_run` call
    /// that took the current lease on `run_id` (so that the call, sent again
    /// after a lost reply, finds its own lease), and after `finish_run` its
    /// result for a while: `{prefix}.nonce:{run_id}`. It expires with the
    /// lease's first time-to-live, and goes with the lease when released.
    #[must_use]
    pub fn nonce_key(&self, run_id: &str) -> String {
        format!("{}.nonce:{run_id}", self.run_prefix(run_id))
    }

    /// The epoch's time-to-live when it has one (its run's checkpoint has an
    /// expiry, or none is stored): it outlives the checkpoint and every lease
    /// drawn from it, so tokens keep growing while either may still be
    /// around. While the checkpoint has no expiry, neither has the epoch.
    fn epoch_px(&self, lease_ms: u64) -> u64 {
        self.inner
            .retention_ms
            .max(crate::builder::EPOCH_GRACE_MS)
            .max(lease_ms)
    }

    /// The expiry a checkpoint is written with, in ms: the completed
    /// retention for a completed run, `0` (none) for every other run.
    fn checkpoint_px(&self, checkpoint: &Checkpoint) -> u64 {
        if checkpoint.status == RunStatus::Completed {
            self.inner.retention_ms
        } else {
            0
        }
    }

    /// Puts on `script` the keys of the run `key` that every script writing
    /// its journal takes, in this order: the journal, the cancel mark, the
    /// epoch and the pipeline's completed runs.
    fn journal_keys(&self, script: &mut ScriptInvocation<'static>, key: &str) {
        script
            .key(self.checkpoint_key(key))
            .key(self.cancelled_key(key))
            .key(self.epoch_key(key))
            .key(self.completed_key_of(key));
    }

    /// Puts on `script` the keys and arguments of a fenced save of
    /// `checkpoint` under `lease`: all that `SAVE_FENCED` takes, and what
    /// `FINISH` takes first (it runs the same save).
    fn fenced_save_args(
        &self,
        script: &mut ScriptInvocation<'static>,
        checkpoint: &Checkpoint,
        lease: &Lease,
    ) -> Result<()> {
        let key = checkpoint.key();
        let bytes = checkpoint.entry_bytes()?;
        script.key(self.lease_key(&key));
        self.journal_keys(script, &key);
        script
            .arg(lease.token())
            .arg(checkpoint.seq)
            .arg(u8::from(checkpoint.change.is_full()))
            .arg(checkpoint.keep_from)
            .arg(bytes)
            .arg(self.checkpoint_px(checkpoint))
            .arg(mark_arg(checkpoint.status))
            .arg(self.epoch_px(0))
            .arg(u8::from(checkpoint.status == RunStatus::Completed))
            .arg(self.keep_arg())
            .arg(&*self.run_prefix(&key))
            .arg(&key);
        summary_args(script, checkpoint)
    }
}

/// How many buckets a cluster store spreads its runs over: each bucket is
/// one hash slot (its keys carry the hash tag `{P#b}`), holding whole
/// pipelines. Part of the key layout: changing it hides every stored run.
pub const CLUSTER_BUCKETS: u32 = 16;

/// The bucket of the runs of `pipeline` on a cluster: FNV-1a (32 bits) of
/// its name, modulo [`CLUSTER_BUCKETS`]. Every build computes the same.
///
/// ```
/// use fluxio_redis::{CLUSTER_BUCKETS, cluster_bucket};
///
/// assert_eq!(cluster_bucket("payments"), cluster_bucket("payments"));
/// assert!(cluster_bucket("") < CLUSTER_BUCKETS);
/// ```
#[must_use]
pub fn cluster_bucket(pipeline: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in pipeline.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % CLUSTER_BUCKETS
}

/// The pipeline of the run key `run_key`: the part before its first `/`,
/// empty for a bare run id.
pub(crate) fn pipeline_of(run_key: &str) -> &str {
    run_key.split_once('/').map_or("", |(pipeline, _)| pipeline)
}

/// What the load script read of a run: the journal's `born:ver` (or
/// `legacy`) and the entries, oldest first.
pub(crate) struct Read {
    pub(crate) version: Vec<u8>,
    pub(crate) parts: Vec<Vec<u8>>,
}

impl RedisStore {
    /// The run's entries from its last whole checkpoint on, or all of them
    /// (`all`); `None` when nothing is stored.
    async fn read(&self, key: &str, all: bool) -> Result<Option<Read>> {
        fluxio_core::store::check_run_id(key)?;
        let operation = if all { op::HISTORY } else { op::LOAD };
        self.read_within(operation, key, all, self.deadline()).await
    }

    /// The journal's meta (`META`), then its entries with one `HMGET`
    /// that reads `born` and `ver` too: when they are still the ones the
    /// meta said, the entries are of that journal. Otherwise (a write came
    /// in between), and for a run of an earlier build, the `LOAD` script
    /// reads it all in one step.
    pub(crate) async fn read_within(
        &self,
        operation: &'static str,
        key: &str,
        all: bool,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Read>> {
        let journal = self.checkpoint_key(key);
        let mut script = scripts::META_SCRIPT.prepare_invoke();
        script.key(&journal).arg(u8::from(all));
        let meta: Vec<String> = self.invoke(operation, &journal, deadline, &script).await?;
        let range = match meta.as_slice() {
            [] => return Ok(None),
            [version, from, last] => from
                .parse::<u32>()
                .ok()
                .zip(last.parse::<u32>().ok())
                .map(|range| (version.as_bytes(), range)),
            _ => None,
        };
        if let Some((version, (from, last))) = range {
            let mut hmget = redis::cmd("HMGET");
            hmget.arg(&journal).arg("born").arg("ver");
            for seq in from..=last {
                hmget.arg(seq);
            }
            let mut reply: Vec<Option<Vec<u8>>> =
                self.query(operation, &journal, deadline, &hmget).await?;
            let same = match reply.get(..2) {
                Some([Some(born), Some(ver)]) => [born, &b":"[..], ver].concat() == version,
                _ => false,
            };
            if same {
                let parts = reply.split_off(2);
                return Ok(Some(Read {
                    version: version.to_vec(),
                    parts: complete(key, &journal, parts)?,
                }));
            }
            tracing::debug!(
                run_id = key,
                "the journal changed while it was read; reading it in one step"
            );
        }
        let mut script = scripts::LOAD_SCRIPT.prepare_invoke();
        script.key(&journal).arg(u8::from(all));
        let reply: Vec<Option<Vec<u8>>> =
            self.invoke(operation, &journal, deadline, &script).await?;
        let mut reply = reply.into_iter();
        let Some(version) = reply.next() else {
            return Ok(None);
        };
        Ok(Some(Read {
            version: version.unwrap_or_default(),
            parts: complete(key, &journal, reply.collect())?,
        }))
    }
}

/// The entries read, each of them there.
fn complete(key: &str, journal: &str, parts: Vec<Option<Vec<u8>>>) -> Result<Vec<Vec<u8>>> {
    parts
        .into_iter()
        .map(|part| {
            part.ok_or_else(|| Error::CorruptCheckpoint {
                run_id: key.to_owned(),
                reason: format!(
                    "the journal hash {journal} lacks a checkpoint between its `first` and `last`"
                ),
                source: None,
            })
        })
        .collect()
}

fn lease_lost(lease: &Lease) -> Error {
    Error::LeaseLost {
        run_id: lease.run_id().to_owned(),
        token: lease.token(),
    }
}

/// A fresh nonce for one `acquire_lease` call: 128 bits in hex, from
/// SipHash keyed by the standard library's per-process random keys over a
/// process-wide counter, the clock and the process id. Unique across calls
/// and processes (a collision needs two equal 128-bit hashes).
fn nonce() -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let half = |lane: u8| {
        let mut h = RandomState::new().build_hasher();
        h.write_u8(lane);
        h.write_u64(call);
        h.write_u128(now);
        h.write_u32(std::process::id());
        h.finish()
    };
    format!("{:016x}{:016x}", half(0), half(1))
}

#[async_trait::async_trait]
impl CheckpointStore for RedisStore {
    /// One script: the journal hash `{prefix}:{run_id}` replaced by the
    /// checkpoint's journal ([`Checkpoint::into_journal`]: its `earlier`
    /// ones, then itself), one field per checkpoint, with the expiry of a
    /// completed run when it completed; the mailbox
    /// `{prefix}.signals:{run_id}` replaced by the checkpoint's
    /// [`signals`](Checkpoint::signals) (none: emptied); and the cancel mark
    /// `{prefix}.cancelled:{run_id}` set when the checkpoint is cancelled,
    /// deleted otherwise.
    async fn save(&self, mut checkpoint: Checkpoint) -> Result<()> {
        // the key, and the journal as a whole reads back (starts whole,
        // numbers follow)
        let run_key = checkpoint.checked_key()?;
        let signals = std::mem::take(&mut checkpoint.signals);
        let key = self.checkpoint_key(&run_key);
        let mut script = scripts::SAVE_SCRIPT.prepare_invoke();
        self.journal_keys(&mut script, &run_key);
        script
            .arg(self.checkpoint_px(&checkpoint))
            .arg(mark_arg(checkpoint.status))
            .arg(self.epoch_px(0));
        let completed = checkpoint.status == RunStatus::Completed;
        let journal = checkpoint.into_journal();
        let fulls: Vec<String> = journal
            .iter()
            .filter(|cp| cp.change.is_full())
            .map(|cp| cp.seq.to_string())
            .collect();
        let (first, latest) = match (journal.first(), journal.last()) {
            (Some(first), Some(last)) => (first.seq, last),
            _ => {
                return Err(Error::Internal {
                    message: "a checkpoint's journal is empty".to_owned(),
                });
            }
        };
        script
            .arg(first)
            .arg(latest.seq)
            .arg(fulls.join(" "))
            .arg(u8::from(completed))
            .arg(self.keep_arg())
            .arg(&*self.run_prefix(&run_key))
            .arg(&run_key);
        summary_args(&mut script, latest)?;
        waits::mailbox_args(&mut script, &signals)?;
        for cp in &journal {
            script.arg(cp.seq).arg(cp.entry_bytes()?);
        }
        let ((), acked) = self
            .invoke_write(op::SAVE, &key, self.deadline(), &script)
            .await?;
        Ok(self.replicated(op::SAVE, &key, &run_key, acked)?)
    }

    /// A script reading the journal's meta, then one `HMGET` of its entries
    /// from its last whole checkpoint on (at most [`COMPACT_EVERY`](fluxio_core::store::COMPACT_EVERY)
    /// and a few), decoded with [`Checkpoint::from_entries`], so undecodable
    /// bytes are [`Error::CorruptCheckpoint`] and stay in place. A run of an
    /// earlier build (one blob) is decoded as it is.
    async fn load(&self, key: &str) -> Result<Option<Checkpoint>> {
        Ok(self
            .read(key, false)
            .await?
            .map(|read| Checkpoint::from_entries(key, read.parts))
            .transpose()?)
    }

    /// As [`load`](CheckpointStore::load), reading every entry of the
    /// journal, decoded with
    /// [`Checkpoint::journal_from_entries`].
    async fn history(&self, key: &str) -> Result<Vec<Checkpoint>> {
        match self.read(key, true).await? {
            Some(read) => Checkpoint::journal_from_entries(key, read.parts),
            None => Ok(Vec::new()),
        }
    }

    /// One script: `DEL` of the checkpoint and its cancel mark, and an
    /// expiry for the run's epoch if it had none.
    async fn delete(&self, key: &str) -> Result<()> {
        fluxio_core::store::check_run_id(key)?;
        let journal = self.checkpoint_key(key);
        let mut script = scripts::DELETE_SCRIPT.prepare_invoke();
        self.journal_keys(&mut script, key);
        script
            .arg(self.epoch_px(0))
            .arg(key)
            .arg(&*self.run_prefix(key));
        self.invoke::<()>(op::DELETE, &journal, self.deadline(), &script)
            .await?;
        Ok(())
    }

    /// The run index (see the [crate documentation](crate)): a script per
    /// slice of at most 500 index members, reading each candidate's
    /// summary (meta fields of its journal hash, never a checkpoint) and,
    /// for a running run, its lease key, in key order from the cursor on,
    /// until the page and one run more are found or the index ends. A
    /// pipeline's runs are one range of the index, and a status has its own
    /// set, so a page of one pipeline's runs in one status reads only those
    /// runs. A member whose journal is gone (an expired completed run) is
    /// removed by the script that finds it, and not listed.
    ///
    /// The listing is one call: all its scripts end within the command
    /// timeout. A filter the index does not cover (a version, a time, the
    /// bare ids' pipeline `""`) reads the index until the page is full, so
    /// over millions of runs it may not: narrow it by pipeline or state.
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage> {
        self.list(filter).await
    }

    /// One `EXISTS`.
    async fn exists(&self, key: &str) -> Result<bool> {
        fluxio_core::store::check_run_id(key)?;
        let journal = self.checkpoint_key(key);
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(&journal);
        let n: u64 = self
            .query(op::EXISTS, &journal, self.deadline(), &cmd)
            .await?;
        Ok(n > 0)
    }

    /// One script: when `{prefix}.lease:{key}` exists, `RunIdInUse`
    /// (unless it carries this call's nonce: see below); otherwise
    /// `INCR {prefix}.epoch:{key}` (refreshing its expiry) and `SET` the
    /// lease to the new token with `PX ttl`, and `{prefix}.nonce:{key}` to
    /// this call's nonce with the same expiry. One round trip.
    ///
    /// The nonce makes sending the script again exact: when the first
    /// attempt took the lease but its reply was lost with the connection, the
    /// repeat finds the lease with this call's nonce and returns its token
    /// (instead of `RunIdInUse` against itself). It is left in place (an
    /// earlier build deleted it in a second round trip): nonces are never
    /// reused, so no other call matches it, and it expires with the lease's
    /// first time-to-live, or goes with the lease
    /// ([`release_lease`](CheckpointStore::release_lease),
    /// [`finish_run`](CheckpointStore::finish_run)).
    async fn acquire_lease(&self, key: &str, ttl: Duration) -> Result<Lease> {
        fluxio_core::store::check_run_id(key)?;
        check_lease_ttl(ttl)?;
        let (lease_key, lease_ms) = (self.lease_key(key), px(ttl));
        let mut script = scripts::ACQUIRE_SCRIPT.prepare_invoke();
        script
            .key(&lease_key)
            .key(self.epoch_key(key))
            .key(self.nonce_key(key))
            .key(self.checkpoint_key(key))
            .arg(lease_ms)
            .arg(self.epoch_px(lease_ms))
            .arg(nonce());
        let token: u64 = self
            .invoke(op::ACQUIRE, &lease_key, self.deadline(), &script)
            .await?;
        if token == 0 {
            return Err(Error::RunIdInUse {
                run_id: key.to_owned(),
            });
        }
        Ok(Lease::new(key, token))
    }

    /// One script: `PEXPIRE` the lease if it still holds this token.
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        check_lease_ttl(ttl)?;
        let (lease_key, lease_ms) = (self.lease_key(lease.run_id()), px(ttl));
        let mut script = scripts::RENEW_SCRIPT.prepare_invoke();
        script
            .key(&lease_key)
            .key(self.epoch_key(lease.run_id()))
            .arg(lease.token())
            .arg(lease_ms)
            .arg(self.epoch_px(lease_ms));
        let renewed: u8 = self
            .invoke(op::RENEW, &lease_key, self.deadline(), &script)
            .await?;
        if renewed == 1 {
            Ok(())
        } else {
            Err(lease_lost(lease))
        }
    }

    /// One script: `DEL` the lease, and the nonce of the call that took
    /// it, if the lease still holds this token.
    async fn release_lease(&self, lease: Lease) -> Result<()> {
        let lease_key = self.lease_key(lease.run_id());
        let mut script = scripts::RELEASE_LEASE_SCRIPT.prepare_invoke();
        script
            .key(&lease_key)
            .key(self.nonce_key(lease.run_id()))
            .arg(lease.token());
        Ok(self
            .invoke::<()>(op::RELEASE, &lease_key, self.deadline(), &script)
            .await?)
    }

    /// One script: if the run is marked cancelled, `Cancelled`; else if
    /// the lease does not hold this token, `LeaseLost`; else if the
    /// checkpoint is a delta whose predecessor is not stored,
    /// [`missing_predecessor`]'s error; otherwise the checkpoint's
    /// [`entry_bytes`](Checkpoint::entry_bytes) appended to the journal hash
    /// (as [`append`](fluxio_core::store::append) does: later checkpoints
    /// dropped, the journal cut at [`cut_point`](fluxio_core::store::cut_point)),
    /// with the expiry of a completed run when it completed. Nothing is
    /// written when it is refused, and nothing stored is read or rewritten
    /// but the hash's few meta fields: a delta costs what it changed.
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        let run_key = checkpoint.key();
        if lease.run_id() != run_key {
            return Err(lease_lost(lease));
        }
        let key = self.checkpoint_key(&run_key);
        let mut script = scripts::SAVE_FENCED_SCRIPT.prepare_invoke();
        self.fenced_save_args(&mut script, &checkpoint, lease)?;
        let (saved, acked): (u8, _) = self
            .invoke_write(op::SAVE_FENCED, &key, self.deadline(), &script)
            .await?;
        match saved {
            1 => Ok(self.replicated(op::SAVE_FENCED, &key, &run_key, acked)?),
            2 => Err(Error::Cancelled { run_id: run_key }),
            6 => Err(Error::Paused { run_id: run_key }),
            3 => Err(missing_predecessor(&run_key, checkpoint.seq)),
            _ => Err(lease_lost(lease)),
        }
    }

    /// One script: if the lease holds this token, the `DEL` of
    /// [`delete`](CheckpointStore::delete) (the checkpoint and its cancel
    /// mark); otherwise `LeaseLost`.
    async fn delete_fenced(&self, key: &str, lease: &Lease) -> Result<()> {
        if lease.run_id() != key {
            return Err(lease_lost(lease));
        }
        let journal = self.checkpoint_key(key);
        let mut script = scripts::DELETE_FENCED_SCRIPT.prepare_invoke();
        script.key(self.lease_key(key));
        self.journal_keys(&mut script, key);
        script
            .arg(lease.token())
            .arg(self.epoch_px(0))
            .arg(key)
            .arg(&*self.run_prefix(key));
        let deleted: u8 = self
            .invoke(op::DELETE_FENCED, &journal, self.deadline(), &script)
            .await?;
        if deleted == 1 {
            Ok(())
        } else {
            Err(lease_lost(lease))
        }
    }

    /// One script (`BEGIN`, one round trip): as
    /// [`acquire_lease`](CheckpointStore::acquire_lease), then for
    /// [`Begin::Replace`] as [`delete_fenced`](CheckpointStore::delete_fenced)
    /// and for [`Begin::IfAbsent`] nothing more when a run is stored, then as
    /// [`save_fenced`](CheckpointStore::save_fenced) of `first`, atomically.
    /// When it fails (`RunIdInUse`, `Cancelled`: [`Begin::IfAbsent`] of a
    /// run whose journal is gone but whose cancel mark is not, or a `first`
    /// that is a delta: its predecessor is missing) nothing is written and
    /// no lease taken; the default's `Replace` would have deleted the
    /// stored run before finding the delta.
    ///
    /// The call's nonce is stored with the lease and the outcome, so that
    /// sending the script again after a dropped connection returns what its
    /// first attempt did; it is not deleted in a second round trip (as
    /// `acquire_lease`'s is), but expires with the lease or goes with
    /// [`finish_run`](CheckpointStore::finish_run).
    async fn begin_run(&self, first: Checkpoint, ttl: Duration, begin: Begin) -> Result<Begun> {
        let run_key = first.key();
        fluxio_core::store::check_run_id(&run_key)?;
        check_lease_ttl(ttl)?;
        let replace = match begin {
            Begin::Replace => true,
            Begin::IfAbsent => false,
            _ => {
                return Err(Error::Internal {
                    message: format!("RedisStore::begin_run does not know {begin:?}"),
                });
            }
        };
        let bytes = first.entry_bytes()?;
        let (lease_key, lease_ms) = (self.lease_key(&run_key), px(ttl));
        let mut script = scripts::BEGIN_SCRIPT.prepare_invoke();
        script
            .key(&lease_key)
            .key(self.epoch_key(&run_key))
            .key(self.nonce_key(&run_key))
            .key(self.checkpoint_key(&run_key))
            .key(self.cancelled_key(&run_key))
            .key(self.completed_key_of(&run_key))
            .arg(lease_ms)
            .arg(self.epoch_px(lease_ms))
            .arg(nonce())
            .arg(u8::from(replace))
            .arg(self.epoch_px(0))
            .arg(first.seq)
            .arg(u8::from(first.change.is_full()))
            .arg(bytes)
            .arg(self.checkpoint_px(&first))
            .arg(mark_arg(first.status))
            .arg(u8::from(first.status == RunStatus::Completed))
            .arg(self.keep_arg())
            .arg(&*self.run_prefix(&run_key))
            .arg(&run_key);
        summary_args(&mut script, &first)?;
        let ((token, started), acked): ((u64, u8), _) = self
            .invoke_write(op::BEGIN, &lease_key, self.deadline(), &script)
            .await?;
        match (token, started) {
            (0, 2) => Err(Error::Cancelled { run_id: run_key }),
            (0, 3) => Err(missing_predecessor(&run_key, first.seq)),
            (0, _) => Err(Error::RunIdInUse { run_id: run_key }),
            (token, started) => {
                let lease = Lease::new(&run_key, token);
                if let Err(e) = self.replicated(op::BEGIN, &lease_key, &run_key, acked) {
                    // as the default: the caller never sees the lease
                    if let Err(release) = self.release_lease(lease).await {
                        tracing::warn!(run_id = %run_key, error = %release, "could not release the lease of a run that did not begin; it will expire");
                    }
                    return Err(e.into());
                }
                Ok(Begun::new(lease, started == 1))
            }
        }
    }

    /// One script (`FINISH`, one round trip): as
    /// [`save_fenced`](CheckpointStore::save_fenced) of `last` (the same
    /// script, run as a function), then, when it saved and `delete` is set,
    /// as [`delete_fenced`](CheckpointStore::delete_fenced), then as
    /// [`release_lease`](CheckpointStore::release_lease) whatever the save
    /// returned, atomically. The nonce `begin_run` left goes with the lease.
    async fn finish_run(&self, last: Checkpoint, lease: Lease, delete: bool) -> Result<()> {
        let run_key = last.key();
        if lease.run_id() != run_key {
            let lost = lease_lost(&lease);
            self.release_lease(lease).await?;
            return Err(lost);
        }
        let key = self.checkpoint_key(&run_key);
        let mut script = scripts::FINISH_SCRIPT.prepare_invoke();
        self.fenced_save_args(&mut script, &last, &lease)?;
        script
            .key(self.nonce_key(&run_key))
            .arg(u8::from(delete))
            .arg(px(self.inner.command_timeout));
        let (saved, acked): (u8, _) = self
            .invoke_write(op::FINISH, &key, self.deadline(), &script)
            .await?;
        match saved {
            1 => Ok(self.replicated(op::FINISH, &key, &run_key, acked)?),
            2 => Err(Error::Cancelled { run_id: run_key }),
            6 => Err(Error::Paused { run_id: run_key }),
            3 => Err(missing_predecessor(&run_key, last.seq)),
            _ => Err(lease_lost(&lease)),
        }
    }

    /// A [`load`](CheckpointStore::load) of the latest checkpoint, decided
    /// with [`marked_checkpoint`], then one script that appends the marked
    /// checkpoint (the run's next, an empty delta) and sets the cancel
    /// mark `{prefix}.cancelled:{key}` (`1` cancelled, `p` paused; deleted
    /// by an unpause) only if the journal is still the one read (a
    /// compare-and-set on its `born:ver`; see the crate docs). When a write
    /// landed in between (the owner's next checkpoint), it reads again,
    /// within the one command timeout: a run that writes checkpoints faster
    /// than a round trip may keep it retrying until it ends (then a cancel
    /// finds it completed) or the timeout passes. While the mark is set,
    /// every fenced save of the run is refused.
    async fn mark(&self, key: &str, mark: Mark) -> Result<()> {
        fluxio_core::store::check_run_id(key)?;
        let journal = self.checkpoint_key(key);
        let deadline = self.deadline();
        loop {
            let read = self.read_within(op::MARK, key, false, deadline).await?;
            let (version, stored) = match read {
                Some(read) => (
                    read.version,
                    Some(Checkpoint::from_entries(key, read.parts)?),
                ),
                None => (Vec::new(), None),
            };
            let marked = marked_checkpoint(key, stored, mark)?;
            let mut script = scripts::MARK_SCRIPT.prepare_invoke();
            script
                .key(&journal)
                .key(self.cancelled_key(key))
                .key(self.epoch_key(key))
                .arg(version)
                .arg(marked.seq)
                .arg(marked.entry_bytes()?)
                .arg(&*self.run_prefix(key))
                .arg(key);
            summary_args(&mut script, &marked)?;
            script.arg(mark_arg(marked.status));
            let (done, acked): (u8, _) = self
                .invoke_write(op::MARK, &journal, deadline, &script)
                .await?;
            if done == 1 {
                return Ok(self.replicated(op::MARK, &journal, key, acked)?);
            }
            tracing::debug!(
                run_id = key,
                "the checkpoint changed while it was being marked; reading it again"
            );
        }
    }

    /// One script (`SEND`): the run's status and the names it waits for
    /// read from its summary, the signal decided as
    /// [`deliver`](fluxio_core::store::deliver) does and stored in the
    /// mailbox `{prefix}.signals:{run_id}`; when the run waits for it, it is
    /// due now (scored 0) and its watchers told. A run of an earlier build
    /// (no summary) is [reindexed](RedisStore::reindex) first.
    async fn send_signal(&self, key: &str, signal: Signal) -> Result<Delivery> {
        self.send(key, signal).await
    }

    /// One script (`TAKE`), fenced as [`save_fenced`](CheckpointStore::save_fenced)
    /// is: the wait decided in Lua over the mailbox's entries of its names,
    /// as [`decide`](fluxio_core::store::decide) does, atomically with
    /// `send_signal`'s script.
    async fn take_signal(&self, key: &str, take: &Take, lease: &Lease) -> Result<Decision> {
        self.take(key, take, lease).await
    }

    /// One `HGETALL` of the mailbox, in send order.
    async fn signals(&self, key: &str) -> Result<Vec<Signal>> {
        self.mailbox(key).await
    }

    /// One script (`DUE`) per bucket asked (one on a single server): the
    /// due-index `{prefix}.due:{pipeline}` of each pipeline asked (every
    /// pipeline in `{prefix}.due` when none is), earliest first, skipping
    /// runs whose lease is held.
    async fn due_runs(&self, filter: &DueFilter) -> Result<Vec<DueRun>> {
        self.due(filter).await
    }

    /// The `DUE` script taking the leases of what it finds, per bucket
    /// until the limit is claimed (one script on a single server).
    async fn claim_due(&self, filter: &DueFilter, ttl: Duration) -> Result<Vec<Claimed>> {
        self.claim(filter, ttl).await
    }

    /// The `SET_DUE` script, fenced as a fenced save is.
    async fn set_due(&self, lease: &Lease, due_ms: Option<u64>) -> Result<()> {
        self.schedule(lease, due_ms).await
    }

    /// `TIME`, in milliseconds (on a cluster, any node's).
    async fn clock_ms(&self) -> Result<Option<u64>> {
        self.time().await.map(Some)
    }

    /// A subscription (its own connection) to `{prefix}.events`, where the
    /// scripts that park a run, signal a waiting one or end one publish;
    /// on a cluster to every bucket's channel on the first node that
    /// answers. The stream ends when that connection drops or stops
    /// answering its keep-alive `PING`.
    async fn watch(&self) -> Result<Option<RunEvents>> {
        self.subscribe().await.map(Some)
    }
}

mod waits;

#[cfg(test)]
mod tests;

/// The cancel mark a checkpoint of `status` leaves (rules 14 and 30): `1`
/// cancelled, `p` paused, `0` none (the scripts' `refused` reads it).
fn mark_arg(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Cancelled => "1",
        RunStatus::Paused => "p",
        _ => "0",
    }
}
