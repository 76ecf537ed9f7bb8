//! Listing runs (contract rule 21) and the due runs (rule 27) on MySQL:
//! each filter is one range of an index in key order, as `EXPLAIN` shows
//! (a unit test: the statements are the store's own).

use fluxio_core::store::{DueFilter, RunFilter};
use fluxio_test_support as support;
use sqlx::Row as _;
use support::sql::plan::{Index, Planner};

use crate::dialect::MySql;
use crate::store::MySqlStore;

/// The plan of the listing statement for `filter`: a line per table read,
/// `<table> type=<access> key=<index> extra=<extra>`.
async fn list_plan(store: &MySqlStore, filter: &RunFilter) -> Vec<String> {
    let statement =
        fluxio_sql::statement::<MySql>(&store.server().sql().list, filter).expect("statement");
    let (text, arguments) = statement.into_parts::<sqlx::MySql>().expect("arguments");
    explain(store, &text, arguments).await
}

/// The plan of the due runs' statement for `filter`, as [`list_plan`].
async fn due_plan(store: &MySqlStore, filter: &DueFilter) -> Vec<String> {
    let waits = &store.server().sql().journal.waits;
    let statement = fluxio_sql::due_statement::<MySql>(waits, filter).expect("statement");
    let (text, arguments) = statement.into_parts::<sqlx::MySql>().expect("arguments");
    explain(store, &text, arguments).await
}

/// The plan of a claim's statement for `filter` (`leased`: the runs with
/// a lease row).
async fn claim_plan(store: &MySqlStore, filter: &DueFilter, leased: bool) -> Vec<String> {
    let waits = &store.server().sql().journal.waits;
    let statement = fluxio_sql::claim_statement::<MySql>(waits, filter, leased).expect("statement");
    let (text, arguments) = statement.into_parts::<sqlx::MySql>().expect("arguments");
    explain(store, &text, arguments).await
}

/// `EXPLAIN` of `text` with `arguments`: a line per table read.
async fn explain(
    store: &MySqlStore,
    text: &str,
    arguments: sqlx::mysql::MySqlArguments,
) -> Vec<String> {
    let rows = sqlx::query_with(&format!("EXPLAIN {text}"), arguments)
        .fetch_all(store.pool())
        .await
        .expect("plan");
    let column = |row: &sqlx::mysql::MySqlRow, name: &str| -> String {
        row.try_get::<Option<String>, _>(name)
            .ok()
            .flatten()
            .unwrap_or_default()
    };
    rows.iter()
        .map(|row| {
            format!(
                "{} type={} key={} extra={}",
                column(row, "table"),
                column(row, "type"),
                column(row, "key"),
                column(row, "Extra")
            )
        })
        .collect()
}

/// MySQL's side of the shared plan check.
struct Plan(MySqlStore);

#[async_trait::async_trait]
impl Planner for Plan {
    type Store = MySqlStore;

    async fn open(url: String, database: String) -> Self {
        let store = MySqlStore::builder(url).database(database).connect().await;
        Plan(store.expect("connect"))
    }

    fn store(&self) -> &MySqlStore {
        &self.0
    }

    async fn clone_seed(&self) {
        let db = self.0.database().expect("the test's own database");
        let table = format!("`{db}`.fluxio_checkpoints");
        let leases = format!("`{db}`.fluxio_checkpoints_leases");
        sqlx::raw_sql(&format!(
            "INSERT INTO {table} (run_id, payload, version, ip, step, status, error_message, \
               created_at, updated_at, expires_at, attempt, due_at) \
             SELECT CONCAT(IF(n.i % 2 = 0, 'other/', 'orders/'), LPAD(n.i, 6, '0')), \
               c.payload, c.version, c.ip, c.step, \
               IF(n.i % 20 = 1 OR n.i % 4 = 0, 'failed', c.status), c.error_message, \
               c.created_at, c.updated_at, c.expires_at, c.attempt, c.due_at \
             FROM {table} AS c, (SELECT a.i * 1000 + b.i * 100 + d.i * 10 + e.i + 1 AS i FROM \
               (SELECT 0 i UNION SELECT 1 UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION \
                SELECT 5 UNION SELECT 6 UNION SELECT 7 UNION SELECT 8 UNION SELECT 9 UNION \
                SELECT 10 UNION SELECT 11 UNION SELECT 12 UNION SELECT 13 UNION SELECT 14 UNION \
                SELECT 15 UNION SELECT 16 UNION SELECT 17 UNION SELECT 18 UNION SELECT 19) a, \
               (SELECT 0 i UNION SELECT 1 UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION \
                SELECT 5 UNION SELECT 6 UNION SELECT 7 UNION SELECT 8 UNION SELECT 9) b, \
               (SELECT 0 i UNION SELECT 1 UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION \
                SELECT 5 UNION SELECT 6 UNION SELECT 7 UNION SELECT 8 UNION SELECT 9) d, \
               (SELECT 0 i UNION SELECT 1 UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION \
                SELECT 5 UNION SELECT 6 UNION SELECT 7 UNION SELECT 8 UNION SELECT 9) e) AS n \
             WHERE c.run_id = 'orders/seed'; \
             INSERT IGNORE INTO {leases} (run_id, token, expires_at) SELECT run_id, 1, NULL FROM {table}; \
             ANALYZE TABLE {table}, {leases};"
        ))
        .execute(self.0.pool())
        .await
        .expect("clone the seed's row");
    }

    async fn plan(&self, filter: &RunFilter) -> Vec<String> {
        list_plan(&self.0, filter).await
    }

    async fn due_plan(&self, filter: &DueFilter) -> Vec<String> {
        due_plan(&self.0, filter).await
    }

    async fn claim_plan(&self, filter: &DueFilter, leased: bool) -> Vec<String> {
        claim_plan(&self.0, filter, leased).await
    }

    fn due_index(&self) -> String {
        "fluxio_due".to_owned()
    }

    fn table_read<'a>(&self, line: &'a str) -> Option<Option<&'a str>> {
        let read = line.strip_prefix("c ")?;
        Some(
            read.split_once(" key=")
                .and_then(|(_, k)| Some(k.split_once(' ')?.0)),
        )
    }

    fn lease_by_key(&self, line: &str) -> bool {
        line.starts_with("l ") && line.contains(" key=PRIMARY ")
    }

    fn sorts_or_scans(&self, line: &str) -> bool {
        ["filesort", "type=ALL"].iter().any(|s| line.contains(s))
    }

    fn names(&self, index: Index, filter: &RunFilter) -> Vec<String> {
        // With a cursor the planner may walk the keys from the cursor on
        // instead: one range in key order too.
        let names: &[&str] = match index {
            Index::PipelineState if filter.after.is_some() => &["fluxio_pipeline_state", "PRIMARY"],
            Index::PipelineState => &["fluxio_pipeline_state"],
            Index::State => &["fluxio_state"],
            Index::Key => &["PRIMARY"],
        };
        names.iter().map(|&n| n.to_owned()).collect()
    }
}

support::sql_plan_tests!(Plan, support::mysql::in_database);
