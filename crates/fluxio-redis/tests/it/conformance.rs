//! The store conformance suite of fluxio-core, against a real Redis.
//!
//! The server is `FLUXIO_REDIS_URL` (see `fluxio_test_support::redis`);
//! without it the tests are skipped loudly, or fail when `CI` is set.

use std::time::Duration;

use fluxio_core::store::conformance::{Harness, Records};
use fluxio_redis::RedisStore;
use fluxio_test_support as support;
/// Completed runs the checks create expire on their own (the others are
/// kept until deleted, as a user's would be).
const TTL: Duration = Duration::from_secs(300);

struct RedisHarness {
    raw: redis::aio::MultiplexedConnection,
}

async fn harness() -> Option<RedisHarness> {
    let raw = support::redis::raw().await?;
    Some(RedisHarness { raw })
}

/// A new connection per call, as a second process would have, keeping
/// the `keep` newest completed runs of each pipeline (`None`: all).
async fn store(ns: &str, keep: Option<usize>) -> RedisStore {
    crate::store_in(ns, |b| {
        b.completed_retention(Some(TTL)).keep_completed(keep)
    })
    .await
}

#[async_trait::async_trait]
impl Harness for RedisHarness {
    type Store = RedisStore;

    async fn store(&self, ns: &str) -> RedisStore {
        store(ns, None).await
    }

    async fn store_keeping_completed(&self, ns: &str, n: usize) -> Option<RedisStore> {
        Some(store(ns, Some(n)).await)
    }

    async fn write_raw(&self, ns: &str, run_id: &str, bytes: &[u8]) -> bool {
        let mut raw = self.raw.clone();
        crate::set_expiring(&mut raw, &format!("{ns}:{run_id}"), bytes, TTL).await;
        true
    }

    /// The checkpoint keys `{ns}:{run_id}`, and the lease keys
    /// `{ns}.lease:{run_id}` (which exist only while the lease is held).
    async fn records(&self, ns: &str) -> Option<Records> {
        let mut raw = self.raw.clone();
        let run_ids = |keys: Vec<String>, prefix: &str| -> Vec<String> {
            keys.iter()
                .filter_map(|k| k.strip_prefix(prefix).map(str::to_owned))
                .collect()
        };
        let checkpoints = run_ids(
            support::redis::keys(&mut raw, &format!("{ns}:")).await,
            &format!("{ns}:"),
        );
        let lease_prefix = format!("{ns}.lease:");
        let leases = run_ids(
            support::redis::keys(&mut raw, &lease_prefix).await,
            &lease_prefix,
        );
        Some(Records {
            checkpoints: checkpoints.into_iter().collect(),
            leases: leases.into_iter().map(|run_id| (run_id, true)).collect(),
        })
    }
}

fluxio_core::store_conformance_tests!(harness);
