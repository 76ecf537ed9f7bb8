//! Helpers shared by the integration tests: the server's URL, fresh schemas.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use fluxio_postgres::PostgresStore;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

/// `FLUXIO_POSTGRES_URL`, or the local test server.
pub fn url() -> String {
    std::env::var("FLUXIO_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// `Some(url)` when the server answers; otherwise skips (or fails under CI).
pub async fn server() -> Option<String> {
    let url = url();
    let reached = tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&url)).await;
    match reached {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Some(url)
        }
        Ok(Err(e)) => fluxio_core::store::conformance::skip_unless_ci("postgres", &e),
        Err(_) => fluxio_core::store::conformance::skip_unless_ci("postgres", &"connect timed out"),
    }
}

/// A schema name no other test uses.
pub fn fresh_schema(test: &str) -> String {
    fluxio_core::store::conformance::namespace(test)
}

/// Drops `schema` and everything in it.
pub async fn drop_schema(url: &str, schema: &str) {
    let mut conn = PgConnection::connect(url).await.expect("connect to drop");
    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await
        .expect("drop schema");
    let _ = conn.close().await;
}

/// A store on a fresh schema with `max_connections` 4.
pub async fn store(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::builder(url)
        .schema(schema)
        .max_connections(4)
        .connect()
        .await
        .expect("connect")
}
