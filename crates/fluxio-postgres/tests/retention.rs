//! Retention of completed runs and `purge_expired`.

mod common;

use std::time::Duration;

use fluxio_core::store::{Checkpoint, CheckpointStore, RunStatus};
use fluxio_postgres::PostgresStore;

fn checkpoint(run_id: &str, status: RunStatus) -> Checkpoint {
    let mut cp = Checkpoint::new(
        run_id,
        "0123456789ab",
        3,
        "",
        fluxio_core::Context::new().snapshot(),
    );
    cp.status = status;
    cp.created_at_ms = 1_700_000_000_000;
    cp.updated_at_ms = 1_700_000_000_000;
    cp
}

#[tokio::test]
async fn completed_runs_expire_and_are_purged_failed_and_running_ones_stay() {
    let Some(url) = common::server().await else {
        return;
    };
    let schema = common::fresh_schema("retention");
    let store = PostgresStore::builder(url.as_str())
        .schema(&schema)
        .max_connections(2)
        .completed_retention(Some(Duration::from_secs(1)))
        .connect()
        .await
        .expect("connect");
    let forever = PostgresStore::builder(url.as_str())
        .schema(&schema)
        .max_connections(1)
        .completed_retention(None)
        .connect()
        .await
        .expect("connect");

    store
        .save(checkpoint("done", RunStatus::Completed))
        .await
        .expect("save");
    store
        .save(checkpoint("failed", RunStatus::Failed))
        .await
        .expect("save");
    store
        .save(checkpoint("running", RunStatus::Running))
        .await
        .expect("save");
    forever
        .save(checkpoint("kept", RunStatus::Completed))
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
    let rows = |store: &PostgresStore| {
        let sql = format!("SELECT count(*) FROM \"{schema}\".fluxio_checkpoints");
        let pool = store.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(&sql)
                .fetch_one(&pool)
                .await
                .expect("count")
        }
    };
    assert_eq!(rows(&store).await, 4, "expired rows stay until purged");
    assert_eq!(store.purge_expired().await.expect("purge"), 1);
    assert_eq!(rows(&store).await, 3);
    assert_eq!(store.purge_expired().await.expect("purge"), 0);

    // Saving the run again (a fresh invoke) makes it visible again.
    store
        .save(checkpoint("done", RunStatus::Running))
        .await
        .expect("save");
    assert!(store.exists("done").await.expect("exists"));
    drop((store, forever));
    common::drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn purging_dead_leases_keeps_tokens_growing() {
    let Some(url) = common::server().await else {
        return;
    };
    let schema = common::fresh_schema("purge_leases");
    let store = common::store(&url, &schema).await;
    let first = store
        .acquire_lease("r", Duration::from_secs(30))
        .await
        .expect("acquire");
    let first_token = first.token();
    store.release_lease(first).await.expect("release");
    let held = store
        .acquire_lease("held", Duration::from_secs(30))
        .await
        .expect("acquire");
    store.purge_expired().await.expect("purge");
    let leases: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT run_id FROM \"{schema}\".fluxio_checkpoints_leases"
    ))
    .fetch_all(store.pool())
    .await
    .expect("leases");
    assert_eq!(leases, ["held"], "the released lease row was purged");
    let second = store
        .acquire_lease("r", Duration::from_secs(30))
        .await
        .expect("acquire again");
    assert!(second.token() > first_token);
    assert!(second.token() > held.token());
    drop(store);
    common::drop_schema(&url, &schema).await;
}
