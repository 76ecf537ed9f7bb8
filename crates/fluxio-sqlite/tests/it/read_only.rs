//! Opening read-only (`SqliteStoreBuilder::read_only`): a missing file is
//! not created, a foreign file is left byte for byte as it was, a store's
//! file is read and never written, and the schema version decides what can
//! be read.

use std::path::Path;

use fluxio_core::Error;
use fluxio_core::store::{CheckpointStore, RunFilter};
use fluxio_sqlite::{SqliteStore, SqliteStoreError};
use fluxio_test_support as support;

fn own(err: &Error) -> &SqliteStoreError {
    match err {
        Error::Store { source, .. } => source
            .downcast_ref::<SqliteStoreError>()
            .unwrap_or_else(|| panic!("expected a SqliteStoreError, got {source:?}")),
        other => panic!("expected Error::Store, got {other:?}"),
    }
}

/// Every schema object of the file, and the file's bytes.
async fn snapshot(file: &Path) -> (Vec<(String, String, Option<String>)>, Vec<u8>) {
    let mut conn = support::sqlite::raw_connection(file).await;
    let objects = sqlx::query_as("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        .fetch_all(&mut conn)
        .await
        .expect("sqlite_master");
    drop(conn);
    (objects, std::fs::read(file).expect("the file"))
}

async fn read_only(file: &Path) -> fluxio_core::Result<SqliteStore> {
    SqliteStore::builder(file).read_only(true).connect().await
}

#[tokio::test]
async fn read_only_never_creates_a_missing_file() {
    let dir = support::TempDir::new("ro_missing");
    let file = dir.db("absent");
    let err = read_only(&file).await.expect_err("no file");
    assert!(
        matches!(own(&err), SqliteStoreError::Open { path, .. } if path == &file),
        "{err:?}"
    );
    assert!(
        !file.exists(),
        "the read-only open created {}",
        file.display()
    );
}

#[tokio::test]
async fn read_only_leaves_a_foreign_file_byte_identical() {
    let dir = support::TempDir::new("ro_foreign");
    let file = dir.db("other");
    {
        use sqlx::Connection as _;
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&file)
            .create_if_missing(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .expect("another application's file");
        sqlx::raw_sql(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
             CREATE INDEX customers_name ON customers (name);
             INSERT INTO customers (name) VALUES ('Ada');",
        )
        .execute(&mut conn)
        .await
        .expect("the application's schema");
    }
    let before = snapshot(&file).await;
    let err = read_only(&file).await.expect_err("no fluxio tables");
    match own(&err) {
        SqliteStoreError::NoTables { path, table } => {
            assert_eq!(
                (path.as_path(), table.as_str()),
                (file.as_path(), "fluxio_checkpoints")
            );
        }
        other => panic!("expected NoTables, got {other:?}"),
    }
    assert!(err.to_string().contains("no fluxio tables here"), "{err}");
    let after = snapshot(&file).await;
    assert_eq!(before.0, after.0, "the schema changed");
    assert!(before.1 == after.1, "the file's bytes changed");
    let wal = file.with_extension("db-wal");
    assert!(!wal.exists(), "a WAL was made: {}", wal.display());
}

#[tokio::test]
async fn read_only_reads_a_store_and_refuses_every_write() {
    let dir = support::TempDir::new("ro_store");
    let file = dir.db("runs");
    let cp = support::checkpoint("orders/r", 1);
    {
        let store = SqliteStore::connect(&file).await.expect("open");
        store.save(cp.clone()).await.expect("save");
    }
    let before = snapshot(&file).await;
    let store = read_only(&file)
        .await
        .expect("a store's file opens read-only");
    assert_eq!(
        store.load("orders/r").await.expect("load"),
        Some(cp.clone())
    );
    assert_eq!(store.history("orders/r").await.expect("history").len(), 1);
    let page = store.list_runs(&RunFilter::new()).await.expect("list");
    assert_eq!(page.runs.len(), 1);
    let err = store
        .save(support::checkpoint("orders/s", 1))
        .await
        .expect_err("a read-only store does not write");
    assert!(matches!(err, Error::Store { .. }), "{err:?}");
    store.delete("orders/r").await.expect_err("nor delete");
    drop(store);
    assert_eq!(before.0, snapshot(&file).await.0, "the schema changed");
}

#[tokio::test]
async fn read_only_refuses_an_older_schema_and_reads_a_newer_one() {
    let dir = support::TempDir::new("ro_versions");
    let file = dir.db("runs");
    drop(SqliteStore::connect(&file).await.expect("open"));
    let mut conn = support::sqlite::raw_connection(&file).await;
    let latest: i64 = sqlx::query_scalar("SELECT max(version) FROM _fluxio_migrations")
        .fetch_one(&mut conn)
        .await
        .expect("versions");

    // a newer build added a migration: still read
    sqlx::query(
        "INSERT INTO _fluxio_migrations VALUES ('fluxio_checkpoints', 9999, 'future', x'00', 0)",
    )
    .execute(&mut conn)
    .await
    .expect("a newer migration");
    read_only(&file).await.expect("a newer schema is read");

    // an older build's tables: refused, named
    sqlx::query("DELETE FROM _fluxio_migrations WHERE version = ?1")
        .bind(latest)
        .execute(&mut conn)
        .await
        .expect("an older schema");
    let err = read_only(&file).await.expect_err("older");
    match own(&err) {
        SqliteStoreError::SchemaOutdated { version, table, .. } => {
            assert_eq!((*version, table.as_str()), (latest, "fluxio_checkpoints"));
        }
        other => panic!("expected SchemaOutdated, got {other:?}"),
    }
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM _fluxio_migrations WHERE version = ?1")
            .bind(latest)
            .fetch_one(&mut conn)
            .await
            .expect("count"),
        0,
        "the read-only open migrated"
    );

    // an edited migration: refused as a writer refuses it
    sqlx::query("UPDATE _fluxio_migrations SET checksum = x'00' WHERE version = 1")
        .execute(&mut conn)
        .await
        .expect("tamper");
    let err = read_only(&file).await.expect_err("changed");
    assert!(
        matches!(
            own(&err),
            SqliteStoreError::MigrationChanged { version: 1, .. }
        ),
        "{err:?}"
    );
}
