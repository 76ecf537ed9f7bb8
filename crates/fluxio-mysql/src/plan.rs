//! Listing runs (contract rule 21) on MySQL: each filter is one range of
//! an index in key order, as `EXPLAIN` shows (a unit test: the listing's
//! statement is the store's own).

use fluxio_core::CheckpointStore as _;
use fluxio_core::store::{RunFilter, RunState};
use fluxio_test_support as support;
use sqlx::Row as _;

use crate::dialect::MySql;
use crate::store::MySqlStore;

/// The plan of the listing statement for `filter`: a line per table read,
/// `<table> type=<access> key=<index> extra=<extra>`.
async fn list_plan(store: &MySqlStore, filter: &RunFilter) -> Vec<String> {
    let statement =
        fluxio_sql::statement::<MySql>(&store.server().sql().list, filter).expect("statement");
    let (text, arguments) = statement.into_parts::<sqlx::MySql>().expect("arguments");
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

/// Rule 21: on a table of 20,000 runs, each filter the indexes cover reads
/// one index in key order (no filesort, no full scan of the table), and
/// the lease by its key.
#[tokio::test]
async fn rule21_listing_reads_one_index_range_in_key_order() {
    let Some(url) = support::mysql::server().await else {
        return;
    };
    let db = support::namespace("list_plan");
    let store = MySqlStore::builder(url.as_str())
        .database(&db)
        .max_connections(2)
        .connect()
        .await
        .expect("connect");
    let seed = support::checkpoint("seed", 3).in_pipeline("orders");
    store.save(seed.clone()).await.expect("save");
    let table = format!("`{db}`.fluxio_checkpoints");
    let leases = format!("`{db}`.fluxio_checkpoints_leases");
    // The seed's row, cloned under new keys: 10,000 runs of `orders`, one
    // in ten failed, and 10,000 of `other`, one in two failed.
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (run_id, payload, version, ip, step, status, error_message, \
           created_at, updated_at, expires_at, attempt) \
         SELECT CONCAT(IF(n.i % 2 = 0, 'other/', 'orders/'), LPAD(n.i, 6, '0')), \
           c.payload, c.version, c.ip, c.step, \
           IF(n.i % 20 = 1 OR n.i % 4 = 0, 'failed', c.status), c.error_message, \
           c.created_at, c.updated_at, c.expires_at, c.attempt \
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
         INSERT INTO {leases} (run_id, token, expires_at) SELECT run_id, 1, NULL FROM {table}; \
         ANALYZE TABLE {table}, {leases};"
    ))
    .execute(store.pool())
    .await
    .expect("clone the seed's row");
    let count: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(store.pool())
        .await
        .expect("count");
    assert_eq!(count, 20_001);

    let failed = RunFilter::new().state(RunState::Failed);
    let cases = [
        (failed.clone().pipeline("orders"), "fluxio_pipeline_state"),
        // With a cursor the planner may walk the keys from the cursor on
        // instead: one range in key order too.
        (
            failed.clone().pipeline("orders").after("orders/000500"),
            "fluxio_pipeline_state|PRIMARY",
        ),
        (failed.clone(), "fluxio_state"),
        (
            RunFilter::new()
                .state(RunState::Abandoned)
                .after("orders/9"),
            "fluxio_state",
        ),
        (RunFilter::new().pipeline("orders"), "PRIMARY"),
        (RunFilter::new(), "PRIMARY"),
    ];
    for (filter, index) in cases {
        let plan = list_plan(&store, &filter).await;
        let lines = plan.join("\n");

        let runs: Vec<&String> = plan.iter().filter(|l| l.starts_with("c ")).collect();
        assert_eq!(runs.len(), 1, "{filter:?}:\n{lines}");
        assert!(
            index
                .split('|')
                .any(|index| runs[0].contains(&format!(" key={index} "))),
            "{filter:?} reads {index}:\n{lines}"
        );
        assert!(
            plan.iter()
                .any(|l| l.starts_with("l ") && l.contains(" key=PRIMARY ")),
            "{filter:?} finds the lease by its key:\n{lines}"
        );
        assert!(
            !lines.contains("filesort") && !lines.contains("type=ALL"),
            "{filter:?}: no sort, no full scan:\n{lines}"
        );
        let page = store.list_runs(&filter).await.expect("list");
        assert!(!page.runs.is_empty(), "{filter:?} lists runs");
    }
    drop(store);
    support::mysql::drop_database(&url, &db).await;
}
