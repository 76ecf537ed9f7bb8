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
    url: String,
    raw: redis::aio::MultiplexedConnection,
}

async fn harness() -> Option<RedisHarness> {
    let raw = support::redis::raw().await?;
    Some(RedisHarness {
        url: support::redis::url(),
        raw,
    })
}

#[async_trait::async_trait]
impl Harness for RedisHarness {
    type Store = RedisStore;

    /// A new connection per call, as a second process would have.
    async fn store(&self, ns: &str) -> RedisStore {
        RedisStore::builder(&self.url)
            .key_prefix(ns)
            .completed_retention(Some(TTL))
            .connect()
            .await
            .expect("connect to redis")
    }

    /// A store keeping the `n` newest completed runs of each pipeline.
    async fn store_keeping_completed(&self, ns: &str, n: usize) -> Option<RedisStore> {
        let store = RedisStore::builder(&self.url)
            .key_prefix(ns)
            .completed_retention(Some(TTL))
            .keep_completed(Some(n))
            .connect()
            .await
            .expect("connect to redis");
        Some(store)
    }

    async fn write_raw(&self, ns: &str, run_id: &str, bytes: &[u8]) -> bool {
        let mut raw = self.raw.clone();
        redis::cmd("SET")
            .arg(format!("{ns}:{run_id}"))
            .arg(bytes)
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query_async::<()>(&mut raw)
            .await
            .expect("raw SET");
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
