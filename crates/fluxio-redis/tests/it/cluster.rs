//! The store on a real Redis Cluster: three local masters started by the
//! tests (`fluxio_test_support::redis::cluster`), shared by this binary.
//! The conformance suite, the listing against `InMemoryStore`, and the
//! key layout: every key of a run, and the index keys its scripts touch, in
//! one hash slot.

use std::time::Duration;

use fluxio_core::Outcome;
use fluxio_core::store::conformance::{Harness, Records};
use fluxio_core::store::{CheckpointStore, RunFilter, conformance};
use fluxio_redis::{CLUSTER_BUCKETS, RedisStore, cluster_bucket};
use fluxio_test_support as support;
use redis::aio::MultiplexedConnection;

/// Completed runs the checks create expire on their own.
const TTL: Duration = Duration::from_secs(300);

/// A plain connection to each node of the cluster.
async fn nodes(cluster: &support::redis::Cluster) -> Vec<MultiplexedConnection> {
    let mut conns = Vec::new();
    for node in cluster.nodes() {
        let client = redis::Client::open(node.as_str()).expect("a node's URL");
        conns.push(
            client
                .get_multiplexed_async_connection()
                .await
                .expect("connect to a node"),
        );
    }
    conns
}

/// Every key of the cluster under the key prefix `ns` (its buckets'
/// prefixes `{ns#b}`), sorted.
pub(crate) async fn cluster_keys(cluster: &support::redis::Cluster, ns: &str) -> Vec<String> {
    let mut keys = Vec::new();
    for mut node in nodes(cluster).await {
        keys.extend(support::redis::keys(&mut node, &format!("{{{ns}#")).await);
    }
    keys.sort();
    keys
}

/// Deletes every key under the key prefix `ns`.
pub(crate) async fn cleanup(cluster: &support::redis::Cluster, ns: &str) {
    for mut node in nodes(cluster).await {
        support::redis::cleanup(&mut node, &format!("{{{ns}#")).await;
    }
}

/// A store on the shared cluster.
pub(crate) async fn store(
    cluster: &support::redis::Cluster,
    ns: &str,
    keep: Option<usize>,
) -> RedisStore {
    RedisStore::cluster_builder(cluster.nodes().iter().cloned())
        .key_prefix(ns)
        .completed_retention(Some(TTL))
        .keep_completed(keep)
        .connect()
        .await
        .expect("connect to the cluster")
}

/// What a test on the cluster starts with: the cluster, a key prefix of
/// its own (`support::namespace(name)`) and a store under it keeping `keep`
/// completed runs; `None` after a loud skip when there is no cluster.
pub(crate) async fn open(
    name: &str,
    keep: Option<usize>,
) -> Option<(&'static support::redis::Cluster, String, RedisStore)> {
    let cluster = support::redis::cluster()?;
    let ns = support::namespace(name);
    let store = store(cluster, &ns, keep).await;
    Some((cluster, ns, store))
}

struct ClusterHarness(&'static support::redis::Cluster);

async fn harness() -> Option<ClusterHarness> {
    support::redis::cluster().map(ClusterHarness)
}

#[async_trait::async_trait]
impl Harness for ClusterHarness {
    type Store = RedisStore;

    async fn store(&self, ns: &str) -> RedisStore {
        store(self.0, ns, None).await
    }

    async fn store_keeping_completed(&self, ns: &str, n: usize) -> Option<RedisStore> {
        Some(store(self.0, ns, Some(n)).await)
    }

    async fn write_raw(&self, ns: &str, run_id: &str, bytes: &[u8]) -> bool {
        let key = store(self.0, ns, None).await.checkpoint_key(run_id);
        let client = redis::cluster::ClusterClient::new(self.0.nodes().to_vec()).expect("client");
        let mut conn = client.get_async_connection().await.expect("connect");
        crate::set_expiring(&mut conn, &key, bytes, TTL).await;
        true
    }

    /// The checkpoint keys `{ns#b}:{run_id}`, and the lease keys
    /// `{ns#b}.lease:{run_id}`, on every node.
    async fn records(&self, ns: &str) -> Option<Records> {
        let mut records = Records::default();
        for key in cluster_keys(self.0, ns).await {
            let Some((_, rest)) = key.split_once('}') else {
                continue;
            };
            if let Some(run) = rest.strip_prefix(':') {
                records.checkpoints.insert(run.to_owned());
            } else if let Some(run) = rest.strip_prefix(".lease:") {
                records.leases.insert(run.to_owned(), true);
            }
        }
        Some(records)
    }
}

fluxio_core::store_conformance_tests!(harness);

/// Every key of a run, and every index key its writes touch, is in its
/// pipeline's bucket `{P#b}`: one hash slot, on one node, so each script
/// runs there. The runs of several pipelines spread over the buckets.
#[tokio::test]
async fn cluster_every_key_of_a_run_is_in_its_pipelines_slot() {
    let Some((cluster, ns, store)) = open("cluster_slots", Some(5)).await else {
        return;
    };
    assert!(store.is_cluster());
    let pipelines: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
    for pipeline in &pipelines {
        for id in ["a", "b"] {
            let cp = conformance::checkpoint(id, 1).in_pipeline(pipeline.as_str());
            let key = cp.key();
            let lease = store.acquire_lease(&key, TTL).await.expect("lease");
            let cp = if id == "a" { cp.completed() } else { cp };
            store.save_fenced(cp, &lease).await.expect("save");
            store.release_lease(lease).await.expect("release");
        }
    }
    let bare = conformance::checkpoint("bare", 1);
    store.save(bare).await.expect("save a bare run id");
    store.cancel("bare").await.expect("cancel");
    let keys = cluster_keys(cluster, &ns).await;
    let mut buckets = std::collections::BTreeSet::new();
    for key in &keys {
        let (tag, rest) = key
            .strip_prefix('{')
            .and_then(|k| k.split_once('}'))
            .expect("every key starts with its bucket's hash tag");
        let bucket: u32 = tag
            .strip_prefix(&format!("{ns}#"))
            .and_then(|b| b.parse().ok())
            .expect("the tag is `P#b`");
        assert!(bucket < CLUSTER_BUCKETS);
        buckets.insert(bucket);
        // a run's own keys name it; their bucket is its pipeline's
        let run = [":", ".lease:", ".epoch:", ".cancelled:", ".nonce:"]
            .iter()
            .find_map(|p| rest.strip_prefix(p));
        if let Some(run) = run {
            let pipeline = run.split_once('/').map_or("", |(p, _)| p);
            assert_eq!(bucket, cluster_bucket(pipeline), "{key}");
        }
        if let Some(pipeline) = rest.strip_prefix(".completed:") {
            assert_eq!(bucket, cluster_bucket(pipeline), "{key}");
        }
    }
    assert!(
        keys.iter().any(|k| k.ends_with(".runs.completed")),
        "the index is kept: {keys:?}"
    );
    assert!(
        buckets.len() > 3,
        "12 pipelines spread over the buckets: {buckets:?}"
    );
    // every run is listed once, in key order, across the buckets
    let mut filter = RunFilter::new().limit(5);
    let mut listed = Vec::new();
    loop {
        let page = store.list_runs(&filter).await.expect("list");
        listed.extend(page.runs.into_iter().map(|r| r.key));
        match page.next {
            Some(next) => filter = filter.after(next),
            None => break,
        }
    }
    let mut expected: Vec<String> = pipelines
        .iter()
        .flat_map(|p| [format!("{p}/a"), format!("{p}/b")])
        .chain(["bare".to_owned()])
        .collect();
    expected.sort();
    assert_eq!(listed, expected);
    cleanup(cluster, &ns).await;
    assert!(cluster_keys(cluster, &ns).await.is_empty());
}

/// A key prefix with a brace would break the hash tags: refused.
#[tokio::test]
async fn cluster_a_prefix_with_a_brace_is_refused() {
    let err = RedisStore::cluster_builder(["redis://127.0.0.1:1"])
        .key_prefix("a{b}")
        .connect()
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("key_prefix"), "{err}");
    let err = RedisStore::cluster_builder(Vec::<String>::new())
        .connect()
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("cluster_nodes"), "{err}");
}

/// `wait_for_replicas` on a cluster: the script and `WAIT` go as one
/// pipeline to the primary of the run's slot, which has no replica here, so
/// every checkpoint write applies and then fails naming the run and "0 of
/// the 1"; `begin_run` gives its lease back; a refused write is that
/// refusal; leases and deletes are not waited for.
#[tokio::test]
async fn rule24_cluster_wait_for_replicas_goes_to_the_runs_primary() {
    use fluxio_core::Error;
    use fluxio_core::store::Begin;
    use fluxio_redis::RedisStoreError;

    let acknowledged = |e: &Error| match e {
        Error::Store { source, .. } => source
            .downcast_ref::<RedisStoreError>()
            .and_then(RedisStoreError::replicas_acknowledged),
        _ => None,
    };
    let Some((cluster, ns, plain)) = open("cluster_wait", None).await else {
        return;
    };
    let store = RedisStore::cluster_builder(cluster.nodes().iter().cloned())
        .key_prefix(&ns)
        .completed_retention(Some(TTL))
        .wait_for_replicas(1, Duration::from_millis(50))
        .connect()
        .await
        .expect("connect");
    for pipeline in ["p", "q", "r", "s"] {
        let w = |ip| conformance::checkpoint("w", ip).in_pipeline(pipeline);
        let cp = w(1);
        let run = cp.key();
        let err = store.save(cp.clone()).await.expect_err("no replicas");
        assert_eq!(acknowledged(&err), Some((0, 1)), "{err}");
        assert!(err.to_string().contains(&format!("`{run}`")), "{err}");
        assert!(err.to_string().contains("0 of the 1"), "{err}");
        assert!(
            plain.exists(&run).await.expect("exists"),
            "the save applied"
        );

        let err = store
            .begin_run(cp.clone(), TTL, Begin::Replace)
            .await
            .expect_err("no replicas");
        assert_eq!(acknowledged(&err), Some((0, 1)), "{err}");
        let lease = store
            .acquire_lease(&run, TTL)
            .await
            .expect("begin_run gave its lease back; a lease is not waited for");
        let err = store
            .save_fenced(w(2), &lease)
            .await
            .expect_err("no replicas");
        assert_eq!(acknowledged(&err), Some((0, 1)), "{err}");
        let err = store
            .finish_run(w(3), lease, false)
            .await
            .expect_err("no replicas");
        assert_eq!(acknowledged(&err), Some((0, 1)), "{err}");
        let stored = plain.load(&run).await.expect("load").expect("stored");
        assert_eq!(stored.ip, 3, "finish_run's save applied");
        let lease = plain
            .acquire_lease(&run, TTL)
            .await
            .expect("finish_run released the lease");
        plain.release_lease(lease).await.expect("release");

        // a write the store refuses is that refusal, not a replica error
        let stale = store
            .acquire_lease(&run, Duration::from_millis(100))
            .await
            .expect("lease");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let taken = plain.acquire_lease(&run, TTL).await.expect("lease");
        let err = store
            .save_fenced(w(4), &stale)
            .await
            .expect_err("the lease is another's");
        assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
        plain.release_lease(taken).await.expect("release");

        store
            .delete(&run)
            .await
            .expect("a delete is not waited for");
        assert!(!plain.exists(&run).await.expect("exists"));
    }
    let invalid = RedisStore::cluster_builder(cluster.nodes().iter().cloned())
        .wait_for_replicas(0, Duration::from_millis(50))
        .connect()
        .await
        .expect_err("no replica asked for");
    assert!(
        invalid.to_string().contains("wait_for_replicas"),
        "{invalid}"
    );
    cleanup(cluster, &ns).await;
}

/// `MONITOR` on every node of the cluster: the commands clients sent, as
/// `(node, client address, line)`, but those run inside scripts.
struct Monitors(Vec<(String, crate::MonitorLines)>);

impl Monitors {
    async fn start(cluster: &support::redis::Cluster) -> Monitors {
        let mut all = Vec::new();
        for node in cluster.nodes() {
            let addr = node.trim_start_matches("redis://");
            all.push((node.clone(), crate::monitor(addr).await));
        }
        Monitors(all)
    }

    /// Every client command of every node since the start (or the last
    /// call): up to an `ECHO` of a mark sent to each node.
    async fn take(&mut self) -> Vec<(String, String, String)> {
        let mark = support::namespace("mark");
        let mut out = Vec::new();
        for (node, lines) in &mut self.0 {
            crate::echo_mark(node, &mark).await;
            loop {
                let line = crate::monitor_line(lines).await;
                let Some((source, command)) = line.split_once("] ") else {
                    continue;
                };
                let client = source.rsplit(' ').next().unwrap_or_default();
                if client == "lua" {
                    continue;
                }
                if command.starts_with("\"ECHO\"") && command.contains(&mark) {
                    break;
                }
                out.push((node.clone(), client.to_owned(), command.to_owned()));
            }
        }
        out
    }
}

#[fluxio::stage]
async fn count_up(ctx: fluxio::Context) -> fluxio::StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?)
}

/// On the cluster too, a 10-stage durable run is 11 scripts (`begin_run`,
/// 9 fenced saves, `finish_run`), all sent to the primary of the run's
/// slot; with `wait_for_replicas`, a checkpoint write's `WAIT` follows its
/// script on that same node and connection (one pipeline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule24_cluster_a_ten_stage_durable_run_is_eleven_scripts_on_its_primary() {
    let Some((cluster, ns, store)) = open("cluster_trips", None).await else {
        return;
    };
    let mut monitors = Monitors::start(cluster).await;
    let _ = monitors.take().await;
    let p = fluxio::pipeline![
        count_up, count_up, count_up, count_up, count_up, count_up, count_up, count_up, count_up,
        count_up
    ]
    .name("trips")
    .store(store)
    .build()
    .expect("valid");
    let out = p
        .invoke("ten", fluxio::Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(out.get::<u64>("n").expect("a number"), 10);
    let tag = format!("{{{ns}#");
    let sent: Vec<_> = monitors
        .take()
        .await
        .into_iter()
        .filter(|(_, _, command)| command.contains(&tag))
        .collect();
    let names: Vec<String> = sent
        .iter()
        .map(|(_, _, c)| c.split('"').nth(1).unwrap_or_default().to_ascii_lowercase())
        .collect();
    eprintln!(
        "cluster invoke: {} commands of the run: {names:?}",
        names.len()
    );
    assert_eq!(names, ["evalsha"; 11], "{sent:?}");
    let node = &sent[0].0;
    assert!(sent.iter().all(|(n, _, _)| n == node), "one node: {sent:?}");

    let waiting = RedisStore::cluster_builder(cluster.nodes().iter().cloned())
        .key_prefix(&ns)
        .wait_for_replicas(1, Duration::from_millis(20))
        .connect()
        .await
        .expect("connect");
    let _ = monitors.take().await;
    let cp = conformance::checkpoint("w", 1).in_pipeline("trips");
    waiting
        .save(cp.clone())
        .await
        .expect_err("no replica acknowledges");
    let sent = monitors.take().await;
    let script = sent
        .iter()
        .position(|(_, _, c)| c.contains(&tag))
        .expect("the save's script");
    let (node, client, _) = &sent[script];
    let next = sent[script + 1..]
        .iter()
        .find(|(n, c, _)| n == node && c == client)
        .map(|(_, _, command)| command.as_str());
    assert!(
        next.is_some_and(|c| c.to_ascii_lowercase().starts_with("\"wait\" \"1\" \"20\"")),
        "WAIT follows the script on {node}: {next:?}"
    );
    cleanup(cluster, &ns).await;
}
