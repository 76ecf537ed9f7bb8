//! Connecting to a port where nothing listens fails at once, naming the
//! server and keeping the I/O error.

use std::error::Error as _;
use std::time::{Duration, Instant};

use fluxio_postgres::{PostgresStore, PostgresStoreError};

#[tokio::test]
async fn a_refused_connection_fails_fast_with_its_cause() {
    let started = Instant::now();
    let err = PostgresStore::builder("postgres://app:hunter2@127.0.0.1:1/test")
        .connect()
        .await
        .expect_err("nothing listens on port 1");
    let elapsed = started.elapsed();
    // A correctness bound, not a benchmark: the default timeout is 10 s.
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}: {err}");
    let message = err.to_string();
    assert!(
        message.contains("127.0.0.1:1"),
        "names host and port: {message}"
    );
    assert!(!message.contains("hunter2"), "{message}");
    let mut chain = Vec::new();
    let mut source = err.source();
    while let Some(s) = source {
        chain.push(s.to_string());
        source = s.source();
    }
    assert!(
        chain.iter().any(|s| s.to_lowercase().contains("refused")),
        "the cause is kept: {chain:?}"
    );
    let own = err
        .source()
        .and_then(|s| s.downcast_ref::<PostgresStoreError>())
        .expect("a PostgresStoreError");
    assert!(
        matches!(own, PostgresStoreError::Connect { url, .. } if url == "postgres://app:***@127.0.0.1:1/test"),
        "{own:?}"
    );
}
