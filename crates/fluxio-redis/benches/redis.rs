//! The cost of checkpoints in Redis.
//!
//! `cargo bench -p fluxio-redis -- --warm-up-time 1 --measurement-time 5`,
//! with Redis at `FLUXIO_REDIS_URL` (see `fluxio_test_support::redis`);
//! skipped with a message when it is unreachable.
//!
//! - `per_checkpoint/*`: one checkpoint of a ~1 KB context.
//!   `raw_set` is `SET key <to_bytes()> EX ttl` of bytes encoded beforehand,
//!   through a redis-rs `ConnectionManager` like the store's;
//!   `raw_set_encoding` encodes first (`to_bytes()` then the same `SET`);
//!   `save` and `save_fenced` are the store's. The target is
//!   `save_fenced / raw_set <= 1.3`.
//! - `journal_1mb/*`: a run whose context holds 1 MB (one whole
//!   checkpoint, then deltas each setting one small key).
//!   `raw_set_entry` is `SET key <bytes>` of a delta's
//!   [`entry_bytes`](Checkpoint::entry_bytes) (about 100 bytes);
//!   `delta_save_fenced` is the store's fenced save of that delta (the next
//!   checkpoint each time). The target is `delta_save_fenced / raw_set_entry
//!   <= 1.3`, printed from interleaved rounds in the summary.
//!   `resume` is what resuming a run crashed after its fifth stage costs the
//!   store: `load` (the whole checkpoint and the five deltas, put together)
//!   and the resume's first checkpoint, an empty delta (`save_fenced`);
//!   target <= 10 ms. `raw_get_set` is its baseline: `GET` of the 1 MB
//!   entry and `SET` of the small one.
//! - `pipeline_10_stages/runs_N`: N concurrent durable runs (distinct run
//!   ids) of a pipeline of ten no-op stages on the store; the throughput is in
//!   runs per second. Each run writes the checkpoints counted in the summary
//!   printed at the end (plus its lease: acquire and release).

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use fluxio::store::{Change, Checkpoint, CheckpointStore};
use fluxio::{Context, Outcome, Pipeline, StageResult, pipeline, stage};
use fluxio_core::store::conformance;
use fluxio_redis::RedisStore;
use fluxio_test_support::bench::{context_1kb, timed};
use fluxio_test_support::counted::Counted;

#[stage]
async fn noop(ctx: Context) -> StageResult {
    Ok(ctx)
}

const CONCURRENCY: [usize; 3] = [1, 16, 64];
const TTL: Duration = Duration::from_secs(120);

fn checkpoint(run_id: &str) -> Checkpoint {
    let mut cp = conformance::checkpoint(run_id, 3);
    cp.context = context_1kb().snapshot();
    cp
}

/// `raw` and `fenced` interleaved, in 40 rounds of 50 calls of each
/// (alternating which goes first), so that load from other processes hits
/// both alike: the µs a call of each took, and how many calls of each ran.
async fn interleaved<A, FA, B, FB>(mut raw: A, mut fenced: B) -> (f64, f64, u32)
where
    A: FnMut() -> FA,
    FA: Future<Output = ()>,
    B: FnMut() -> FB,
    FB: Future<Output = ()>,
{
    let (mut raw_time, mut fenced_time, mut n) = (Duration::ZERO, Duration::ZERO, 0u32);
    for round in 0..40 {
        for first in [round % 2 == 0, round % 2 == 1] {
            let start = Instant::now();
            for _ in 0..50 {
                if first {
                    raw().await;
                } else {
                    fenced().await;
                }
            }
            if first {
                raw_time += start.elapsed();
            } else {
                fenced_time += start.elapsed();
            }
        }
        n += 50;
    }
    (
        raw_time.as_secs_f64() * 1e6 / f64::from(n),
        fenced_time.as_secs_f64() * 1e6 / f64::from(n),
        n,
    )
}

fn per_checkpoint(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    url: &str,
    store: &RedisStore,
) -> String {
    let cp = checkpoint("fenced");
    let bytes = cp.to_bytes().expect("encode");
    println!("per_checkpoint: the checkpoint is {} bytes", bytes.len());
    let raw_key = format!("{}:raw", store.key_prefix());
    let ttl_s = TTL.as_secs();
    let raw = rt.block_on(async {
        let client = redis::Client::open(url).expect("a valid URL");
        redis::aio::ConnectionManager::new(client)
            .await
            .expect("connect")
    });
    let lease = rt
        .block_on(store.acquire_lease("fenced", Duration::from_secs(600)))
        .expect("acquire");

    // a raw `SET` of `bytes` with the journal's expiry: what a save is
    // measured against
    let raw_set = |bytes: Vec<u8>| {
        let mut conn = raw.clone();
        let mut cmd = redis::cmd("SET");
        cmd.arg(&raw_key).arg(bytes).arg("EX").arg(ttl_s);
        async move { cmd.query_async::<()>(&mut conn).await.expect("SET") }
    };

    let mut g = c.benchmark_group("per_checkpoint");
    g.bench_function("raw_set", |b| {
        b.iter_custom(|iters| timed(rt, iters, || raw_set(black_box(bytes.clone()))));
    });
    g.bench_function("raw_set_encoding", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, || {
                raw_set(black_box(&cp).to_bytes().expect("encode"))
            })
        });
    });
    g.bench_function("save", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, || async {
                store.save(black_box(cp.clone())).await.expect("save");
            })
        });
    });
    g.bench_function("save_fenced", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, || async {
                store
                    .save_fenced(black_box(cp.clone()), &lease)
                    .await
                    .expect("save_fenced");
            })
        });
    });
    g.finish();

    // The same two, interleaved in rounds (alternating which goes first), so
    // that load from other processes hits both alike: the ratio to report.
    let (raw_us, fenced_us, n) = rt.block_on(interleaved(
        || raw_set(bytes.clone()),
        || async {
            store
                .save_fenced(cp.clone(), &lease)
                .await
                .expect("save_fenced");
        },
    ));
    rt.block_on(store.release_lease(lease)).expect("release");
    format!(
        "per checkpoint ({} bytes), interleaved, {n} of each: raw SET {raw_us:.1} µs, \
         save_fenced {fenced_us:.1} µs, ratio {:.2}",
        bytes.len(),
        fenced_us / raw_us
    )
}

/// The 1 MB run's whole checkpoint and the delta after it that sets
/// `stage` (numbered `seq`).
fn journal_1mb(run_id: &str) -> (Checkpoint, Context, Context) {
    let c0 = Context::new()
        .set("blob", vec![7u8; 1 << 20])
        .expect("serializes");
    let mut base = conformance::checkpoint(run_id, 0);
    base.context = c0.snapshot();
    let c1 = c0.clone().set("stage", 1u32).expect("serializes");
    (base, c0, c1)
}

fn delta(base: &Checkpoint, before: &Context, after: &Context, seq: u32) -> Checkpoint {
    let mut cp = base.clone();
    cp.seq = seq;
    cp.ip = seq;
    cp.context = after.snapshot();
    cp.change = Change::between(&before.snapshot(), &cp.context);
    cp
}

fn journal(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    url: &str,
    store: &RedisStore,
) -> String {
    let raw = rt.block_on(async {
        let client = redis::Client::open(url).expect("a valid URL");
        redis::aio::ConnectionManager::new(client)
            .await
            .expect("connect")
    });
    let raw_key = format!("{}:raw-entry", store.key_prefix());
    let raw_big = format!("{}:raw-big", store.key_prefix());

    let (delta, entry) = journal_delta(c, rt, &raw, &raw_key, store);
    let (parts, resume) = journal_resume(c, rt, &raw, (&raw_key, &raw_big), &entry, store);
    format!("{parts}\n  {delta}\n  {resume}")
}

/// The delta save of a 1 MB context against a raw SET of its bytes; the
/// delta's entry, for the resume's baseline.
fn journal_delta(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    raw: &redis::aio::ConnectionManager,
    raw_key: &str,
    store: &RedisStore,
) -> (String, Vec<u8>) {
    // the delta save against a raw SET of its bytes
    let (base, c0, c1) = journal_1mb("delta");
    let lease = rt
        .block_on(store.acquire_lease("delta", Duration::from_secs(600)))
        .expect("acquire");
    rt.block_on(store.save_fenced(base.clone(), &lease))
        .expect("the whole checkpoint");
    let template = delta(&base, &c0, &c1, 1);
    let entry = template.entry_bytes().expect("encode");
    // each save is the run's next checkpoint, a delta setting `stage`
    let seq = AtomicU64::new(1);
    let next = || {
        let mut cp = template.clone();
        cp.seq = u32::try_from(seq.fetch_add(1, Ordering::Relaxed)).expect("few saves");
        cp
    };
    let raw_set = || {
        let mut conn = raw.clone();
        let mut cmd = redis::cmd("SET");
        cmd.arg(raw_key).arg(black_box(entry.clone()));
        async move { cmd.query_async::<()>(&mut conn).await.expect("SET") }
    };
    let mut g = c.benchmark_group("journal_1mb");
    g.bench_function("raw_set_entry", |b| {
        b.iter_custom(|iters| timed(rt, iters, raw_set));
    });
    g.bench_function("delta_save_fenced", |b| {
        b.iter_custom(|iters| {
            timed(rt, iters, || async {
                store
                    .save_fenced(black_box(next()), &lease)
                    .await
                    .expect("save_fenced");
            })
        });
    });
    let (raw_us, fenced_us, n) = rt.block_on(interleaved(raw_set, || async {
        store
            .save_fenced(next(), &lease)
            .await
            .expect("save_fenced");
    }));
    rt.block_on(store.release_lease(lease)).expect("release");
    g.finish();

    let line = format!(
        "1 MB context, interleaved, {n} of each: raw SET of a delta's {} bytes {raw_us:.1} µs, \
         delta save_fenced {fenced_us:.1} µs, ratio {:.2}",
        entry.len(),
        fenced_us / raw_us,
    );
    (line, entry)
}

/// The resume of a 10-stage run crashed after its fifth stage (a 1 MB
/// context), against a raw GET of its entry and SET of a delta's; then
/// the resume's parts apart.
fn journal_resume(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    raw: &redis::aio::ConnectionManager,
    (raw_key, raw_big): (&str, &str),
    entry: &[u8],
    store: &RedisStore,
) -> (String, String) {
    // the resume of a 10-stage run crashed after its fifth stage
    let (base, c0, _) = journal_1mb("crashed");
    let big = base.entry_bytes().expect("encode");
    let lease = rt
        .block_on(store.acquire_lease("crashed", Duration::from_secs(600)))
        .expect("acquire");
    rt.block_on(async {
        store
            .save_fenced(base.clone(), &lease)
            .await
            .expect("whole");
        let mut ctx = c0.clone();
        for stage in 1..=5u32 {
            let after = ctx
                .clone()
                .set(format!("stage-{stage}"), stage)
                .expect("set");
            store
                .save_fenced(delta(&base, &ctx, &after, stage), &lease)
                .await
                .expect("delta");
            ctx = after;
        }
    });
    let resume = || async {
        let mut cp = store
            .load(black_box("crashed"))
            .await
            .expect("load")
            .expect("stored");
        cp.seq += 1;
        cp.attempt += 1;
        cp.change = Change::none();
        store
            .save_fenced(cp, &lease)
            .await
            .expect("first checkpoint");
    };
    let raw_get_set = || async {
        let mut conn = raw.clone();
        let got: Vec<u8> = redis::cmd("GET")
            .arg(raw_big)
            .query_async(&mut conn)
            .await
            .expect("GET");
        black_box(got);
        redis::cmd("SET")
            .arg(raw_key)
            .arg(entry)
            .query_async::<()>(&mut conn)
            .await
            .expect("SET");
    };
    rt.block_on(async {
        let mut conn = raw.clone();
        redis::cmd("SET")
            .arg(raw_big)
            .arg(&big)
            .query_async::<()>(&mut conn)
            .await
            .expect("SET");
    });
    let mut g = c.benchmark_group("journal_1mb");
    g.bench_function("resume", |b| {
        b.iter_custom(|iters| timed(rt, iters, resume));
    });
    g.bench_function("raw_get_set", |b| {
        b.iter_custom(|iters| timed(rt, iters, raw_get_set));
    });
    g.finish();
    let (mut resume_time, mut base_time) = (Duration::ZERO, Duration::ZERO);
    rt.block_on(async {
        for _ in 0..50 {
            let start = Instant::now();
            resume().await;
            resume_time += start.elapsed();
            let start = Instant::now();
            raw_get_set().await;
            base_time += start.elapsed();
        }
    });
    let parts = resume_parts(rt, raw, store, &lease);
    rt.block_on(store.release_lease(lease)).expect("release");
    let resume = format!(
        "resume of a 10-stage run crashed after stage 5 (load + first checkpoint), 50 of \
         each: {:.2} ms (baseline GET of the 1 MB entry + SET of the delta: {:.2} ms)",
        resume_time.as_secs_f64() * 1e3 / 50.0,
        base_time.as_secs_f64() * 1e3 / 50.0,
    );
    (parts, resume)
}

/// The parts of a resume of run `crashed` apart, 50 of each: its load (a
/// raw HMGET of its entries, decoding them) and its first checkpoint.
fn resume_parts(
    rt: &tokio::runtime::Runtime,
    raw: &redis::aio::ConnectionManager,
    store: &RedisStore,
    lease: &fluxio_core::store::Lease,
) -> String {
    // the two parts of the resume apart
    let (mut load_time, mut hmget_time, mut decode_time, mut first_time) = (
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
    );
    rt.block_on(async {
        for _ in 0..50 {
            let start = Instant::now();
            let mut cp = store.load("crashed").await.expect("load").expect("stored");
            load_time += start.elapsed();
            let start = Instant::now();
            let mut conn = raw.clone();
            let parts: Vec<Vec<u8>> = redis::cmd("HMGET")
                .arg(store.checkpoint_key("crashed"))
                .arg(&[0, 1, 2, 3, 4, 5][..])
                .query_async(&mut conn)
                .await
                .expect("HMGET");
            hmget_time += start.elapsed();
            let start = Instant::now();
            black_box(Checkpoint::from_entries("crashed", &parts).expect("decode"));
            decode_time += start.elapsed();
            cp.seq += 1;
            cp.change = Change::none();
            let start = Instant::now();
            store
                .save_fenced(cp, lease)
                .await
                .expect("first checkpoint");
            first_time += start.elapsed();
        }
    });
    format!(
        "resume parts, 50 of each: load {:.2} ms (a raw HMGET of its entries {:.2} ms, \
         decoding them {:.2} ms), first checkpoint {:.3} ms",
        load_time.as_secs_f64() * 1e3 / 50.0,
        hmget_time.as_secs_f64() * 1e3 / 50.0,
        decode_time.as_secs_f64() * 1e3 / 50.0,
        first_time.as_secs_f64() * 1e3 / 50.0,
    )
}

/// The server's `INFO commandstats` call counts, by command.
async fn command_calls(conn: &mut redis::aio::ConnectionManager) -> Vec<(String, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// The commands the server ran for one durable run of ten no-op stages
/// (from `INFO commandstats`, so commands run inside scripts count too):
/// the `EVALSHA`s and plain commands are the round trips.
fn commands_per_run(rt: &tokio::runtime::Runtime, url: &str, store: &RedisStore) -> String {
    rt.block_on(async {
        let client = redis::Client::open(url).expect("a valid URL");
        let mut conn = redis::aio::ConnectionManager::new(client)
            .await
            .expect("connect");
        let (p, input) = ten_noops_on(store);
        let before = command_calls(&mut conn).await;
        p.invoke("count-commands", input)
            .await
            .and_then(Outcome::completed)
            .expect("runs");
        let after = command_calls(&mut conn).await;
        let mut out = Vec::new();
        for (name, calls) in after {
            let was = before
                .iter()
                .find(|(n, _)| n == &name)
                .map_or(0, |(_, c)| *c);
            // the two INFO calls are this function's
            let ran = calls - was - u64::from(name == "info");
            if ran > 0 {
                out.push(format!("{name} {ran}"));
            }
        }
        out.join(", ")
    })
}

fn ten_noops() -> fluxio::PipelineBuilder {
    pipeline![noop, noop, noop, noop, noop, noop, noop, noop, noop, noop]
}

/// The pipeline `bench` of ten no-op stages on `store`, and its input.
fn ten_noops_on(store: &RedisStore) -> (Pipeline, Context) {
    let p = ten_noops()
        .name("bench")
        .store(store.clone())
        .build()
        .expect("valid");
    let input = Context::new().set("order", 42u64).expect("serializes");
    (p, input)
}

async fn run_batch(p: &Pipeline, ids: &[String], input: &Context) {
    let runs = ids.iter().map(|id| p.invoke(id, input.clone()));
    for r in futures::future::join_all(runs).await {
        r.and_then(Outcome::completed).expect("the run completes");
    }
}

fn throughput(c: &mut Criterion, rt: &tokio::runtime::Runtime, store: &RedisStore) -> u64 {
    let input = Context::new().set("order", 42u64).expect("serializes");
    // checkpoint writes per run, counted once
    let counting = Arc::new(Counted::stepwise(store.clone()));
    let p = ten_noops()
        .name("bench")
        .store_arc(Arc::clone(&counting) as Arc<dyn CheckpointStore>)
        .build()
        .expect("valid");
    rt.block_on(p.invoke("count", input.clone()))
        .and_then(Outcome::completed)
        .expect("runs");
    let per_run = counting.writes();

    let p = ten_noops()
        .name("bench")
        .store(store.clone())
        .build()
        .expect("valid");
    let mut g = c.benchmark_group("pipeline_10_stages");
    for n in CONCURRENCY {
        let ids: Vec<String> = (0..n).map(|i| format!("run-{n}-{i}")).collect();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("runs", n), &n, |b, _| {
            b.iter_custom(|iters| timed(rt, iters, || run_batch(&p, &ids, &input)));
        });
    }
    g.finish();
    per_run
}

/// A fixed-length measurement for the summary: runs and checkpoints per second.
fn summary(rt: &tokio::runtime::Runtime, store: &RedisStore, per_checkpoint: &str, per_run: u64) {
    println!("\nsummary:\n  {per_checkpoint}");
    let (p, input) = ten_noops_on(store);
    println!("  pipelines of 10 no-op stages: {per_run} checkpoint writes per run");
    for n in CONCURRENCY {
        let ids: Vec<String> = (0..n).map(|i| format!("sum-{n}-{i}")).collect();
        let (mut runs, start) = (0u64, Instant::now());
        while start.elapsed() < Duration::from_secs(3) {
            rt.block_on(run_batch(&p, &ids, &input));
            runs += n as u64;
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "  {n:>2} concurrent: {:>8.0} runs/s, {:>9.0} checkpoints/s",
            runs as f64 / secs,
            (runs * per_run) as f64 / secs
        );
    }
}

fn main() {
    let prefix = format!("fx_bench_{}", std::process::id());
    let Some((rt, url, store)) = common::start(&prefix, TTL) else {
        return;
    };
    let mut c = Criterion::default().configure_from_args();
    let per_checkpoint = per_checkpoint(&mut c, &rt, &url, &store);
    let journal = journal(&mut c, &rt, &url, &store);
    let per_run = throughput(&mut c, &rt, &store);
    c.final_summary();
    summary(&rt, &store, &per_checkpoint, per_run);
    println!("  {journal}");
    println!(
        "  one durable run of 10 no-op stages, commands the server ran (INFO commandstats; \
         other clients' commands meanwhile count too): {}",
        commands_per_run(&rt, &url, &store)
    );
    common::cleanup(&rt, &url, &prefix, TTL);
}
