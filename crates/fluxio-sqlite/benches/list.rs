//! What listing runs costs in an SQLite file of 100,000 runs (contract
//! rule 21).
//!
//! `cargo bench -p fluxio-sqlite --bench list -- --warm-up-time 1 --measurement-time 5`
//! (the file is created under cargo's scratch directory, `target/tmp`, and
//! removed at the end).
//!
//! The file holds 100,000 runs of the pipeline `orders`, 50 of them failed
//! (one in 2,000, spread over the keys) and the rest completed, each with a
//! released lease row, as a worker leaves them. Two runs are written
//! through the store (`save`, then a lease acquired and released); the
//! other 99,998 are copies of their rows (the run row and the lease row)
//! under new keys, in one `INSERT ... SELECT` through the store's own
//! writing pool, so every row is exactly what the store writes. Their
//! journals are not copied: a listing never reads a journal.
//!
//! - `sqlite_list/failed_100`: `list_runs(pipeline orders, Failed, limit
//!   100)`, one page holding the 50 failed runs. Target: at most 20 ms.
//! - `sqlite_list/first_page_100`: `list_runs(pipeline orders, limit 100)`,
//!   the first page of all of them (a range of keys).
//! - `sqlite_list/unindexed_scan`: `list_runs(pipeline orders, updated
//!   before 1970)`: a filter no index covers, which reads every run to
//!   return none, the worst case.
//! - baselines, in the same run: `sqlite_list/count_baseline`, a plain
//!   `SELECT count(*)` of the run table, and `sqlite_list/load_baseline`,
//!   the store's `load` of one run (a point lookup by key).
//!
//! - `sqlite_console/*`: the web console's runs page (failed runs, a
//!   first page) and the page of a run of 1,000 steps, each beside the
//!   store call it is built on (`bench::sql::console`). Targets: a runs
//!   page well under 100 ms, the run page under 200 ms.
//!
//! The group is written once for the SQL stores
//! (`fluxio_test_support::bench::sql::list`); this file fills the file.

use std::path::Path;

use fluxio_sqlite::SqliteStore;
use fluxio_test_support::bench::sql::{self as bench, LIST_RUNS};

/// Writes the two seed runs through the store and copies their rows into
/// `LIST_RUNS` runs in all.
async fn fill(store: &SqliteStore) {
    bench::list_seeds(store).await;
    // Copies 2 .. LIST_RUNS - 1 (99,998 runs); one in 2,000 from the failed
    // seed: 49 of them, 50 failed runs with the seed.
    let copies = "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
                  SELECT n.i AS i, printf('orders/run-%06d', n.i) AS run_id, \
                  CASE WHEN n.i % 2000 = 0 THEN 'orders/seed-failed' ELSE 'orders/seed-done' END \
                  AS seed FROM n";
    let mut tx = store.pool().begin().await.expect("begin");
    sqlx::query(&format!(
        "INSERT INTO fluxio_checkpoints (run_id, payload, version, ip, step, status, \
           error_message, created_at, updated_at, expires_at, attempt) \
         SELECT k.run_id, c.payload, c.version, c.ip, c.step, c.status, c.error_message, \
           c.created_at, c.updated_at, c.expires_at, c.attempt \
         FROM ({copies}) AS k JOIN fluxio_checkpoints AS c ON c.run_id = k.seed"
    ))
    .bind(LIST_RUNS - 1)
    .execute(&mut *tx)
    .await
    .expect("copy the run rows");
    sqlx::query(&format!(
        "INSERT INTO fluxio_checkpoints_leases (run_id, token, expires_at) \
         SELECT k.run_id, (SELECT max(token) FROM fluxio_checkpoints_leases) + k.i, NULL \
         FROM ({copies}) AS k"
    ))
    .bind(LIST_RUNS - 1)
    .execute(&mut *tx)
    .await
    .expect("copy the lease rows");
    tx.commit().await.expect("commit");
}

fn main() {
    let rt = bench::runtime();
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "fluxio-sqlite-bench-list-{}.db",
        std::process::id()
    ));
    let store = rt
        .block_on(SqliteStore::connect(&file))
        .expect("open the bench file");
    rt.block_on(fill(&store));
    let count = || async {
        sqlx::query_scalar("SELECT count(*) FROM fluxio_checkpoints")
            .fetch_one(store.pool())
            .await
            .expect("count")
    };

    bench::criterion(|c| bench::list(c, &rt, "sqlite_list", &store, count));
    let shared: std::sync::Arc<dyn fluxio_core::store::CheckpointStore> =
        std::sync::Arc::new(store.clone());
    bench::criterion(|c| bench::console(c, &rt, "sqlite_console", shared));

    drop(store);
    drop(rt);
    fluxio_test_support::sqlite::remove_database(&file);
}
