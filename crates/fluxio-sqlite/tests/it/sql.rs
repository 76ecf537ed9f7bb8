//! How the SQL stores' shared checks (`fluxio_test_support::sql`) reach
//! SQLite: a scratch directory per test, its store in one file there, and
//! SQL on a connection of its own to that file, as another program has.

use fluxio_core::Error;
use fluxio_sqlite::{SqliteStore, SqliteStoreBuilder};
use fluxio_test_support as support;
use support::sql::{Options, Refusal, SqlHarness, SqlStore as _};

fluxio_test_support::sql_store!(Types: SqliteStore, SqliteStoreBuilder,
    fluxio_sqlite::SqliteStoreError, "sqlite");

/// A scratch directory for the test `test`, its file, and a store on it
/// with the store's defaults.
///
/// # Panics
/// When the store cannot be opened.
pub(crate) async fn fresh(test: &str) -> (support::TempDir, std::path::PathBuf, SqliteStore) {
    fresh_with(test, |builder| builder).await
}

/// As [`fresh`], the store with the settings `settings` makes on its
/// builder.
///
/// # Panics
/// When the store cannot be opened.
pub(crate) async fn fresh_with(
    test: &str,
    settings: impl FnOnce(SqliteStoreBuilder) -> SqliteStoreBuilder,
) -> (support::TempDir, std::path::PathBuf, SqliteStore) {
    let dir = support::TempDir::new(test);
    let file = dir.db("x");
    let store = settings(SqliteStore::builder(&file))
        .connect()
        .await
        .expect("open");
    (dir, file, store)
}

/// A file of one test, in a scratch directory removed with it.
pub(crate) struct Sqlite {
    dir: support::TempDir,
}

impl Sqlite {
    /// The store's file.
    pub(crate) fn file(&self) -> std::path::PathBuf {
        self.dir.db("x")
    }

    async fn connection(&self) -> sqlx::SqliteConnection {
        support::sqlite::raw_connection(&self.file()).await
    }
}

#[async_trait::async_trait]
impl SqlHarness for Sqlite {
    type Store = SqliteStore;

    const BACKEND: &'static str = "sqlite";

    async fn new(test: &str) -> Option<Self> {
        Some(Sqlite {
            dir: support::TempDir::new(test),
        })
    }

    async fn open(&self, options: &Options) -> fluxio_core::Result<SqliteStore> {
        let builder = SqliteStore::builder(self.file());
        Types::connect(support::sql::configure::<Types>(builder, options, None)).await
    }

    fn prefix(&self) -> String {
        String::new()
    }

    fn blob(&self, bytes: &[u8]) -> String {
        format!("X'{}'", support::sql::hex(bytes))
    }

    async fn execute_sql(&self, sql: &str) {
        let mut conn = self.connection().await;
        sqlx::Executor::execute(&mut conn, sqlx::raw_sql(sql))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn scalar_sql(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&mut self.connection().await)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn tables(&self) -> Vec<String> {
        sqlx::query_scalar("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .fetch_all(&mut self.connection().await)
            .await
            .expect("tables")
    }

    async fn schema_objects(&self) -> Vec<String> {
        let objects: Vec<(String, String, Option<String>)> =
            sqlx::query_as("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
                .fetch_all(&mut self.connection().await)
                .await
                .expect("sqlite_master");
        objects.iter().map(|o| format!("{o:?}")).collect()
    }

    async fn insert_old_row(&self, run_id: &str, version: &str, status: &str, payload: &[u8]) {
        sqlx::query(
            "INSERT INTO fluxio_checkpoints \
               (run_id, payload, version, ip, step, status, created_at, updated_at) \
             VALUES (?1, ?2, ?3, 0, '', ?4, 0, 0)",
        )
        .bind(run_id)
        .bind(payload)
        .bind(version)
        .bind(status)
        .execute(&mut self.connection().await)
        .await
        .expect("a row as an older build writes it");
    }

    async fn undo_migration(&self, version: i64) {
        let undo = match version {
            2 => {
                "DROP TRIGGER fluxio_checkpoints_steps_cascade; DROP TABLE fluxio_checkpoints_steps"
            }
            4 => {
                "DROP INDEX fluxio_checkpoints_state; DROP INDEX fluxio_checkpoints_pipeline_state; \
                 ALTER TABLE fluxio_checkpoints DROP COLUMN attempt"
            }
            _ => panic!("no undoing migration {version}"),
        };
        self.execute_sql(&format!(
            "{undo}; DELETE FROM _fluxio_migrations WHERE version = {version}"
        ))
        .await;
    }

    /// SQLite's commit hook on the store's writing connection counts them.
    async fn commits(&self, store: &SqliteStore) -> i64 {
        i64::try_from(store.commits()).expect("a count")
    }

    fn refusal(err: &Error) -> Refusal {
        support::sql::refusal::<Types>(err)
    }
}
