//! The MySQL (or MariaDB) server of the tests.

/// The environment variable that names the server.
pub const URL_VAR: &str = "FLUXIO_MYSQL_URL";

/// The server when [`URL_VAR`] is not set.
pub const DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// [`URL_VAR`], or [`DEFAULT_URL`].
#[must_use]
pub fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// `Some(url)` when the server answers within 5 s; otherwise `None` after a
/// loud skip (a panic instead when `CI` is set).
#[cfg(feature = "mysql")]
pub async fn server() -> Option<String> {
    use sqlx::Connection as _;

    let url = url();
    let reached = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        sqlx::MySqlConnection::connect(&url),
    )
    .await;
    match reached {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Some(url)
        }
        Ok(Err(e)) => crate::skip_unless_ci("mysql", &e),
        Err(_) => crate::skip_unless_ci("mysql", &"connect timed out"),
    }
}

/// Drops `database` and everything in it.
///
/// # Panics
/// When the server refuses.
#[cfg(feature = "mysql")]
pub async fn drop_database(url: &str, database: &str) {
    use sqlx::{Connection as _, Executor as _};

    let mut conn = sqlx::MySqlConnection::connect(url)
        .await
        .expect("connect to drop");
    // `Executor::execute` rather than `RawSql::execute`: the latter's
    // future is not `Send` for every lifetime on a MySQL connection
    let drop = format!("DROP DATABASE IF EXISTS `{database}`");
    conn.execute(sqlx::raw_sql(&drop))
        .await
        .expect("drop database");
    let _ = conn.close().await;
}
