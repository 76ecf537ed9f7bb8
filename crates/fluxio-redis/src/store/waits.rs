//! Runs that wait on Redis (contract rules 25-27): the mailbox's keys and
//! entries, and the calls behind `send_signal`, `take_signal`, `signals`,
//! `due_runs`, `clock_ms` and `watch`. The due-index is written by the
//! scripts that write checkpoints (`scripts::waits_fns`'s `due`); the
//! Lua is in `scripts/waits.rs`.
//!
//! A mailbox entry (the value of a wait name's field in `P.signals:R`) is
//! `<order> <state> <sent_at> <sender length>\n<sender><payload>`: its
//! place in send order, `delivered`, `consumed` or `closed`, when it was
//! sent (ms), the sender's length in bytes, then the sender and the
//! payload's bytes ([`Payload::bytes`]), so a script reads the state
//! without the payload and compares payloads as bytes.

use std::collections::BTreeMap;
use std::time::Duration;

use fluxio_core::context::Snapshot;
use fluxio_core::store::{
    Checkpoint, Claimed, Decision, Delivery, DueFilter, DueRun, Lease, MAX_UNTIL_MS, Payload,
    RunEvent, RunEventKind, RunEvents, RunFilter, Signal, SignalState, Take, check_lease_ttl,
    check_run_id, check_wait_name,
};
use fluxio_core::{Error, Result};
use redis::ScriptInvocation;
use redis::aio::{PubSubSink, PubSubStream};

use super::{RedisStore, lease_lost};
use crate::builder::px;
use crate::connection::Backend;
use crate::error::{RedisStoreError, op};
use crate::index::status_of;
use crate::scripts;

/// How many members of each pipeline's due-index one `DUE` script looks
/// at beyond the runs it returns: the runs due but held by a worker it
/// skips. A worker holds few at once, so this is a bound, never a limit
/// met in practice.
const DUE_BUDGET: usize = 1000;

/// How often a subscription checks that its connection still answers.
const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(15);

impl RedisStore {
    /// The mailbox of `run_id` (contract rule 26): `{prefix}.signals:{run_id}`,
    /// a hash with a field per wait name signalled (or closed) holding its
    /// entry (see the [crate documentation](crate)), and the field `""`
    /// counting the entries ever added. Deleted with the run, emptied when
    /// a fresh run replaces it, with the run's expiry.
    #[must_use]
    pub fn mailbox_key(&self, run_id: &str) -> String {
        format!("{}.signals:{run_id}", self.run_prefix(run_id))
    }

    /// The due-index of `pipeline` (contract rule 27):
    /// `{prefix}.due:{pipeline}`, a sorted set of its sleeping and waiting
    /// runs that can become due (their keys), each scored by when it is
    /// due (ms: 0 once signalled). Written by the script of every write of
    /// a run.
    #[must_use]
    pub fn due_key(&self, pipeline: &str) -> String {
        format!("{}.due:{pipeline}", self.pipeline_prefix(pipeline))
    }

    /// The set of the pipelines whose due-index exists, among those of
    /// `pipeline`'s bucket on a cluster (every pipeline on one server):
    /// `{prefix}.due`, what [`due_runs`](fluxio_core::store::CheckpointStore::due_runs)
    /// reads when it is asked for every pipeline.
    #[must_use]
    pub fn due_pipelines_key(&self, pipeline: &str) -> String {
        format!("{}.due", self.pipeline_prefix(pipeline))
    }

    /// The channel of the store's wake-ups on one server: `{prefix}.events`
    /// (on a cluster each bucket's, `{{prefix}#b}.events`), carrying
    /// `due <run key>` and `ended <run key>`.
    #[must_use]
    pub fn events_channel(&self) -> String {
        format!("{}.events", self.inner.key_prefix)
    }

    /// [`CheckpointStore::send_signal`](fluxio_core::store::CheckpointStore::send_signal).
    pub(super) async fn send(&self, key: &str, signal: Signal) -> Result<Delivery> {
        check_run_id(key)?;
        check_wait_name(&signal.name)?;
        let journal = self.checkpoint_key(key);
        let deadline = self.deadline();
        let mut reindexed = false;
        loop {
            let mut script = scripts::SEND_SCRIPT.prepare_invoke();
            script
                .key(&journal)
                .key(self.mailbox_key(key))
                .arg(&*self.run_prefix(key))
                .arg(key)
                .arg(&signal.name)
                .arg(signal.sent_at_ms)
                .arg(&signal.sender)
                .arg(signal.payload.bytes());
            let (reply, acked): (Vec<String>, _) = self
                .invoke_write(op::SEND_SIGNAL, &journal, deadline, &script)
                .await?;
            let wait = || signal.name.clone();
            let run_id = || key.to_owned();
            return match reply.first().map(String::as_str) {
                Some("0") => {
                    self.replicated(op::SEND_SIGNAL, &journal, key, acked)?;
                    Ok(Delivery::Delivered)
                }
                Some("1") => Ok(Delivery::Duplicate),
                Some("3") => {
                    let status = reply.get(1).and_then(|s| status_of(s));
                    let status = status.ok_or_else(|| unexpected(op::SEND_SIGNAL, &reply))?;
                    Err(Error::RunFinished {
                        run_id: run_id(),
                        status,
                    })
                }
                Some("4") => Err(Error::CheckpointNotFound { run_id: run_id() }),
                // a run of an earlier build, without the summary the
                // script reads: indexed, then sent again
                Some("5") if !reindexed && !self.is_cluster() => {
                    self.reindex_run(key).await?;
                    reindexed = true;
                    continue;
                }
                Some("5") => Err(Error::CorruptCheckpoint {
                    run_id: run_id(),
                    reason: "its journal has no run summary (written by a build before the run \
                             index, and not reindexed)"
                        .to_owned(),
                    source: None,
                }),
                Some("6") => Err(Error::WaitClosed {
                    run_id: run_id(),
                    wait: wait(),
                }),
                Some("7") => Err(Error::SignalConflict {
                    run_id: run_id(),
                    wait: wait(),
                }),
                Some("8") => Err(unreadable(key, &signal.name)),
                _ => Err(unexpected(op::SEND_SIGNAL, &reply)),
            };
        }
    }

    /// [`CheckpointStore::take_signal`](fluxio_core::store::CheckpointStore::take_signal).
    pub(super) async fn take(&self, key: &str, take: &Take, lease: &Lease) -> Result<Decision> {
        if lease.run_id() != key {
            return Err(lease_lost(lease));
        }
        for name in take.waits.iter().chain(&take.refuse) {
            check_wait_name(name)?;
        }
        let journal = self.checkpoint_key(key);
        let mut script = scripts::TAKE_SCRIPT.prepare_invoke();
        script
            .key(self.lease_key(key))
            .key(&journal)
            .key(self.cancelled_key(key))
            .key(self.mailbox_key(key))
            .arg(lease.token())
            .arg(take.now_ms)
            .arg(u8::from(take.expired))
            .arg(take.refuse.as_deref().unwrap_or_default())
            .arg(Signal::closed("-", 0).payload.bytes());
        for name in &take.waits {
            script.arg(name);
        }
        let (reply, acked): (Vec<Vec<u8>>, _) = self
            .invoke_write(op::TAKE_SIGNAL, &journal, self.deadline(), &script)
            .await?;
        let decision = decision(key, &reply)?;
        if let Some(decision) = decision {
            self.replicated(op::TAKE_SIGNAL, &journal, key, acked)?;
            return Ok(decision);
        }
        Err(refusal(lease, reply.first().map_or(b"0", Vec::as_slice)))
    }

    /// [`CheckpointStore::set_due`](fluxio_core::store::CheckpointStore::set_due).
    pub(super) async fn schedule(&self, lease: &Lease, due_ms: Option<u64>) -> Result<()> {
        let key = lease.run_id();
        check_run_id(key)?;
        let journal = self.checkpoint_key(key);
        let mut script = scripts::SET_DUE_SCRIPT.prepare_invoke();
        script
            .key(self.lease_key(key))
            .key(&journal)
            .key(self.cancelled_key(key))
            .arg(lease.token())
            .arg(&*self.run_prefix(key))
            .arg(key)
            .arg(
                due_ms
                    .map(|at| at.min(MAX_UNTIL_MS).to_string())
                    .unwrap_or_default(),
            );
        let (reply, acked): (u8, _) = self
            .invoke_write(op::SET_DUE, &journal, self.deadline(), &script)
            .await?;
        if reply != 1 {
            return Err(refusal(lease, reply.to_string().as_bytes()));
        }
        Ok(self.replicated(op::SET_DUE, &journal, key, acked)?)
    }

    /// [`CheckpointStore::signals`](fluxio_core::store::CheckpointStore::signals).
    pub(super) async fn mailbox(&self, key: &str) -> Result<Vec<Signal>> {
        check_run_id(key)?;
        let mailbox = self.mailbox_key(key);
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(&mailbox);
        let fields: Vec<(Vec<u8>, Vec<u8>)> = self
            .query(op::SIGNALS, &mailbox, self.deadline(), &cmd)
            .await?;
        let mut signals = BTreeMap::new();
        for (name, entry) in fields {
            if name.is_empty() {
                continue;
            }
            let name = String::from_utf8(name).map_err(|_| Error::CorruptCheckpoint {
                run_id: key.to_owned(),
                reason: "its mailbox names a wait that is not UTF-8".to_owned(),
                source: None,
            })?;
            let (order, signal) = decode_entry(key, &name, &entry)?;
            signals.insert((order, name), signal);
        }
        Ok(signals.into_values().collect())
    }

    /// [`CheckpointStore::due_runs`](fluxio_core::store::CheckpointStore::due_runs):
    /// one `DUE` script per bucket of the pipelines asked (every bucket on
    /// a cluster when none is; the one index on a single server), at once,
    /// merged earliest first.
    pub(super) async fn due(&self, filter: &DueFilter) -> Result<Vec<DueRun>> {
        let limit = RunFilter::new().limit(filter.limit).page_size()?;
        let deadline = self.deadline();
        let buckets = self.due_buckets(filter);
        let found = futures::future::try_join_all(buckets.iter().map(|(prefix, pipelines)| {
            self.due_in(prefix, pipelines, filter, limit, None, deadline)
        }))
        .await?;
        let mut runs: Vec<DueRun> = found.into_iter().flatten().map(|(run, _)| run).collect();
        runs.sort_by(|a, b| (a.due_ms, &a.key).cmp(&(b.due_ms, &b.key)));
        runs.truncate(limit);
        Ok(runs)
    }

    /// [`CheckpointStore::claim_due`](fluxio_core::store::CheckpointStore::claim_due):
    /// the `DUE` script of each bucket in turn, taking the leases of what
    /// it finds, until `filter.limit` runs are claimed (one script on a
    /// single server, or for one pipeline). A script sent again after its
    /// reply was lost finds the leases it took by its nonce.
    pub(super) async fn claim(&self, filter: &DueFilter, ttl: Duration) -> Result<Vec<Claimed>> {
        check_lease_ttl(ttl)?;
        let limit = RunFilter::new().limit(filter.limit).page_size()?;
        let lease_ms = px(ttl);
        let claim = (lease_ms, self.epoch_px(lease_ms), super::nonce());
        let deadline = self.deadline();
        let mut claimed: Vec<Claimed> = Vec::new();
        for (prefix, pipelines) in &self.due_buckets(filter) {
            let left = limit - claimed.len();
            if left == 0 {
                break;
            }
            match self
                .due_in(prefix, pipelines, filter, left, Some(&claim), deadline)
                .await
            {
                Ok(found) => claimed.extend(
                    found
                        .into_iter()
                        .map(|(run, token)| Claimed::new(run.clone(), Lease::new(run.key, token))),
                ),
                Err(e) if claimed.is_empty() => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, "claiming due runs stopped early");
                    break;
                }
            }
        }
        Ok(claimed)
    }

    /// The key prefixes whose due-index holds the runs `filter` asks for,
    /// each with the pipelines asked there (none: all of them).
    fn due_buckets<'f>(&self, filter: &'f DueFilter) -> BTreeMap<String, Vec<&'f str>> {
        let mut buckets: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        if filter.pipelines.is_empty() {
            if self.is_cluster() {
                for bucket in 0..crate::CLUSTER_BUCKETS {
                    buckets.insert(self.bucket_prefix(bucket), Vec::new());
                }
            } else {
                buckets.insert(self.inner.key_prefix.clone(), Vec::new());
            }
        }
        // a pipeline's name is what comes before a run key's first `/`
        for pipeline in filter.pipelines.iter().filter(|p| !p.contains('/')) {
            let asked = buckets
                .entry(self.pipeline_prefix(pipeline).into_owned())
                .or_default();
            if !asked.contains(&pipeline.as_str()) {
                asked.push(pipeline);
            }
        }
        buckets
    }

    /// The first `limit` due runs of each of `pipelines` (all when empty)
    /// in the due-index of the key prefix `prefix`, of the versions
    /// `filter` asks for, each with the token of the lease `claim` (lease
    /// and epoch ttl in ms, nonce) took on it (0 when only listing).
    async fn due_in(
        &self,
        prefix: &str,
        pipelines: &[&str],
        filter: &DueFilter,
        limit: usize,
        claim: Option<&(u64, u64, String)>,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<(DueRun, u64)>> {
        let set = format!("{prefix}.due");
        let mut script = scripts::DUE_SCRIPT.prepare_invoke();
        let (lease_ms, epoch_ms, nonce) =
            claim.map_or((0, 0, ""), |(l, e, n)| (*l, *e, n.as_str()));
        script
            .key(&set)
            .arg(prefix)
            .arg(filter.before_ms.min(MAX_UNTIL_MS))
            .arg(limit)
            .arg(limit + DUE_BUDGET)
            .arg(lease_ms)
            .arg(epoch_ms)
            .arg(nonce)
            .arg(filter.versions.len());
        for version in &filter.versions {
            script.arg(version.as_str());
        }
        for pipeline in pipelines {
            script.arg(*pipeline);
        }
        let operation = if claim.is_some() {
            op::CLAIM_DUE
        } else {
            op::DUE_RUNS
        };
        let reply: Vec<String> = self.invoke(operation, &set, deadline, &script).await?;
        let empty = Snapshot::default();
        reply
            .chunks(5)
            .map(|row| {
                let [key, pipeline, version, due, token] = row else {
                    return Err(unexpected(operation, &reply));
                };
                let number = |text: &str| {
                    text.parse::<u64>()
                        .map_err(|_| unexpected(operation, &reply))
                };
                let (due_ms, token) = (number(due)?, number(token)?);
                let run_id = key
                    .strip_prefix(pipeline.as_str())
                    .and_then(|rest| rest.strip_prefix('/'))
                    .filter(|_| !pipeline.is_empty())
                    .unwrap_or(key);
                let cp = Checkpoint::new(run_id, version.as_str(), 0, "", empty.clone())
                    .in_pipeline(pipeline.as_str());
                Ok((DueRun::of(key, &cp, due_ms), token))
            })
            .collect()
    }

    /// `TIME` in milliseconds since the Unix epoch.
    pub(super) async fn time(&self) -> Result<u64> {
        let cmd = redis::cmd("TIME");
        let (secs, micros): (u64, u64) =
            self.query(op::CLOCK, "TIME", self.deadline(), &cmd).await?;
        Ok(secs.saturating_mul(1000).saturating_add(micros / 1000))
    }

    /// [`CheckpointStore::watch`](fluxio_core::store::CheckpointStore::watch):
    /// a subscription on a connection of its own, to the first server (of
    /// a cluster, the first node given) that takes it.
    pub(super) async fn subscribe(&self) -> Result<RunEvents> {
        let (clients, channels): (Vec<&redis::Client>, Vec<String>) = match &self.inner.backend {
            Backend::Single { client, .. } => (vec![&**client], vec![self.events_channel()]),
            Backend::Cluster { nodes } => (
                nodes.iter().collect(),
                (0..crate::CLUSTER_BUCKETS)
                    .map(|bucket| format!("{}.events", self.bucket_prefix(bucket)))
                    .collect(),
            ),
        };
        let channel = self.events_channel();
        let mut failed = None;
        for client in clients {
            let subscribing = async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&channels).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            let error = match tokio::time::timeout_at(self.deadline(), subscribing).await {
                Ok(Ok(pubsub)) => {
                    let (sink, messages) = pubsub.split();
                    return Ok(events(sink, messages, self.inner.command_timeout));
                }
                Ok(Err(e)) => {
                    RedisStoreError::redis(op::WATCH, Some(channel.clone()), &self.inner.url, e)
                }
                Err(_) => RedisStoreError::timeout(
                    op::WATCH,
                    Some(channel.clone()),
                    &self.inner.url,
                    self.inner.command_timeout,
                ),
            };
            failed = Some(error);
        }
        Err(failed.map(Error::from).unwrap_or_else(|| Error::Internal {
            message: "a Redis store without a server to subscribe to".to_owned(),
        }))
    }
}

/// Appends the mailbox arguments of `SAVE`: the number of `signals`, then
/// each one's wait name and entry, in order.
///
/// # Errors
/// [`check_wait_name`]'s, for a name no signal can have.
pub(crate) fn mailbox_args(
    script: &mut ScriptInvocation<'static>,
    signals: &[Signal],
) -> Result<()> {
    script.arg(signals.len());
    for (order, signal) in (1u64..).zip(signals) {
        check_wait_name(&signal.name)?;
        script.arg(&signal.name).arg(encode_entry(order, signal));
    }
    Ok(())
}

/// The mailbox entry of `signal`, `order`th in send order.
pub(crate) fn encode_entry(order: u64, signal: &Signal) -> Vec<u8> {
    let mut out = format!(
        "{order} {} {} {}\n",
        signal.state.as_str(),
        signal.sent_at_ms,
        signal.sender.len()
    )
    .into_bytes();
    out.extend_from_slice(signal.sender.as_bytes());
    out.extend_from_slice(signal.payload.bytes());
    out
}

/// The mailbox entry `bytes` of the wait `name` of the run `key`: its
/// order and the signal.
///
/// # Errors
/// [`Error::CorruptCheckpoint`] naming the run when it does not read.
pub(crate) fn decode_entry(key: &str, name: &str, bytes: &[u8]) -> Result<(u64, Signal)> {
    let (header, rest) = bytes
        .iter()
        .position(|&b| b == b'\n')
        .map(|at| (&bytes[..at], &bytes[at + 1..]))
        .ok_or_else(|| unreadable(key, name))?;
    let header = std::str::from_utf8(header).map_err(|_| unreadable(key, name))?;
    let fields: Vec<&str> = header.split(' ').collect();
    let [order, state, sent_at, sender_len] = fields.as_slice() else {
        return Err(unreadable(key, name));
    };
    let number = |s: &str| s.parse::<u64>().map_err(|_| unreadable(key, name));
    let (order, sent_at) = (number(order)?, number(sent_at)?);
    let state = SignalState::parse(state).ok_or_else(|| unreadable(key, name))?;
    let sender_len = usize::try_from(number(sender_len)?).map_err(|_| unreadable(key, name))?;
    let sender = rest
        .get(..sender_len)
        .and_then(|s| std::str::from_utf8(s).ok())
        .ok_or_else(|| unreadable(key, name))?;
    let payload = Payload::from_stored(key, rest.get(sender_len..).unwrap_or_default())?;
    let mut signal = Signal::closed(name, sent_at);
    signal.payload = payload;
    signal.sender = sender.to_owned();
    signal.state = state;
    Ok((order, signal))
}

/// `TAKE`'s reply as a decision; `None` for a refusal (a code of the
/// gate: lease, cancel, no run).
fn decision(key: &str, reply: &[Vec<u8>]) -> Result<Option<Decision>> {
    let text = |i: usize| reply.get(i).and_then(|b| std::str::from_utf8(b).ok());
    Ok(Some(match text(0) {
        Some("10") => Decision::Open,
        Some("12") => Decision::TimedOut,
        Some("11") => {
            let (Some(name), Some(entry)) = (text(1), reply.get(2)) else {
                return Err(unexpected_bytes(reply));
            };
            Decision::Signal(decode_entry(key, name, entry)?.1)
        }
        Some("8") => return Err(unreadable(key, text(1).unwrap_or_default())),
        Some("0" | "2" | "4") => return Ok(None),
        _ => return Err(unexpected_bytes(reply)),
    }))
}

/// The stream of a subscription: its messages as events, until its
/// connection drops or a keep-alive `PING` gets no answer within
/// `timeout`.
fn events(sink: PubSubSink, messages: PubSubStream, timeout: std::time::Duration) -> RunEvents {
    struct Listening {
        sink: PubSubSink,
        messages: PubSubStream,
        keepalive: tokio::time::Interval,
        timeout: std::time::Duration,
    }
    enum Step {
        Message(Option<redis::Msg>),
        Keepalive,
    }
    let start = tokio::time::Instant::now() + KEEPALIVE;
    let mut keepalive = tokio::time::interval_at(start, KEEPALIVE);
    // a stream nobody polled for a while pings once, not once per period
    keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let listening = Listening {
        sink,
        messages,
        keepalive,
        timeout: timeout.min(KEEPALIVE),
    };
    RunEvents::new(futures::stream::unfold(listening, |mut l| async move {
        loop {
            let step = tokio::select! {
                message = futures::StreamExt::next(&mut l.messages) => Step::Message(message),
                _ = l.keepalive.tick() => Step::Keepalive,
            };
            match step {
                // the connection is gone: the watcher falls back to polling
                Step::Message(None) => return None,
                Step::Message(Some(message)) => {
                    if let Some(event) = event_of(message.get_payload_bytes()) {
                        return Some((event, l));
                    }
                }
                Step::Keepalive => {
                    let ping = l.sink.ping::<redis::Value>();
                    if !matches!(tokio::time::timeout(l.timeout, ping).await, Ok(Ok(_))) {
                        return None;
                    }
                }
            }
        }
    }))
}

/// The event a message of the channel says: `due <key>` or `ended <key>`.
fn event_of(payload: &[u8]) -> Option<RunEvent> {
    let text = std::str::from_utf8(payload).ok()?;
    let (kind, key) = text.split_once(' ')?;
    let kind = match kind {
        "due" => RunEventKind::Due,
        "ended" => RunEventKind::Ended,
        _ => return None,
    };
    Some(RunEvent::new(key, kind))
}

fn unreadable(key: &str, name: &str) -> Error {
    Error::CorruptCheckpoint {
        run_id: key.to_owned(),
        reason: format!("its mailbox entry for the wait `{name}` does not read"),
        source: None,
    }
}

fn unexpected(operation: &str, reply: &[String]) -> Error {
    Error::Internal {
        message: format!("the {operation} script replied {reply:?}"),
    }
}

fn unexpected_bytes(reply: &[Vec<u8>]) -> Error {
    let shown: Vec<String> = reply
        .iter()
        .map(|b| String::from_utf8_lossy(&b[..b.len().min(64)]).into_owned())
        .collect();
    unexpected(op::TAKE_SIGNAL, &shown)
}

/// What a fenced script's refusal `code` says of the run `lease` fences:
/// `2` cancelled, `6` paused, `4` not stored, else the lease is lost.
fn refusal(lease: &Lease, code: &[u8]) -> Error {
    let run_id = lease.run_id().to_owned();
    match code {
        b"2" => Error::Cancelled { run_id },
        b"6" => Error::Paused { run_id },
        b"4" => Error::CheckpointNotFound { run_id },
        _ => lease_lost(lease),
    }
}

#[cfg(test)]
mod tests;
