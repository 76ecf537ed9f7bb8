//! What the Redis benchmarks share: their runtime, the store each connects
//! to the local Redis, and the deletion of their keys at the end.

use std::time::Duration;

use fluxio_redis::RedisStore;
use tokio::runtime::Runtime;

/// The benchmarks' runtime: two worker threads.
pub(crate) fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A store on `url` under the key prefix `prefix`, keeping completed runs
/// `ttl`; `None`, after a line that says the benchmarks are skipped, when
/// Redis is unreachable.
pub(crate) fn connect(rt: &Runtime, url: &str, prefix: &str, ttl: Duration) -> Option<RedisStore> {
    let connected = rt.block_on(
        RedisStore::builder(url)
            .key_prefix(prefix)
            .completed_retention(Some(ttl))
            .connect(),
    );
    match connected {
        Ok(store) => Some(store),
        Err(e) => {
            eprintln!("SKIPPED: redis is unreachable ({e}); start it to run these benchmarks");
            None
        }
    }
}

/// The benchmark's runtime, the server's URL
/// (`fluxio_test_support::redis::url`) and a store on it (see [`connect`]);
/// `None` when Redis is unreachable.
pub(crate) fn start(prefix: &str, ttl: Duration) -> Option<(Runtime, String, RedisStore)> {
    let rt = runtime();
    let url = fluxio_test_support::redis::url();
    let store = connect(&rt, &url, prefix, ttl)?;
    Some((rt, url, store))
}

/// Deletes the benchmark's keys (those of `prefix`), or says that they are
/// left to expire in `ttl`.
#[allow(dead_code, reason = "not every benchmark deletes its keys")]
pub(crate) fn cleanup(rt: &Runtime, url: &str, prefix: &str, ttl: Duration) {
    if let Err(e) = rt.block_on(delete_keys(url, prefix)) {
        eprintln!("could not delete the benchmark's keys (they expire in {ttl:?}): {e}");
    }
}

async fn delete_keys(url: &str, prefix: &str) -> redis::RedisResult<()> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await?;
    for chunk in keys.chunks(1_000) {
        redis::cmd("UNLINK")
            .arg(chunk)
            .query_async::<()>(&mut conn)
            .await?;
    }
    Ok(())
}
