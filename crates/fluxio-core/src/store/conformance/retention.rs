//! Checks of completed-run retention and of the purge (contract rule 7),
//! for stores that have them ([`Harness::store_with_retention`],
//! [`Harness::purge_expired`]); the others pass them without a call.

use std::time::Duration;

use super::{Harness, checkpoint, namespace};
use crate::store::{CheckpointStore, RunStatus};

/// A completed run is hidden once its retention has passed (whether it was
/// written plainly or through a lease, as a run writes it), stays stored
/// until purged, and is then purged; failed and running runs, and completed
/// ones of a store without retention, stay. Saving the run again makes it
/// visible again.
pub async fn completed_runs_expire_and_are_purged_failed_and_running_ones_stay<H: Harness>(h: &H) {
    let ns = namespace("retention");
    let Some(store) = h
        .store_with_retention(&ns, Some(Duration::from_secs(1)))
        .await
    else {
        return;
    };
    let forever = h
        .store_with_retention(&ns, None)
        .await
        .expect("a store with retention can keep completed runs");
    let with_status = |run_id: &str, status| {
        let mut cp = checkpoint(run_id, 3);
        cp.status = status;
        cp
    };
    for (run_id, status) in [
        ("done", RunStatus::Completed),
        ("failed", RunStatus::Failed),
        ("running", RunStatus::Running),
    ] {
        store.save(with_status(run_id, status)).await.expect("save");
    }
    let lease = store
        .acquire_lease("done-fenced", Duration::from_secs(30))
        .await
        .expect("acquire");
    store
        .save_fenced(with_status("done-fenced", RunStatus::Completed), &lease)
        .await
        .expect("fenced save");
    store.release_lease(lease).await.expect("release");
    forever
        .save(with_status("kept", RunStatus::Completed))
        .await
        .expect("save");
    for done in ["done", "done-fenced"] {
        assert!(store.exists(done).await.expect("exists"), "{done}");
    }
    assert_eq!(
        h.purge_expired(&ns).await,
        Some(0),
        "nothing expired yet (a store with retention purges)"
    );

    tokio::time::sleep(Duration::from_millis(1500)).await;
    for done in ["done", "done-fenced"] {
        assert!(
            !store.exists(done).await.expect("exists"),
            "{done}: expired reads as absent"
        );
        assert!(store.load(done).await.expect("load").is_none(), "{done}");
    }
    for kept in ["failed", "running", "kept"] {
        assert!(store.load(kept).await.expect("load").is_some(), "{kept}");
    }
    let stored = || async {
        h.records(&ns)
            .await
            .map(|records| records.checkpoints.len())
    };
    if let Some(n) = stored().await {
        assert_eq!(n, 5, "expired checkpoints stay until purged");
    }
    assert_eq!(h.purge_expired(&ns).await, Some(2));
    if let Some(n) = stored().await {
        assert_eq!(n, 3);
    }
    assert_eq!(h.purge_expired(&ns).await, Some(0));

    // Saving the run again (a fresh invoke) makes it visible again.
    store
        .save(with_status("done", RunStatus::Running))
        .await
        .expect("save");
    assert!(store.exists("done").await.expect("exists"));
}

/// Purging removes released lease records, yet fencing tokens keep growing:
/// a run id acquired again, and a new run id, get a token greater than any
/// before, even after every record but one has been purged. Which released
/// records a purge may keep depends on how the store draws its tokens (a
/// sequence in Postgres, the greatest stored token in SQLite); each backend
/// pins its own in its tests.
pub async fn purging_dead_leases_keeps_tokens_growing<H: Harness>(h: &H) {
    let ns = namespace("purge_leases");
    let store = h.store(&ns).await;
    if h.purge_expired(&ns).await.is_none() {
        return;
    }
    let ttl = Duration::from_secs(30);
    let first = store.acquire_lease("r", ttl).await.expect("acquire");
    let first_token = first.token();
    store.release_lease(first).await.expect("release");
    let held = store.acquire_lease("held", ttl).await.expect("acquire");
    let last = store.acquire_lease("last", ttl).await.expect("acquire");
    let last_token = last.token();
    store.release_lease(last).await.expect("release");
    h.purge_expired(&ns).await.expect("purge");
    if let Some(records) = h.records(&ns).await {
        assert!(
            !records.leases.contains_key("r"),
            "the released lease of `r` was purged: {records:?}"
        );
        assert_eq!(
            records.leases.get("held"),
            Some(&true),
            "the held lease stays: {records:?}"
        );
        assert!(
            records.leases.keys().all(|k| k == "held" || k == "last"),
            "only `held` and `last` (the greatest token) may stay: {records:?}"
        );
    }

    let again = store.acquire_lease("r", ttl).await.expect("acquire again");
    assert!(again.token() > first_token);
    assert!(again.token() > last_token);
    assert!(again.token() > held.token());

    // Even with every record gone but the greatest, a new run id gets more.
    store.release_lease(again).await.expect("release");
    store.release_lease(held).await.expect("release");
    h.purge_expired(&ns).await.expect("purge");
    if let Some(records) = h.records(&ns).await {
        assert!(
            records.leases.len() <= 1,
            "only the greatest token's record may stay: {records:?}"
        );
    }
    let newest = store.acquire_lease("new", ttl).await.expect("acquire");
    assert!(newest.token() > last_token + 1);
}
