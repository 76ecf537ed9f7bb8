//! Reading commands write nothing (contract rule 23): `list`, `show` and
//! `diff` never create or migrate, on SQLite (a missing file stays missing,
//! another application's file keeps its schema and bytes), PostgreSQL (no
//! schema, no table) and Redis (no key). Writing commands refuse a store
//! without fluxio's tables rather than create them.

use std::path::Path;

use fluxio_test_support::{TempDir, namespace};
use sqlx::Connection as _;

use crate::common::fluxio;

/// The reading commands, and one writing command, on a store without runs.
const COMMANDS: [&[&str]; 5] = [
    &["runs", "list"],
    &["runs", "list", "--json", "--status", "failed"],
    &["runs", "show", "orders/r-1"],
    &["runs", "diff", "orders/r-1", "orders/r-2@0"],
    &["runs", "cancel", "orders/r-1"],
];

/// Every schema object of the SQLite file, and its bytes.
async fn sqlite_snapshot(file: &Path) -> (Vec<(String, String)>, Vec<u8>) {
    let mut conn = fluxio_test_support::sqlite::raw_connection(file).await;
    let objects = sqlx::query_as("SELECT type, name FROM sqlite_master ORDER BY type, name")
        .fetch_all(&mut conn)
        .await
        .expect("sqlite_master");
    conn.close().await.expect("close");
    (objects, std::fs::read(file).expect("the file"))
}

#[tokio::test]
async fn rule23_reads_leave_another_applications_sqlite_file_as_it_was() {
    let dir = TempDir::new("rule23_foreign_sqlite");
    let file = dir.db("other");
    {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&file)
            .create_if_missing(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .expect("the application's file");
        sqlx::raw_sql(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
             INSERT INTO customers (name) VALUES ('Ada');",
        )
        .execute(&mut conn)
        .await
        .expect("its schema");
        conn.close().await.expect("close");
    }
    let before = sqlite_snapshot(&file).await;
    let url = format!("sqlite://{}", file.display());
    for command in COMMANDS {
        let mut args = vec!["--store", url.as_str()];
        args.extend_from_slice(command);
        let ran = fluxio(&args, None).code(3);
        assert!(
            ran.stderr
                .starts_with("fluxio: no fluxio tables here (table `fluxio_checkpoints`"),
            "{command:?}: {}",
            ran.all()
        );
        assert!(ran.stdout.is_empty(), "{command:?}: {}", ran.all());
        let after = sqlite_snapshot(&file).await;
        assert_eq!(before.0, after.0, "{command:?} changed the schema");
        assert!(before.1 == after.1, "{command:?} changed the file's bytes");
    }
    // a missing file is not created, by any command
    let missing = dir.db("typo");
    let url = format!("sqlite://{}", missing.display());
    for command in COMMANDS {
        let mut args = vec!["--store", url.as_str()];
        args.extend_from_slice(command);
        fluxio(&args, None).code(3);
        assert!(
            !missing.exists(),
            "{command:?} created {}",
            missing.display()
        );
    }
}

#[tokio::test]
async fn rule23_reads_create_no_postgres_schema_or_table() {
    let Some(url) = fluxio_test_support::postgres::server().await else {
        return;
    };
    let pool = sqlx::PgPool::connect(&url).await.expect("a raw pool");
    let schema = namespace("rule23_probe_fresh");
    let tables = || async {
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(&schema)
                .fetch_one(&pool)
                .await
                .expect("pg_namespace");
        let relations: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1",
        )
        .bind(&schema)
        .fetch_one(&pool)
        .await
        .expect("pg_class");
        (exists, relations)
    };
    for command in COMMANDS {
        let mut args = vec!["--store", url.as_str(), "--schema", schema.as_str()];
        args.extend_from_slice(command);
        let ran = fluxio(&args, None).code(3);
        assert!(
            ran.stderr
                .contains(&format!("no fluxio tables here (schema `{schema}`")),
            "{command:?}: {}",
            ran.all()
        );
        assert_eq!(tables().await, (false, 0), "{command:?} created the schema");
    }
    // and in a schema of another application's, its tables only
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA \"{schema}\"; CREATE TABLE \"{schema}\".customers (id BIGINT)"
    ))
    .execute(&pool)
    .await
    .expect("the application's schema");
    for command in COMMANDS {
        let mut args = vec!["--store", url.as_str(), "--schema", schema.as_str()];
        args.extend_from_slice(command);
        fluxio(&args, None).code(3);
        assert_eq!(tables().await, (true, 1), "{command:?} created a table");
    }
    pool.close().await;
    fluxio_test_support::postgres::drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn rule23_reads_create_no_mysql_database_or_table() {
    let Some(url) = fluxio_test_support::mysql::server().await else {
        return;
    };
    let pool = sqlx::MySqlPool::connect(&url).await.expect("a raw pool");
    let database = namespace("rule23_probe_fresh");
    let tables = || async {
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = ?)",
        )
        .bind(&database)
        .fetch_one(&pool)
        .await
        .expect("schemata");
        let tables: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ?",
        )
        .bind(&database)
        .fetch_one(&pool)
        .await
        .expect("tables");
        (exists, tables)
    };
    for command in COMMANDS {
        let mut args = vec!["--store", url.as_str(), "--schema", database.as_str()];
        args.extend_from_slice(command);
        let ran = fluxio(&args, None).code(3);
        assert!(
            ran.stderr
                .contains(&format!("no fluxio tables here (schema `{database}`")),
            "{command:?}: {}",
            ran.all()
        );
        assert_eq!(
            tables().await,
            (false, 0),
            "{command:?} created the database"
        );
    }
    // and in a database of another application's, its tables only
    sqlx::raw_sql(&format!(
        "CREATE DATABASE `{database}`; CREATE TABLE `{database}`.customers (id BIGINT)"
    ))
    .execute(&pool)
    .await
    .expect("the application's database");
    for command in COMMANDS {
        let mut args = vec!["--store", url.as_str(), "--schema", database.as_str()];
        args.extend_from_slice(command);
        fluxio(&args, None).code(3);
        assert_eq!(tables().await, (true, 1), "{command:?} created a table");
    }
    pool.close().await;
    fluxio_test_support::mysql::drop_database(&url, &database).await;
}

#[tokio::test]
async fn rule23_reads_write_no_redis_key() {
    let Some(mut raw) = fluxio_test_support::redis::raw().await else {
        return;
    };
    let url = fluxio_test_support::redis::url();
    let prefix = namespace("rule23_fresh_prefix");
    assert!(
        fluxio_test_support::redis::keys(&mut raw, &prefix)
            .await
            .is_empty()
    );
    for command in &COMMANDS[..4] {
        let mut args = vec!["--store", url.as_str(), "--prefix", prefix.as_str()];
        args.extend_from_slice(command);
        let ran = fluxio(&args, None);
        assert!(matches!(ran.code, 0 | 1), "{command:?}: {}", ran.all());
        let keys = fluxio_test_support::redis::keys(&mut raw, &prefix).await;
        assert!(keys.is_empty(), "{command:?} wrote {keys:?}");
    }
}
