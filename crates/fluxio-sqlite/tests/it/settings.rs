//! Settings: validation, the pragmas really in force, timeouts.

use std::time::{Duration, Instant};

use fluxio_core::Error;
use fluxio_core::store::CheckpointStore;
use fluxio_sqlite::{SqliteStore, SqliteStoreError, Synchronous};
use fluxio_test_support as support;
use sqlx::Connection;
use support::error::timed;

use crate::sql::fresh_with;

fn invalid_setting(err: &Error) -> (&'static str, String) {
    support::sql::invalid_setting::<crate::sql::Types>(err)
}

#[tokio::test]
async fn the_table_name_is_validated_naming_the_setting_and_the_value() {
    let dir = support::TempDir::new("identifiers");
    let file = dir.db("x");
    let more = ["Checkpoints", "t]", "sqlite_master", "_fluxio_migrations"];
    for bad in &support::sql::bad_identifiers(&more) {
        let bad = bad.as_str();
        let err = SqliteStore::builder(&file)
            .table(bad)
            .connect()
            .await
            .expect_err(bad);
        assert_eq!(invalid_setting(&err), ("table", bad.to_owned()));
        let message = err.to_string();
        assert!(
            message.contains(&format!("invalid table {bad:?}")),
            "{message}"
        );
    }
    // Validation happens before any I/O.
    assert!(!file.exists(), "no file was created for an invalid setting");
    for ok in ["_a", "a_1", "checkpoints", &"a".repeat(63)] {
        let store = SqliteStore::builder(&file)
            .table(ok)
            .connect()
            .await
            .expect(ok);
        assert_eq!(store.table(), ok);
    }
}

#[tokio::test]
async fn other_settings_are_validated() {
    let dir = support::TempDir::new("settings");
    for bad in ["", ":memory:", "file:x.db?mode=memory"] {
        let err = SqliteStore::connect(bad).await.expect_err(bad);
        assert_eq!(invalid_setting(&err), ("path", bad.to_owned()));
    }
    let file = dir.db("x");
    let err = SqliteStore::builder(&file)
        .timeout(Duration::ZERO)
        .connect()
        .await
        .expect_err("zero timeout");
    assert_eq!(invalid_setting(&err).0, "timeout");
    let err = SqliteStore::builder(&file)
        .max_connections(0)
        .connect()
        .await
        .expect_err("no connections");
    assert_eq!(invalid_setting(&err).0, "max_connections");
    let err = SqliteStore::builder(&file)
        .busy_timeout(Duration::from_secs(60 * 24 * 60 * 60))
        .connect()
        .await
        .expect_err("60 days");
    assert_eq!(invalid_setting(&err).0, "busy_timeout");
    assert!(!file.exists());

    // A directory that does not exist: a store error naming the file, with
    // SQLite's error as its source.
    let err = SqliteStore::connect(dir.path().join("missing").join("x.db"))
        .await
        .expect_err("no directory");
    match err {
        Error::Store {
            backend, source, ..
        } => {
            assert_eq!(backend, "sqlite");
            match source.downcast_ref::<SqliteStoreError>() {
                Some(SqliteStoreError::Open { path, source }) => {
                    assert!(path.ends_with("missing/x.db"), "{path:?}");
                    assert!(matches!(source, sqlx::Error::Database(_)), "{source:?}");
                }
                other => panic!("expected Open, got {other:?}"),
            }
        }
        other => panic!("expected Error::Store, got {other:?}"),
    }
}

async fn pragma<T>(store: &SqliteStore, name: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite> + Send + Unpin,
{
    sqlx::query_scalar::<_, T>(&format!("PRAGMA {name}"))
        .fetch_one(store.pool())
        .await
        .expect("pragma")
}

#[tokio::test]
async fn wal_synchronous_and_busy_timeout_are_really_set() {
    let dir = support::TempDir::new("pragmas");
    let file = dir.db("x");
    let store = SqliteStore::connect(&file).await.expect("open");
    assert_eq!(store.path(), file.as_path());
    assert_eq!(pragma::<String>(&store, "journal_mode").await, "wal");
    // 2 is FULL, 1 NORMAL.
    assert_eq!(pragma::<i64>(&store, "synchronous").await, 2);
    assert_eq!(pragma::<i64>(&store, "busy_timeout").await, 5000);
    let shown = format!("{store:?}");
    assert!(shown.contains("x.db") && shown.contains("Full"), "{shown}");

    // WAL is a property of the file: a connection that asks for nothing
    // gets it too.
    let mut raw = support::sqlite::raw_connection(&file).await;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut raw)
        .await
        .expect("pragma");
    assert_eq!(mode, "wal");
    let _ = raw.close().await;

    let normal = SqliteStore::builder(&file)
        .synchronous(Synchronous::Normal)
        .busy_timeout(Duration::from_millis(1234))
        .connect()
        .await
        .expect("open");
    assert_eq!(pragma::<i64>(&normal, "synchronous").await, 1);
    assert_eq!(pragma::<i64>(&normal, "busy_timeout").await, 1234);
    assert_eq!(pragma::<String>(&normal, "journal_mode").await, "wal");
    // The first store is unaffected: the setting is per connection.
    assert_eq!(pragma::<i64>(&store, "synchronous").await, 2);
}

/// Checks that `r`, timed, is a store error that came within `limit`;
/// returns its source.
fn assert_store_error_in_time(
    what: &str,
    (r, took): (Result<(), Error>, Duration),
    limit: Duration,
) -> fluxio_core::BoxError {
    assert!(took < limit, "{what} took {took:?}, more than {limit:?}");
    match r {
        Err(Error::Store {
            backend: "sqlite",
            source,
            ..
        }) => source,
        other => panic!("{what}: expected a store error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_write_blocked_past_the_timeout_fails_with_a_store_error_and_the_store_recovers() {
    let timeout = Duration::from_millis(500);
    // The busy timeout (5 s) outlasts the store's timeout: the timeout wins.
    let (_dir, file, store) = fresh_with("blocked", |b| b.timeout(timeout)).await;
    let cp = support::checkpoint("r", 1);
    store.save(cp.clone()).await.expect("save");

    let mut other = support::sqlite::hold_the_write_lock(&file).await;
    let limit = timeout + Duration::from_millis(700);

    let save = timed(store.save(support::checkpoint("r", 2))).await;
    let source = assert_store_error_in_time("save", save, limit);
    match source.downcast_ref::<SqliteStoreError>() {
        Some(SqliteStoreError::Timeout {
            operation,
            timeout: t,
        }) => assert_eq!((*operation, *t), ("save", timeout)),
        other => panic!("expected Timeout, got {other:?}"),
    }
    let acquire = store.acquire_lease("r", Duration::from_secs(30));
    assert_store_error_in_time("acquire_lease", timed(acquire).await, limit);
    let purge = store.purge_expired();
    assert_store_error_in_time("purge_expired", timed(purge).await, limit);

    // Readers are not blocked by a writer (WAL).
    assert_eq!(store.load("r").await.expect("load"), Some(cp));

    sqlx::query("ROLLBACK")
        .execute(&mut other)
        .await
        .expect("release the lock");
    let lease = store
        .acquire_lease("r", Duration::from_secs(30))
        .await
        .expect("acquire once the lock is gone");
    let cp = support::checkpoint("r", 3);
    store.save_fenced(cp.clone(), &lease).await.expect("save");
    assert_eq!(store.load("r").await.expect("load"), Some(cp));
    store.release_lease(lease).await.expect("release");
    let _ = other.close().await;
}

#[tokio::test]
async fn a_write_blocked_past_the_busy_timeout_fails_with_sqlites_error() {
    let busy = Duration::from_millis(200);
    let (_dir, file, store) = fresh_with("busy", |b| b.busy_timeout(busy)).await;
    let mut other = support::sqlite::hold_the_write_lock(&file).await;

    let started = Instant::now();
    let r = store.save(support::checkpoint("r", 1)).await;
    let took = started.elapsed();
    assert!(
        took >= busy,
        "gave up after {took:?}, before the busy timeout"
    );
    assert!(took < busy + Duration::from_secs(2), "took {took:?}");
    match r {
        Err(Error::Store {
            backend: "sqlite",
            source,
            ..
        }) => {
            let sql = source
                .downcast_ref::<sqlx::Error>()
                .expect("sqlx's error as the source");
            assert!(sql.to_string().contains("locked"), "{sql}");
        }
        other => panic!("expected a store error, got {other:?}"),
    }
    sqlx::query("COMMIT")
        .execute(&mut other)
        .await
        .expect("release the lock");
    store
        .save(support::checkpoint("r", 1))
        .await
        .expect("save once the lock is gone");
}
