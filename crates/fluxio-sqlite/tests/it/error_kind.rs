//! Whether a failure was a timeout or a connection failure is answered the
//! same way by every store: `Error::store_error_kind`, and here
//! `SqliteStoreError::{kind, is_timeout, is_connection}`. Each case is a
//! real failure, not a constructed error.

use std::path::Path;
use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::{CheckpointStore, StoreErrorKind};
use fluxio_sqlite::{BACKEND, SqliteStore, SqliteStoreBuilder, SqliteStoreError};
use fluxio_test_support as support;

use crate::sql::fresh;
use support::error::assert_kind;

/// The error of a lease asked of the store `builder` opens on `file` while
/// another connection holds the file's write lock: a timeout.
async fn error_behind_the_write_lock(file: &Path, builder: SqliteStoreBuilder) -> Error {
    let store = builder.connect().await.expect("open");
    let other = support::sqlite::hold_the_write_lock(file).await;
    let err = store
        .acquire_lease("r", Duration::from_secs(30))
        .await
        .expect_err("the write lock is held");
    drop(other);
    assert_kind(&err, StoreErrorKind::Timeout);
    err
}

#[tokio::test]
async fn a_file_that_cannot_be_opened_is_a_connection_failure() {
    let dir = support::TempDir::new("error_kind_open");
    let err = SqliteStore::connect(dir.path().join("missing").join("x.db"))
        .await
        .expect_err("the directory does not exist");
    assert_kind(&err, StoreErrorKind::Connection);
    let own: &SqliteStoreError = support::error::own(&err, BACKEND);
    assert_eq!(own.kind(), StoreErrorKind::Connection);
}

#[tokio::test]
async fn a_write_locked_past_the_busy_timeout_is_a_timeout() {
    let dir = support::TempDir::new("error_kind_busy");
    let file = dir.db("x");
    let builder = SqliteStore::builder(&file).busy_timeout(Duration::from_millis(100));
    let err = error_behind_the_write_lock(&file, builder).await;
    // SQLite's own error ("database is locked"), the source itself.
    assert!(
        support::error::source(&err, BACKEND)
            .downcast_ref::<sqlx::Error>()
            .is_some(),
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
    let builder = SqliteStore::builder(&file).timeout(Duration::from_millis(200));
    let err = error_behind_the_write_lock(&file, builder).await;
    let own: &SqliteStoreError = support::error::own(&err, BACKEND);
    assert_eq!(own.kind(), StoreErrorKind::Timeout, "{own}");
}

#[tokio::test]
async fn an_error_sqlite_reports_is_neither() {
    let (_dir, file, store) = fresh("error_kind_other").await;
    support::sqlite::execute(&file, "DROP TABLE fluxio_checkpoints").await;
    let err = store.exists("r").await.expect_err("no such table");
    assert_eq!(err.store_error_kind(), Some(StoreErrorKind::Other), "{err}");
}
