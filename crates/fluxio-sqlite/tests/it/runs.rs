//! Contract rule 24: a durable run starts and ends in one transaction each
//! (`begin_run`, `finish_run`), so a 10-stage run commits 11 times, counted
//! by SQLite's commit hook on the store's writing connection.

use fluxio::{Context, StageResult, pipeline, stage};
use fluxio_sqlite::SqliteStore;
use fluxio_test_support as support;
use support::runs;

/// The one-transaction overrides answer as the trait's defaults do.
#[tokio::test]
async fn rule24_begin_and_finish_run_answer_as_the_defaults() {
    let dir = support::TempDir::new("runs_semantics");
    let store = SqliteStore::connect(dir.db("x")).await.expect("open");
    runs::check_begin_and_finish(&store, "orders").await;
}

/// A 10-stage run driven as a durable pipeline drives it: 11 commits, one
/// per checkpoint (the lease taken with the first, given back with the
/// last), where acquire, delete, 11 saves and release made 14.
#[tokio::test]
async fn rule24_a_ten_stage_run_commits_eleven_times() {
    let dir = support::TempDir::new("runs_commits");
    let store = SqliteStore::connect(dir.db("x")).await.expect("open");
    let run = runs::ten_stage_run("orders", "1");
    let before = store.commits();
    runs::drive(&store, &run).await;
    assert_eq!(store.commits() - before, 11);
    let stored = fluxio_core::store::CheckpointStore::load(&store, &run[0].key())
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(stored.status, fluxio_core::RunStatus::Completed);
}

#[stage]
async fn stamp(ctx: Context) -> StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?)
}

/// The same through a durable pipeline of 10 stages, each setting one key:
/// `invoke` begins the run with `begin_run` and ends it with `finish_run`,
/// so it commits 11 times (issue 13: at most 11).
#[tokio::test]
async fn rule24_a_ten_stage_durable_invoke_commits_eleven_times() {
    let dir = support::TempDir::new("runs_invoke");
    let store = SqliteStore::connect(dir.db("x")).await.expect("open");
    let p = pipeline![
        stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp
    ]
    .name("orders")
    .store(store.clone())
    .build()
    .expect("valid");
    let before = store.commits();
    let out = p
        .invoke("1", Context::new())
        .await
        .expect("the run completes");
    let commits = store.commits() - before;
    assert_eq!(out.get::<u64>("n").expect("n"), 10);
    // one per checkpoint: 10 before the stages, and the completed one
    assert_eq!(commits, 11);
}
