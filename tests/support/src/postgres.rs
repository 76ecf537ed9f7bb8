//! The PostgreSQL server of the tests.

/// The environment variable that names the server.
pub const URL_VAR: &str = "FLUXIO_POSTGRES_URL";

/// The server when [`URL_VAR`] is not set.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// [`URL_VAR`], or [`DEFAULT_URL`].
#[must_use]
pub fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// `Some(url)` when the server answers within 5 s; otherwise `None` after a
/// loud skip (a panic instead when `CI` is set).
#[cfg(feature = "postgres")]
pub async fn server() -> Option<String> {
    use sqlx::Connection as _;

    let url = url();
    let reached = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        sqlx::PgConnection::connect(&url),
    )
    .await;
    match reached {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Some(url)
        }
        Ok(Err(e)) => crate::skip_unless_ci("postgres", &e),
        Err(_) => crate::skip_unless_ci("postgres", &"connect timed out"),
    }
}

/// Drops `schema` and everything in it.
///
/// # Panics
/// When the server refuses.
#[cfg(feature = "postgres")]
pub async fn drop_schema(url: &str, schema: &str) {
    use sqlx::Connection as _;

    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .expect("connect to drop");
    // `Executor::execute`, not `RawSql::execute`: the future stays `Send`
    // (a harness's `async_trait` method awaits it)
    let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
    sqlx::Executor::execute(&mut conn, sqlx::raw_sql(&drop))
        .await
        .expect("drop schema");
    let _ = conn.close().await;
}

/// The indexes of `schema.table`: each one's name and definition.
///
/// Filter the definitions here, not in the query: a filter on
/// `pg_get_indexdef` in SQL may run on any index of the server first, and
/// fails on one that a concurrent test is dropping ("could not open
/// relation with OID ...").
///
/// # Panics
/// When the server refuses.
#[cfg(feature = "postgres")]
pub async fn indexes(pool: &sqlx::PgPool, schema: &str, table: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT i.relname::text, pg_get_indexdef(i.oid) \
         FROM pg_index x \
         JOIN pg_class c ON c.oid = x.indrelid \
         JOIN pg_class i ON i.oid = x.indexrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relname = $2 \
         ORDER BY 1",
    )
    .bind(schema)
    .bind(table)
    .fetch_all(pool)
    .await
    .expect("the table's indexes")
}

/// For a bench: `Some(url)` when the server answers within 5 s; otherwise
/// `None` after saying on stderr that the benches are skipped.
#[cfg(feature = "postgres")]
pub fn bench_server(rt: &tokio::runtime::Runtime) -> Option<String> {
    use sqlx::Connection as _;

    let url = url();
    let reachable = rt.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            sqlx::PgConnection::connect(&url),
        )
        .await
    });
    match reachable {
        Ok(Ok(conn)) => {
            drop(rt.block_on(conn.close()));
            Some(url)
        }
        Ok(Err(e)) => {
            eprintln!("SKIPPED: postgres is unreachable ({e}); start it to run these benchmarks");
            None
        }
        Err(_) => {
            eprintln!(
                "SKIPPED: postgres did not answer within 5 s; start it to run these benchmarks"
            );
            None
        }
    }
}
