//! How the SQL stores' shared checks (`fluxio_test_support::sql`) reach
//! MySQL or MariaDB: a database per test (`FLUXIO_MYSQL_URL`), dropped when
//! the check passes, and SQL on a small pool of its own.
//!
//! The checks that take the tables back to an older schema version (rule
//! 18's row of an earlier build, rule 21's schema version 3, a read-only
//! open of tables an older build left) do not run here: this store's first
//! schema version is its whole schema, so no older tables of it exist. Nor
//! do the ones that count commits (see [`SqlHarness::commits`] below), or
//! name every table of two stores (this store has five tables per store).

use fluxio_core::Error;
use fluxio_mysql::{MySqlStore, MySqlStoreError};
use fluxio_test_support as support;
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use support::sql::{Options, Refusal, SqlHarness};

/// A database of one test on the test server.
pub(crate) struct MySql {
    url: String,
    database: String,
    pool: MySqlPool,
}

#[async_trait::async_trait]
impl SqlHarness for MySql {
    type Store = MySqlStore;

    const BACKEND: &'static str = "mysql";
    const MIGRATIONS: i64 = 1;

    async fn new(test: &str) -> Option<Self> {
        let url = support::mysql::server().await?;
        let pool = MySqlPoolOptions::new()
            .max_connections(2)
            .connect_lazy(&url)
            .expect("a valid URL");
        Some(MySql {
            url,
            database: support::namespace(test),
            pool,
        })
    }

    async fn open(&self, options: &Options) -> fluxio_core::Result<MySqlStore> {
        let mut builder = MySqlStore::builder(self.url.as_str())
            .database(&self.database)
            .max_connections(options.max_connections.unwrap_or(2))
            .read_only(options.read_only);
        if let Some(table) = &options.table {
            builder = builder.table(table);
        }
        builder.connect().await
    }

    async fn finish(&self) {
        self.pool.close().await;
        support::mysql::drop_database(&self.url, &self.database).await;
    }

    fn prefix(&self) -> String {
        format!("`{}`.", self.database)
    }

    fn blob(&self, bytes: &[u8]) -> String {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("X'{hex}'")
    }

    async fn execute_sql(&self, sql: &str) {
        sqlx::raw_sql(sql)
            .execute(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn scalar_sql(&self, sql: &str) -> i64 {
        let sql = format!("SELECT CAST(({sql}) AS SIGNED)");
        sqlx::query_scalar(&sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn tables(&self) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
             WHERE table_schema = ? ORDER BY 1",
        )
        .bind(&self.database)
        .fetch_all(&self.pool)
        .await
        .expect("tables")
    }

    /// Every table, index and trigger of the database.
    async fn schema_objects(&self) -> Vec<String> {
        let objects: Vec<(String, String)> = sqlx::query_as(
            "SELECT 'table', CAST(table_name AS CHAR) FROM information_schema.tables \
               WHERE table_schema = ? \
             UNION ALL SELECT 'index', CAST(CONCAT(table_name, '.', index_name, '.', column_name) \
               AS CHAR) FROM information_schema.statistics WHERE table_schema = ? \
             UNION ALL SELECT 'trigger', CAST(trigger_name AS CHAR) \
               FROM information_schema.triggers WHERE trigger_schema = ? \
             ORDER BY 1, 2",
        )
        .bind(&self.database)
        .bind(&self.database)
        .bind(&self.database)
        .fetch_all(&self.pool)
        .await
        .expect("information_schema");
        objects.iter().map(|o| format!("{o:?}")).collect()
    }

    async fn insert_old_row(&self, run_id: &str, version: &str, status: &str, payload: &[u8]) {
        sqlx::query(&self.sql(
            "INSERT INTO {s}.fluxio_checkpoints \
               (run_id, payload, version, ip, step, status, created_at, updated_at) \
             VALUES (?, ?, ?, 0, '', ?, 0, 0)",
        ))
        .bind(run_id)
        .bind(payload)
        .bind(version)
        .bind(status)
        .execute(&self.pool)
        .await
        .expect("a row written past the store");
    }

    async fn undo_migration(&self, version: i64) {
        panic!("migration {version} has no older schema on MySQL: its first is the whole schema");
    }

    /// Not counted here: InnoDB names a transaction only in
    /// `information_schema.innodb_trx`, a copy the server refreshes at most
    /// every 0.1 s, so a trigger cannot tell one transaction from the next
    /// (the commit-count checks do not run on MySQL).
    async fn commits(&self, _store: &MySqlStore) -> i64 {
        panic!("MySQL's commits are not counted by this harness")
    }

    fn refusal(err: &Error) -> Refusal {
        let own = match err {
            Error::Store { source, .. } => source.downcast_ref::<MySqlStoreError>(),
            _ => None,
        };
        match own {
            Some(MySqlStoreError::MigrationChanged { version, table, .. }) => {
                Refusal::MigrationChanged {
                    version: *version,
                    table: table.clone(),
                }
            }
            Some(MySqlStoreError::SchemaOutdated { version, table, .. }) => {
                Refusal::SchemaOutdated {
                    version: *version,
                    table: table.clone(),
                }
            }
            Some(MySqlStoreError::NoTables { table, .. }) => Refusal::NoTables {
                table: table.clone(),
            },
            _ => Refusal::Other(format!("{err:?}")),
        }
    }
}

fluxio_test_support::sql_tests! { MySql;
    rule18_a_durable_run_writes_its_context_once_then_only_changed_keys,
    rule20_a_load_reads_only_from_the_last_whole_checkpoint,
    rule21_a_listing_reads_the_run_rows_not_the_journals,
    rule21_a_row_with_an_unknown_status_is_a_corrupt_checkpoint_error,
    read_only_reads_a_store_and_refuses_every_write,
    rule24_begin_and_finish_run_answer_as_the_defaults,
    reopening_changes_nothing_and_an_edited_migration_is_refused,
    the_pipeline_column_is_generated_from_the_run_id,
}

/// Eight stores opening one fresh database at once all succeed, the
/// migration applied once (the runners queue on the named lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_first_opens_all_succeed() {
    support::sql::run::<MySql, _, _>("eight_opens", |h| {
        support::sql::eight_concurrent_first_opens_all_succeed(h, 2)
    })
    .await;
}
