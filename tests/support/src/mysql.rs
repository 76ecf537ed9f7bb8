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

/// Runs `test` with the test server's URL and a database of its own
/// ([`namespace`](crate::namespace)`(test_name)`), then drops the database
/// (left to look at when the test fails); nothing after a loud skip
/// ([`server`]).
#[cfg(feature = "mysql")]
pub async fn in_database<F, Fut>(test_name: &str, test: F)
where
    F: FnOnce(String, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let drop = async |url: String, ns: String| drop_database(&url, &ns).await;
    crate::in_namespace(server().await, test_name, test, drop).await;
}

/// [`drop_database`], boxed, to be kept and called later (when a harness
/// is dropped).
#[cfg(feature = "mysql")]
pub fn drop_database_later<'a>(
    url: &'a str,
    database: &'a str,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
    Box::pin(drop_database(url, database))
}

/// MySQL's SQL, for the SQL stores' shared checks
/// ([`sql::Server`](crate::sql::Server)): a test's namespace is a database.
///
/// The store's first schema version is its whole schema, so no older
/// tables of it exist to undo a migration to; its commits are not counted:
/// InnoDB names a transaction only in `information_schema.innodb_trx`, a
/// copy the server refreshes at most every 0.1 s, so a trigger cannot tell
/// one transaction from the next (the commit-count checks do not run on
/// MySQL).
#[cfg(feature = "mysql")]
#[derive(Debug)]
pub struct MySql;

#[cfg(feature = "mysql")]
#[async_trait::async_trait]
impl crate::sql::Dialect for MySql {
    type Db = sqlx::MySql;

    const MIGRATIONS: i64 = 2;

    const DROP: crate::sql::DropNamespace = drop_database_later;

    const TABLES: &'static str = "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
         WHERE table_schema = ? ORDER BY 1";

    /// Every table, index and trigger of the database.
    const OBJECTS: &'static str = "SELECT 'table', CAST(table_name AS CHAR) \
           FROM information_schema.tables WHERE table_schema = ? \
         UNION ALL SELECT 'index', CAST(CONCAT(table_name, '.', index_name, '.', column_name) \
           AS CHAR) FROM information_schema.statistics WHERE table_schema = ? \
         UNION ALL SELECT 'trigger', CAST(trigger_name AS CHAR) \
           FROM information_schema.triggers WHERE trigger_schema = ? \
         ORDER BY 1, 2";

    const OBJECTS_BINDS: usize = 3;

    const OLD_ROW: &'static str = "INSERT INTO {s}.fluxio_checkpoints \
           (run_id, payload, version, ip, step, status, created_at, updated_at) \
         VALUES (?, ?, ?, 0, '', ?, 0, 0)";

    async fn server() -> Option<String> {
        server().await
    }

    fn prefix(database: &str) -> String {
        format!("`{database}`.")
    }

    fn blob(hex: &str) -> String {
        format!("X'{hex}'")
    }

    fn int8(sql: &str) -> String {
        format!("SELECT CAST(({sql}) AS SIGNED)")
    }

    fn undo(version: i64) -> String {
        panic!("migration {version} has no older schema on MySQL: its first is the whole schema");
    }
}
