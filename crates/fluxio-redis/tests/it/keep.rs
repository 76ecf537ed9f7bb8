//! Keep-the-last-N on Redis (contract rule 20): the trim that a completing
//! save runs deletes only runs that are still the completed ones it
//! indexed. The conformance check covers the counting; this covers a run
//! written again after it completed, and a stale member of the index.

use std::time::Duration;

use fluxio_core::Context;
use fluxio_core::store::{Checkpoint, CheckpointStore, RunStatus, conformance};
use fluxio_redis::RedisStore;
use fluxio_test_support as support;

const TTL: Duration = Duration::from_secs(30);

/// Checkpoint `seq` (whole) of the run `id` of the pipeline `p`.
fn entry(id: &str, seq: u32, status: RunStatus) -> Checkpoint {
    let mut cp = conformance::checkpoint(id, seq + 1).in_pipeline("p");
    cp.seq = seq;
    cp.context = Context::new().snapshot();
    cp.status = status;
    cp
}

/// Runs `id` under a lease: checkpoint 0, then, with `end`, checkpoint 1
/// with that status. Returns the lease's token.
async fn run(store: &RedisStore, id: &str, end: Option<RunStatus>) -> u64 {
    let key = format!("p/{id}");
    let lease = store.acquire_lease(&key, TTL).await.expect("lease");
    let token = lease.token();
    store
        .save_fenced(entry(id, 0, RunStatus::Running), &lease)
        .await
        .expect("save 0");
    if let Some(status) = end {
        store
            .save_fenced(entry(id, 1, status), &lease)
            .await
            .expect("save 1");
    }
    store.release_lease(lease).await.expect("release");
    // completion times that differ on the server's clock
    tokio::time::sleep(Duration::from_millis(3)).await;
    token
}

async fn stored(store: &RedisStore, id: &str) -> Option<RunStatus> {
    let cp = store.load(&format!("p/{id}")).await.expect("load")?;
    Some(cp.status)
}

/// A completed run written again under its key (a fresh run through a
/// fenced save, or a plain save) is not the completed run the index named:
/// the trims that follow leave it, and so does a stale member of the index
/// that names a running run. A trimmed run's epoch is kept: its tokens
/// keep growing.
#[tokio::test]
async fn rule20_keep_completed_never_deletes_a_run_that_was_replaced() {
    let Some((mut raw, prefix)) = support::redis::raw_in("keep_replaced").await else {
        return;
    };
    let store = crate::store_in(&prefix, |b| {
        b.completed_retention(Some(TTL)).keep_completed(Some(1))
    })
    .await;
    let index = store.completed_key("p");

    // a: completed, then started afresh under the same key (a new invoke)
    run(&store, "a", Some(RunStatus::Completed)).await;
    run(&store, "a", None).await;
    // e: completed, then replaced by a plain save of a running checkpoint
    run(&store, "e", Some(RunStatus::Completed)).await;
    store
        .save(entry("e", 0, RunStatus::Running))
        .await
        .expect("save");
    let b = run(&store, "b", Some(RunStatus::Completed)).await;
    run(&store, "c", Some(RunStatus::Completed)).await;
    assert_eq!(stored(&store, "a").await, Some(RunStatus::Running));
    assert_eq!(stored(&store, "e").await, Some(RunStatus::Running));
    assert_eq!(stored(&store, "b").await, None, "trimmed: c is newer");
    assert_eq!(stored(&store, "c").await, Some(RunStatus::Completed));
    let history = store.history("p/a").await.expect("history");
    assert_eq!(history.len(), 1, "a's fresh journal, whole");

    // a stale member, the oldest, naming the running run a: popped, not deleted
    let _: () = redis::cmd("ZADD")
        .arg(&index)
        .arg(1)
        .arg("p/a")
        .query_async(&mut raw)
        .await
        .expect("ZADD");
    run(&store, "d", Some(RunStatus::Completed)).await;
    assert_eq!(stored(&store, "a").await, Some(RunStatus::Running));
    assert_eq!(stored(&store, "c").await, None, "trimmed: d is newer");
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(&index)
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .expect("ZRANGE");
    assert_eq!(members, ["p/d"], "the index names the kept run only");

    // failed and cancelled runs are not indexed, and survive
    run(&store, "f", Some(RunStatus::Failed)).await;
    run(&store, "x", None).await;
    store.cancel("p/x").await.expect("cancel");
    run(&store, "g", Some(RunStatus::Completed)).await;
    assert_eq!(stored(&store, "f").await, Some(RunStatus::Failed));
    assert_eq!(stored(&store, "x").await, Some(RunStatus::Cancelled));
    assert_eq!(stored(&store, "d").await, None);

    // the trimmed b's epoch was kept: a new lease on b draws a larger token
    let lease = store.acquire_lease("p/b", TTL).await.expect("lease");
    assert!(lease.token() > b, "{} > {b}", lease.token());
    store.release_lease(lease).await.expect("release");

    // a deleted completed run leaves the index
    store.delete("p/g").await.expect("delete");
    let exists: u8 = redis::cmd("EXISTS")
        .arg(&index)
        .query_async(&mut raw)
        .await
        .expect("EXISTS");
    assert_eq!(exists, 0, "the index went with its last member");

    support::redis::cleanup(&mut raw, &prefix).await;
}
