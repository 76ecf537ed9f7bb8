//! Helpers shared by the integration tests: the server's URL, unique key
//! prefixes, a plain connection for raw reads and writes, and cleanup.
#![allow(dead_code)]

use fluxio_core::store::conformance::{namespace, skip_unless_ci};

/// `FLUXIO_REDIS_URL`, default `redis://127.0.0.1:6379`.
pub(crate) fn url() -> String {
    std::env::var("FLUXIO_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A key prefix no other test (or test run) uses.
pub(crate) fn prefix(test: &str) -> String {
    namespace(test)
}

/// A plain redis-rs connection to the server, or `None` (a loud skip) when
/// it is unreachable outside CI.
pub(crate) async fn raw() -> Option<redis::aio::MultiplexedConnection> {
    let url = url();
    let conn = async {
        redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await
    };
    match conn.await {
        Ok(c) => Some(c),
        Err(e) => skip_unless_ci("redis", &e),
    }
}

/// Every key that starts with `prefix`, sorted.
pub(crate) async fn keys(raw: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Vec<String> {
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
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    keys
}

/// Deletes every key that starts with `prefix`.
pub(crate) async fn cleanup(raw: &mut redis::aio::MultiplexedConnection, prefix: &str) {
    for key in keys(raw, prefix).await {
        let _: () = redis::cmd("DEL")
            .arg(key)
            .query_async(raw)
            .await
            .expect("DEL");
    }
}
