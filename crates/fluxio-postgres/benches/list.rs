//! What listing runs costs on PostgreSQL with 100,000 runs (contract
//! rule 21).
//!
//! `cargo bench -p fluxio-postgres --bench list -- --warm-up-time 1 --measurement-time 5`
//! (against `FLUXIO_POSTGRES_URL`, see `fluxio_test_support::postgres`;
//! skipped with a message when the server is down; in a schema of its own,
//! dropped at the end).
//!
//! The table holds 100,000 runs of the pipeline `orders`, 50 of them failed
//! (one in 2,000, spread over the keys) and the rest completed, each with a
//! released lease row, as a worker leaves them. Two runs are written
//! through the store (`save`, then a lease acquired and released); the
//! other 99,998 are copies of their rows (the run row and the lease row)
//! under new keys, in one `INSERT ... SELECT` through the store's own pool,
//! so every row is exactly what the store writes. Their journals are not
//! copied: a listing never reads a journal. Then `ANALYZE`, as autovacuum
//! would after such a load.
//!
//! - `pg_list/failed_100`: `list_runs(pipeline orders, Failed, limit 100)`,
//!   one page holding the 50 failed runs. Target: at most 20 ms.
//! - `pg_list/first_page_100`: `list_runs(pipeline orders, limit 100)`, the
//!   first page of all of them (a range of keys).
//! - `pg_list/unindexed_scan`: `list_runs(pipeline orders, updated before
//!   1970)`: a filter no index covers, which reads every run to return
//!   none, the worst case.
//! - baselines, in the same run: `pg_list/count_baseline`, a plain
//!   `SELECT count(*)` of the run table, and `pg_list/load_baseline`, the
//!   store's `load` of one run (a point lookup by key).
//!
//! - `pg_console/*`: the web console's runs page (failed runs, a first
//!   page) and the page of a run of 1,000 steps, each beside the store
//!   call it is built on (`bench::sql::console`). Targets: a runs page well
//!   under 100 ms, the run page under 200 ms.
//!
//! The group is written once for the SQL stores
//! (`fluxio_test_support::bench::sql::list`); this file fills the schema.

mod common;

use fluxio_postgres::PostgresStore;
use fluxio_test_support::bench::sql::{self as bench, LIST_RUNS};

/// Writes the two seed runs through the store and copies their rows into
/// `LIST_RUNS` runs in all.
async fn fill(store: &PostgresStore) {
    bench::list_seeds(store).await;
    let s = format!("\"{}\"", store.schema());
    // Copies 2 .. LIST_RUNS - 1 (99,998 runs); one in 2,000 from the failed
    // seed: 49 of them, 50 failed runs with the seed.
    let copies = "SELECT 'orders/run-' || lpad(i::text, 6, '0') AS run_id, \
                  CASE WHEN i % 2000 = 0 THEN 'orders/seed-failed' ELSE 'orders/seed-done' END \
                  AS seed FROM generate_series(2, $1::int8) AS i";
    let mut tx = store.pool().begin().await.expect("begin");
    sqlx::query(&format!(
        "INSERT INTO {s}.fluxio_checkpoints (run_id, payload, version, ip, step, status, \
           error_message, created_at, updated_at, expires_at, attempt) \
         SELECT k.run_id, c.payload, c.version, c.ip, c.step, c.status, c.error_message, \
           c.created_at, c.updated_at, c.expires_at, c.attempt \
         FROM ({copies}) AS k JOIN {s}.fluxio_checkpoints AS c ON c.run_id = k.seed"
    ))
    .bind(LIST_RUNS - 1)
    .execute(&mut *tx)
    .await
    .expect("copy the run rows");
    // The token comes from the lease table's identity sequence, as the
    // store's acquisitions draw it.
    sqlx::query(&format!(
        "INSERT INTO {s}.fluxio_checkpoints_leases (run_id, expires_at) \
         SELECT k.run_id, NULL FROM ({copies}) AS k"
    ))
    .bind(LIST_RUNS - 1)
    .execute(&mut *tx)
    .await
    .expect("copy the lease rows");
    tx.commit().await.expect("commit");
    sqlx::query(&format!(
        "ANALYZE {s}.fluxio_checkpoints, {s}.fluxio_checkpoints_leases"
    ))
    .execute(store.pool())
    .await
    .expect("analyze");
}

fn main() {
    let rt = bench::runtime();
    let schema = format!("fx_bench_list_{}", std::process::id());
    let Some((url, store)) = common::store(&rt, &schema, 4) else {
        return;
    };
    rt.block_on(fill(&store));
    let count_sql = format!("SELECT count(*) FROM \"{schema}\".fluxio_checkpoints");
    let count = || async {
        sqlx::query_scalar(&count_sql)
            .fetch_one(store.pool())
            .await
            .expect("count")
    };

    bench::criterion(|c| bench::list(c, &rt, "pg_list", &store, count));
    let shared: std::sync::Arc<dyn fluxio_core::store::CheckpointStore> =
        std::sync::Arc::new(store.clone());
    bench::criterion(|c| bench::console(c, &rt, "pg_console", shared));

    rt.block_on(fluxio_test_support::postgres::drop_schema(&url, &schema));
}
