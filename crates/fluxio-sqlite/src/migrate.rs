//! Preparing a file: write-ahead logging, then the embedded migrations.
//!
//! The migration files are embedded with `sqlx::migrate!` (versions,
//! descriptions, checksums at compile time) but applied here rather than by
//! sqlx's `Migrator`, whose bookkeeping table `_sqlx_migrations` has a fixed
//! name: the application may keep its own migrations in the same file, and
//! several stores (tables) may share one file. Ours is `_fluxio_migrations`,
//! keyed by table name and version.

use std::time::Duration;

use sqlx::SqlitePool;
use sqlx::migrate::{Migration, Migrator};

use crate::error::SqliteStoreError;
use crate::statements::{MIGRATIONS_TABLE, Names, quote};

/// The migrations under `crates/fluxio-sqlite/migrations/`, embedded at
/// compile time. Their SQL is a template over the names of [`render`].
static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

fluxio_sql::migration_templates_test! {
    migrator: &MIGRATOR,
    render: render,
    names: Names::new("t").expect("valid"),
    at_least: 5,
    tables: ["\"t\"", "\"t_leases\"", "\"t_expires_at\"", "\"t_leases_token\"", "\"t_steps\"", "\"t_steps_whole\"", "\"t_steps_cascade\"", "\"t_pipeline\"", "\"t_state\"", "\"t_pipeline_state\"", "\"t_due\"", "\"t_signals\"", "\"t_signals_cascade\""],
}

/// SQLite's primary result codes for a database that another connection
/// holds locked.
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;

/// Errors of preparing a file: sqlx's, or the store's own.
#[derive(Debug)]
pub(crate) enum MigrateError {
    Sql(sqlx::Error),
    Store(SqliteStoreError),
}

impl From<sqlx::Error> for MigrateError {
    fn from(e: sqlx::Error) -> Self {
        MigrateError::Sql(e)
    }
}

/// The SQL of `migration` for these names.
pub(crate) fn render(migration: &Migration, names: &Names) -> String {
    migration
        .sql
        .replace("{checkpoints_expires_at}", &names.checkpoints_expires_at())
        .replace("{checkpoints_pipeline}", &names.checkpoints_pipeline())
        .replace(
            "{checkpoints_pipeline_state}",
            &names.checkpoints_pipeline_state(),
        )
        .replace("{checkpoints_state}", &names.checkpoints_state())
        .replace("{leases_token}", &names.leases_token())
        .replace("{steps_whole}", &names.steps_whole())
        .replace("{steps_cascade}", &names.steps_cascade())
        .replace("{signals_cascade}", &names.signals_cascade())
        .replace("{signals}", &names.signals())
        .replace("{checkpoints_due}", &names.checkpoints_due())
        .replace("{steps}", &names.steps())
        .replace("{checkpoints}", &names.checkpoints())
        .replace("{leases}", &names.leases())
}

/// Whether `e` is SQLite's "database is locked" (`SQLITE_BUSY`) or "table is
/// locked" (`SQLITE_LOCKED`), with any extended code.
pub(crate) fn is_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|code| code.parse::<i64>().ok())
            .is_some_and(|code| matches!(code & 0xff, SQLITE_BUSY | SQLITE_LOCKED)),
        _ => false,
    }
}

/// Switches the file to write-ahead logging, unless it is already.
///
/// The mode is stored in the file, so only the first connection to a fresh
/// file changes it; every connection after that opens it in WAL mode. The
/// switch needs the file to itself, and SQLite fails it at once with
/// `SQLITE_BUSY` instead of waiting through the busy timeout when other
/// connections (other processes opening the same fresh file) hold it: so it
/// is retried here, with a short backoff, until the caller's timeout.
pub(crate) async fn ensure_wal(pool: &SqlitePool) -> Result<(), MigrateError> {
    let mut pause = Duration::from_millis(1);
    loop {
        match sqlx::query_scalar::<_, String>("PRAGMA journal_mode = WAL")
            .fetch_one(pool)
            .await
        {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => return Err(MigrateError::Store(SqliteStoreError::NotWal { mode })),
            Err(e) if is_busy(&e) => {
                tracing::debug!(error = %e, "the file is busy; retrying the switch to WAL");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The migrations applied to `names.table` (version and checksum), read
/// without writing; `None` when the file has no bookkeeping table or no
/// checkpoint table of that name (no fluxio tables).
pub(crate) async fn applied(
    pool: &SqlitePool,
    names: &Names,
) -> Result<Option<Vec<(i64, Vec<u8>)>>, sqlx::Error> {
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?1, ?2)",
    )
    .bind(MIGRATIONS_TABLE)
    .bind(&names.table)
    .fetch_one(pool)
    .await?;
    if tables < 2 {
        return Ok(None);
    }
    let applied = sqlx::query_as(&format!(
        "SELECT version, checksum FROM {} WHERE table_name = ?1",
        quote(MIGRATIONS_TABLE)
    ))
    .bind(&names.table)
    .fetch_all(pool)
    .await?;
    Ok(Some(applied))
}

/// Whether the migrations `applied` are ones this build reads (see
/// [`fluxio_sql::readable`]).
pub(crate) fn readable(
    applied: &[(i64, Vec<u8>)],
    table: &str,
) -> Result<(), fluxio_sql::Unreadable> {
    fluxio_sql::readable(&MIGRATOR, applied, table)
}

/// Applies the pending migrations in one `BEGIN IMMEDIATE` transaction: it
/// takes the file's write lock before reading the bookkeeping, so processes
/// opening a fresh file together queue (through the busy timeout) instead of
/// racing on `CREATE TABLE`, and the second one finds the migrations applied.
/// A dropped future or a failure rolls everything back. Returns how many
/// migrations it applied.
pub(crate) async fn run(pool: &SqlitePool, names: &Names) -> Result<usize, MigrateError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let bookkeeping = quote(MIGRATIONS_TABLE);
    let book = fluxio_sql::Bookkeeping::new::<crate::journal::Sqlite>(
        &bookkeeping,
        Some("CAST(round(unixepoch('now', 'subsec') * 1000) AS INTEGER)"),
    );
    // Only a changed migration stops the runner (a missing one it applies).
    let changed = |u: fluxio_sql::Unreadable| {
        let fluxio_sql::Unreadable {
            version,
            description,
            ..
        } = u;
        MigrateError::Store(SqliteStoreError::MigrationChanged {
            table: names.table.clone(),
            version,
            description,
        })
    };
    let applied = fluxio_sql::apply::<sqlx::Sqlite, _>(
        &mut tx,
        &MIGRATOR,
        &book,
        ("the file", &names.table),
        |m| render(m, names),
        changed,
    )
    .await?;
    tx.commit().await?;
    Ok(applied)
}
