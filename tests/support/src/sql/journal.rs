//! The run journal in SQL (contract rules 18 and 20), past what the
//! conformance suite checks through the API: a run an earlier build wrote
//! (one blob per run, schema version 1) is migrated and resumes; a delta
//! writes only the keys that changed; a load reads from the last whole
//! checkpoint on and nothing before it.

use std::time::Duration;

use fluxio_core::store::{Change, Checkpoint, CheckpointStore, RunStatus};
use fluxio_core::{Context, Outcome};

use super::{SqlHarness, open, ten_stamps};

/// A format 3 checkpoint as an earlier build stored it, under this key.
const OLD: &[u8] = include_bytes!("../../../fixtures/checkpoints/v3_running.bin");
const OLD_KEY: &str = "orders/golden:run/ü 🦀";
const TTL: Duration = Duration::from_secs(30);

/// Rule 18: a row of schema version 1 (the run's one blob in its row) is
/// migrated into the journal by the next open, loads as it was, and
/// resumes with a delta after it.
pub async fn rule18_a_row_of_an_earlier_build_is_migrated_and_resumes<H: SqlHarness>(h: &H) {
    drop(open(h).await);
    // Back to schema version 1, with the run's one blob in its row.
    h.undo_migration(2).await;
    h.insert_old_row(OLD_KEY, "old", "running", OLD).await;

    let store = open(h).await;
    let old = store.load(OLD_KEY).await.expect("load").expect("kept");
    assert_eq!(old, Checkpoint::from_bytes(OLD_KEY, OLD).expect("decode"));
    assert_eq!((old.seq, old.change.clone()), (0, Change::Full));
    assert_eq!(
        h.scalar("SELECT length(payload) FROM {s}.fluxio_checkpoints")
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
}

/// Rule 18: the bytes of every step a 10-stage durable run with a 1 MB
/// context wrote (nothing is cut, so every step it wrote is still stored):
/// the whole context once, then one small delta per checkpoint. Before the
/// journal, each of its 11 checkpoints wrote the whole context: about
/// 11.5 MB.
pub async fn rule18_a_durable_run_writes_its_context_once_then_only_changed_keys<H: SqlHarness>(
    h: &H,
) {
    let store = open(h).await;
    let p = ten_stamps()
        .name("ten")
        .store(store.clone())
        .build()
        .expect("build");
    let input = Context::new()
        .set("blob", vec![7u8; 1 << 20])
        .expect("1 MB");
    p.invoke("r", input)
        .await
        .and_then(Outcome::completed)
        .expect("run");
    let steps = h
        .scalar("SELECT count(*) FROM {s}.fluxio_checkpoints_steps")
        .await;
    let total = h
        .scalar("SELECT sum(length(payload)) FROM {s}.fluxio_checkpoints_steps")
        .await;
    let largest_delta = h
        .scalar("SELECT max(length(payload)) FROM {s}.fluxio_checkpoints_steps WHERE seq > 0")
        .await;
    println!("10-stage run, 1 MB context: {steps} steps, {total} bytes written");
    assert_eq!(steps, 11, "a checkpoint per stage and the completed one");
    assert!(total < (1 << 20) + 4096, "{total} bytes: the context once");
    assert!(largest_delta < 300, "a delta of {largest_delta} bytes");
}

/// Rule 20: a load reads the steps from the run's last whole checkpoint on:
/// the steps before it could be garbage and it would not notice (the
/// history, which reads them all, does).
pub async fn rule20_a_load_reads_only_from_the_last_whole_checkpoint<H: SqlHarness>(h: &H) {
    let store = open(h).await;
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
    let garbage = h.blob(&[0]);
    h.execute(&format!(
        "UPDATE {{s}}.fluxio_checkpoints_steps SET payload = {garbage} WHERE seq < 4"
    ))
    .await;
    let latest = store.load("p/r").await.expect("load").expect("stored");
    assert_eq!((latest.seq, latest.context), (5, ctx.snapshot()));
    assert!(
        store.history("p/r").await.is_err(),
        "the history reads them"
    );
}
