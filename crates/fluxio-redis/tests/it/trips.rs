//! Contract rule 24 on Redis: a run's first and last round trips folded
//! (`begin_run`, `finish_run`), counted on a server of the test's own, and
//! `wait_for_replicas` against a real replica.
//!
//! The counting and replica tests start their own `redis-server` processes
//! on free loopback ports (the shared server runs other tests' commands):
//! skipped loudly when `redis-server` is not on `PATH`, failing under `CI`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fluxio::{Context, Outcome, StageResult, pipeline, stage};
use fluxio_core::Error;
use fluxio_core::store::{Begin, Change, Checkpoint, CheckpointStore, Lease, RunStatus};
use fluxio_redis::{RedisStore, RedisStoreBuilder, RedisStoreError};
use fluxio_test_support::counted::Counted;
use fluxio_test_support::{self as support, namespace};
use redis::aio::MultiplexedConnection;

const TTL: Duration = Duration::from_secs(30);

/// The journal of a run `run` of pipeline `trips`: a whole checkpoint 0,
/// then deltas each setting one key; the last one completed.
fn journal(run: &str, len: u32) -> Vec<Checkpoint> {
    let mut ctx = Context::new();
    let mut out = Vec::new();
    for seq in 0..len {
        let before = ctx.clone();
        if seq > 0 {
            ctx = ctx.set(format!("k{seq}"), seq).expect("serializes");
        }
        let mut cp = Checkpoint::new(
            run,
            "0123456789ab",
            seq,
            format!("stage-{seq}"),
            ctx.snapshot(),
        )
        .in_pipeline("trips");
        cp.seq = seq;
        cp.created_at_ms = 1_700_000_000_000;
        cp.updated_at_ms = 1_700_000_000_000 + u64::from(seq);
        if seq > 0 {
            cp.change = Change::between(&before.snapshot(), &ctx.snapshot());
        }
        out.push(cp);
    }
    if let Some(last) = out.last_mut() {
        last.status = RunStatus::Completed;
    }
    out
}

/// Everything stored under the prefix of `keys` but the nonce keys (which
/// hold a call's nonce, or `finish_run`'s result): each key (without the prefix) with
/// its type, its value (a hash's fields but the clock's `born` and `done`,
/// a sorted set's members without their clock-made scores) and whether it
/// expires.
async fn state(keys: &RedisStore, raw: &mut MultiplexedConnection) -> BTreeMap<String, String> {
    let prefix = keys.key_prefix();
    let nonces = ["a", "b", "c"].map(|r| keys.nonce_key(&format!("trips/{r}")));
    let mut out = BTreeMap::new();
    for key in support::redis::keys(raw, prefix).await {
        if nonces.contains(&key) {
            continue;
        }
        let name = key[prefix.len()..].to_owned();
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(raw)
            .await
            .expect("TYPE");
        let value = match kind.as_str() {
            "string" => {
                let v: Vec<u8> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(raw)
                    .await
                    .expect("GET");
                String::from_utf8_lossy(&v).into_owned()
            }
            "hash" => {
                let mut h: BTreeMap<String, Vec<u8>> = redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(raw)
                    .await
                    .expect("HGETALL");
                h.remove("born");
                h.remove("done");
                format!("{h:?}")
            }
            "zset" => {
                let m: Vec<String> = redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query_async(raw)
                    .await
                    .expect("ZRANGE");
                format!("{m:?}")
            }
            other => panic!("unexpected type {other} of {key}"),
        };
        let ttl = crate::pttl(raw, &key).await;
        out.insert(name, format!("{kind} {value} expires={}", ttl > 0));
    }
    out
}

/// The tests' settings: the last completed run of each pipeline kept.
fn keep_one(builder: RedisStoreBuilder) -> RedisStoreBuilder {
    builder.keep_completed(Some(1))
}

async fn store(prefix: &str) -> RedisStore {
    crate::store_in(prefix, keep_one).await
}

/// The steps of the comparison, on `s`; the state after each.
async fn steps(
    s: &dyn CheckpointStore,
    keys: &RedisStore,
    raw: &mut MultiplexedConnection,
) -> Vec<BTreeMap<String, String>> {
    let a = journal("a", 4);
    let mut states = Vec::new();
    let begun = s
        .begin_run(a[0].clone(), TTL, Begin::IfAbsent)
        .await
        .expect("begins");
    assert!(begun.started, "nothing stored: written");
    states.push(state(keys, raw).await);
    for cp in &a[1..3] {
        s.save_fenced(cp.clone(), &begun.lease).await.expect("save");
    }
    states.push(state(keys, raw).await);
    s.finish_run(a[3].clone(), begun.lease, false)
        .await
        .expect("finishes");
    states.push(state(keys, raw).await);

    let kept = s
        .begin_run(a[0].clone(), TTL, Begin::IfAbsent)
        .await
        .expect("begins");
    assert!(!kept.started, "a stored run is kept");
    assert_eq!(
        s.load("trips/a").await.expect("load").map(|cp| cp.seq),
        Some(3)
    );
    states.push(state(keys, raw).await);
    s.release_lease(kept.lease).await.expect("release");

    let again = s
        .begin_run(a[0].clone(), TTL, Begin::Replace)
        .await
        .expect("begins");
    assert!(again.started);
    states.push(state(keys, raw).await);
    let mut done = a[1].clone();
    done.status = RunStatus::Completed;
    s.finish_run(done, again.lease, true)
        .await
        .expect("finishes, deleting");
    assert!(!s.exists("trips/a").await.expect("exists"));
    states.push(state(keys, raw).await);

    // keep_completed(1): the second completed run of the pipeline trims the first
    for run in ["b", "c"] {
        let j = journal(run, 2);
        let begun = s
            .begin_run(j[0].clone(), TTL, Begin::Replace)
            .await
            .expect("begins");
        s.finish_run(j[1].clone(), begun.lease, false)
            .await
            .expect("finishes");
        states.push(state(keys, raw).await);
    }
    assert!(!s.exists("trips/b").await.expect("exists"), "trimmed");
    states
}

#[tokio::test]
async fn rule24_begin_and_finish_run_write_what_the_default_calls_write() {
    let Some(mut raw) = support::redis::raw().await else {
        return;
    };
    let (native_prefix, default_prefix) = (namespace("trips_native"), namespace("trips_default"));
    let native = store(&native_prefix).await;
    let defaults = Counted::stepwise(store(&default_prefix).await);
    let ours = steps(&native, &native, &mut raw).await;
    let theirs = steps(&defaults, &defaults.inner, &mut raw).await;
    assert_eq!(ours.len(), theirs.len());
    for (i, (ours, theirs)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(ours, theirs, "step {i}: native != default calls");
    }
    // the native calls' nonce: kept with the lease, a mark once finished
    let nonce = native.nonce_key("trips/c");
    let mark = get(&mut raw, &nonce).await;
    assert!(
        mark.as_deref().is_some_and(|m| m.starts_with("end:")),
        "{mark:?}"
    );
    let ttl = crate::pttl(&mut raw, &nonce).await;
    assert!(
        ttl > 0 && ttl <= 10_000,
        "kept for a command timeout: {ttl}"
    );
    support::redis::cleanup(&mut raw, &native_prefix).await;
    support::redis::cleanup(&mut raw, &default_prefix).await;
}

#[tokio::test]
async fn rule24_begin_run_refuses_without_writing_or_leasing() {
    let Some((mut raw, prefix, s)) = crate::open("trips_refuse", keep_one).await else {
        return;
    };
    let j = journal("r", 3);

    // held: RunIdInUse, nothing written
    let held = s.acquire_lease("trips/r", TTL).await.expect("acquire");
    let err = s
        .begin_run(j[0].clone(), TTL, Begin::Replace)
        .await
        .expect_err("held");
    assert!(matches!(err, Error::RunIdInUse { .. }), "{err:?}");
    assert!(!s.exists("trips/r").await.expect("exists"));
    s.release_lease(held).await.expect("release");

    // a delta cannot begin a run: nothing deleted, no lease taken
    let begun = s
        .begin_run(j[0].clone(), TTL, Begin::Replace)
        .await
        .expect("begins");
    s.save_fenced(j[1].clone(), &begun.lease)
        .await
        .expect("save");
    s.release_lease(begun.lease).await.expect("release");
    let err = s
        .begin_run(j[2].clone(), TTL, Begin::Replace)
        .await
        .expect_err("a delta");
    assert!(!matches!(err, Error::RunIdInUse { .. }), "{err:?}");
    assert_eq!(
        s.load("trips/r").await.expect("load").map(|cp| cp.seq),
        Some(1),
        "the stored run is untouched"
    );
    let lease = s
        .acquire_lease("trips/r", TTL)
        .await
        .expect("no lease was left behind");
    s.release_lease(lease).await.expect("release");

    // a cancel mark without its journal: IfAbsent is Cancelled, Replace deletes it
    let mark = s.cancelled_key("trips/r");
    s.delete("trips/r").await.expect("delete");
    let _: () = redis::cmd("SET")
        .arg(&mark)
        .arg(1)
        .query_async(&mut raw)
        .await
        .expect("SET");
    let err = s
        .begin_run(j[0].clone(), TTL, Begin::IfAbsent)
        .await
        .expect_err("cancelled");
    assert!(matches!(err, Error::Cancelled { .. }), "{err:?}");
    let begun = s
        .begin_run(j[0].clone(), TTL, Begin::Replace)
        .await
        .expect("Replace starts afresh");
    assert!(begun.started);
    s.finish_run(j[2].clone(), begun.lease, false)
        .await
        .expect_err("j[2] is a delta on j[1], which is not stored");
    let lease = s
        .acquire_lease("trips/r", TTL)
        .await
        .expect("finish_run released the lease though the save failed");
    s.release_lease(lease).await.expect("release");
    support::redis::cleanup(&mut raw, &prefix).await;
}

#[tokio::test]
async fn rule24_finish_run_of_a_lost_or_cancelled_lease() {
    let Some((mut raw, prefix, s)) = crate::open("trips_lost", keep_one).await else {
        return;
    };
    let j = journal("l", 2);

    let begun = s
        .begin_run(j[0].clone(), TTL, Begin::Replace)
        .await
        .expect("begins");
    s.cancel("trips/l").await.expect("cancel");
    let err = s
        .finish_run(j[1].clone(), begun.lease, false)
        .await
        .expect_err("cancelled");
    assert!(matches!(err, Error::Cancelled { .. }), "{err:?}");
    assert!(
        s.load("trips/l")
            .await
            .expect("load")
            .expect("kept")
            .is_cancelled(),
        "the cancel stays"
    );
    assert!(
        get(&mut raw, &s.lease_key("trips/l")).await.is_none(),
        "released all the same"
    );

    s.delete("trips/l").await.expect("delete");
    let begun = s
        .begin_run(j[0].clone(), Duration::from_millis(100), Begin::Replace)
        .await
        .expect("begins");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let other = s.acquire_lease("trips/l", TTL).await.expect("expired");
    let err = s
        .finish_run(j[1].clone(), begun.lease, true)
        .await
        .expect_err("lost");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    assert_eq!(
        get(&mut raw, &s.lease_key("trips/l")).await,
        Some(other.token().to_string()),
        "the other owner's lease is not released"
    );
    assert_eq!(
        s.load("trips/l").await.expect("load").map(|cp| cp.seq),
        Some(0),
        "nothing written, nothing deleted"
    );
    s.release_lease(other).await.expect("release");
    support::redis::cleanup(&mut raw, &prefix).await;
}

async fn get(raw: &mut MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(raw)
        .await
        .expect("GET")
}

// ---- a server of the test's own ----

/// The test's own servers.
type Server = crate::OwnServer;

impl Server {
    /// `INFO section` as `field -> value`.
    async fn info(&self, section: &str) -> BTreeMap<String, String> {
        let text: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.conn().await)
            .await
            .expect("INFO");
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
            .collect()
    }
}

#[stage]
async fn count_up(ctx: Context) -> StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?)
}

/// The calls of `name` in `INFO commandstats`.
fn calls(stats: &BTreeMap<String, String>, name: &str) -> u64 {
    stats
        .get(&format!("cmdstat_{name}"))
        .and_then(|v| v.strip_prefix("calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule24_a_ten_stage_durable_run_is_eleven_round_trips() {
    // the test's own INFO calls are not the store's
    let Some((server, store, mut monitor)) = crate::Monitor::on_own("trips", &["info"]).await
    else {
        return;
    };

    // the store's calls of a 10-stage run: begin, 9 fenced saves, finish
    let j = journal("ten", 11);
    let stats = server.info("commandstats").await;
    let begun = store
        .begin_run(j[0].clone(), TTL, Begin::Replace)
        .await
        .expect("begins");
    assert_eq!(monitor.take().await, ["evalsha"], "begin_run: one script");
    for cp in &j[1..10] {
        store
            .save_fenced(cp.clone(), &begun.lease)
            .await
            .expect("save");
    }
    assert_eq!(monitor.take().await.len(), 9);
    store
        .finish_run(j[10].clone(), begun.lease, false)
        .await
        .expect("finishes");
    assert_eq!(monitor.take().await, ["evalsha"], "finish_run: one script");
    let after = server.info("commandstats").await;
    assert_eq!(calls(&after, "evalsha") - calls(&stats, "evalsha"), 11);

    // the pipeline's: at most 11 once it calls begin_run and finish_run
    let folded = Arc::new(Counted::native(store.clone()));
    let p = pipeline![
        count_up, count_up, count_up, count_up, count_up, count_up, count_up, count_up, count_up,
        count_up
    ]
    .name("trips")
    .store_arc(Arc::clone(&folded) as Arc<dyn CheckpointStore>)
    .build()
    .expect("valid");
    for (how, id) in [("invoke", "inv"), ("start", "sta")] {
        let folds = folded.folds();
        let out = if how == "invoke" {
            p.invoke(id, Context::new()).await
        } else {
            p.start(id, Context::new()).await
        }
        .and_then(Outcome::completed)
        .expect("runs");
        assert_eq!(out.get::<u64>("n").expect("a number"), 10);
        let sent = monitor.take().await;
        assert_eq!(folded.folds() - folds, 2, "begin_run and finish_run");
        eprintln!("{how}: {} round trips: {sent:?}", sent.len());
        if how == "invoke" {
            assert_eq!(sent, ["evalsha"; 11], "{how}");
        } else {
            // start first reads the run without its lease (a completed run
            // is returned as it is), and, for a named pipeline, whether a
            // run of before names waits under the bare id (rule 10)
            let mut expected = vec!["evalsha", "exists"];
            expected.extend(["evalsha"; 11]);
            assert_eq!(sent, expected, "{how}");
        }
    }
}

// ---- wait_for_replicas ----

/// A primary and a replica of it, linked.
async fn replicated() -> Option<(Server, Server)> {
    let primary = Server::start("trips", None)?;
    let replica = Server::start("trips", Some(primary.port))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let link = replica.info("replication").await;
        let info = primary.info("replication").await;
        if link.get("master_link_status").map(String::as_str) == Some("up")
            && info.get("connected_slaves").map(String::as_str) == Some("1")
        {
            return Some((primary, replica));
        }
        assert!(
            Instant::now() < deadline,
            "the replica did not link: {link:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn replicas_error(e: &Error) -> (u64, u32) {
    let Error::Store { source, .. } = e else {
        panic!("{e:?}")
    };
    source
        .downcast_ref::<RedisStoreError>()
        .and_then(RedisStoreError::replicas_acknowledged)
        .unwrap_or_else(|| panic!("not a replica error: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_a_live_replica_acknowledges_and_a_stopped_one_fails_the_write() {
    let Some((primary, replica)) = replicated().await else {
        return;
    };
    let connect = |n| {
        RedisStore::builder(primary.url())
            .key_prefix("wait")
            .wait_for_replicas(n, Duration::from_millis(300))
            .connect()
    };
    let one = connect(1).await.expect("connect");
    let j = journal("w", 3);
    let begun = one
        .begin_run(j[0].clone(), TTL, Begin::Replace)
        .await
        .expect("one replica acknowledges");
    // a server that lost the scripts gets them, and the pipeline again
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut primary.conn().await)
        .await
        .expect("SCRIPT FLUSH");
    one.save_fenced(j[1].clone(), &begun.lease)
        .await
        .expect("one replica acknowledges");
    // the replica has it when the call returns
    let on_replica: bool = redis::cmd("EXISTS")
        .arg(one.checkpoint_key("trips/w"))
        .query_async(&mut replica.conn().await)
        .await
        .expect("EXISTS");
    assert!(on_replica);

    // two asked, one there: the write fails, naming the run and the numbers
    let two = connect(2).await.expect("connect");
    let err = two
        .save_fenced(j[2].clone(), &begun.lease)
        .await
        .expect_err("one replica of two");
    assert_eq!(replicas_error(&err), (1, 2));
    let text = err.to_string();
    assert!(
        text.contains("trips/w") && text.contains("1 of the 2"),
        "{text}"
    );
    assert_eq!(
        one.load("trips/w").await.expect("load").map(|cp| cp.seq),
        Some(2),
        "the primary applied it all the same"
    );

    // the replica stopped: none acknowledges
    drop(replica);
    let mut done = j[2].clone();
    done.seq = 3;
    done.change = Change::none();
    let err = one
        .finish_run(done, begun.lease, false)
        .await
        .expect_err("no replica");
    assert_eq!(replicas_error(&err), (0, 1));
    assert!(err.to_string().contains("0 of the 1"), "{err}");
    let err = one
        .begin_run(journal("x", 1)[0].clone(), TTL, Begin::Replace)
        .await
        .expect_err("no replica");
    assert_eq!(replicas_error(&err), (0, 1));
    // begin_run gave the lease back
    let lease = one.acquire_lease("trips/x", TTL).await.expect("free");
    one.release_lease(lease).await.expect("release");
    // a refused write is the refusal, not a replica error
    let err = one
        .save_fenced(j[1].clone(), &Lease::new("trips/w", 999))
        .await
        .expect_err("no such lease");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
}

#[tokio::test]
async fn wait_for_replicas_settings_are_checked() {
    for (n, timeout, why) in [
        (0, Duration::from_millis(100), "at least 1 replica"),
        (1, Duration::ZERO, "at least 1 ms"),
        (
            1,
            Duration::from_secs(10),
            "shorter than the command timeout",
        ),
    ] {
        let err = RedisStore::builder("redis://127.0.0.1:1")
            .wait_for_replicas(n, timeout)
            .connect()
            .await
            .expect_err("invalid");
        let Error::Store { source, .. } = &err else {
            panic!("{err:?}")
        };
        let source = source.downcast_ref::<RedisStoreError>().expect("ours");
        assert_eq!(source.setting_name(), Some("wait_for_replicas"));
        assert!(err.to_string().contains(why), "{err}");
    }
}
