//! Fencing under concurrency: once a new owner has written, no write of the
//! previous owner lands, however its statements interleave with the
//! takeover. The two owners are two stores on one file, as two processes
//! would be.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::{CheckpointStore, RunStatus};
use fluxio_sqlite::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_writes_never_land_after_a_takeover() {
    for round in 0..3 {
        let dir = common::TempDir::new(&format!("takeover{round}"));
        let file = dir.db("x");
        let zombie = Arc::new(SqliteStore::connect(&file).await.expect("open"));
        let owner = SqliteStore::connect(&file).await.expect("open");
        let old = Arc::new(
            zombie
                .acquire_lease("r", Duration::from_millis(150))
                .await
                .expect("acquire"),
        );
        // Four writers of the old owner hammer the checkpoint, across the
        // moment the lease expires and is taken over.
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..4u32)
            .map(|w| {
                let (zombie, old, stop) =
                    (Arc::clone(&zombie), Arc::clone(&old), Arc::clone(&stop));
                tokio::spawn(async move {
                    let mut n = 0u32;
                    while !stop.load(Ordering::SeqCst) {
                        n += 1;
                        let cp = common::checkpoint("r", w * 100_000 + n, RunStatus::Running);
                        match zombie.save_fenced(cp, &old).await {
                            Ok(()) | Err(Error::LeaseLost { .. }) => {}
                            Err(e) => panic!("unexpected: {e}"),
                        }
                    }
                })
            })
            .collect();
        let new = loop {
            match owner.acquire_lease("r", Duration::from_secs(30)).await {
                Ok(lease) => break lease,
                Err(Error::RunIdInUse { .. }) => tokio::task::yield_now().await,
                Err(e) => panic!("unexpected: {e}"),
            }
        };
        assert!(new.token() > old.token());
        let theirs = common::checkpoint("r", 999_999_999, RunStatus::Running);
        owner
            .save_fenced(theirs.clone(), &new)
            .await
            .expect("the new owner writes");
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.store(true, Ordering::SeqCst);
        for w in writers {
            w.await.expect("no panic");
        }
        assert_eq!(
            owner.load("r").await.expect("load"),
            Some(theirs),
            "round {round}: a stale write landed after the new owner's"
        );
    }
}

#[tokio::test]
async fn expiry_is_judged_after_waiting_for_the_write_lock() {
    // SQLite's clock is read inside the statement, once it holds the write
    // lock: a lease acquired after waiting 700 ms for another writer lasts
    // its full time-to-live from then, not from when the call was made.
    let dir = common::TempDir::new("clock");
    let file = dir.db("x");
    let store = SqliteStore::connect(&file).await.expect("open");
    let mut other = common::raw_connection(&file).await;
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .expect("take the write lock");
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        sqlx::query("COMMIT")
            .execute(&mut other)
            .await
            .expect("commit");
        other
    });
    let started = std::time::Instant::now();
    let lease = store
        .acquire_lease("r", Duration::from_millis(500))
        .await
        .expect("acquire after the wait");
    assert!(started.elapsed() >= Duration::from_millis(600));
    let _other = release.await.expect("no panic");
    store
        .save_fenced(common::checkpoint("r", 1, RunStatus::Running), &lease)
        .await
        .expect("the lease is fresh: its 500 ms started after the wait");
    store
        .renew_lease(&lease, Duration::from_secs(30))
        .await
        .expect("and it can be renewed");
}
