//! Retention of completed runs and `purge_expired`.

mod common;

use std::path::Path;
use std::time::Duration;

use fluxio_core::store::{CheckpointStore, RunStatus};
use fluxio_sqlite::SqliteStore;

async fn rows(file: &Path, table: &str) -> i64 {
    let mut conn = common::raw_connection(file).await;
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(&mut conn)
        .await
        .expect("count")
}

#[tokio::test]
async fn completed_runs_expire_and_are_purged_failed_and_running_ones_stay() {
    let dir = common::TempDir::new("retention");
    let file = dir.db("x");
    let store = SqliteStore::builder(&file)
        .completed_retention(Some(Duration::from_secs(1)))
        .connect()
        .await
        .expect("open");
    let forever = SqliteStore::builder(&file)
        .completed_retention(None)
        .connect()
        .await
        .expect("open");

    for (run_id, status) in [
        ("done", RunStatus::Completed),
        ("failed", RunStatus::Failed),
        ("running", RunStatus::Running),
    ] {
        store
            .save(common::checkpoint(run_id, 3, status))
            .await
            .expect("save");
    }
    forever
        .save(common::checkpoint("kept", 3, RunStatus::Completed))
        .await
        .expect("save");
    assert!(store.exists("done").await.expect("exists"));
    assert_eq!(
        store.purge_expired().await.expect("purge"),
        0,
        "nothing expired yet"
    );

    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !store.exists("done").await.expect("exists"),
        "expired reads as absent"
    );
    assert!(store.load("done").await.expect("load").is_none());
    for kept in ["failed", "running", "kept"] {
        assert!(store.load(kept).await.expect("load").is_some(), "{kept}");
    }
    assert_eq!(
        rows(&file, "fluxio_checkpoints").await,
        4,
        "expired rows stay until purged"
    );
    assert_eq!(store.purge_expired().await.expect("purge"), 1);
    assert_eq!(rows(&file, "fluxio_checkpoints").await, 3);
    assert_eq!(store.purge_expired().await.expect("purge"), 0);

    // Saving the run again (a fresh invoke) makes it visible again.
    store
        .save(common::checkpoint("done", 0, RunStatus::Running))
        .await
        .expect("save");
    assert!(store.exists("done").await.expect("exists"));
}

#[tokio::test]
async fn purging_dead_leases_keeps_tokens_growing() {
    let dir = common::TempDir::new("purge_leases");
    let file = dir.db("x");
    let store = SqliteStore::connect(&file).await.expect("open");
    let ttl = Duration::from_secs(30);

    let first = store.acquire_lease("r", ttl).await.expect("acquire");
    let first_token = first.token();
    store.release_lease(first).await.expect("release");
    let held = store.acquire_lease("held", ttl).await.expect("acquire");
    let last = store.acquire_lease("last", ttl).await.expect("acquire");
    let last_token = last.token();
    store.release_lease(last).await.expect("release");
    store.purge_expired().await.expect("purge");

    let mut conn = common::raw_connection(&file).await;
    let leases: Vec<String> =
        sqlx::query_scalar("SELECT run_id FROM fluxio_checkpoints_leases ORDER BY run_id")
            .fetch_all(&mut conn)
            .await
            .expect("leases");
    assert_eq!(
        leases,
        ["held", "last"],
        "the released lease of `r` was purged; `last`, released too, holds the greatest token"
    );

    let again = store.acquire_lease("r", ttl).await.expect("acquire again");
    assert!(again.token() > first_token);
    assert!(again.token() > last_token);
    assert!(again.token() > held.token());

    // Even with every row gone but the greatest, a new run id gets more.
    store.release_lease(again).await.expect("release");
    store.release_lease(held).await.expect("release");
    store.purge_expired().await.expect("purge");
    assert_eq!(rows(&file, "fluxio_checkpoints_leases").await, 1);
    let newest = store.acquire_lease("new", ttl).await.expect("acquire");
    assert!(newest.token() > last_token + 1);
}
