//! A run that crashes in one process and is resumed by another, on Postgres.
//!
//! ```text
//! cargo run --example postgres   # FLUXIO_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/test
//! ```

use std::sync::Arc;

/// The server when `FLUXIO_POSTGRES_URL` is not set.
const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("FLUXIO_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let store = fluxio::PostgresStore::builder(&url)
        .schema("fluxio_example")
        .connect()
        .await?;
    fluxio_examples::two_process::main(Arc::new(store), "Postgres").await
}
