//! Whether a failure was a timeout or a connection failure is answered the
//! same way by every store: `Error::store_error_kind`, and here
//! `RedisStoreError::{kind, is_timeout, is_connection}`. Each case is a real
//! failure, not a constructed error.

use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::{CheckpointStore, StoreErrorKind};
use fluxio_test_support as support;

/// That `err` is of `kind`, through `Error::store_error_kind` and
/// through its `RedisStoreError`'s `kind`, `is_timeout` and
/// `is_connection`.
fn assert_kind(err: &Error, kind: StoreErrorKind) {
    assert_eq!(err.store_error_kind(), Some(kind), "{err:?}");
    let source = crate::redis_source(err);
    assert_eq!(source.kind(), kind, "{source}");
}

#[tokio::test]
async fn a_refused_connection_is_a_connection_failure() {
    let err = crate::connect_within("redis://127.0.0.1:1", Duration::from_secs(5))
        .await
        .expect_err("nothing listens on port 1");
    assert_kind(&err, StoreErrorKind::Connection);
}

#[tokio::test]
async fn a_server_that_never_answers_is_a_timeout() {
    let port = crate::silent_server().await;
    let url = format!("redis://127.0.0.1:{port}");
    let err = crate::connect_within(&url, Duration::from_millis(300))
        .await
        .expect_err("no reply");
    assert_kind(&err, StoreErrorKind::Timeout);
}

#[tokio::test]
async fn an_error_reply_of_the_server_is_neither() {
    let Some((mut raw, prefix)) = support::redis::raw_in("error_kind").await else {
        return;
    };
    let store = crate::store_in(&prefix, |b| b).await;
    // A list where the checkpoint's string should be: GET answers WRONGTYPE.
    let _: () = redis::cmd("RPUSH")
        .arg(store.checkpoint_key("r"))
        .arg("x")
        .query_async(&mut raw)
        .await
        .expect("RPUSH");
    let err = store.load("r").await.expect_err("WRONGTYPE");
    assert_kind(&err, StoreErrorKind::Other);
    support::redis::cleanup(&mut raw, &prefix).await;
}
