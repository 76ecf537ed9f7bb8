//! SQLite files of the tests.

/// A connection of its own to the file at `path` (busy timeout 5 s), as
/// another program (or an operator's `sqlite3` shell) would have.
///
/// # Panics
/// When the file cannot be opened.
#[cfg(feature = "sqlite")]
pub async fn raw_connection(path: &std::path::Path) -> sqlx::SqliteConnection {
    use sqlx::Connection as _;

    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .busy_timeout(std::time::Duration::from_secs(5));
    sqlx::SqliteConnection::connect_with(&options)
        .await
        .expect("a raw connection")
}

/// Another connection to `path` (another process, as far as SQLite can
/// tell) that takes the write lock (`BEGIN IMMEDIATE`) and sits on it until
/// it ends its transaction or is dropped.
///
/// # Panics
/// When the file cannot be opened or locked.
#[cfg(feature = "sqlite")]
pub async fn hold_the_write_lock(path: &std::path::Path) -> sqlx::SqliteConnection {
    let mut other = raw_connection(path).await;
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .expect("take the write lock");
    other
}

/// Removes the database `file` and its `-wal` and `-shm` files, those that
/// are there (what a bench leaves under `target/tmp`).
pub fn remove_database(file: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}
