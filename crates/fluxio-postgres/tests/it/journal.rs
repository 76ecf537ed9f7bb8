//! The run journal in PostgreSQL (contract rules 18 and 20), past what the
//! conformance suite checks through the API: a run an earlier build wrote
//! (one blob per run, schema version 1) is migrated and resumes; a delta
//! writes only the keys that changed; a load reads from the last whole
//! checkpoint on and nothing before it.

use std::time::Duration;

use fluxio::{Context, StageResult, pipeline, stage};
use fluxio_core::store::{Change, Checkpoint, CheckpointStore, RunStatus};
use fluxio_postgres::PostgresStore;
use fluxio_test_support as support;

/// A format 3 checkpoint as an earlier build stored it, under this key.
const OLD: &[u8] = include_bytes!("../../../../tests/fixtures/checkpoints/v3_running.bin");
const OLD_KEY: &str = "orders/golden:run/ü 🦀";
const TTL: Duration = Duration::from_secs(30);

async fn store(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::builder(url)
        .schema(schema)
        .max_connections(2)
        .connect()
        .await
        .expect("connect")
}

async fn scalar(store: &PostgresStore, sql: &str) -> i64 {
    let sql = sql.replace("{s}", &format!("\"{}\"", store.schema()));
    sqlx::query_scalar(&sql)
        .fetch_one(store.pool())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn exec(store: &PostgresStore, sql: &str) {
    let sql = sql.replace("{s}", &format!("\"{}\"", store.schema()));
    sqlx::raw_sql(&sql)
        .execute(store.pool())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[tokio::test]
async fn rule18_a_row_of_an_earlier_build_is_migrated_and_resumes() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("old_row");
    let first = store(&url, &schema).await;
    // Back to schema version 1, with the run's one blob in its row.
    exec(
        &first,
        "DROP TABLE {s}.fluxio_checkpoints_steps; \
         DELETE FROM {s}._fluxio_migrations WHERE version = 2",
    )
    .await;
    let old_row = format!(
        "INSERT INTO \"{schema}\".fluxio_checkpoints \
           (run_id, payload, version, ip, step, status, created_at) \
         VALUES ($1, $2, 'old', 0, '', 'running', now())"
    );
    sqlx::query(&old_row)
        .bind(OLD_KEY)
        .bind(OLD)
        .execute(first.pool())
        .await
        .expect("an old row");
    drop(first);

    let store = store(&url, &schema).await;
    let old = store.load(OLD_KEY).await.expect("load").expect("kept");
    assert_eq!(old, Checkpoint::from_bytes(OLD_KEY, OLD).expect("decode"));
    assert_eq!((old.seq, old.change.clone()), (0, Change::Full));
    assert_eq!(
        scalar(
            &store,
            "SELECT length(payload)::bigint FROM {s}.fluxio_checkpoints"
        )
        .await,
        0,
        "the blob moved to the steps"
    );

    // A resume appends a delta after it, then the run is cancelled.
    let lease = store.acquire_lease(OLD_KEY, TTL).await.expect("lease");
    let before = Context::from(old.context.clone());
    let after = before.clone().set("resumed", true).expect("set");
    let mut next = old.clone();
    next.seq = 1;
    next.attempt += 1;
    next.context = after.snapshot();
    next.change = Change::between(&before.snapshot(), &after.snapshot());
    store
        .save_fenced(next.clone(), &lease)
        .await
        .expect("resume");
    assert_eq!(store.load(OLD_KEY).await.expect("load"), Some(next));
    store.release_lease(lease).await.expect("release");
    store.cancel(OLD_KEY).await.expect("cancel");
    let all = store.history(OLD_KEY).await.expect("history");
    let seqs: Vec<u32> = all.iter().map(|cp| cp.seq).collect();
    assert_eq!(seqs, [0, 1, 2]);
    assert_eq!(all[2].status, RunStatus::Cancelled);
    assert_eq!(all[2].context, after.snapshot());
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}

#[stage]
async fn stamp(ctx: Context) -> StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?.set(format!("stage-{n}"), n)?)
}

/// The bytes of every step a 10-stage durable run with a 1 MB context
/// wrote (nothing is cut, so every step it wrote is still stored): the whole
/// context once, then one small delta per checkpoint. Before the journal,
/// each of its 11 checkpoints wrote the whole context: about 11.5 MB.
#[tokio::test]
async fn rule18_a_durable_run_writes_its_context_once_then_only_changed_keys() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("bytes");
    let store = store(&url, &schema).await;
    let p = pipeline![
        stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp
    ]
    .name("ten")
    .store(store.clone())
    .build()
    .expect("build");
    let input = Context::new()
        .set("blob", vec![7u8; 1 << 20])
        .expect("1 MB");
    p.invoke("r", input).await.expect("run");
    let steps = scalar(&store, "SELECT count(*) FROM {s}.fluxio_checkpoints_steps").await;
    let total = scalar(
        &store,
        "SELECT sum(length(payload))::bigint FROM {s}.fluxio_checkpoints_steps",
    )
    .await;
    let largest_delta = scalar(
        &store,
        "SELECT max(length(payload))::bigint FROM {s}.fluxio_checkpoints_steps WHERE seq > 0",
    )
    .await;
    println!("10-stage run, 1 MB context: {steps} steps, {total} bytes written");
    assert_eq!(steps, 11, "a checkpoint per stage and the completed one");
    assert!(total < (1 << 20) + 4096, "{total} bytes: the context once");
    assert!(largest_delta < 300, "a delta of {largest_delta} bytes");
    drop((p, store));
    support::postgres::drop_schema(&url, &schema).await;
}

/// A load reads the steps from the run's last whole checkpoint on: the
/// steps before it could be garbage and it would not notice (the history,
/// which reads them all, does).
#[tokio::test]
async fn rule20_a_load_reads_only_from_the_last_whole_checkpoint() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("last_whole");
    let store = store(&url, &schema).await;
    let lease = store.acquire_lease("p/r", TTL).await.expect("lease");
    let mut ctx = Context::new().set("n", 0u32).expect("set");
    for seq in 0..6u32 {
        let next = ctx.clone().set("n", seq).expect("set");
        let mut cp = Checkpoint::new("r", "v", seq, "s", next.snapshot()).in_pipeline("p");
        cp.seq = seq;
        if seq != 0 && seq != 4 {
            cp.change = Change::between(&ctx.snapshot(), &next.snapshot());
        }
        store.save_fenced(cp, &lease).await.expect("save");
        ctx = next;
    }
    // spoil the steps before the last whole one
    exec(
        &store,
        "UPDATE {s}.fluxio_checkpoints_steps SET payload = '\\x00' WHERE seq < 4",
    )
    .await;
    let latest = store.load("p/r").await.expect("load").expect("stored");
    assert_eq!((latest.seq, latest.context), (5, ctx.snapshot()));
    assert!(
        store.history("p/r").await.is_err(),
        "the history reads them"
    );
}

/// `keep_completed`: runs of one pipeline completing at once, on their own
/// connections, trim one after the other (the advisory lock), so exactly
/// the newest `n` completed runs are left, not `n` plus the ones that
/// committed concurrently; the other pipeline's run is not touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_completions_leave_exactly_the_newest_n() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("keep_race");
    let store = PostgresStore::builder(&url)
        .schema(&schema)
        .max_connections(8)
        .keep_completed(Some(2))
        .connect()
        .await
        .expect("connect");
    let completed = |pipeline: &str, id: &str| {
        let mut cp = fluxio_core::store::conformance::checkpoint(id, 1);
        cp.pipeline = pipeline.to_owned();
        cp.status = RunStatus::Completed;
        cp
    };
    store.save(completed("other", "o")).await.expect("save");
    for round in 0..3 {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..8 {
            let (store, cp) = (store.clone(), completed("p", &format!("r{round}-{i}")));
            tasks.spawn(async move { store.save(cp).await });
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("no panic").expect("save");
        }
        let kept: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM \"{schema}\".fluxio_checkpoints WHERE pipeline = 'p'"
        ))
        .fetch_one(store.pool())
        .await
        .expect("count");
        assert_eq!(kept, 2, "round {round}");
        let steps: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM \"{schema}\".fluxio_checkpoints_steps WHERE run_id LIKE 'p/%'"
        ))
        .fetch_one(store.pool())
        .await
        .expect("count");
        assert_eq!(steps, 2, "the trimmed runs' journals went with them");
    }
    assert!(store.exists("other/o").await.expect("exists"));
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}
