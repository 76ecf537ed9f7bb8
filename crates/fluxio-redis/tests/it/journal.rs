//! The run journal in Redis (contract rules 18 and 20): a run of an earlier
//! build (one format 3 blob) loads, resumes, cancels and deletes; a delta
//! writes only what changed; a completed run expires whole, a failed or
//! cancelled one is kept whole.

use std::time::Duration;

use fluxio_core::Context;
use fluxio_core::store::{Change, Checkpoint, CheckpointStore, RunFilter, RunStatus, conformance};
use fluxio_redis::RedisStore;
use fluxio_test_support as support;
use redis::aio::MultiplexedConnection;

/// Checkpoints of earlier builds (format 3), as they sit in Redis: both of
/// the pipeline `orders`, run `golden:run/ü 🦀` (see the fixtures' README).
const V3_RUNNING: &[u8] = include_bytes!("../../../../tests/fixtures/checkpoints/v3_running.bin");
const V3_FAILED: &[u8] = include_bytes!("../../../../tests/fixtures/checkpoints/v3_failed.bin");
const OLD_KEY: &str = "orders/golden:run/ü 🦀";
const TTL: Duration = Duration::from_secs(30);

/// [`crate::open`], completed runs kept `retention`.
async fn open(
    name: &str,
    retention: Option<Duration>,
) -> Option<(MultiplexedConnection, String, RedisStore)> {
    crate::open(name, |b| b.completed_retention(retention)).await
}

async fn cmd<T: redis::FromRedisValue>(raw: &mut MultiplexedConnection, args: &[&[u8]]) -> T {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).expect("a command name"));
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query_async(raw).await.expect("a raw command")
}

async fn kind(raw: &mut MultiplexedConnection, key: &str) -> String {
    cmd(raw, &[b"TYPE", key.as_bytes()]).await
}

/// Checkpoint `seq` of the run `run` of the pipeline `p` with context
/// `ctx`, a delta against `before` (`None`: whole).
fn entry(run: &str, seq: u32, ctx: &Context, before: Option<&Context>) -> Checkpoint {
    let mut cp = conformance::checkpoint(run, seq + 1).in_pipeline("p");
    cp.seq = seq;
    cp.context = ctx.snapshot();
    cp.change = before.map_or(Change::Full, |b| {
        Change::between(&b.snapshot(), &cp.context)
    });
    cp
}

/// The run `run` of the pipeline `p` under a lease: a whole checkpoint 0,
/// then deltas 1 to 3 each setting `n`, the last one as `last` makes it.
async fn four_checkpoints(store: &RedisStore, run: &str, last: impl Fn(Checkpoint) -> Checkpoint) {
    let lease = store
        .acquire_lease(&format!("p/{run}"), TTL)
        .await
        .expect("lease");
    let mut ctx = Context::new().set("n", 0).expect("set");
    store
        .save_fenced(entry(run, 0, &ctx, None), &lease)
        .await
        .expect("save");
    for seq in 1..=3u32 {
        let next = ctx.clone().set("n", seq).expect("set");
        let mut cp = entry(run, seq, &next, Some(&ctx));
        if seq == 3 {
            cp = last(cp);
        }
        store.save_fenced(cp, &lease).await.expect("save");
        ctx = next;
    }
    store.release_lease(lease).await.expect("release");
}

/// Rule 18 on Redis: a run an earlier build wrote (one string key holding a
/// format 3 checkpoint) loads as checkpoint 0, and a resume appends a delta
/// after it (the key becomes the journal hash, the old blob its checkpoint
/// 0, byte for byte); another such run cancels, and a third deletes.
#[tokio::test]
async fn rule18_a_run_of_an_earlier_build_loads_resumes_cancels_and_deletes() {
    let Some((mut raw, prefix, store)) = open("old_format", None).await else {
        return;
    };
    let key = store.checkpoint_key(OLD_KEY);
    let _: () = cmd(&mut raw, &[b"SET", key.as_bytes(), V3_RUNNING]).await;
    let old = Checkpoint::from_bytes(OLD_KEY, V3_RUNNING).expect("a format 3 checkpoint");
    assert!(store.exists(OLD_KEY).await.expect("exists"));
    let loaded = store.load(OLD_KEY).await.expect("load").expect("stored");
    assert_eq!(loaded, old);
    assert_eq!((loaded.seq, loaded.change.clone()), (0, Change::Full));
    assert_eq!(store.history(OLD_KEY).await.expect("history"), vec![old]);

    // a delta whose predecessor is not the old checkpoint is refused, and
    // the old key is left as it was
    let lease = store.acquire_lease(OLD_KEY, TTL).await.expect("lease");
    let before = Context::from(loaded.context.clone());
    let after = before.clone().set("resumed", true).expect("set");
    let mut next = loaded.clone();
    next.ip += 1;
    next.context = after.snapshot();
    next.change = Change::between(&before.snapshot(), &next.context);
    next.seq = 2;
    assert!(store.save_fenced(next.clone(), &lease).await.is_err());
    assert_eq!(kind(&mut raw, &key).await, "string", "nothing written");

    // the resume's first checkpoint: a delta after checkpoint 0
    next.seq = 1;
    store
        .save_fenced(next.clone(), &lease)
        .await
        .expect("resume");
    assert_eq!(kind(&mut raw, &key).await, "hash", "migrated on write");
    let blob: Vec<u8> = cmd(&mut raw, &[b"HGET", key.as_bytes(), b"0"]).await;
    assert_eq!(blob, V3_RUNNING, "the old checkpoint kept byte for byte");
    let latest = store.load(OLD_KEY).await.expect("load").expect("stored");
    assert_eq!(latest, next);
    let all = store.history(OLD_KEY).await.expect("history");
    assert_eq!(all.iter().map(|c| c.seq).collect::<Vec<_>>(), [0, 1]);
    store.delete_fenced(OLD_KEY, &lease).await.expect("delete");
    store.release_lease(lease).await.expect("release");
    assert!(!store.exists(OLD_KEY).await.expect("exists"));

    // an old failed run cancels: the cancel is its checkpoint 1
    let _: () = cmd(&mut raw, &[b"SET", key.as_bytes(), V3_FAILED]).await;
    store.cancel(OLD_KEY).await.expect("cancel");
    let cancelled = store.load(OLD_KEY).await.expect("load").expect("stored");
    assert_eq!((cancelled.seq, cancelled.status), (1, RunStatus::Cancelled));
    let failed = Checkpoint::from_bytes(OLD_KEY, V3_FAILED).expect("decode");
    assert_eq!(cancelled.context, failed.context);
    assert_eq!(cancelled.error_message, failed.error_message);
    assert_eq!(
        crate::pttl(&mut raw, &key).await,
        -1,
        "a cancelled run is kept"
    );
    store.delete(OLD_KEY).await.expect("delete");

    // and an old run deletes, whole
    let _: () = cmd(&mut raw, &[b"SET", key.as_bytes(), V3_RUNNING]).await;
    store.delete(OLD_KEY).await.expect("delete");
    assert!(store.load(OLD_KEY).await.expect("load").is_none());
    let left = support::redis::keys(&mut raw, &prefix).await;
    assert!(
        left.iter().all(|k| !k.contains(".cancelled:") && k != &key),
        "{left:?}"
    );
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// Rule 18 on Redis: on a run whose context holds 1 MB, a delta save stores
/// only its entry (one small hash field) and leaves the whole checkpoint
/// as it was; the load puts the context back together.
#[tokio::test]
async fn rule18_a_delta_save_writes_few_bytes() {
    let Some((mut raw, prefix, store)) = open("delta_bytes", None).await else {
        return;
    };
    let run = "big";
    let key = store.checkpoint_key("p/big");
    let lease = store.acquire_lease("p/big", TTL).await.expect("lease");
    let c0 = Context::new().set("blob", vec![7u8; 1 << 20]).expect("set");
    let base = entry(run, 0, &c0, None);
    let base_bytes = base.entry_bytes().expect("encode");
    store.save_fenced(base, &lease).await.expect("base");
    let mut ctx = c0;
    for seq in 1..=5u32 {
        let next = ctx.clone().set("stage", seq).expect("set");
        let cp = entry(run, seq, &next, Some(&ctx));
        let bytes = cp.entry_bytes().expect("encode");
        assert!(bytes.len() < 200, "a delta entry is {} bytes", bytes.len());
        store.save_fenced(cp, &lease).await.expect("delta");
        let stored: Vec<u8> = cmd(
            &mut raw,
            &[b"HGET", key.as_bytes(), seq.to_string().as_bytes()],
        )
        .await;
        assert_eq!(stored, bytes, "checkpoint {seq} holds its delta alone");
        ctx = next;
    }
    let whole: Vec<u8> = cmd(&mut raw, &[b"HGET", key.as_bytes(), b"0"]).await;
    assert!(
        whole == base_bytes,
        "the whole checkpoint is left as it was"
    );
    let fields: u64 = cmd(&mut raw, &[b"HLEN", key.as_bytes()]).await;
    assert_eq!(
        fields,
        6 + 5 + 7,
        "six checkpoints, the journal's meta fields (no `exp`) and the run's summary \
         (no `error`)"
    );
    let latest = store.load("p/big").await.expect("load").expect("stored");
    assert_eq!((latest.seq, latest.context.clone()), (5, ctx.snapshot()));
    store.release_lease(lease).await.expect("release");
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// Rule 20 on Redis: a run that completes with a delta gets the completed
/// retention on its one journal key, which holds every checkpoint: when it
/// expires, the whole run goes (no checkpoint outlives another).
#[tokio::test]
async fn rule20_expiry_of_a_completed_run_removes_all_its_keys() {
    let retention = Some(Duration::from_millis(1_500));
    let Some((mut raw, prefix, store)) = open("journal_expiry", retention).await else {
        return;
    };
    let key = "p/done";
    four_checkpoints(&store, "done", Checkpoint::completed).await;
    let journal = store.checkpoint_key(key);
    let ttl = crate::pttl(&mut raw, &journal).await;
    assert!(ttl > 1_000 && ttl <= 1_500, "completed: PTTL {ttl}");
    let index = [
        format!("{prefix}.expiring"),
        format!("{prefix}.runs"),
        format!("{prefix}.runs.completed"),
    ];
    let run_keys: Vec<String> = support::redis::keys(&mut raw, &prefix)
        .await
        .into_iter()
        .filter(|k| k != &store.epoch_key(key) && !index.contains(k))
        .collect();
    assert_eq!(run_keys, vec![journal.clone()], "the run is one key");
    assert_eq!(store.history(key).await.expect("history").len(), 4);
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    assert!(!store.exists(key).await.expect("exists"));
    assert!(store.history(key).await.expect("history").is_empty());
    let mut left = vec![store.epoch_key(key)];
    left.extend(index.iter().cloned());
    left.sort();
    assert_eq!(
        support::redis::keys(&mut raw, &prefix).await,
        left,
        "the epoch is left, and the index still names the run"
    );
    // a listing finds the run gone: it is not listed, and leaves the index
    let page = store.list_runs(&RunFilter::new()).await.expect("list");
    assert!(
        page.runs.is_empty(),
        "an expired run is not listed: {page:?}"
    );
    assert_eq!(
        support::redis::keys(&mut raw, &prefix).await,
        vec![store.epoch_key(key)],
        "only the epoch is left, with an expiry of its own"
    );
    assert!(crate::pttl(&mut raw, &store.epoch_key(key)).await > 0);
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// Rule 20 on Redis: a failed run and a cancelled run keep every key (the
/// journal, the cancel mark, the epoch) with no expiry, past the completed
/// retention, and their whole history.
#[tokio::test]
async fn rule20_a_cancelled_or_failed_run_keeps_all_its_keys_without_expiry() {
    let retention = Some(Duration::from_millis(500));
    let Some((mut raw, prefix, store)) = open("journal_kept", retention).await else {
        return;
    };
    for run in ["failed", "cancelled"] {
        if run == "failed" {
            four_checkpoints(&store, run, |cp| cp.failed("boom")).await;
        } else {
            four_checkpoints(&store, run, |cp| cp).await;
            store.cancel(&format!("p/{run}")).await.expect("cancel");
        }
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let keys = support::redis::keys(&mut raw, &prefix).await;
    assert_eq!(
        keys.len(),
        5 + 3,
        "two journals, two epochs, one mark, the index (all, failed, cancelled): {keys:?}"
    );
    for k in &keys {
        assert_eq!(crate::pttl(&mut raw, k).await, -1, "{k} has no expiry");
    }
    let failed = store.history("p/failed").await.expect("history");
    assert_eq!(failed.len(), 4);
    assert_eq!(failed[3].status, RunStatus::Failed);
    let cancelled = store.history("p/cancelled").await.expect("history");
    assert_eq!(cancelled.len(), 5, "the cancel is checkpoint 4");
    assert_eq!(cancelled[4].status, RunStatus::Cancelled);
    support::redis::cleanup(&mut raw, &prefix).await;
}
