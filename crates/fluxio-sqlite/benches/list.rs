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

use std::path::Path;
use std::time::Duration;

use criterion::Criterion;
use fluxio::store::{CheckpointStore, RunFilter, RunState};
use fluxio_core::store::conformance;
use fluxio_sqlite::SqliteStore;

/// The runs in the file, and how many of them failed.
const RUNS: i64 = 100_000;
const FAILED: usize = 50;

/// Writes the two seed runs through the store and copies their rows into
/// `RUNS` runs in all.
async fn fill(store: &SqliteStore) {
    let done = conformance::checkpoint("seed-done", 3)
        .in_pipeline("orders")
        .completed();
    let failed = conformance::checkpoint("seed-failed", 3)
        .in_pipeline("orders")
        .failed("card declined");
    for cp in [done, failed] {
        store.save(cp.clone()).await.expect("a seed run");
        let lease = store
            .acquire_lease(&cp.key(), Duration::from_secs(60))
            .await
            .expect("lease");
        store.release_lease(lease).await.expect("release");
    }
    // Copies 2 .. RUNS - 1 (99,998 runs); one in 2,000 from the failed
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
    .bind(RUNS - 1)
    .execute(&mut *tx)
    .await
    .expect("copy the run rows");
    sqlx::query(&format!(
        "INSERT INTO fluxio_checkpoints_leases (run_id, token, expires_at) \
         SELECT k.run_id, (SELECT max(token) FROM fluxio_checkpoints_leases) + k.i, NULL \
         FROM ({copies}) AS k"
    ))
    .bind(RUNS - 1)
    .execute(&mut *tx)
    .await
    .expect("copy the lease rows");
    tx.commit().await.expect("commit");
}

fn remove_database(file: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "fluxio-sqlite-bench-list-{}.db",
        std::process::id()
    ));
    let store = rt
        .block_on(SqliteStore::connect(&file))
        .expect("open the bench file");
    rt.block_on(fill(&store));
    let count = "SELECT count(*) FROM fluxio_checkpoints";
    let runs: i64 = rt
        .block_on(sqlx::query_scalar(count).fetch_one(store.pool()))
        .expect("count");
    assert_eq!(runs, RUNS);

    let failed = RunFilter::new()
        .pipeline("orders")
        .state(RunState::Failed)
        .limit(100);
    let page = rt.block_on(store.list_runs(&failed)).expect("list");
    assert_eq!((page.runs.len(), page.next), (FAILED, None));
    let first = RunFilter::new().pipeline("orders").limit(100);
    let page = rt.block_on(store.list_runs(&first)).expect("list");
    assert_eq!(page.runs.len(), 100);
    let mut unindexed = RunFilter::new().pipeline("orders");
    unindexed.updated_before_ms = Some(0);
    let page = rt.block_on(store.list_runs(&unindexed)).expect("list");
    assert!(page.runs.is_empty());

    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("sqlite_list");
    g.bench_function("failed_100", |b| {
        b.iter(|| rt.block_on(store.list_runs(&failed)).expect("list"));
    });
    g.bench_function("first_page_100", |b| {
        b.iter(|| rt.block_on(store.list_runs(&first)).expect("list"));
    });
    g.bench_function("unindexed_scan", |b| {
        b.iter(|| rt.block_on(store.list_runs(&unindexed)).expect("list"));
    });
    g.bench_function("count_baseline", |b| {
        b.iter(|| {
            let n: i64 = rt
                .block_on(sqlx::query_scalar(count).fetch_one(store.pool()))
                .expect("count");
            n
        });
    });
    g.bench_function("load_baseline", |b| {
        b.iter(|| {
            rt.block_on(store.load("orders/seed-failed"))
                .expect("load")
                .expect("stored")
        });
    });
    g.finish();
    c.final_summary();

    drop(store);
    drop(rt);
    remove_database(&file);
}
