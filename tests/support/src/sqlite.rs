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

/// A connection to `path` that creates the file if it is missing, with
/// the driver's defaults (a rollback journal, not WAL): an application's
/// own file, not a store's.
///
/// # Panics
/// When the file cannot be opened.
#[cfg(feature = "sqlite")]
pub async fn application_connection(path: &std::path::Path) -> sqlx::SqliteConnection {
    use sqlx::Connection as _;

    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true);
    sqlx::SqliteConnection::connect_with(&options)
        .await
        .expect("an application's file")
}

/// Creates the file `path` of an application (not a store) with the
/// schema and rows `sql` makes.
///
/// # Panics
/// When the file cannot be made.
#[cfg(feature = "sqlite")]
pub async fn application_file(path: &std::path::Path, sql: &str) {
    use sqlx::Connection as _;

    let mut conn = application_connection(path).await;
    sqlx::raw_sql(sql)
        .execute(&mut conn)
        .await
        .expect("the application's schema");
    conn.close().await.expect("close");
}

/// Every schema object of the file at `path` (type, name, SQL), and the
/// file's bytes: what must stay as it was when a store only reads it.
///
/// # Panics
/// When the file cannot be read.
#[cfg(feature = "sqlite")]
pub async fn snapshot(path: &std::path::Path) -> (Vec<(String, String, Option<String>)>, Vec<u8>) {
    use sqlx::Connection as _;

    let mut conn = raw_connection(path).await;
    let objects = sqlx::query_as("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        .fetch_all(&mut conn)
        .await
        .expect("sqlite_master");
    conn.close().await.expect("close");
    (objects, std::fs::read(path).expect("the file"))
}

/// Commits the transaction of `conn` after `delay`, on a task of its own
/// that hands the connection back.
#[cfg(feature = "sqlite")]
pub fn commit_after(
    mut conn: sqlx::SqliteConnection,
    delay: std::time::Duration,
) -> tokio::task::JoinHandle<sqlx::SqliteConnection> {
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        sqlx::query("COMMIT")
            .execute(&mut conn)
            .await
            .expect("commit");
        conn
    })
}

/// Runs `sql` (statements separated by `;`) on a connection of its own to
/// the file at `path` ([`raw_connection`]), past any store.
///
/// # Panics
/// When SQLite refuses.
#[cfg(feature = "sqlite")]
pub async fn execute(path: &std::path::Path, sql: &str) {
    let mut conn = raw_connection(path).await;
    sqlx::raw_sql(sql)
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The one integer the query `sql` answers on a connection of its own to
/// the file at `path` ([`raw_connection`]), past any store.
///
/// # Panics
/// When SQLite refuses, or the answer is no integer.
#[cfg(feature = "sqlite")]
pub async fn scalar(path: &std::path::Path, sql: &str) -> i64 {
    let mut conn = raw_connection(path).await;
    sqlx::query_scalar(sql)
        .fetch_one(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
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
