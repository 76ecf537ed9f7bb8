//! What a checkpoint costs on PostgreSQL, and how many durable runs per
//! second a store sustains.
//!
//! `cargo bench -p fluxio-postgres -- --warm-up-time 1 --measurement-time 5`
//! (against `FLUXIO_POSTGRES_URL`, see `fluxio_test_support::postgres`;
//! skipped with a message when the server is down).
//!
//! - `per_checkpoint/save_fenced`: [`PostgresStore::save_fenced`] of a
//!   checkpoint with a ~1 KB context (encoding included), against
//!   `per_checkpoint/raw_upsert`: one `INSERT ... ON CONFLICT DO UPDATE` of
//!   the same, pre-encoded bytes into a plain `(run_id, payload)` table on the
//!   same pool. Their ratio is the store's overhead per checkpoint (target
//!   at most 1.3).
//! - `throughput/{1,16,64}`: that many concurrent runs (distinct run ids) of
//!   a durable pipeline of 10 no-op stages; criterion reports runs/s. Each
//!   run saves 11 checkpoints (one before each stage and the completed one),
//!   plus a lease acquire, a fenced delete and a release.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, Throughput};
use fluxio::store::{Checkpoint, CheckpointStore};
use fluxio::{Context, StageResult, pipeline, stage};
use fluxio_core::store::conformance;
use fluxio_postgres::PostgresStore;
use sqlx::Connection;

#[stage]
async fn noop(ctx: Context) -> StageResult {
    Ok(ctx)
}

fn context_of(bytes: usize) -> Context {
    let per_key = 100;
    (0..bytes / per_key).fold(Context::new(), |c, i| {
        c.set(format!("key-{i:02}"), "x".repeat(per_key))
            .expect("a string serializes")
    })
}

fn checkpoint(run_id: &str, ctx: &Context) -> Checkpoint {
    let mut cp = conformance::checkpoint(run_id, 3);
    cp.context = ctx.snapshot();
    cp
}

fn per_checkpoint(c: &mut Criterion, rt: &tokio::runtime::Runtime, store: &PostgresStore) {
    let raw_table = format!("\"{}\".raw_checkpoints", store.schema());
    rt.block_on(async {
        sqlx::query(&format!(
            "CREATE TABLE IF NOT EXISTS {raw_table} (run_id TEXT PRIMARY KEY, payload BYTEA NOT NULL)"
        ))
        .execute(store.pool())
        .await
        .expect("raw table");
    });
    let cp = checkpoint("bench", &context_of(1024));
    let bytes = cp.to_bytes().expect("encode");
    let lease = rt
        .block_on(store.acquire_lease("bench", Duration::from_secs(3600)))
        .expect("lease");
    let raw_upsert = format!(
        "INSERT INTO {raw_table} (run_id, payload) VALUES ($1, $2) \
         ON CONFLICT (run_id) DO UPDATE SET payload = EXCLUDED.payload"
    );

    let mut g = c.benchmark_group("per_checkpoint");
    g.bench_function("save_fenced", |b| {
        b.iter(|| {
            rt.block_on(store.save_fenced(cp.clone(), &lease))
                .expect("fenced save");
        });
    });
    g.bench_function("raw_upsert", |b| {
        b.iter(|| {
            rt.block_on(
                sqlx::query(&raw_upsert)
                    .bind("bench")
                    .bind(bytes.as_slice())
                    .execute(store.pool()),
            )
            .expect("raw upsert");
        });
    });
    g.finish();
    eprintln!(
        "per_checkpoint: checkpoint of {} bytes ({} context keys)",
        bytes.len(),
        cp.context.len()
    );
}

fn throughput(c: &mut Criterion, rt: &tokio::runtime::Runtime, store: &PostgresStore) {
    let p = pipeline![noop, noop, noop, noop, noop, noop, noop, noop, noop, noop]
        .name("bench")
        .store(store.clone())
        .build()
        .expect("valid");
    let input = context_of(1024);
    static RUN: AtomicU64 = AtomicU64::new(0);

    let mut g = c.benchmark_group("throughput");
    for runs in [1u64, 16, 64] {
        g.throughput(Throughput::Elements(runs));
        g.bench_function(format!("{runs}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let mut tasks = tokio::task::JoinSet::new();
                    for _ in 0..runs {
                        let (p, input) = (p.clone(), input.clone());
                        let run_id = format!("run-{}", RUN.fetch_add(1, Ordering::Relaxed));
                        tasks.spawn(async move { p.invoke(&run_id, input).await });
                    }
                    while let Some(done) = tasks.join_next().await {
                        done.expect("no panic").expect("the run completes");
                    }
                });
            });
        });
    }
    g.finish();
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
    let schema = format!("fx_bench_{}", std::process::id());
    let store = rt
        .block_on(
            PostgresStore::builder(url.as_str())
                .schema(&schema)
                .max_connections(16)
                .connect(),
        )
        .expect("connect");

    let mut c = Criterion::default().configure_from_args();
    per_checkpoint(&mut c, &rt, &store);
    throughput(&mut c, &rt, &store);
    c.final_summary();

    rt.block_on(async {
        sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .execute(store.pool())
            .await
            .expect("drop the bench schema");
    });
}
