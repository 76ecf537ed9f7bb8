//! The store conformance suite of fluxio-core, against a real Redis.
//!
//! `FLUXIO_REDIS_URL` (default `redis://127.0.0.1:6379`); without a server the
//! tests are skipped loudly, or fail when `CI` is set.

use std::time::Duration;

use fluxio_core::store::conformance::{Harness, Records, skip_unless_ci};
use fluxio_redis::RedisStore;

/// Keys the checks create expire on their own.
const TTL: Duration = Duration::from_secs(300);

fn url() -> String {
    std::env::var("FLUXIO_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

struct RedisHarness {
    url: String,
    raw: redis::aio::MultiplexedConnection,
}

async fn harness() -> Option<RedisHarness> {
    let url = url();
    let raw = async {
        redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await
    };
    match raw.await {
        Ok(raw) => Some(RedisHarness { url, raw }),
        Err(e) => skip_unless_ci("redis", &e),
    }
}

#[async_trait::async_trait]
impl Harness for RedisHarness {
    type Store = RedisStore;

    /// A new connection per call, as a second process would have.
    async fn store(&self, ns: &str) -> RedisStore {
        RedisStore::builder(&self.url)
            .key_prefix(ns)
            .ttl(TTL)
            .connect()
            .await
            .expect("connect to redis")
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
        let checkpoints = run_ids(keys(&mut raw, &format!("{ns}:")).await, &format!("{ns}:"));
        let lease_prefix = format!("{ns}.lease:");
        let leases = run_ids(keys(&mut raw, &lease_prefix).await, &lease_prefix);
        Some(Records {
            checkpoints: checkpoints.into_iter().collect(),
            leases: leases.into_iter().map(|run_id| (run_id, true)).collect(),
        })
    }
}

/// Every key that starts with `prefix`.
async fn keys(raw: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Vec<String> {
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(raw)
            .await
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

fluxio_core::store_conformance_tests!(harness);
