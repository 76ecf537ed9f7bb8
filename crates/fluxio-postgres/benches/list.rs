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

use std::time::Duration;

use criterion::Criterion;
use fluxio::store::{CheckpointStore, RunFilter, RunState};
use fluxio_core::store::conformance;
use fluxio_postgres::PostgresStore;
use sqlx::Connection;

/// The runs in the table, and how many of them failed.
const RUNS: i64 = 100_000;
const FAILED: usize = 50;

/// Writes the two seed runs through the store and copies their rows into
/// `RUNS` runs in all.
async fn fill(store: &PostgresStore) {
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
    let s = format!("\"{}\"", store.schema());
    // Copies 2 .. RUNS - 1 (99,998 runs); one in 2,000 from the failed
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
    .bind(RUNS - 1)
    .execute(&mut *tx)
    .await
    .expect("copy the run rows");
    // The token comes from the lease table's identity sequence, as the
    // store's acquisitions draw it.
    sqlx::query(&format!(
        "INSERT INTO {s}.fluxio_checkpoints_leases (run_id, expires_at) \
         SELECT k.run_id, NULL FROM ({copies}) AS k"
    ))
    .bind(RUNS - 1)
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
    let url = fluxio_test_support::postgres::url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let reachable = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(&url)).await
    });
    match reachable {
        Ok(Ok(conn)) => drop(rt.block_on(conn.close())),
        Ok(Err(e)) => {
            eprintln!("SKIPPED: postgres is unreachable ({e}); start it to run these benchmarks");
            return;
        }
        Err(_) => {
            eprintln!(
                "SKIPPED: postgres did not answer within 5 s; start it to run these benchmarks"
            );
            return;
        }
    }
    let schema = format!("fx_bench_list_{}", std::process::id());
    let store = rt
        .block_on(
            PostgresStore::builder(url.as_str())
                .schema(&schema)
                .max_connections(4)
                .connect(),
        )
        .expect("connect");
    rt.block_on(fill(&store));
    let count = format!("SELECT count(*) FROM \"{schema}\".fluxio_checkpoints");
    let runs: i64 = rt
        .block_on(sqlx::query_scalar(&count).fetch_one(store.pool()))
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
    let mut g = c.benchmark_group("pg_list");
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
                .block_on(sqlx::query_scalar(&count).fetch_one(store.pool()))
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

    rt.block_on(async {
        sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .execute(store.pool())
            .await
            .expect("drop the bench schema");
    });
}
