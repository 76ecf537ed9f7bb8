//! Leases by SQLite's clock, and its fencing tokens. (Fencing under
//! concurrent stale writes is a conformance check.)

use std::time::Duration;

use fluxio_core::store::CheckpointStore;
use fluxio_test_support as support;

use crate::sql::fresh;

#[tokio::test]
async fn expiry_is_judged_after_waiting_for_the_write_lock() {
    // SQLite's clock is read inside the statement, once it holds the write
    // lock: a lease acquired after waiting 700 ms for another writer lasts
    // its full time-to-live from then, not from when the call was made.
    let (_dir, file, store) = fresh("clock").await;
    let other = support::sqlite::hold_the_write_lock(&file).await;
    let release = support::sqlite::commit_after(other, Duration::from_millis(700));
    let started = std::time::Instant::now();
    let lease = store
        .acquire_lease("r", Duration::from_millis(500))
        .await
        .expect("acquire after the wait");
    assert!(started.elapsed() >= Duration::from_millis(600));
    let _other = release.await.expect("no panic");
    store
        .save_fenced(support::checkpoint("r", 1), &lease)
        .await
        .expect("the lease is fresh: its 500 ms started after the wait");
    store
        .renew_lease(&lease, Duration::from_secs(30))
        .await
        .expect("and it can be renewed");
}

/// SQLite draws a new fencing token from the greatest one stored, so a
/// purge keeps the lease row that holds it, released or not, and drops the
/// other released rows. (That the tokens keep growing across purges is the
/// conformance check `purging_dead_leases_keeps_tokens_growing`.)
#[tokio::test]
async fn purge_keeps_the_lease_row_with_the_greatest_token() {
    let (_dir, file, store) = fresh("purge_rows").await;
    let ttl = Duration::from_secs(30);
    let lease_rows = || async {
        let mut conn = support::sqlite::raw_connection(&file).await;
        sqlx::query_scalar::<_, String>(
            "SELECT run_id FROM fluxio_checkpoints_leases ORDER BY run_id",
        )
        .fetch_all(&mut conn)
        .await
        .expect("leases")
    };

    let held = support::runs::leases_before_a_purge(&store, ttl).await;
    store.purge_expired().await.expect("purge");
    assert_eq!(
        lease_rows().await,
        ["held", "last"],
        "the released lease of `r` was purged; `last`, released too, holds the greatest token"
    );

    let again = store.acquire_lease("r", ttl).await.expect("acquire again");
    store.release_lease(again).await.expect("release");
    store.release_lease(held).await.expect("release");
    store.purge_expired().await.expect("purge");
    assert_eq!(
        lease_rows().await,
        ["r"],
        "only the greatest token's row stays"
    );
}
