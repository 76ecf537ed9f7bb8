//! Whether a failure was a timeout or a connection failure is answered the
//! same way by every store: `Error::store_error_kind`, and here
//! `RedisStoreError::{kind, is_timeout, is_connection}`. Each case is a real
//! failure, not a constructed error.

use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::{CheckpointStore, StoreErrorKind};
use fluxio_redis::{RedisStore, RedisStoreError};
use fluxio_test_support as support;
use tokio::net::TcpListener;

fn redis_source(err: &Error) -> &RedisStoreError {
    match err {
        Error::Store {
            backend: "redis",
            source,
            ..
        } => source
            .downcast_ref::<RedisStoreError>()
            .expect("the source is a RedisStoreError"),
        other => panic!("expected a redis Error::Store, got {other:?}"),
    }
}

#[tokio::test]
async fn a_refused_connection_is_a_connection_failure() {
    let err = RedisStore::builder("redis://127.0.0.1:1")
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect_err("nothing listens on port 1");
    assert_eq!(
        err.store_error_kind(),
        Some(StoreErrorKind::Connection),
        "{err:?}"
    );
    let source = redis_source(&err);
    assert_eq!(source.kind(), StoreErrorKind::Connection);
    assert!(source.is_connection() && !source.is_timeout(), "{source}");
}

#[tokio::test]
async fn a_server_that_never_answers_is_a_timeout() {
    // Accepts connections and never writes a byte back.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let err = RedisStore::builder(format!("redis://127.0.0.1:{port}"))
        .command_timeout(Duration::from_millis(300))
        .connect()
        .await
        .expect_err("no reply");
    assert_eq!(
        err.store_error_kind(),
        Some(StoreErrorKind::Timeout),
        "{err:?}"
    );
    let source = redis_source(&err);
    assert_eq!(source.kind(), StoreErrorKind::Timeout);
    assert!(source.is_timeout() && !source.is_connection(), "{source}");
}

#[tokio::test]
async fn an_error_reply_of_the_server_is_neither() {
    let Some(mut raw) = support::redis::raw().await else {
        return;
    };
    let prefix = support::namespace("error_kind");
    let store = RedisStore::builder(support::redis::url())
        .key_prefix(&prefix)
        .connect()
        .await
        .expect("connect");
    // A list where the checkpoint's string should be: GET answers WRONGTYPE.
    let _: () = redis::cmd("RPUSH")
        .arg(store.checkpoint_key("r"))
        .arg("x")
        .query_async(&mut raw)
        .await
        .expect("RPUSH");
    let err = store.load("r").await.expect_err("WRONGTYPE");
    assert_eq!(err.store_error_kind(), Some(StoreErrorKind::Other), "{err}");
    let source = redis_source(&err);
    assert!(!source.is_timeout() && !source.is_connection(), "{source}");
    support::redis::cleanup(&mut raw, &prefix).await;
}
