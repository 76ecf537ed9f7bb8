//! Run ownership on every store: one winner per acquisition, renewal, takeover with a greater token, fencing of stale writes, release.

use super::CheckpointStore;
use crate::context::Context;
use crate::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::*;

/// Among 32 concurrent acquires from 4 store handles, exactly one wins.
pub async fn lease_is_exclusive_under_concurrent_acquires<H: Harness>(h: &H) {
    let ns = namespace("exclusive");
    let results = race(h, &ns, 32, |_, store| async move {
        store
            .acquire_lease("contested", Duration::from_secs(30))
            .await
    })
    .await;
    let (mut won, mut in_use) = (0, 0);
    for result in results {
        match result {
            Ok(_) => won += 1,
            Err(Error::RunIdInUse { run_id }) => {
                assert_eq!(run_id, "contested");
                in_use += 1;
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!((won, in_use), (1, 31));
}

/// Renewing keeps a lease past its first time-to-live.
pub async fn renewal_keeps_the_lease<H: Harness>(h: &H) {
    let ns = namespace("renew");
    let (owner, other) = two_handles(h, &ns).await;
    // four renewals 500 ms apart hold the lease for 2 s, past its 1.5 s
    // time-to-live; what follows the last one has 1.5 s, room for a
    // loaded machine (600 ms was once not enough for a Postgres save)
    let ttl = Duration::from_millis(1500);
    let lease = owner.acquire_lease("r", ttl).await.expect("acquire");
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        owner
            .renew_lease(&lease, ttl)
            .await
            .expect("renew while held");
    }
    assert_lease_held(&other, "r", ttl, "still held after 2 s").await;
    owner
        .save_fenced(checkpoint("r", 1), &lease)
        .await
        .expect("fenced save while held");
}

/// An expired lease can be taken over, with a greater token.
pub async fn expired_lease_is_taken_over_with_a_greater_token<H: Harness>(h: &H) {
    let ns = namespace("expiry");
    let (dead, next) = two_handles(h, &ns).await;
    let first = acquire(&dead, "r", Duration::from_millis(300)).await;
    assert_lease_held(
        &next,
        "r",
        Duration::from_secs(30),
        "held before it expires",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let second = acquire(&next, "r", Duration::from_secs(30)).await;
    assert!(
        second.token() > first.token(),
        "tokens grow: {} then {}",
        first.token(),
        second.token()
    );
}

/// A worker whose lease was taken over cannot write: its save, delete and
/// renew fail with `LeaseLost` and the new owner's checkpoint is intact.
pub async fn stale_token_is_fenced<H: Harness>(h: &H) {
    let ns = namespace("fencing");
    let (zombie, owner) = two_handles(h, &ns).await;
    let ctx = Context::new();
    let old = acquire(&zombie, "r", Duration::from_millis(300)).await;
    zombie
        .save_fenced(checkpoint_with("r", 1, &ctx), &old)
        .await
        .expect("save while held");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let new = acquire(&owner, "r", Duration::from_secs(30)).await;
    let theirs = checkpoint_with(
        "r",
        2,
        &ctx.clone().set("owner", "new").expect("serializes"),
    );
    owner
        .save_fenced(theirs.clone(), &new)
        .await
        .expect("new owner saves");

    let lost = |r: crate::Result<()>, what: &str| match r {
        Err(Error::LeaseLost { run_id, token }) => {
            assert_eq!((run_id.as_str(), token), ("r", old.token()), "{what}")
        }
        other => panic!("{what}: expected LeaseLost, got {other:?}"),
    };
    lost(
        zombie
            .save_fenced(checkpoint_with("r", 9, &ctx), &old)
            .await,
        "stale save",
    );
    lost(zombie.delete_fenced("r", &old).await, "stale delete");
    lost(
        zombie.renew_lease(&old, Duration::from_secs(30)).await,
        "stale renew",
    );
    assert_eq!(
        owner.load("r").await.expect("load"),
        Some(theirs),
        "the new owner's checkpoint is intact"
    );
}

/// Fencing under concurrency: once a new owner has written, no write of the
/// previous owner lands, however its writes interleave with the takeover.
/// Five rounds of four writers of the old owner (another handle, as another
/// process would be) saving across the moment its lease expires and is
/// taken over.
pub async fn stale_writes_never_land_after_a_takeover<H: Harness>(h: &H) {
    for round in 0..5 {
        let ns = namespace(&format!("takeover{round}"));
        let zombie = Arc::new(h.store(&ns).await);
        let owner = h.store(&ns).await;
        let old = Arc::new(
            zombie
                .acquire_lease("r", Duration::from_millis(150))
                .await
                .expect("acquire"),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..4u32)
            .map(|w| {
                let (zombie, old, stop) =
                    (Arc::clone(&zombie), Arc::clone(&old), Arc::clone(&stop));
                tokio::spawn(async move {
                    let mut n = 0u32;
                    while !stop.load(Ordering::SeqCst) {
                        n += 1;
                        match zombie
                            .save_fenced(checkpoint("r", w * 100_000 + n), &old)
                            .await
                        {
                            Ok(()) | Err(Error::LeaseLost { .. }) => {}
                            Err(e) => panic!("unexpected: {e}"),
                        }
                        // A store that never waits (in memory) would keep
                        // the runtime's workers, and its clock, to itself.
                        tokio::task::yield_now().await;
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
        let theirs = checkpoint("r", 999_999_999);
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

/// An expired lease (no takeover yet) no longer fences writes in.
pub async fn expired_lease_refuses_writes<H: Harness>(h: &H) {
    let store = h.store(&namespace("expired")).await;
    let lease = acquire(&store, "r", Duration::from_millis(200)).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(matches!(
        store.save_fenced(checkpoint("r", 1), &lease).await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(store.load("r").await.expect("load").is_none());
}

/// Release frees the run id at once; releasing a lost lease frees nothing.
pub async fn release_frees_at_once_and_only_its_own_lease<H: Harness>(h: &H) {
    let ns = namespace("release");
    let (a, b) = two_handles(h, &ns).await;
    let first = acquire(&a, "r", Duration::from_secs(30)).await;
    a.release_lease(first).await.expect("release");
    let second = acquire(&b, "r", Duration::from_millis(300)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let third = acquire(&a, "r", Duration::from_secs(30)).await;
    b.release_lease(second)
        .await
        .expect("releasing a lost lease is not an error");
    let what = "the stale release did not free the new owner's lease";
    assert_lease_held(&b, "r", Duration::from_secs(30), what).await;
    a.save_fenced(checkpoint("r", 1), &third)
        .await
        .expect("the owner still writes");
}

/// Fenced writes with a valid lease behave like plain ones.
pub async fn fenced_writes_with_the_current_lease<H: Harness>(h: &H) {
    let store = h.store(&namespace("fenced_ok")).await;
    let lease = acquire(&store, "r", Duration::from_secs(30)).await;
    let cp = checkpoint_with("r", 4, &every_value_type());
    store.save_fenced(cp.clone(), &lease).await.expect("save");
    assert_eq!(store.load("r").await.expect("load"), Some(cp));
    store.delete_fenced("r", &lease).await.expect("delete");
    assert!(!store.exists("r").await.expect("exists"));
    let other = acquire(&store, "other-run", Duration::from_secs(30)).await;
    assert!(
        matches!(
            store.save_fenced(checkpoint("r", 5), &other).await,
            Err(Error::LeaseLost { .. })
        ),
        "a lease on another run id does not fence this one"
    );
}
