//! The Redis server of the tests.

/// The environment variable that names the server.
pub const URL_VAR: &str = "FLUXIO_REDIS_URL";

/// The server when [`URL_VAR`] is not set.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// [`URL_VAR`], or [`DEFAULT_URL`].
#[must_use]
pub fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// A plain redis-rs connection to the server, or `None` after a loud skip
/// when it is unreachable (a panic instead when `CI` is set).
#[cfg(feature = "redis")]
pub async fn raw() -> Option<::redis::aio::MultiplexedConnection> {
    let url = url();
    let conn = async {
        ::redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await
    };
    match conn.await {
        Ok(c) => Some(c),
        Err(e) => crate::skip_unless_ci("redis", &e),
    }
}

/// Every key that starts with `prefix`, sorted.
///
/// # Panics
/// When a `SCAN` fails.
#[cfg(feature = "redis")]
pub async fn keys(raw: &mut ::redis::aio::MultiplexedConnection, prefix: &str) -> Vec<String> {
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = ::redis::cmd("SCAN")
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
///
/// # Panics
/// When a command fails.
#[cfg(feature = "redis")]
pub async fn cleanup(raw: &mut ::redis::aio::MultiplexedConnection, prefix: &str) {
    for key in keys(raw, prefix).await {
        let _: () = ::redis::cmd("DEL")
            .arg(key)
            .query_async(raw)
            .await
            .expect("DEL");
    }
}
