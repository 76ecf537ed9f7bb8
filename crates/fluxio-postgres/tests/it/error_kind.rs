//! Whether a failure was a timeout or a connection failure is answered the
//! same way by every store: `Error::store_error_kind`, and here
//! `PostgresStoreError::{kind, is_timeout, is_connection}`. Each case is a
//! real failure, not a constructed error.

use std::time::Duration;

use fluxio_core::store::{CheckpointStore, StoreErrorKind};
use fluxio_postgres::{BACKEND, PostgresStore, PostgresStoreError};
use fluxio_test_support as support;
use support::error::assert_kind;

#[tokio::test]
async fn a_refused_connection_is_a_connection_failure() {
    let err = PostgresStore::builder("postgres://postgres@127.0.0.1:1/test")
        .connect()
        .await
        .expect_err("nothing listens on port 1");
    assert_kind(&err, StoreErrorKind::Connection);
    let own: &PostgresStoreError = support::error::own(&err, BACKEND);
    assert_eq!(own.kind(), StoreErrorKind::Connection);
}

#[tokio::test]
async fn waiting_for_a_pooled_connection_past_the_timeout_is_a_timeout() {
    support::postgres::in_schema("error_kind_timeout", |url, schema| async move {
        // the schema's migrations run first, under the default timeout: on a
        // busy machine four of them can take longer than the 300 ms below
        PostgresStore::builder(&url)
            .schema(&schema)
            .connect()
            .await
            .expect("migrate");
        let store = PostgresStore::builder(&url)
            .schema(&schema)
            .max_connections(1)
            .timeout(Duration::from_millis(300))
            .connect()
            .await
            .expect("connect");
        // The pool's only connection is taken: the call waits for it.
        let held = store.pool().acquire().await.expect("the only connection");
        let err = store.exists("r").await.expect_err("no connection in time");
        drop(held);
        assert_kind(&err, StoreErrorKind::Timeout);
        // The store's own deadline or the pool's acquire timeout, whichever
        // fired first (they are the same duration).
        let source = support::error::source(&err, BACKEND);
        match source.downcast_ref::<PostgresStoreError>() {
            Some(own) => assert_eq!(own.kind(), StoreErrorKind::Timeout, "{own}"),
            None => assert!(
                matches!(
                    source.downcast_ref::<sqlx::Error>(),
                    Some(sqlx::Error::PoolTimedOut)
                ),
                "{source:?}"
            ),
        }
        store.exists("r").await.expect("the connection is back");
    })
    .await;
}

#[tokio::test]
async fn an_error_the_server_reports_is_neither() {
    support::postgres::in_schema("error_kind_other", |url, schema| async move {
        let store = PostgresStore::builder(&url)
            .schema(&schema)
            .max_connections(4)
            .connect()
            .await
            .expect("connect");
        support::postgres::drop_schema(&url, &schema).await;
        let err = store.exists("r").await.expect_err("the table is gone");
        assert_eq!(err.store_error_kind(), Some(StoreErrorKind::Other), "{err}");
        assert!(
            support::error::source(&err, BACKEND)
                .downcast_ref::<sqlx::Error>()
                .is_some(),
            "{err:?}"
        );
    })
    .await;
}
