//! Listing runs on Redis (contract rule 21): the index is written by the
//! script of every write, pages answer exactly as `InMemoryStore`'s, runs
//! that expire leave the index, and runs of earlier builds are indexed by
//! `reindex` or by their next write.

use std::collections::BTreeMap;
use std::time::Duration;

use fluxio_core::store::{
    Change, Checkpoint, CheckpointStore, InMemoryStore, RunFilter, RunState, RunStatus, RunSummary,
    conformance, retry_run,
};
use fluxio_core::{Context, Error};
use fluxio_redis::RedisStore;
use fluxio_test_support as support;
use redis::aio::MultiplexedConnection;

const TTL: Duration = Duration::from_secs(30);
/// A format 3 checkpoint of an earlier build (see the fixtures' README).
const V3_RUNNING: &[u8] = include_bytes!("../../../../tests/fixtures/checkpoints/v3_running.bin");
const V3_FAILED: &[u8] = include_bytes!("../../../../tests/fixtures/checkpoints/v3_failed.bin");

/// [`crate::open`], completed runs kept `retention`, and the last `keep`
/// of each pipeline.
async fn open(
    name: &str,
    retention: Option<Duration>,
    keep: Option<usize>,
) -> Option<(MultiplexedConnection, String, RedisStore)> {
    crate::open(name, |b| {
        b.completed_retention(retention).keep_completed(keep)
    })
    .await
}

async fn members(raw: &mut MultiplexedConnection, set: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(set)
        .arg(0)
        .arg(-1)
        .query_async(raw)
        .await
        .expect("ZRANGE")
}

/// Every page of `filter`, chained by the cursors.
async fn all_pages(store: &dyn CheckpointStore, filter: RunFilter) -> Vec<RunSummary> {
    let mut filter = filter;
    let mut runs = Vec::new();
    loop {
        let page = store.list_runs(&filter).await.expect("list");
        assert!(page.runs.len() <= filter.limit.max(1));
        runs.extend(page.runs);
        match page.next {
            Some(next) => filter = filter.after(next),
            None => return runs,
        }
    }
}

/// Rule 21: the listing of every run agrees with `load` of each of `keys`
/// (the runs that may be stored): the same runs, each with the status,
/// step, attempt, version and error of its latest checkpoint. Returns the
/// listed states by key.
async fn agrees(store: &RedisStore, keys: &[&str]) -> BTreeMap<String, RunState> {
    let listed = all_pages(store, RunFilter::new().limit(2)).await;
    let mut loaded = BTreeMap::new();
    for key in keys {
        if let Some(cp) = store.load(key).await.expect("load") {
            loaded.insert((*key).to_owned(), cp);
        }
    }
    assert_eq!(
        listed.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        loaded.keys().map(String::as_str).collect::<Vec<_>>(),
        "the listing names the stored runs, in key order"
    );
    for run in &listed {
        let cp = &loaded[&run.key];
        let status = match run.state {
            RunState::Running | RunState::Abandoned => RunStatus::Running,
            RunState::Failed => RunStatus::Failed,
            RunState::Completed => RunStatus::Completed,
            RunState::Cancelled => RunStatus::Cancelled,
            RunState::NeedsAttention => RunStatus::NeedsAttention,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (
                status,
                &run.step,
                run.attempt,
                &run.version,
                &run.error_message
            ),
            (
                cp.status,
                &cp.step,
                cp.attempt,
                &cp.version,
                &cp.error_message
            ),
            "{}",
            run.key
        );
        assert_eq!(
            (run.created_at_ms, run.updated_at_ms, &run.pipeline),
            (cp.created_at_ms, cp.updated_at_ms, &cp.pipeline),
            "{}",
            run.key
        );
    }
    listed.into_iter().map(|r| (r.key, r.state)).collect()
}

/// Checkpoint `seq` (whole) of `run` in pipeline `p`.
fn entry(run: &str, seq: u32) -> Checkpoint {
    let mut cp = conformance::checkpoint(run, seq + 1).in_pipeline("p");
    cp.seq = seq;
    cp
}

/// Rule 21 on Redis: every write keeps the index in its own script: plain
/// and fenced saves (a status change moves the run between the status
/// sets; a fresh run over an old one too), cancel, delete, delete_fenced,
/// the keep-the-last-N trim, the migration of a run of an earlier build by
/// its first write, and needs-attention and its retry (rule 22). After each, the listing agrees with `load`,
/// and the index sets hold exactly the runs in their status.
#[tokio::test]
async fn rule21_every_write_keeps_the_index_in_its_script() {
    let Some((mut raw, prefix, store)) = open("list_writes", Some(TTL), Some(1)).await else {
        return;
    };
    let keys = ["p/a", "p/b", "p/c", "orders/golden:run/ü 🦀", "p/d", "p/e"];
    let set = |status: &str| format!("{prefix}.runs.{status}");

    // a: running under a lease, then failed, then running again, then completed
    let lease = store.acquire_lease("p/a", TTL).await.expect("lease");
    store
        .save_fenced(entry("a", 0), &lease)
        .await
        .expect("save");
    assert_eq!(
        agrees(&store, &keys).await,
        BTreeMap::from([("p/a".to_owned(), RunState::Running)])
    );
    store
        .save_fenced(entry("a", 1).failed("card declined"), &lease)
        .await
        .expect("save");
    assert_eq!(members(&mut raw, &set("failed")).await, ["p/a"]);
    assert!(members(&mut raw, &set("running")).await.is_empty());
    let page = store
        .list_runs(&RunFilter::new().state(RunState::Failed))
        .await
        .expect("list");
    assert_eq!(page.runs[0].error_message.as_deref(), Some("card declined"));
    store
        .save_fenced(entry("a", 2), &lease)
        .await
        .expect("save");
    agrees(&store, &keys).await;
    assert!(members(&mut raw, &set("failed")).await.is_empty());
    let page = store
        .list_runs(&RunFilter::new().state(RunState::Running))
        .await
        .expect("list");
    assert_eq!(page.runs[0].error_message, None, "the error is gone");
    store
        .save_fenced(entry("a", 3).completed(), &lease)
        .await
        .expect("save");
    store.release_lease(lease).await.expect("release");
    assert_eq!(members(&mut raw, &set("completed")).await, ["p/a"]);

    // b: a plain save, abandoned (no lease); then cancelled
    store.save(entry("b", 0)).await.expect("save");
    assert_eq!(
        agrees(&store, &keys).await.get("p/b"),
        Some(&RunState::Abandoned)
    );
    store.cancel("p/b").await.expect("cancel");
    assert_eq!(
        agrees(&store, &keys).await.get("p/b"),
        Some(&RunState::Cancelled)
    );
    assert_eq!(members(&mut raw, &set("cancelled")).await, ["p/b"]);
    assert_eq!(
        members(&mut raw, &set("running")).await,
        Vec::<String>::new()
    );
    // a plain save replaces the cancelled run: running again
    store.save(entry("b", 0)).await.expect("save");
    assert_eq!(members(&mut raw, &set("running")).await, ["p/b"]);
    assert!(members(&mut raw, &set("cancelled")).await.is_empty());

    // c completes: keep_completed(1) trims a, in the same script
    store.save(entry("c", 0).completed()).await.expect("save");
    assert_eq!(members(&mut raw, &set("completed")).await, ["p/c"]);
    assert_eq!(
        agrees(&store, &keys).await.keys().collect::<Vec<_>>(),
        ["p/b", "p/c"]
    );
    // a fresh run under c's key (a whole checkpoint 0 under a lease): running
    let lease = store.acquire_lease("p/c", TTL).await.expect("lease");
    store
        .save_fenced(entry("c", 0), &lease)
        .await
        .expect("save");
    assert!(members(&mut raw, &set("completed")).await.is_empty());
    assert_eq!(agrees(&store, &keys).await["p/c"], RunState::Running);
    store.delete_fenced("p/c", &lease).await.expect("delete");
    store.release_lease(lease).await.expect("release");
    store.delete("p/b").await.expect("delete");
    assert!(agrees(&store, &keys).await.is_empty());
    for status in ["running", "failed", "completed", "cancelled"] {
        assert!(members(&mut raw, &set(status)).await.is_empty(), "{status}");
    }
    assert!(
        members(&mut raw, &format!("{prefix}.runs"))
            .await
            .is_empty()
    );

    an_earlier_builds_run_is_indexed_by_its_first_write(&mut raw, &store, &keys).await;
    a_retry_and_a_lapsed_lease_move_runs(&mut raw, &store, &keys, &prefix).await;
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// A run of an earlier build (one string) is not indexed until written:
/// its first fenced save migrates and indexes it in one script, and so
/// does its cancel.
async fn an_earlier_builds_run_is_indexed_by_its_first_write(
    raw: &mut MultiplexedConnection,
    store: &RedisStore,
    keys: &[&str],
) {
    let old = "orders/golden:run/ü 🦀";
    let journal = store.checkpoint_key(old);
    crate::set(raw, &journal, V3_RUNNING).await;
    assert!(all_pages(store, RunFilter::new()).await.is_empty());
    let loaded = store.load(old).await.expect("load").expect("stored");
    let lease = store.acquire_lease(old, TTL).await.expect("lease");
    let mut next = loaded.clone();
    next.seq = 1;
    next.ip += 1;
    next.change = Change::none();
    store.save_fenced(next, &lease).await.expect("resume");
    assert_eq!(agrees(store, keys).await[old], RunState::Running);
    store.delete_fenced(old, &lease).await.expect("delete");
    store.release_lease(lease).await.expect("release");
    // and its cancel, likewise
    crate::set(raw, &journal, V3_FAILED).await;
    store.cancel(old).await.expect("cancel");
    assert_eq!(agrees(store, keys).await[old], RunState::Cancelled);
    store.delete(old).await.expect("delete");
}

/// A run recovery gave up on is handed back by an operator's retry; a
/// lease that lapses makes its run abandoned.
async fn a_retry_and_a_lapsed_lease_move_runs(
    raw: &mut MultiplexedConnection,
    store: &RedisStore,
    keys: &[&str],
    prefix: &str,
) {
    let set = |status: &str| format!("{prefix}.runs.{status}");
    // e: recovery gave up on it; an operator's retry hands it back
    store
        .save(entry("e", 0).failed("timeout").needing_attention())
        .await
        .expect("save");
    assert_eq!(members(raw, &set("needs_attention")).await, ["p/e"]);
    assert_eq!(agrees(store, keys).await["p/e"], RunState::NeedsAttention);
    retry_run(store, "p/e").await.expect("retry");
    assert!(members(raw, &set("needs_attention")).await.is_empty());
    assert_eq!(agrees(store, keys).await["p/e"], RunState::Abandoned);
    store.delete("p/e").await.expect("delete");

    // d: a lease that lapses makes the run abandoned
    let lease = store
        .acquire_lease("p/d", Duration::from_millis(200))
        .await
        .expect("lease");
    store
        .save_fenced(entry("d", 0), &lease)
        .await
        .expect("save");
    assert_eq!(agrees(store, keys).await["p/d"], RunState::Running);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(agrees(store, keys).await["p/d"], RunState::Abandoned);
    store.delete("p/d").await.expect("delete");
}

/// Rule 21 on Redis: a completed run whose retention runs out leaves no
/// ghost: the next completion's script sweeps it out of the index (from
/// `P.expiring`), without any listing; one a listing meets first is
/// dropped by the listing's script (see `journal::rule20_expiry_...`).
#[tokio::test]
async fn rule21_expired_runs_leave_the_index_when_others_complete() {
    let retention = Some(Duration::from_millis(300));
    let Some((mut raw, prefix, store)) = open("list_expiry", retention, None).await else {
        return;
    };
    let (runs, expiring) = (format!("{prefix}.runs"), format!("{prefix}.expiring"));
    store.save(entry("old", 0).completed()).await.expect("save");
    store
        .save(entry("kept", 0).failed("boom"))
        .await
        .expect("save");
    assert_eq!(members(&mut raw, &expiring).await, ["p/old"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!store.exists("p/old").await.expect("exists"));
    assert_eq!(
        members(&mut raw, &runs).await,
        ["p/kept", "p/old"],
        "expired: still named until swept"
    );
    store.save(entry("new", 0).completed()).await.expect("save");
    assert_eq!(members(&mut raw, &runs).await, ["p/kept", "p/new"]);
    assert_eq!(members(&mut raw, &expiring).await, ["p/new"]);
    assert!(
        members(&mut raw, &format!("{prefix}.runs.completed"))
            .await
            .contains(&"p/new".to_owned())
    );
    // a completed run that becomes failed leaves `P.expiring`
    store
        .save(entry("new", 0).failed("boom"))
        .await
        .expect("save");
    assert!(members(&mut raw, &expiring).await.is_empty());
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// Rule 21: Redis pages exactly as `InMemoryStore` (the reference) for the
/// same runs: every filter (pipelines sharing a prefix, the bare ids'
/// pipeline `""`, a pipeline with a `/`, each state, versions, times),
/// limits and cursors, keys with `/`, `:` and non-ASCII characters.
#[tokio::test]
async fn rule21_pages_are_those_of_the_in_memory_store() {
    let Some((mut raw, prefix, redis)) = open("list_same", Some(TTL), None).await else {
        return;
    };
    pages_agree(&redis).await;
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// As [`rule21_pages_are_those_of_the_in_memory_store`], on a Redis
/// Cluster: the listing merges the buckets, page by page.
#[tokio::test]
async fn rule21_cluster_pages_are_those_of_the_in_memory_store() {
    let Some((cluster, prefix, redis)) = crate::cluster::open("list_same_cluster", None).await
    else {
        return;
    };
    pages_agree(&redis).await;
    crate::cluster::cleanup(cluster, &prefix).await;
}

/// Writes runs of several pipelines, in every state, to `redis` and to an
/// `InMemoryStore`, and compares their pages for every filter.
async fn pages_agree(redis: &RedisStore) {
    let memory = InMemoryStore::new();
    let stores: [&dyn CheckpointStore; 2] = [&memory, redis];
    let pipelines = ["p", "p2", "p.x", "q", ""];
    let ids = ["r1", "r/2", "ü 🦀", "0", "a/b", "z:9"];
    let mut held = Vec::new();
    let mut n = 0u64;
    for pipeline in pipelines {
        for id in ids {
            n += 1;
            let mut cp = conformance::checkpoint(id, 1).in_pipeline(pipeline);
            cp.version = if n % 3 == 0 { "v2" } else { "v1" }.to_owned();
            cp.created_at_ms = 1_000 + n;
            cp.updated_at_ms = 2_000 + n * 7 % 31;
            cp.step = format!("step-{n}");
            let cp = match n % 7 {
                0 => cp.failed(format!("failure {n}")),
                4 => cp.failed(format!("failure {n}")).needing_attention(),
                1 => cp.completed(),
                2 => {
                    // as a cancel writes it, but with a fixed time
                    let mut c = cp.cancelled();
                    c.updated_at_ms = 2_000 + n;
                    c
                }
                _ => cp,
            };
            let key = cp.key();
            for store in stores {
                if n % 7 == 3 {
                    let lease = store.acquire_lease(&key, TTL).await.expect("lease");
                    store.save_fenced(cp.clone(), &lease).await.expect("save");
                    held.push((store, lease));
                } else {
                    store.save(cp.clone()).await.expect("save");
                }
            }
        }
    }
    let states: Vec<Option<RunState>> = std::iter::once(None)
        .chain(RunState::ALL.into_iter().map(Some))
        .collect();
    let without_lease_time = |mut runs: Vec<RunSummary>| {
        for r in &mut runs {
            r.lease_expires_at_ms = r.lease_expires_at_ms.map(|_| 1);
        }
        runs
    };
    let mut compared = 0;
    for pipeline in [
        None,
        Some("p"),
        Some("p2"),
        Some("p.x"),
        Some(""),
        Some("a"),
        Some("p/r"),
    ] {
        for state in states.iter().copied() {
            for version in [None, Some("v2")] {
                for (created, updated) in [(None, None), (Some(1_010), None), (None, Some(2_015))] {
                    for limit in [1, 4, 100] {
                        for after in [None, Some("p/"), Some("p/r1"), Some("q")] {
                            let mut filter = RunFilter::new().limit(limit);
                            filter.pipeline = pipeline.map(str::to_owned);
                            filter.state = state;
                            filter.version = version.map(str::to_owned);
                            filter.created_after_ms = created;
                            filter.updated_before_ms = updated;
                            filter.after = after.map(str::to_owned);
                            let expected = memory.list_runs(&filter).await.expect("memory");
                            let got = redis.list_runs(&filter).await.expect("redis");
                            assert_eq!(
                                (without_lease_time(got.runs), got.next),
                                (without_lease_time(expected.runs), expected.next),
                                "{filter:?}"
                            );
                            compared += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(compared, 7 * (RunState::ALL.len() + 1) * 2 * 3 * 3 * 4);
    // and whole listings, page after page
    for limit in [1, 7] {
        assert_eq!(
            without_lease_time(all_pages(redis, RunFilter::new().limit(limit)).await),
            without_lease_time(all_pages(&memory, RunFilter::new().limit(limit)).await),
        );
    }
    let everything = all_pages(redis, RunFilter::new()).await;
    assert_eq!(everything.len(), pipelines.len() * ids.len());
    let bare = everything.iter().find(|r| r.key == "a/b").expect("listed");
    assert_eq!(
        (bare.pipeline.as_str(), bare.run_id.as_str()),
        ("", "a/b"),
        "a bare run id with a `/` keeps its pipeline and id"
    );
    for (store, lease) in held {
        store.release_lease(lease).await.expect("release");
    }
}

/// Rule 21 on Redis: a filter few runs pass is answered through several
/// bounded scripts (each looks at 500 index members at most), and still
/// finds the run past them; a page larger than 10,000 is clamped.
#[tokio::test]
async fn rule21_a_sparse_filter_reads_the_index_in_bounded_slices() {
    let Some((mut raw, prefix, store)) = open("list_sparse", Some(TTL), None).await else {
        return;
    };
    let saves = (0..4_500u32).map(|i| {
        let mut cp = entry(&format!("r{i:05}"), 0);
        if i == 4_321 {
            cp.version = "rare".to_owned();
        }
        let store = &store;
        async move { store.save(cp).await.expect("save") }
    });
    futures::future::join_all(saves).await;
    let page = store
        .list_runs(&RunFilter::new().version("rare"))
        .await
        .expect("list");
    assert_eq!(
        page.runs.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["p/r04321"]
    );
    assert_eq!(page.next, None);
    let largest = RunFilter::new()
        .pipeline("p")
        .limit(fluxio_core::store::MAX_LIST_LIMIT);
    let page = store.list_runs(&largest).await.expect("list");
    assert_eq!((page.runs.len(), page.next), (4_500, None));
    let page = store
        .list_runs(&RunFilter::new().pipeline("p").limit(4_499))
        .await
        .expect("list");
    assert_eq!(page.next.as_deref(), Some("p/r04498"));
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// Rule 21 on Redis: runs that builds before the index wrote (a journal
/// hash without the summary, and one string of a build before the
/// journal) are listed once `reindex` has run, which indexes each once;
/// a `status` this build does not know is a typed error naming the run.
#[tokio::test]
async fn rule21_reindex_lists_the_runs_of_earlier_builds() {
    let Some((mut raw, prefix, store)) = open("list_reindex", Some(TTL), None).await else {
        return;
    };
    // a hash as the build before the index wrote it: no summary, no index
    store
        .save(entry("hash", 0).failed("boom"))
        .await
        .expect("save");
    let journal = store.checkpoint_key("p/hash");
    support::redis::drop_summary(&mut raw, &journal).await;
    for set in [store.runs_key(), format!("{prefix}.runs.failed")] {
        let _: () = redis::cmd("DEL")
            .arg(set)
            .query_async(&mut raw)
            .await
            .expect("DEL");
    }
    // a string of a build before the journal, completed, with an expiry
    let old = "orders/golden:run/ü 🦀";
    let expiry = Duration::from_secs(60);
    crate::set_expiring(&mut raw, &store.checkpoint_key(old), V3_RUNNING, expiry).await;
    assert!(all_pages(&store, RunFilter::new()).await.is_empty());

    assert_eq!(store.reindex().await.expect("reindex"), 2);
    let keys = ["p/hash", old];
    let states = agrees(&store, &keys).await;
    assert_eq!(
        states,
        BTreeMap::from([
            (old.to_owned(), RunState::Abandoned),
            ("p/hash".to_owned(), RunState::Failed)
        ])
    );
    let ttl = crate::pttl(&mut raw, &store.checkpoint_key(old)).await;
    assert!(ttl > 0 && ttl <= 60_000, "the expiry is kept: {ttl}");
    assert_eq!(store.reindex().await.expect("reindex"), 0, "once");
    let loaded = store.load(old).await.expect("load").expect("stored");
    assert_eq!(loaded, Checkpoint::from_bytes(old, V3_RUNNING).expect("v3"));

    // a status of a later build is refused by name
    let _: () = redis::cmd("HSET")
        .arg(&journal)
        .arg("status")
        .arg("resting")
        .query_async(&mut raw)
        .await
        .expect("HSET");
    match store.list_runs(&RunFilter::new()).await {
        Err(Error::CorruptCheckpoint { run_id, reason, .. }) => {
            assert_eq!(run_id, "p/hash");
            assert!(reason.contains("resting"), "{reason}");
        }
        other => panic!("expected CorruptCheckpoint, got {other:?}"),
    }
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// The whole checkpoint and five deltas: the summary follows the latest,
/// and a listing reads no entry (it answers with the journal's meta alone
/// even when an entry is unreadable).
#[tokio::test]
async fn rule21_a_listing_reads_no_checkpoint() {
    let Some((mut raw, prefix, store)) = open("list_meta", Some(TTL), None).await else {
        return;
    };
    let lease = store.acquire_lease("p/j", TTL).await.expect("lease");
    let mut ctx = Context::new().set("n", 0).expect("set");
    store
        .save_fenced(entry("j", 0), &lease)
        .await
        .expect("save");
    for seq in 1..=5u32 {
        let next = ctx.clone().set("n", seq).expect("set");
        let mut cp = entry("j", seq);
        cp.context = next.snapshot();
        cp.change = Change::between(&ctx.snapshot(), &cp.context);
        cp.step = format!("stage-{seq}");
        store.save_fenced(cp, &lease).await.expect("save");
        ctx = next;
    }
    let _: () = redis::cmd("HSET")
        .arg(store.checkpoint_key("p/j"))
        .arg("0")
        .arg("not a checkpoint")
        .query_async(&mut raw)
        .await
        .expect("HSET");
    let page = store.list_runs(&RunFilter::new()).await.expect("list");
    assert_eq!(
        (page.runs[0].step.as_str(), page.runs[0].state),
        ("stage-5", RunState::Running)
    );
    assert!(store.load("p/j").await.is_err(), "the entry is corrupt");
    store.release_lease(lease).await.expect("release");
    support::redis::cleanup(&mut raw, &prefix).await;
}
