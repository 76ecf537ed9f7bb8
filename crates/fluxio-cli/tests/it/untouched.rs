//! Reading commands write nothing (contract rule 23): `list`, `show` and
//! `diff` never create or migrate, on SQLite (a missing file stays missing,
//! another application's file keeps its schema and bytes), PostgreSQL (no
//! schema, no table) and Redis (no key). Writing commands refuse a store
//! without fluxio's tables rather than create them.

use fluxio_test_support::{TempDir, namespace};

use crate::common::fluxio;

/// The reading commands, and one writing command, on a store without runs.
const COMMANDS: [&[&str]; 5] = [
    &["runs", "list"],
    &["runs", "list", "--json", "--status", "failed"],
    &["runs", "show", "orders/r-1"],
    &["runs", "diff", "orders/r-1", "orders/r-2@0"],
    &["runs", "cancel", "orders/r-1"],
];

#[tokio::test]
async fn rule23_reads_leave_another_applications_sqlite_file_as_it_was() {
    let dir = TempDir::new("rule23_foreign_sqlite");
    let file = dir.db("other");
    fluxio_test_support::sqlite::application_file(
        &file,
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
         INSERT INTO customers (name) VALUES ('Ada');",
    )
    .await;
    let before = fluxio_test_support::sqlite::snapshot(&file).await;
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
        let after = fluxio_test_support::sqlite::snapshot(&file).await;
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

/// Every read command on the namespace `name` (a `noun`: schema,
/// database) of the server at `url` is refused and creates nothing
/// (`objects` answers whether the namespace exists and how many tables it
/// has); nor does it in the namespace of another application that
/// `application` makes, with one table.
async fn reads_create_nothing_on_a_server<F, Fut>(
    url: &str,
    noun: &str,
    name: &str,
    objects: F,
    application: impl Future<Output = ()>,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = (bool, i64)>,
{
    let args = |command: &[&'static str]| {
        let mut args = vec!["--store", url, "--schema", name];
        args.extend_from_slice(command);
        args
    };
    for command in COMMANDS {
        let ran = fluxio(&args(command), None).code(3);
        assert!(
            ran.stderr
                .contains(&format!("no fluxio tables here ({noun} `{name}`")),
            "{command:?}: {}",
            ran.all()
        );
        assert_eq!(
            objects().await,
            (false, 0),
            "{command:?} created the {noun}"
        );
    }
    application.await;
    for command in COMMANDS {
        fluxio(&args(command), None).code(3);
        assert_eq!(objects().await, (true, 1), "{command:?} created a table");
    }
}

#[tokio::test]
async fn rule23_reads_create_no_postgres_schema_or_table() {
    let Some(url) = fluxio_test_support::postgres::server().await else {
        return;
    };
    let pool = sqlx::PgPool::connect(&url).await.expect("a raw pool");
    let schema = namespace("rule23_probe_fresh");
    let objects = || async {
        sqlx::query_as::<_, (bool, i64)>(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), \
               (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                WHERE n.nspname = $1)",
        )
        .bind(&schema)
        .fetch_one(&pool)
        .await
        .expect("pg_namespace, pg_class")
    };
    // and in a schema of another application's, its tables only
    let application = async {
        sqlx::raw_sql(&format!(
            "CREATE SCHEMA \"{schema}\"; CREATE TABLE \"{schema}\".customers (id BIGINT)"
        ))
        .execute(&pool)
        .await
        .expect("the application's schema");
    };
    reads_create_nothing_on_a_server(&url, "schema", &schema, objects, application).await;
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
    let objects = || async {
        sqlx::query_as::<_, (bool, i64)>(
            "SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = ?), \
               (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ?)",
        )
        .bind(&database)
        .bind(&database)
        .fetch_one(&pool)
        .await
        .expect("schemata, tables")
    };
    // and in a database of another application's, its tables only
    let application = async {
        sqlx::raw_sql(&format!(
            "CREATE DATABASE `{database}`; CREATE TABLE `{database}`.customers (id BIGINT)"
        ))
        .execute(&pool)
        .await
        .expect("the application's database");
    };
    // the refusal says schema, MySQL's other word for a database
    reads_create_nothing_on_a_server(&url, "schema", &database, objects, application).await;
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
