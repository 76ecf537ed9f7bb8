//! The run journal in SQLite (contract rules 18 and 20), past what the
//! conformance suite checks through the API: a run an earlier build wrote
//! (one blob per run, schema version 1) is migrated and resumes; a delta
//! writes only the keys that changed; a load reads from the last whole
//! checkpoint on and nothing before it.

use std::time::Duration;

use fluxio::{Context, StageResult, pipeline, stage};
use fluxio_core::store::{Change, Checkpoint, CheckpointStore, RunStatus};
use fluxio_sqlite::SqliteStore;
use fluxio_test_support as support;

/// A format 3 checkpoint as an earlier build stored it, under this key.
const OLD: &[u8] = include_bytes!("../../../../tests/fixtures/checkpoints/v3_running.bin");
const OLD_KEY: &str = "orders/golden:run/ü 🦀";
const TTL: Duration = Duration::from_secs(30);

async fn scalar(file: &std::path::Path, sql: &str) -> i64 {
    let mut conn = support::sqlite::raw_connection(file).await;
    sqlx::query_scalar(sql)
        .fetch_one(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

#[tokio::test]
async fn rule18_a_row_of_an_earlier_build_is_migrated_and_resumes() {
    let dir = support::TempDir::new("old_row");
    let file = dir.db("x");
    drop(SqliteStore::connect(&file).await.expect("open"));
    // Back to schema version 1, with the run's one blob in its row.
    let mut conn = support::sqlite::raw_connection(&file).await;
    sqlx::raw_sql(
        "DROP TRIGGER fluxio_checkpoints_steps_cascade; DROP TABLE fluxio_checkpoints_steps; \
         DELETE FROM _fluxio_migrations WHERE version = 2",
    )
    .execute(&mut conn)
    .await
    .expect("schema version 1");
    sqlx::query(
        "INSERT INTO fluxio_checkpoints \
           (run_id, payload, version, ip, step, status, created_at, updated_at) \
         VALUES (?1, ?2, 'old', 0, '', 'running', 0, 0)",
    )
    .bind(OLD_KEY)
    .bind(OLD)
    .execute(&mut conn)
    .await
    .expect("an old row");
    drop(conn);

    let store = SqliteStore::connect(&file).await.expect("migrates");
    let old = store.load(OLD_KEY).await.expect("load").expect("kept");
    assert_eq!(old, Checkpoint::from_bytes(OLD_KEY, OLD).expect("decode"));
    assert_eq!((old.seq, old.change.clone()), (0, Change::Full));
    assert_eq!(
        scalar(&file, "SELECT length(payload) FROM fluxio_checkpoints").await,
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
    let dir = support::TempDir::new("bytes");
    let file = dir.db("x");
    let store = SqliteStore::connect(&file).await.expect("open");
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
    let steps = scalar(&file, "SELECT count(*) FROM fluxio_checkpoints_steps").await;
    let total = scalar(
        &file,
        "SELECT sum(length(payload)) FROM fluxio_checkpoints_steps",
    )
    .await;
    let largest_delta = scalar(
        &file,
        "SELECT max(length(payload)) FROM fluxio_checkpoints_steps WHERE seq > 0",
    )
    .await;
    println!("10-stage run, 1 MB context: {steps} steps, {total} bytes written");
    assert_eq!(steps, 11, "a checkpoint per stage and the completed one");
    assert!(total < (1 << 20) + 4096, "{total} bytes: the context once");
    assert!(largest_delta < 300, "a delta of {largest_delta} bytes");
}

/// A load reads the steps from the run's last whole checkpoint on: the
/// steps before it could be garbage and it would not notice (the history,
/// which reads them all, does).
#[tokio::test]
async fn rule20_a_load_reads_only_from_the_last_whole_checkpoint() {
    let dir = support::TempDir::new("last_whole");
    let file = dir.db("x");
    let store = SqliteStore::connect(&file).await.expect("open");
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
    let mut conn = support::sqlite::raw_connection(&file).await;
    sqlx::query("UPDATE fluxio_checkpoints_steps SET payload = X'00' WHERE seq < 4")
        .execute(&mut conn)
        .await
        .expect("spoil the steps before the last whole one");
    let latest = store.load("p/r").await.expect("load").expect("stored");
    assert_eq!((latest.seq, latest.context), (5, ctx.snapshot()));
    assert!(
        store.history("p/r").await.is_err(),
        "the history reads them"
    );
}
