//! Opening: errors name the file, and a database that cannot be written is
//! refused at open rather than at the first run.

use std::io::{Seek, SeekFrom, Write};

use fluxio_core::Error;
use fluxio_core::store::CheckpointStore;
use fluxio_sqlite::{BACKEND, SqliteStore, SqliteStoreError};
use fluxio_test_support as support;
use sqlx::Connection;

/// Display of `err` and of every source, one per line.
fn chain(err: &Error) -> String {
    support::error::chain(err, "\n")
}

fn own(err: &Error) -> &SqliteStoreError {
    support::error::own(err, BACKEND)
}

#[tokio::test]
async fn a_file_in_a_missing_directory_is_named_in_the_error() {
    let dir = support::TempDir::new("missing_dir");
    let file = dir.path().join("no-such-directory").join("orders.db");
    let err = SqliteStore::connect(&file).await.expect_err("no directory");
    let message = err.to_string();
    assert!(
        message.contains(&file.display().to_string()),
        "the message names the file: {message}"
    );
    match own(&err) {
        SqliteStoreError::Open { path, .. } => assert_eq!(path, &file),
        other => panic!("expected Open, got {other:?}"),
    }
    assert!(
        chain(&err).contains("unable to open database file"),
        "SQLite's error is kept as the source: {}",
        chain(&err)
    );
}

/// A `sqlite://` URL given where the store takes a path (the `fluxio`
/// command takes URLs): the error says so, naming what was given.
#[tokio::test]
async fn a_url_given_as_the_path_is_named_and_explained() {
    let dir = support::TempDir::new("url_as_path");
    let url = format!("sqlite://{}/runs.db", dir.path().display());
    let err = SqliteStore::connect(&url).await.expect_err("not a path");
    let message = chain(&err);
    assert!(
        message.contains(&url) && message.contains("takes a file path"),
        "{message}"
    );
    let plain = dir.path().join("missing").join("runs.db");
    let err = SqliteStore::connect(&plain)
        .await
        .expect_err("no directory");
    assert!(
        !chain(&err).contains("takes a file path"),
        "no hint for a path"
    );
}

/// A database SQLite itself treats as read-only, whoever opens it (these
/// tests run as root, which file permissions do not stop): its header's
/// write version (byte 18) is above 2.
async fn read_only_database(dir: &support::TempDir) -> std::path::PathBuf {
    let file = dir.db("read_only");
    {
        let store = SqliteStore::connect(&file).await.expect("create");
        store.save(support::checkpoint("r", 1)).await.expect("save");
    }
    let mut raw = support::sqlite::raw_connection(&file).await;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut raw)
        .await
        .expect("checkpoint the WAL into the file");
    raw.close().await.expect("close");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .expect("open the file");
    f.seek(SeekFrom::Start(18)).expect("seek");
    f.write_all(&[3]).expect("write the header's write version");
    file
}

#[tokio::test]
async fn a_database_that_cannot_be_written_is_refused_at_open() {
    let dir = support::TempDir::new("read_only");
    let file = read_only_database(&dir).await;
    // The file really is read-only for SQLite (and still readable).
    let mut raw = support::sqlite::raw_connection(&file).await;
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM fluxio_checkpoints")
        .fetch_one(&mut raw)
        .await
        .expect("readable");
    assert_eq!(n, 1);
    let write = sqlx::query("DELETE FROM fluxio_checkpoints")
        .execute(&mut raw)
        .await;
    assert!(write.is_err(), "the database is read-only");
    raw.close().await.expect("close");

    let err = SqliteStore::connect(&file)
        .await
        .expect_err("a read-only database is refused at open");
    let message = err.to_string();
    assert!(
        message.contains(&file.display().to_string()) && message.contains("cannot be written"),
        "{message}"
    );
    match own(&err) {
        SqliteStoreError::NotWritable { path, .. } => assert_eq!(path, &file),
        other => panic!("expected NotWritable, got {other:?}"),
    }
    assert!(chain(&err).contains("readonly"), "{}", chain(&err));
}
