//! Measures runs through a queue (contract rule 31) on each store, beside
//! runs started directly in the same run: the figures of
//! docs/performance.md, "Queues".
//!
//! ```text
//! cargo run --release -p fluxio-tests --bin fluxio-queue-bench -- <store> [runs]
//! ```
//!
//! `<store>`: `sqlite`, `postgres`, `mysql` or `redis` (the tests' servers);
//! `runs`: 1,000 by default. In a namespace of its own, with one stage that
//! sets a key:
//!
//! - the baseline: as many runs started directly (`invoke`, 16 at once) in
//!   this process, and the latency from a lone `invoke` to its stage's
//!   start (30 times);
//! - the queue (`concurrency(16)`): `enqueue` of as many runs, one after the
//!   other; a `RecoveryWorker` (concurrency 16, `due_poll` 20 ms) draining
//!   them, from its start to the last run's end; and, the worker idle, the
//!   latency from a lone `enqueue` to its stage's start (30 times).
//!
//! It prints one summary line starting with `==`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fluxio::queue::{Enqueue, Queue};
use fluxio::recovery::RecoveryWorker;
use fluxio::store::CheckpointStore;
use fluxio::{Context, Pipeline, StageResult, pipeline, stage};
use fluxio_tests::StoreKind;

type BenchResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

static DONE: AtomicU64 = AtomicU64::new(0);
static STARTED: Mutex<Option<Instant>> = Mutex::new(None);

#[stage]
async fn deliver(ctx: Context) -> StageResult {
    *STARTED.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    let n: u64 = ctx.get("n")?;
    let out = ctx.set("delivered", n * 2)?;
    DONE.fetch_add(1, Ordering::SeqCst);
    Ok(out)
}

fn build(store: &Arc<dyn CheckpointStore>, name: &str, queue: bool) -> fluxio::Result<Pipeline> {
    let mut b = pipeline![deliver].name(name).store_arc(Arc::clone(store));
    if queue {
        b = b.queue(Queue::new(name).concurrency(16));
    }
    b.build()
}

fn take_started() -> Option<Instant> {
    STARTED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
}

/// The median and 90th percentile of `samples`, in ms.
fn spread(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort_unstable();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    (at(0.5), at(0.9))
}

async fn until_done(target: u64) -> BenchResult {
    let started = Instant::now();
    while DONE.load(Ordering::SeqCst) < target {
        if started.elapsed() > Duration::from_secs(600) {
            return Err("the queue did not drain in 600 s".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> BenchResult {
    let args: Vec<String> = std::env::args().collect();
    let kind = args
        .get(1)
        .and_then(|k| StoreKind::parse(k))
        .ok_or("usage: fluxio-queue-bench <sqlite|postgres|mysql|redis> [runs]")?;
    let n: u64 = args.get(2).map_or(Ok(1_000), |n| n.parse())?;
    let ns = format!("queue_bench_{}", std::process::id());
    let url = kind.url();
    let store = kind.open(&url, &ns).await?;
    let input = |i: u64| Context::new().set("n", i);

    // the baseline: started directly
    let direct = build(&store, "direct", false)?;
    let started = Instant::now();
    let runs = (0..n).map(|i| {
        let direct = direct.clone();
        async move { direct.invoke(&format!("d-{i}"), input(i)?).await.map(drop) }
    });
    futures::stream::iter(runs)
        .buffer_unordered(16)
        .collect::<Vec<fluxio::Result<()>>>()
        .await
        .into_iter()
        .collect::<fluxio::Result<Vec<()>>>()?;
    let direct_time = started.elapsed();
    let mut direct_latency = Vec::new();
    for i in 0..30 {
        let called = Instant::now();
        direct
            .invoke(&format!("dl-{i}"), input(i)?)
            .await?
            .completed()?;
        let ran = take_started().ok_or("the stage ran")?;
        direct_latency.push(ran - called);
    }

    // through the queue
    let queued = build(&store, "queued", true)?;
    DONE.store(0, Ordering::SeqCst);
    let started = Instant::now();
    for i in 0..n {
        queued
            .enqueue(&format!("q-{i}"), input(i)?, Enqueue::new())
            .await?;
    }
    let enqueue_time = started.elapsed();
    let started = Instant::now();
    let worker = RecoveryWorker::builder()
        .pipeline(queued.clone())
        .concurrency(16)
        .due_poll(Duration::from_millis(20))
        .build()?
        .spawn()?;
    until_done(n).await?;
    let drain_time = started.elapsed();
    // idle now: one enqueue at a time
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut queue_latency = Vec::new();
    for i in 0..30 {
        take_started();
        let called = Instant::now();
        queued
            .enqueue(&format!("ql-{i}"), input(i)?, Enqueue::new())
            .await?;
        until_done(n + i + 1).await?;
        let ran = take_started().ok_or("the stage ran")?;
        queue_latency.push(ran - called);
    }
    worker.shutdown(Duration::from_secs(10)).await?;

    let rate = |d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    let (dl50, dl90) = spread(direct_latency);
    let (ql50, ql90) = spread(queue_latency);
    println!(
        "== {n} runs on {}: direct {:.0} runs/s; through a queue: enqueue {:.0}/s, drained \
         {:.0} runs/s ({:.2}x the direct time); start latency median {dl50:.2} ms direct, \
         {ql50:.1} ms queued (p90 {dl90:.2} / {ql90:.1} ms)",
        kind.name(),
        rate(direct_time),
        rate(enqueue_time),
        rate(drain_time),
        drain_time.as_secs_f64() / direct_time.as_secs_f64().max(1e-9),
    );
    if kind == StoreKind::Sqlite {
        let _ = std::fs::remove_file(std::path::Path::new(&url).join(format!("{ns}.db")));
    }
    Ok(())
}

use futures::StreamExt as _;
