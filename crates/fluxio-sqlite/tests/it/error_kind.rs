//! Whether a failure was a timeout or a connection failure is answered the
//! same way by every store: `Error::store_error_kind`, and here
//! `SqliteStoreError::{kind, is_timeout, is_connection}`. Each case is a
//! real failure, not a constructed error.

use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::{CheckpointStore, StoreErrorKind};
use fluxio_sqlite::{SqliteStore, SqliteStoreError};
use fluxio_test_support as support;

fn sqlite_source(err: &Error) -> &(dyn std::error::Error + Send + Sync + 'static) {
    match err {
        Error::Store {
            backend: "sqlite",
            source,
            ..
        } => &**source,
        other => panic!("expected an sqlite Error::Store, got {other:?}"),
    }
}

#[tokio::test]
async fn a_file_that_cannot_be_opened_is_a_connection_failure() {
    let dir = support::TempDir::new("error_kind_open");
    let err = SqliteStore::connect(dir.path().join("missing").join("x.db"))
        .await
        .expect_err("the directory does not exist");
    assert_eq!(
        err.store_error_kind(),
        Some(StoreErrorKind::Connection),
        "{err:?}"
    );
    let own = sqlite_source(&err)
        .downcast_ref::<SqliteStoreError>()
        .expect("a SqliteStoreError");
    assert_eq!(own.kind(), StoreErrorKind::Connection);
    assert!(own.is_connection() && !own.is_timeout(), "{own}");
}

#[tokio::test]
async fn a_write_locked_past_the_busy_timeout_is_a_timeout() {
    let dir = support::TempDir::new("error_kind_busy");
    let file = dir.db("x");
    let store = SqliteStore::builder(&file)
        .busy_timeout(Duration::from_millis(100))
        .connect()
        .await
        .expect("open");
    let other = support::sqlite::hold_the_write_lock(&file).await;
    let err = store
        .acquire_lease("r", Duration::from_secs(30))
        .await
        .expect_err("database is locked");
    drop(other);
    assert_eq!(
        err.store_error_kind(),
        Some(StoreErrorKind::Timeout),
        "{err:?}"
    );
    // SQLite's own error, the source itself.
    assert!(
        sqlite_source(&err).downcast_ref::<sqlx::Error>().is_some(),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_write_locked_past_the_store_timeout_is_a_timeout() {
    let dir = support::TempDir::new("error_kind_timeout");
    let file = dir.db("x");
    // the file's migrations run first, under the default timeout: on a busy
    // machine four of them can take longer than the 200 ms below
    drop(SqliteStore::connect(&file).await.expect("migrate"));
    // The busy timeout (5 s) outlasts the store's timeout: the timeout wins.
    let store = SqliteStore::builder(&file)
        .timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("open");
    let other = support::sqlite::hold_the_write_lock(&file).await;
    let err = store
        .acquire_lease("r", Duration::from_secs(30))
        .await
        .expect_err("the store's timeout");
    drop(other);
    assert_eq!(
        err.store_error_kind(),
        Some(StoreErrorKind::Timeout),
        "{err:?}"
    );
    let own = sqlite_source(&err)
        .downcast_ref::<SqliteStoreError>()
        .expect("a SqliteStoreError");
    assert!(own.is_timeout() && !own.is_connection(), "{own}");
}

#[tokio::test]
async fn an_error_sqlite_reports_is_neither() {
    let dir = support::TempDir::new("error_kind_other");
    let file = dir.db("x");
    let store = SqliteStore::connect(&file).await.expect("open");
    let mut other = support::sqlite::raw_connection(&file).await;
    sqlx::query("DROP TABLE fluxio_checkpoints")
        .execute(&mut other)
        .await
        .expect("drop the table");
    let err = store.exists("r").await.expect_err("no such table");
    assert_eq!(err.store_error_kind(), Some(StoreErrorKind::Other), "{err}");
}
