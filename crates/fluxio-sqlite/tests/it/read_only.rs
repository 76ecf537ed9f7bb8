//! Opening read-only (`SqliteStoreBuilder::read_only`): a missing file is
//! not created, a foreign file is left byte for byte as it was, a store's
//! file is read and never written, and the schema version decides what can
//! be read (the last two: the SQL stores' shared checks,
//! `fluxio_test_support::sql`, `read_only.rs` there).

use std::path::Path;

use fluxio_core::Error;
use fluxio_sqlite::{BACKEND, SqliteStore, SqliteStoreError};
use fluxio_test_support as support;

use crate::sql::Types;

fn own(err: &Error) -> &SqliteStoreError {
    support::error::own(err, BACKEND)
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
    support::sqlite::application_file(
        &file,
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
         CREATE INDEX customers_name ON customers (name);
         INSERT INTO customers (name) VALUES ('Ada');",
    )
    .await;
    let before = support::sqlite::snapshot(&file).await;
    let err = read_only(&file).await.expect_err("no fluxio tables");
    support::sql::assert_no_tables::<Types>(&err);
    assert!(
        matches!(own(&err), SqliteStoreError::NoTables { path, .. } if path == &file),
        "{err:?}"
    );
    let after = support::sqlite::snapshot(&file).await;
    assert_eq!(before.0, after.0, "the schema changed");
    assert!(before.1 == after.1, "the file's bytes changed");
    let wal = file.with_extension("db-wal");
    assert!(!wal.exists(), "a WAL was made: {}", wal.display());
}

fluxio_test_support::sql_tests! { crate::sql::Sqlite;
    read_only_reads_a_store_and_refuses_every_write,
    read_only_refuses_an_older_schema_and_reads_a_newer_one,
}
