//! A run that crashes in one process and is resumed by another, on Redis.
//!
//! ```text
//! cargo run --example redis      # FLUXIO_REDIS_URL, default redis://127.0.0.1:6379
//! ```

use std::sync::Arc;

/// The server when `FLUXIO_REDIS_URL` is not set.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("FLUXIO_REDIS_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let store = fluxio::RedisStore::builder(&url)
        .key_prefix("fluxio:example")
        .connect()
        .await?;
    fluxio_examples::two_process::main(Arc::new(store), "Redis").await
}
