//! Opening read-only (`PostgresStoreBuilder::read_only`): no schema, table
//! or row is created (read from the catalog), a store's tables are read and
//! never written, and the schema version decides what can be read.

use fluxio_core::Error;
use fluxio_core::store::conformance::checkpoint;
use fluxio_core::store::{CheckpointStore, RunFilter};
use fluxio_postgres::{PostgresStore, PostgresStoreError};
use fluxio_test_support as support;
use sqlx::PgPool;

fn own(err: &Error) -> &PostgresStoreError {
    match err {
        Error::Store { source, .. } => source
            .downcast_ref::<PostgresStoreError>()
            .unwrap_or_else(|| panic!("expected a PostgresStoreError, got {source:?}")),
        other => panic!("expected Error::Store, got {other:?}"),
    }
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
    match own(&err) {
        PostgresStoreError::NoTables { schema, table } => {
            assert_eq!(
                (schema.as_str(), table.as_str()),
                (fresh.as_str(), "fluxio_checkpoints")
            );
        }
        other => panic!("expected NoTables, got {other:?}"),
    }
    assert!(err.to_string().contains("no fluxio tables here"), "{err}");
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

#[tokio::test]
async fn read_only_reads_a_store_and_refuses_every_write() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("ro_store");
    let cp = checkpoint("orders/r", 1);
    {
        let store = PostgresStore::builder(&url)
            .schema(&schema)
            .connect()
            .await
            .expect("connect");
        store.save(cp.clone()).await.expect("save");
    }
    let pool = PgPool::connect(&url).await.expect("a raw pool");
    let before = catalog(&pool, &schema).await;
    let store = read_only(&url, &schema).await.expect("opens read-only");
    assert_eq!(store.load("orders/r").await.expect("load"), Some(cp));
    assert_eq!(store.history("orders/r").await.expect("history").len(), 1);
    let page = store.list_runs(&RunFilter::new()).await.expect("list");
    assert_eq!(page.runs.len(), 1);
    store
        .save(checkpoint("orders/s", 1))
        .await
        .expect_err("a read-only store does not write");
    store.delete("orders/r").await.expect_err("nor delete");
    assert!(store.exists("orders/r").await.expect("exists"));
    assert_eq!(catalog(&pool, &schema).await, before);
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn read_only_refuses_an_older_schema_and_reads_a_newer_one() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("ro_versions");
    drop(
        PostgresStore::builder(&url)
            .schema(&schema)
            .connect()
            .await
            .expect("connect"),
    );
    let pool = PgPool::connect(&url).await.expect("a raw pool");
    let bookkeeping = format!("\"{schema}\"._fluxio_migrations");
    let latest: i64 = sqlx::query_scalar(&format!("SELECT max(version) FROM {bookkeeping}"))
        .fetch_one(&pool)
        .await
        .expect("versions");
    sqlx::query(&format!(
        "INSERT INTO {bookkeeping} (table_name, version, description, checksum) \
         VALUES ('fluxio_checkpoints', 9999, 'future', '\\x00')"
    ))
    .execute(&pool)
    .await
    .expect("a newer migration");
    drop(
        read_only(&url, &schema)
            .await
            .expect("a newer schema is read"),
    );

    sqlx::query(&format!("DELETE FROM {bookkeeping} WHERE version = $1"))
        .bind(latest)
        .execute(&pool)
        .await
        .expect("an older schema");
    let err = read_only(&url, &schema).await.expect_err("older");
    match own(&err) {
        PostgresStoreError::SchemaOutdated { version, .. } => assert_eq!(*version, latest),
        other => panic!("expected SchemaOutdated, got {other:?}"),
    }
    let left: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {bookkeeping} WHERE version = $1"
    ))
    .bind(latest)
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(left, 0, "the read-only open migrated");

    sqlx::query(&format!(
        "UPDATE {bookkeeping} SET checksum = '\\x00' WHERE version = 1"
    ))
    .execute(&pool)
    .await
    .expect("tamper");
    let err = read_only(&url, &schema).await.expect_err("changed");
    assert!(
        matches!(
            own(&err),
            PostgresStoreError::MigrationChanged { version: 1, .. }
        ),
        "{err:?}"
    );
    pool.close().await;
    support::postgres::drop_schema(&url, &schema).await;
}
