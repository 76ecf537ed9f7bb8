//! Opening read-only (`PostgresStoreBuilder::read_only`): no schema, table
//! or row is created (read from the catalog), a store's tables are read and
//! never written, and the schema version decides what can be read (the
//! last two: the SQL stores' shared checks, `fluxio_test_support::sql`,
//! `read_only.rs` there).

use fluxio_core::Error;
use fluxio_postgres::{BACKEND, PostgresStore, PostgresStoreError};
use fluxio_test_support as support;
use sqlx::PgPool;

use crate::sql::Types;

fn own(err: &Error) -> &PostgresStoreError {
    support::error::own(err, BACKEND)
}

async fn read_only(url: &str, schema: &str) -> fluxio_core::Result<PostgresStore> {
    PostgresStore::builder(url)
        .schema(schema)
        .read_only(true)
        .connect()
        .await
}

/// Whether the schema exists, and every relation in it (tables, indexes,
/// sequences) with its kind.
async fn catalog(pool: &PgPool, schema: &str) -> (bool, Vec<(String, String)>) {
    let exists =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema)
            .fetch_one(pool)
            .await
            .expect("pg_namespace");
    let relations = sqlx::query_as(
        "SELECT c.relname::text, c.relkind::text FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .expect("pg_class");
    (exists, relations)
}

#[tokio::test]
async fn read_only_creates_no_schema_and_no_table() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let pool = PgPool::connect(&url).await.expect("a raw pool");

    // a schema that does not exist stays so
    let fresh = support::namespace("ro_fresh");
    let err = read_only(&url, &fresh).await.expect_err("no schema");
    support::sql::assert_no_tables::<Types>(&err);
    assert!(
        matches!(own(&err), PostgresStoreError::NoTables { schema, .. } if schema == &fresh),
        "{err:?}"
    );
    assert_eq!(catalog(&pool, &fresh).await, (false, Vec::new()));

    // another application's schema keeps exactly its relations
    let foreign = support::namespace("ro_foreign");
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA \"{foreign}\"; \
         CREATE TABLE \"{foreign}\".customers (id BIGINT PRIMARY KEY, name TEXT)"
    ))
    .execute(&pool)
    .await
    .expect("the application's schema");
    let before = catalog(&pool, &foreign).await;
    let err = read_only(&url, &foreign)
        .await
        .expect_err("no fluxio tables");
    assert!(
        matches!(own(&err), PostgresStoreError::NoTables { .. }),
        "{err:?}"
    );
    assert_eq!(catalog(&pool, &foreign).await, before);
    support::postgres::drop_schema(&url, &foreign).await;
}

fluxio_test_support::sql_tests! { crate::sql::Postgres;
    read_only_reads_a_store_and_refuses_every_write,
    read_only_refuses_an_older_schema_and_reads_a_newer_one,
}
