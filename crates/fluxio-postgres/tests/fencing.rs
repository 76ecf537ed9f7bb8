//! Fencing under concurrency: once a new owner has written, no write of the
//! previous owner lands, however its statements interleave with the takeover.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::{Checkpoint, CheckpointStore};

fn checkpoint(ip: u32) -> Checkpoint {
    let mut cp = Checkpoint::new(
        "r",
        "0123456789ab",
        ip,
        format!("step-{ip}"),
        fluxio_core::Context::new().snapshot(),
    );
    cp.created_at_ms = 1_700_000_000_000;
    cp.updated_at_ms = 1_700_000_000_000;
    cp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_writes_never_land_after_a_takeover() {
    let Some(url) = common::server().await else {
        return;
    };
    for round in 0..5 {
        let schema = common::fresh_schema(&format!("takeover{round}"));
        let zombie = Arc::new(common::store(&url, &schema).await);
        let owner = common::store(&url, &schema).await;
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
                        match zombie.save_fenced(checkpoint(w * 100_000 + n), &old).await {
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
        let theirs = checkpoint(999_999_999);
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
        drop((zombie, owner));
        common::drop_schema(&url, &schema).await;
    }
}
