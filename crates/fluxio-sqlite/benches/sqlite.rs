//! What a checkpoint costs in an SQLite file, and how many durable runs per
//! second a store sustains.
//!
//! `cargo bench -p fluxio-sqlite --bench sqlite -- --warm-up-time 1 --measurement-time 5`
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
//!   ids) of a durable pipeline of 10 stages, each setting one key, on a
//!   1 KB input; criterion reports runs/s. Each run writes 11 checkpoints
//!   (one before each stage and the completed one; the lease taken with the
//!   first and given back with the last when the pipeline calls
//!   `begin_run` / `finish_run`). The store commits the writes that wait
//!   together in one transaction (group commit), so concurrent runs share
//!   commits: runs/s at 16 over runs/s at 1 is what it buys (issue 13's
//!   target: at least 5x).
//!
//! - `sqlite_resume_1mb/journal`: a resume of a crashed 10-stage run whose
//!   context holds 1 MB (a whole checkpoint, then five deltas of one small
//!   key each): `load` plus the resume's first checkpoint, an empty delta,
//!   `save_fenced`. Against `sqlite_resume_1mb/blob_baseline`, what that
//!   cost before the journal: read the run's 1 MB blob and write it back
//!   whole (raw SQL, no decoding or encoding). Target: at most 10 ms.
//! - `sqlite_run_1mb/durable_10_stages`: a whole durable run of 10 stages,
//!   each setting one small key, on a 1 MB context; it prints the bytes of
//!   the steps the run wrote (before the journal: 11 whole checkpoints,
//!   about 11.5 MB).
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
use fluxio_test_support::journal;

#[stage]
async fn stamp(ctx: Context) -> StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?)
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
    let p = pipeline![
        stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp
    ]
    .name("bench")
    .store(store.clone())
    .build()
    .expect("valid");
    let input = context_of(1024);
    static RUN: AtomicU64 = AtomicU64::new(0);

    // `runs` concurrent runs, to completion.
    let batch = |runs: u64| {
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
    };

    let mut g = c.benchmark_group("sqlite_throughput");
    for runs in [1u64, 16, 64] {
        g.throughput(Throughput::Elements(runs));
        g.bench_function(format!("{runs}"), |b| b.iter(|| batch(runs)));
    }
    g.finish();

    // As for the checkpoints above: criterion measures 1, then 16, then 64
    // concurrent runs, and on a shared machine the load changes in between.
    // Alternating them gives each the same conditions; the store's commit
    // counter says how many commits the runs shared.
    let rounds = 30;
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut commits = [0u64; 2];
    for _ in 0..rounds {
        for (i, runs) in [1u64, 16].into_iter().enumerate() {
            let before = store.commits();
            let started = Instant::now();
            batch(runs);
            rates[i].push(runs as f64 / started.elapsed().as_secs_f64());
            commits[i] += store.commits() - before;
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (one, sixteen) = (median(&mut rates[0]), median(&mut rates[1]));
    eprintln!(
        "throughput, {rounds} alternating rounds: 1 run {one:.0} runs/s ({:.2} commits per run), \
         16 concurrent runs {sixteen:.0} runs/s ({:.2} commits per run), ratio {:.2}",
        commits[0] as f64 / f64::from(rounds),
        commits[1] as f64 / (16.0 * f64::from(rounds)),
        sixteen / one
    );
}

fn resume(c: &mut Criterion, rt: &tokio::runtime::Runtime, store: &SqliteStore) {
    let mut run = journal::crashed_run();
    let mut crashed = run.pop().expect("a journal");
    crashed.earlier = run;
    let next = journal::resumed(&crashed);
    let blob = crashed.earlier[0].to_bytes().expect("encode");
    rt.block_on(async {
        store.save(crashed).await.expect("the crashed run");
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS raw_checkpoints \
             (run_id TEXT PRIMARY KEY, payload BLOB NOT NULL)",
        )
        .execute(store.pool())
        .await
        .expect("raw table");
    });
    let lease = rt
        .block_on(store.acquire_lease(journal::KEY, Duration::from_secs(3600)))
        .expect("lease");
    let raw_upsert = "INSERT INTO raw_checkpoints (run_id, payload) VALUES (?1, ?2) \
         ON CONFLICT (run_id) DO UPDATE SET payload = excluded.payload";
    rt.block_on(
        sqlx::query(raw_upsert)
            .bind("blob")
            .bind(&blob)
            .execute(store.pool()),
    )
    .expect("the baseline's blob");

    let mut g = c.benchmark_group("sqlite_resume_1mb");
    g.bench_function("journal", |b| {
        b.iter(|| {
            rt.block_on(async {
                let latest = store.load(journal::KEY).await.expect("load");
                assert_eq!(latest.map(|cp| cp.context.len()), Some(next.context.len()));
                store.save_fenced(next.clone(), &lease).await.expect("save");
            });
        });
    });
    g.bench_function("blob_baseline", |b| {
        b.iter(|| {
            rt.block_on(async {
                let bytes: Vec<u8> =
                    sqlx::query_scalar("SELECT payload FROM raw_checkpoints WHERE run_id = 'blob'")
                        .fetch_one(store.pool())
                        .await
                        .expect("read");
                sqlx::query(raw_upsert)
                    .bind("blob")
                    .bind(bytes)
                    .execute(store.pool())
                    .await
                    .expect("write");
            });
        });
    });
    g.finish();
}

fn run_1mb(c: &mut Criterion, rt: &tokio::runtime::Runtime, store: &SqliteStore) {
    let p = pipeline![
        stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp
    ]
    .name("bench1mb")
    .store(store.clone())
    .build()
    .expect("valid");
    let input = Context::new()
        .set("blob", vec![7u8; journal::MB])
        .expect("1 MB");
    rt.block_on(p.invoke("once", input.clone())).expect("run");
    let (steps, bytes): (i64, i64) = rt
        .block_on(
            sqlx::query_as(
                "SELECT count(*), sum(length(payload)) FROM fluxio_checkpoints_steps \
                 WHERE run_id = 'bench1mb/once'",
            )
            .fetch_one(store.pool()),
        )
        .expect("count");
    eprintln!("run_1mb: a 10-stage durable run wrote {steps} steps, {bytes} bytes");
    let mut g = c.benchmark_group("sqlite_run_1mb");
    g.bench_function("durable_10_stages", |b| {
        b.iter(|| rt.block_on(p.invoke("run", input.clone())).expect("run"));
    });
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
    resume(&mut c, &rt, &store);
    run_1mb(&mut c, &rt, &store);
    c.final_summary();

    drop((store, normal));
    drop(rt);
    remove_database(&file);
}
