//! How the SQL stores' shared checks (`fluxio_test_support::sql`) reach
//! PostgreSQL: a schema per test (`FLUXIO_POSTGRES_URL`), dropped when the
//! check passes (left to look at when it fails), and SQL on a small pool of
//! its own.

use fluxio_core::Error;
use fluxio_postgres::{PostgresStore, PostgresStoreError};
use fluxio_test_support as support;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use support::sql::{Options, Refusal, SqlHarness};

/// A schema of one test on the test server.
pub(crate) struct Postgres {
    url: String,
    schema: String,
    pool: PgPool,
}

impl Postgres {
    /// The test's schema.
    pub(crate) fn schema(&self) -> &str {
        &self.schema
    }

    /// The harness's own pool (not a store's).
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait::async_trait]
impl SqlHarness for Postgres {
    type Store = PostgresStore;

    const BACKEND: &'static str = "postgres";

    async fn new(test: &str) -> Option<Self> {
        let url = support::postgres::server().await?;
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_lazy(&url)
            .expect("a valid URL");
        Some(Postgres {
            url,
            schema: support::namespace(test),
            pool,
        })
    }

    async fn open(&self, options: &Options) -> fluxio_core::Result<PostgresStore> {
        let mut builder = PostgresStore::builder(self.url.as_str())
            .schema(&self.schema)
            .max_connections(options.max_connections.unwrap_or(2))
            .read_only(options.read_only);
        if let Some(table) = &options.table {
            builder = builder.table(table);
        }
        builder.connect().await
    }

    async fn finish(&self) {
        self.pool.close().await;
        support::postgres::drop_schema(&self.url, &self.schema).await;
    }

    fn prefix(&self) -> String {
        format!("\"{}\".", self.schema)
    }

    fn blob(&self, bytes: &[u8]) -> String {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("'\\x{hex}'::bytea")
    }

    async fn execute_sql(&self, sql: &str) {
        sqlx::raw_sql(sql)
            .execute(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn scalar_sql(&self, sql: &str) -> i64 {
        let sql = format!("SELECT ({sql})::int8");
        sqlx::query_scalar(&sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn tables(&self) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = $1 ORDER BY tablename",
        )
        .bind(&self.schema)
        .fetch_all(&self.pool)
        .await
        .expect("tables")
    }

    /// Every relation of the schema (tables, indexes, sequences) with its
    /// kind.
    async fn schema_objects(&self) -> Vec<String> {
        let relations: Vec<(String, String)> = sqlx::query_as(
            "SELECT c.relname::text, c.relkind::text FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1",
        )
        .bind(&self.schema)
        .fetch_all(&self.pool)
        .await
        .expect("pg_class");
        relations.iter().map(|r| format!("{r:?}")).collect()
    }

    async fn insert_old_row(&self, run_id: &str, version: &str, status: &str, payload: &[u8]) {
        sqlx::query(&self.sql(
            "INSERT INTO {s}.fluxio_checkpoints \
               (run_id, payload, version, ip, step, status, created_at) \
             VALUES ($1, $2, $3, 0, '', $4, now())",
        ))
        .bind(run_id)
        .bind(payload)
        .bind(version)
        .bind(status)
        .execute(&self.pool)
        .await
        .expect("a row as an older build writes it");
    }

    async fn undo_migration(&self, version: i64) {
        let undo = match version {
            2 => "DROP TABLE {s}.fluxio_checkpoints_steps",
            // dropping the column drops the indexes on it
            4 => {
                "ALTER TABLE {s}.fluxio_checkpoints DROP COLUMN attempt; \
                 DROP INDEX {s}.fluxio_checkpoints_run_id_idx"
            }
            _ => panic!("no undoing migration {version}"),
        };
        self.execute(&format!(
            "{undo}; DELETE FROM {{s}}._fluxio_migrations WHERE version = {version}"
        ))
        .await;
    }

    /// Commits are counted by the server: a statement trigger on each of
    /// the store's tables records the id of every transaction that writes
    /// to them (`pg_current_xact_id()`, once per transaction) in a table of
    /// the test's schema. A transaction that rolls back takes its record
    /// with it, so the records are the write transactions that committed:
    /// what makes the server flush its log. Other tests write to other
    /// schemas, so the count is this test's alone.
    async fn count_commits(&self, store: &PostgresStore) {
        let t = store.table();
        let mut sql = self.sql(
            "CREATE TABLE {s}._commits (xid xid8 PRIMARY KEY);
             CREATE FUNCTION {s}._count_commit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               INSERT INTO {s}._commits VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
               RETURN NULL;
             END $$;",
        );
        for table in [t.to_owned(), format!("{t}_leases"), format!("{t}_steps")] {
            sql.push_str(&self.sql(&format!(
                "CREATE TRIGGER _count_commit AFTER INSERT OR UPDATE OR DELETE ON {{s}}.\"{table}\"
                 FOR EACH STATEMENT EXECUTE FUNCTION {{s}}._count_commit();"
            )));
        }
        self.execute_sql(&sql).await;
    }

    async fn commits(&self, _store: &PostgresStore) -> i64 {
        self.scalar("SELECT count(*) FROM {s}._commits").await
    }

    fn refusal(err: &Error) -> Refusal {
        let own = match err {
            Error::Store { source, .. } => source.downcast_ref::<PostgresStoreError>(),
            _ => None,
        };
        match own {
            Some(PostgresStoreError::MigrationChanged { version, table, .. }) => {
                Refusal::MigrationChanged {
                    version: *version,
                    table: table.clone(),
                }
            }
            Some(PostgresStoreError::SchemaOutdated { version, table, .. }) => {
                Refusal::SchemaOutdated {
                    version: *version,
                    table: table.clone(),
                }
            }
            Some(PostgresStoreError::NoTables { table, .. }) => Refusal::NoTables {
                table: table.clone(),
            },
            _ => Refusal::Other(format!("{err:?}")),
        }
    }
}
