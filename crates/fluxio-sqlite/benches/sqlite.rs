//! What a checkpoint costs in an SQLite file, and how many durable runs per
//! second a store sustains.
//!
//! `cargo bench -p fluxio-sqlite -- --warm-up-time 1 --measurement-time 5`
//! (the file is created under cargo's scratch directory, `target/tmp`, and
//! removed at the end; what it measures is mostly that disk's `fsync`).
//!
//! - `sqlite_per_checkpoint/save_fenced`: [`SqliteStore::save_fenced`] of
//!   a checkpoint with a ~1 KB context (encoding included), against
//!   `sqlite_per_checkpoint/raw_upsert`: one `INSERT ... ON CONFLICT DO
//!   UPDATE` of the same, pre-encoded bytes into a plain `(run_id, payload)`
//!   table of the same file, on the same pool. Their ratio is the store's
//!   overhead per checkpoint. To split that overhead: `save` is the same
//!   write without the lease check, `encode` the encoding alone; and
//!   `save_fenced_normal` is `save_fenced` with `synchronous = NORMAL` (no
//!   `fsync` per commit).
//! - `sqlite_throughput/{1,16,64}`: that many concurrent runs (distinct run
//!   ids) of a durable pipeline of 10 no-op stages; criterion reports runs/s.
//!   Each run saves 11 checkpoints (one before each stage and the completed
//!   one), plus a lease acquire, a fenced delete and a release: 14 commits,
//!   one after the other through the store's single writing connection.
//!
//! The groups carry the `sqlite_` prefix so that their baselines under
//! `target/criterion` are not mixed up with the other stores' benchmarks.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use fluxio::store::{Checkpoint, CheckpointStore};
use fluxio::{Context, StageResult, pipeline, stage};
use fluxio_core::store::conformance;
use fluxio_sqlite::{SqliteStore, Synchronous};

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

fn per_checkpoint(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    store: &SqliteStore,
    normal: &SqliteStore,
) {
    rt.block_on(async {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS raw_checkpoints \
             (run_id TEXT PRIMARY KEY, payload BLOB NOT NULL)",
        )
        .execute(store.pool())
        .await
        .expect("raw table");
    });
    let cp = checkpoint("bench", &context_of(1024));
    let bytes = cp.to_bytes().expect("encode");
    let lease = rt
        .block_on(store.acquire_lease("bench", Duration::from_secs(3600)))
        .expect("lease");
    let raw_upsert = "INSERT INTO raw_checkpoints (run_id, payload) VALUES (?1, ?2) \
         ON CONFLICT (run_id) DO UPDATE SET payload = excluded.payload";

    let mut g = c.benchmark_group("sqlite_per_checkpoint");
    g.bench_function("save_fenced", |b| {
        b.iter(|| {
            rt.block_on(store.save_fenced(cp.clone(), &lease))
                .expect("fenced save");
        });
    });
    g.bench_function("save", |b| {
        b.iter(|| {
            rt.block_on(store.save(cp.clone())).expect("save");
        });
    });
    g.bench_function("encode", |b| {
        b.iter(|| cp.clone().to_bytes().expect("encode"));
    });
    g.bench_function("raw_upsert", |b| {
        b.iter(|| {
            rt.block_on(
                sqlx::query(raw_upsert)
                    .bind("bench")
                    .bind(bytes.as_slice())
                    .execute(store.pool()),
            )
            .expect("raw upsert");
        });
    });
    g.bench_function("save_fenced_normal", |b| {
        b.iter(|| {
            rt.block_on(normal.save_fenced(cp.clone(), &lease))
                .expect("fenced save");
        });
    });
    g.finish();
    eprintln!(
        "per_checkpoint: checkpoint of {} bytes ({} context keys)",
        bytes.len(),
        cp.context.len()
    );

    // Criterion measures one function after the other; on a shared machine
    // the load changes in between. Alternating the two writes gives both the
    // same conditions, so their ratio is steadier.
    let rounds = 2000;
    let (mut fenced, mut raw) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let started = Instant::now();
        rt.block_on(store.save_fenced(cp.clone(), &lease))
            .expect("fenced save");
        fenced.push(started.elapsed());
        let started = Instant::now();
        rt.block_on(
            sqlx::query(raw_upsert)
                .bind("bench")
                .bind(bytes.as_slice())
                .execute(store.pool()),
        )
        .expect("raw upsert");
        raw.push(started.elapsed());
    }
    let (fenced, raw) = (median(&mut fenced), median(&mut raw));
    eprintln!(
        "per_checkpoint, {rounds} alternating rounds: save_fenced median {fenced:?}, \
         raw_upsert median {raw:?}, ratio {:.2}",
        fenced.as_secs_f64() / raw.as_secs_f64()
    );
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn throughput(c: &mut Criterion, rt: &tokio::runtime::Runtime, store: &SqliteStore) {
    let p = pipeline![noop, noop, noop, noop, noop, noop, noop, noop, noop, noop]
        .name("bench")
        .store(store.clone())
        .build()
        .expect("valid");
    let input = context_of(1024);
    static RUN: AtomicU64 = AtomicU64::new(0);

    let mut g = c.benchmark_group("sqlite_throughput");
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
    let file = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fluxio-sqlite-bench-{}.db", std::process::id()));
    let store = rt
        .block_on(SqliteStore::connect(&file))
        .expect("open the bench file");
    let normal = rt
        .block_on(
            SqliteStore::builder(&file)
                .synchronous(Synchronous::Normal)
                .connect(),
        )
        .expect("open the bench file");

    let mut c = Criterion::default().configure_from_args();
    per_checkpoint(&mut c, &rt, &store, &normal);
    throughput(&mut c, &rt, &store);
    c.final_summary();

    drop((store, normal));
    drop(rt);
    remove_database(&file);
}
