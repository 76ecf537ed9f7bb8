//! The embedded migrations and the runner that applies them to one
//! database and table, with bookkeeping in `_fluxio_migrations` (keyed by
//! table name and version; sqlx's `Migrator` keeps a fixed table of its
//! own, which the application may use for its own migrations).
//!
//! MySQL and MariaDB commit every DDL statement on its own, so a migration
//! is not one transaction as on Postgres: its statements are written to run
//! again after a crash half-way (`IF NOT EXISTS`), and it is recorded after
//! its last one. Concurrent runners queue on a named lock (`GET_LOCK`),
//! held by a connection taken out of the pool, so that a dropped future or
//! an error closes the connection and frees the lock with it.

use sqlx::migrate::{Migration, Migrator};
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection as _, Executor};

use crate::error::{MySqlStoreError, own_error};
use crate::statements::Names;

/// The migrations under `crates/fluxio-mysql/migrations/`, embedded at
/// compile time. Their SQL is a template over the tables' names.
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

fluxio_sql::migration_templates_test! {
    migrator: &MIGRATOR,
    render: render,
    names: Names::new(Some("d"), "t").expect("valid"),
    at_least: 2,
    tables: ["`d`.`t`", "`d`.`t_steps`", "`d`.`t_leases`", "`d`.`t_tokens`", "`d`.`t_signals`"],
}

/// How long a runner waits for another one's lock, in seconds (the store's
/// timeout bounds the call as a whole).
const LOCK_WAIT_SECS: i64 = 3600;

/// The SQL of `migration` for these names.
pub(crate) fn render(migration: &Migration, names: &Names) -> String {
    migration
        .sql
        .replace("{checkpoints}", &names.checkpoints())
        .replace("{steps}", &names.derived("_steps"))
        .replace("{leases}", &names.derived("_leases"))
        .replace("{tokens}", &names.derived("_tokens"))
        .replace("{pipelines}", &names.derived("_pipelines"))
        .replace("{signals}", &names.derived("_signals"))
        .replace("{database}", &names.database_literal())
        .replace("{table_name}", &format!("'{}'", names.table))
}

/// The database a store's tables are in: its own, or the connection's.
fn database_expr(names: &Names) -> (&'static str, Option<&str>) {
    match &names.database {
        Some(database) => ("?", Some(database.as_str())),
        None => ("DATABASE()", None),
    }
}

/// Whether table `name` exists in the store's database.
pub(crate) async fn table_exists(
    conn: &mut MySqlConnection,
    names: &Names,
    name: &str,
) -> sqlx::Result<bool> {
    let (database, bound) = database_expr(names);
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM information_schema.tables \
         WHERE table_schema = {database} AND table_name = ?)"
    );
    let mut query = sqlx::query_scalar(&sql);
    if let Some(database) = bound {
        query = query.bind(database);
    }
    query.bind(name).fetch_one(&mut *conn).await
}

/// The store's error for migrations it cannot read.
fn unreadable(names: &Names, unreadable: fluxio_sql::Unreadable) -> fluxio_core::Error {
    own_error(MySqlStoreError::unreadable(
        names.shown_database(),
        &names.table,
        unreadable,
    ))
}

/// Applies the pending migrations on `conn` (a connection that is closed
/// afterwards, not returned to a pool) under a named lock per database.
/// Returns how many it applied.
///
/// # Errors
/// The driver's; the store's `MigrationChanged`.
pub(crate) async fn run(
    conn: &mut MySqlConnection,
    names: &Names,
) -> Result<usize, fluxio_sql::Failure> {
    let lock = format!("fluxio:{}", names.shown_database());
    if let Some(database) = &names.database {
        // `IF NOT EXISTS` needs the privilege to create one even when it
        // exists: asked first.
        let found: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = ?)",
        )
        .bind(database)
        .fetch_one(&mut *conn)
        .await?;
        if !found {
            let create = format!(
                "CREATE DATABASE IF NOT EXISTS {}",
                crate::statements::quote(database)
            );
            conn.execute(create.as_str()).await?;
        }
    }
    let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
        .bind(&lock)
        .bind(LOCK_WAIT_SECS)
        .fetch_one(&mut *conn)
        .await?;
    if locked != Some(1) {
        return Err(sqlx::Error::Protocol(format!("could not take the lock {lock:?}")).into());
    }
    let applied = apply(conn, names).await;
    let released = sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(&lock)
        .execute(&mut *conn)
        .await;
    let applied = applied?;
    released?;
    Ok(applied)
}

async fn apply(conn: &mut MySqlConnection, names: &Names) -> Result<usize, fluxio_sql::Failure> {
    let bookkeeping = names.migrations();
    let book = fluxio_sql::Bookkeeping::new::<crate::dialect::MySql>(
        &bookkeeping,
        Some(crate::statements::NOW),
    );
    fluxio_sql::apply::<sqlx::MySql, _>(
        conn,
        &MIGRATOR,
        &book,
        (names.shown_database(), &names.table),
        |m| render(m, names),
        |u| unreadable(names, u).into(),
    )
    .await
}

/// Closes `conn` (a connection taken out of the pool), logging a failure.
pub(crate) async fn close(conn: MySqlConnection) {
    if let Err(e) = conn.close().await {
        tracing::debug!(error = %e, "closing the migration's connection failed");
    }
}
