//! The embedded migrations and the runner that applies them to one
//! schema and table.
//!
//! sqlx 0.8's `Migrator` keeps its bookkeeping in an unqualified
//! `_sqlx_migrations` table that it finds through `search_path`, and 0.8 has
//! no way to rename it. In the default schema, `public`, that table would be
//! the application's own (its versions would clash with ours), and two stores
//! with different table names in one schema would clash with each other. So
//! the files are embedded with `sqlx::migrate!` (versions, descriptions,
//! SHA-384 checksums at compile time) and applied here, with bookkeeping in
//! `"<schema>"._fluxio_migrations`, keyed by table name and version.

use sqlx::migrate::{Migration, Migrator};
use sqlx::{Connection as _, Executor, PgConnection};

use crate::error::PostgresStoreError;
use crate::statements::Names;

/// The migrations under `crates/fluxio-postgres/migrations/`, embedded at
/// compile time. Their SQL is a template over `{checkpoints}`, `{leases}`,
/// `{steps}` and `{signals}`.
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

fluxio_sql::migration_templates_test! {
    migrator: &MIGRATOR,
    render: render,
    names: Names::new("s", "t").expect("valid"),
    at_least: 5,
    tables: ["\"s\".\"t\"", "\"s\".\"t_leases\"", "\"s\".\"t_steps\"", "\"s\".\"t_signals\""],
}

/// The first key of the transaction-level advisory lock the runner takes
/// (`"flux"`); the second is `hashtext(schema)`.
const LOCK_CLASS: i32 = 0x666c_7578;

/// The SQL of `migration` for these names.
pub(crate) fn render(migration: &Migration, names: &Names) -> String {
    migration
        .sql
        .replace("{checkpoints}", &names.checkpoints_qualified())
        .replace("{leases}", &names.leases_qualified())
        .replace("{steps}", &names.steps_qualified())
        .replace("{signals}", &names.signals_qualified())
}

/// Applies the pending migrations in one transaction, under a
/// transaction-level advisory lock per schema: concurrent first connections
/// wait for each other instead of racing on `CREATE SCHEMA` / `CREATE TABLE`,
/// and a dropped future or a lost connection rolls everything back and frees
/// the lock. Returns how many migrations it applied.
pub(crate) async fn run(
    conn: &mut PgConnection,
    names: &Names,
) -> Result<usize, fluxio_sql::Failure> {
    let mut tx = conn.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(LOCK_CLASS)
        .bind(&names.schema)
        .execute(&mut *tx)
        .await?;

    // Checked first: `CREATE SCHEMA IF NOT EXISTS` needs the CREATE privilege
    // on the database even when the schema exists.
    let schema_exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(&names.schema)
            .fetch_one(&mut *tx)
            .await?;
    if !schema_exists {
        let create = format!("CREATE SCHEMA {}", names.schema_quoted());
        tx.execute(create.as_str()).await?;
    }
    let bookkeeping = names.migrations_qualified();
    let book = fluxio_sql::Bookkeeping::new::<crate::dialect::Postgres>(&bookkeeping, None);
    let applied = fluxio_sql::apply::<sqlx::Postgres, fluxio_sql::Failure>(
        &mut tx,
        &MIGRATOR,
        &book,
        (&names.schema, &names.table),
        |m| render(m, names),
        |u| {
            crate::error::own_error(PostgresStoreError::unreadable(
                &names.schema,
                &names.table,
                u,
            ))
            .into()
        },
    )
    .await?;
    tx.commit().await?;
    Ok(applied)
}
