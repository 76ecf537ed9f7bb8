//! The cost of listing runs in Redis (contract rule 21).
//!
//! `cargo bench -p fluxio-redis --bench list -- --warm-up-time 1 --measurement-time 5`,
//! with Redis at `FLUXIO_REDIS_URL` (see `fluxio_test_support::redis`);
//! skipped with a message when it is unreachable.
//!
//! The setup writes 100,000 runs of one pipeline through the store's own
//! `save` (its script: journal, summary and index), many at a time on the
//! store's one multiplexed connection: 50 failed ones spread through the
//! key order (every 2,000th), a tenth running with no lease (abandoned),
//! the rest completed. Each run's context is a few small keys.
//!
//! - `list_100k/failed_limit_100`: `list_runs(pipeline, Failed, limit 100)`,
//!   the 50 failed runs (one page, no next): the target is <= 20 ms.
//! - `list_100k/load`: one `load` of one run, the baseline.
//! - `list_100k/first_page_limit_100`: the pipeline's first 100 runs, any
//!   state.
//! - `list_100k/abandoned_limit_100`: the first 100 abandoned runs (each
//!   candidate's lease key checked in the script).
//! - `list_100k/version_scan_all`: a version no run has: the whole index
//!   read in bounded slices (500 members a script), the worst case of a
//!   filter the index does not cover. Sampled fewer times.
//!
//! The summary prints the same figures from interleaved rounds (so other
//! load on the machine hits them alike), and the server's memory for the
//! index (`MEMORY USAGE` of its sorted sets, and the summary fields' share
//! of a run's hash).

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use fluxio::Context;
use fluxio::store::{CheckpointStore, RunFilter, RunState};
use fluxio_core::store::conformance;
use fluxio_redis::RedisStore;
use fluxio_test_support::bench::timed;

const RUNS: usize = 100_000;
const FAILED_EVERY: usize = 2_000;
const PIPELINE: &str = "orders";
const TTL: Duration = Duration::from_secs(1_800);
/// Saves in flight at once during the setup.
const IN_FLIGHT: usize = 256;

/// The `i`th run's checkpoint: failed every 2,000th, running (abandoned)
/// every 10th, completed otherwise.
fn run(i: usize, context: &Context) -> fluxio::Checkpoint {
    let mut cp = conformance::checkpoint(&format!("run-{i:06}"), 3).in_pipeline(PIPELINE);
    cp.context = context.snapshot();
    if i % FAILED_EVERY == 0 {
        cp.failed(format!("card declined ({i})"))
    } else if i % 10 == 1 {
        cp
    } else {
        cp.completed()
    }
}

fn setup(rt: &tokio::runtime::Runtime, store: &RedisStore) -> Duration {
    let context = Context::new()
        .set("order", 42u64)
        .and_then(|c| c.set("customer", "c-1234"))
        .and_then(|c| c.set("total_cents", 1999u64))
        .expect("serializes");
    let start = Instant::now();
    rt.block_on(async {
        for chunk in (0..RUNS).collect::<Vec<_>>().chunks(IN_FLIGHT) {
            let saves = chunk.iter().map(|i| store.save(run(*i, &context)));
            for saved in futures::future::join_all(saves).await {
                saved.expect("save");
            }
        }
    });
    start.elapsed()
}

async fn list(store: &RedisStore, filter: &RunFilter, expect: usize) {
    let page = store.list_runs(black_box(filter)).await.expect("list");
    assert_eq!(page.runs.len(), expect, "{filter:?}");
}

async fn load(store: &RedisStore) {
    let key = format!("{PIPELINE}/run-{:06}", RUNS / 2);
    let cp = store.load(black_box(&key)).await.expect("load");
    assert!(cp.is_some());
}

fn filters() -> [(&'static str, RunFilter, usize); 4] {
    let failed = RunFilter::new()
        .pipeline(PIPELINE)
        .state(RunState::Failed)
        .limit(100);
    let first = RunFilter::new().pipeline(PIPELINE).limit(100);
    let abandoned = RunFilter::new()
        .pipeline(PIPELINE)
        .state(RunState::Abandoned)
        .limit(100);
    let scan = RunFilter::new()
        .pipeline(PIPELINE)
        .version("no-such-version")
        .limit(100);
    [
        ("failed_limit_100", failed, RUNS / FAILED_EVERY),
        ("first_page_limit_100", first, 100),
        ("abandoned_limit_100", abandoned, 100),
        ("version_scan_all", scan, 0),
    ]
}

fn bench(c: &mut Criterion, rt: &tokio::runtime::Runtime, store: &RedisStore) {
    let mut g = c.benchmark_group("list_100k");
    for (name, filter, expect) in filters() {
        if name == "version_scan_all" {
            g.sample_size(10);
        }
        g.bench_function(name, |b| {
            b.iter_custom(|iters| timed(rt, iters, || list(store, &filter, expect)));
        });
    }
    g.sample_size(100);
    g.bench_function("load", |b| {
        b.iter_custom(|iters| timed(rt, iters, || load(store)));
    });
    g.finish();
}

/// Mean times of each measurement, from rounds that alternate them.
fn interleaved(rt: &tokio::runtime::Runtime, store: &RedisStore) -> String {
    let filters = filters();
    let mut times = vec![Duration::ZERO; filters.len() + 1];
    let mut counts = vec![0u32; filters.len() + 1];
    rt.block_on(async {
        for round in 0..20 {
            for k in 0..times.len() {
                let which = (k + round) % times.len();
                let n = if which == 3 { 2 } else { 20 };
                let start = Instant::now();
                for _ in 0..n {
                    match filters.get(which) {
                        Some((_, filter, expect)) => list(store, filter, *expect).await,
                        None => load(store).await,
                    }
                }
                times[which] += start.elapsed();
                counts[which] += n;
            }
        }
    });
    let ms = |i: usize| times[i].as_secs_f64() * 1e3 / f64::from(counts[i]);
    let mut out: Vec<String> = filters
        .iter()
        .enumerate()
        .map(|(i, (name, ..))| format!("{name} {:.3} ms", ms(i)))
        .collect();
    out.push(format!("load {:.3} ms", ms(filters.len())));
    format!("{} runs, interleaved rounds: {}", RUNS, out.join(", "))
}

async fn memory(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> u64 {
    redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async::<Option<u64>>(conn)
        .await
        .expect("MEMORY USAGE")
        .unwrap_or(0)
}

/// What the index costs the server: its sorted sets, and the summary
/// fields of one run's hash (the hash with and without them).
fn index_memory(rt: &tokio::runtime::Runtime, url: &str, store: &RedisStore) -> String {
    rt.block_on(async {
        let mut conn = redis::Client::open(url)
            .expect("a valid URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let prefix = store.key_prefix();
        let mut sets = 0;
        for set in [
            store.runs_key(),
            format!("{prefix}.runs.completed"),
            format!("{prefix}.runs.running"),
            format!("{prefix}.runs.failed"),
            format!("{prefix}.expiring"),
        ] {
            sets += memory(&mut conn, &set).await;
        }
        let key = store.checkpoint_key(&format!("{PIPELINE}/run-{:06}", 7));
        let with = memory(&mut conn, &key).await;
        let copy = format!("{prefix}:memory-probe");
        let _: () = redis::cmd("COPY")
            .arg(&key)
            .arg(&copy)
            .query_async(&mut conn)
            .await
            .expect("COPY");
        fluxio_test_support::redis::drop_summary(&mut conn, &copy).await;
        let without = memory(&mut conn, &copy).await;
        format!(
            "index memory: {:.1} MB of sorted sets ({:.0} bytes a run); a run's hash {with} \
             bytes, {without} without its summary fields",
            sets as f64 / 1e6,
            sets as f64 / RUNS as f64,
        )
    })
}

fn main() {
    let prefix = format!("fx_bench_list_{}", std::process::id());
    let Some((rt, url, store)) = common::start(&prefix, TTL) else {
        return;
    };
    let took = setup(&rt, &store);
    println!(
        "setup: {RUNS} runs saved in {:.1} s ({:.0} saves/s, {IN_FLIGHT} in flight)",
        took.as_secs_f64(),
        RUNS as f64 / took.as_secs_f64()
    );
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c, &rt, &store);
    c.final_summary();
    println!("\nsummary:\n  {}", interleaved(&rt, &store));
    println!("  {}", index_memory(&rt, &url, &store));
    common::cleanup(&rt, &url, &prefix, TTL);
}
