//! What the SQL stores' benches share (feature `sql`): each criterion
//! group, written once and named by the bench (`sqlite_`, `pg_`, ...), over
//! a store and its [`RawTable`], the baseline of plain SQL on the store's
//! own pool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use fluxio_core::store::{Checkpoint, CheckpointStore, RunFilter, RunState};
use fluxio_core::{Context, Outcome, PipelineBuilder};
use tokio::runtime::Runtime;

use crate::journal;

/// The baselines past the store: a plain `(run_id, payload)` table in the
/// store's database, written and read with the store's own pool, and what
/// the store's journal holds.
#[async_trait::async_trait(?Send)]
pub trait RawTable {
    /// Creates the table if it is not there.
    async fn create(&self);
    /// `INSERT ... ON CONFLICT DO UPDATE` of `payload` under `run_id`.
    async fn upsert(&self, run_id: &str, payload: &[u8]);
    /// The payload of `run_id`.
    async fn read(&self, run_id: &str) -> Vec<u8>;
    /// How many steps the store's journal holds for the run `key`, and
    /// their bytes.
    async fn steps_written(&self, key: &str) -> (i64, i64);
}

/// Runs the groups `groups` adds to a criterion configured from the
/// command line, then prints criterion's summary.
pub fn criterion(groups: impl FnOnce(&mut Criterion)) {
    let mut c = Criterion::default().configure_from_args();
    groups(&mut c);
    c.final_summary();
}

/// The benches' runtime: two workers, as the machine's other tenants
/// leave.
///
/// # Panics
/// When it cannot be built.
#[must_use]
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A context of about `bytes` bytes: keys `key-NN` of 100-byte strings.
#[must_use]
pub fn context_of(bytes: usize) -> Context {
    let per_key = 100;
    (0..bytes / per_key).fold(Context::new(), |c, i| {
        c.set(format!("key-{i:02}"), "x".repeat(per_key))
            .expect("a string serializes")
    })
}

fn checkpoint(run_id: &str, ctx: &Context) -> Checkpoint {
    let mut cp = fluxio_core::store::conformance::checkpoint(run_id, 3);
    cp.context = ctx.snapshot();
    cp
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// `<group>/save_fenced` of a checkpoint with a ~1 KB context (encoding
/// included) against `<group>/raw_upsert` of the same, pre-encoded bytes;
/// `save` (no lease check) and `encode` to split the difference, and
/// `save_fenced_normal` on `normal` (another setting of the store) when
/// given. Then the two writes alternating, whose ratio is steadier on a
/// shared machine.
pub fn per_checkpoint<S: CheckpointStore>(
    c: &mut Criterion,
    rt: &Runtime,
    group: &str,
    (store, raw): (&S, &dyn RawTable),
    normal: Option<&S>,
) {
    rt.block_on(raw.create());
    let cp = checkpoint("bench", &context_of(1024));
    let bytes = cp.to_bytes().expect("encode");
    let lease = rt
        .block_on(store.acquire_lease("bench", Duration::from_secs(3600)))
        .expect("lease");
    let fenced = || {
        rt.block_on(store.save_fenced(cp.clone(), &lease))
            .expect("fenced save");
    };
    let upsert = || rt.block_on(raw.upsert("bench", &bytes));

    let mut g = c.benchmark_group(group);
    g.bench_function("save_fenced", |b| b.iter(fenced));
    g.bench_function("save", |b| {
        b.iter(|| rt.block_on(store.save(cp.clone())).expect("save"));
    });
    g.bench_function("encode", |b| {
        b.iter(|| cp.clone().to_bytes().expect("encode"));
    });
    g.bench_function("raw_upsert", |b| b.iter(upsert));
    if let Some(normal) = normal {
        g.bench_function("save_fenced_normal", |b| {
            b.iter(|| {
                rt.block_on(normal.save_fenced(cp.clone(), &lease))
                    .expect("fenced save");
            });
        });
    }
    g.finish();
    eprintln!(
        "{group}: checkpoint of {} bytes ({} context keys)",
        bytes.len(),
        cp.context.len()
    );

    // Criterion measures one function after the other; on a shared machine
    // the load changes in between. Alternating the two writes gives both the
    // same conditions, so their ratio is steadier.
    let rounds = 2000;
    let (mut fenced_times, mut raw_times) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        fenced();
        fenced_times.push(started.elapsed());
        let started = Instant::now();
        upsert();
        raw_times.push(started.elapsed());
    }
    let (fenced, raw) = (median(&mut fenced_times), median(&mut raw_times));
    eprintln!(
        "{group}, {rounds} alternating rounds: save_fenced median {fenced:?}, \
         raw_upsert median {raw:?}, ratio {:.2}",
        fenced.as_secs_f64() / raw.as_secs_f64()
    );
}

/// `<group>/{1,16,64}`: that many concurrent runs (distinct run ids) of the
/// durable pipeline `stages` (named `bench`, on `store`) on a 1 KB input;
/// criterion reports runs/s. Then 1 and 16 runs alternating, with the
/// commits they made when `commits` counts them.
pub fn throughput<S: CheckpointStore + Clone>(
    c: &mut Criterion,
    rt: &Runtime,
    group: &str,
    (store, stages): (&S, PipelineBuilder),
    commits: Option<&dyn Fn() -> u64>,
) {
    let p = stages
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
                done.expect("no panic")
                    .and_then(Outcome::completed)
                    .expect("the run completes");
            }
        });
    };

    let mut g = c.benchmark_group(group);
    for runs in [1u64, 16, 64] {
        g.throughput(Throughput::Elements(runs));
        g.bench_function(format!("{runs}"), |b| b.iter(|| batch(runs)));
    }
    g.finish();

    // As for the checkpoints: alternating 1 and 16 concurrent runs gives
    // each the same conditions; the commit counter says how many commits
    // the runs shared.
    let rounds = 30;
    let count = || commits.map_or(0, |commits| commits());
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut made = [0u64; 2];
    for _ in 0..rounds {
        for (i, runs) in [1u64, 16].into_iter().enumerate() {
            let before = count();
            let started = Instant::now();
            batch(runs);
            rates[i].push(runs as f64 / started.elapsed().as_secs_f64());
            made[i] += count() - before;
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (one, sixteen) = (median(&mut rates[0]), median(&mut rates[1]));
    let per_run = |i: usize, runs: f64| match commits {
        Some(_) => format!(
            " ({:.2} commits per run)",
            made[i] as f64 / (runs * f64::from(rounds))
        ),
        None => String::new(),
    };
    eprintln!(
        "{group}, {rounds} alternating rounds: 1 run {one:.0} runs/s{}, \
         16 concurrent runs {sixteen:.0} runs/s{}, ratio {:.2}",
        per_run(0, 1.0),
        per_run(1, 16.0),
        sixteen / one
    );
}

/// `<group>/journal`: a resume of a crashed 10-stage run whose context holds
/// 1 MB ([`journal::crashed_run`]): `load` plus the resume's first
/// checkpoint, an empty delta, `save_fenced`. Against
/// `<group>/blob_baseline`, what that cost before the journal: read the
/// run's 1 MB blob and write it back whole (raw SQL).
pub fn resume<S: CheckpointStore>(
    c: &mut Criterion,
    rt: &Runtime,
    group: &str,
    (store, raw): (&S, &dyn RawTable),
) {
    let mut run = journal::crashed_run();
    let mut crashed = run.pop().expect("a journal");
    crashed.earlier = run;
    let next = journal::resumed(&crashed);
    let blob = crashed.earlier[0].to_bytes().expect("encode");
    rt.block_on(async {
        store.save(crashed).await.expect("the crashed run");
        raw.create().await;
        raw.upsert("blob", &blob).await;
    });
    let lease = rt
        .block_on(store.acquire_lease(journal::KEY, Duration::from_secs(3600)))
        .expect("lease");

    let mut g = c.benchmark_group(group);
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
                let bytes = raw.read("blob").await;
                raw.upsert("blob", &bytes).await;
            });
        });
    });
    g.finish();
}

/// `<group>/durable_10_stages`: a whole durable run of `stages` (10 of
/// them, each setting one small key) on a 1 MB context, after printing the
/// steps and bytes a first run wrote (before the journal: 11 whole
/// checkpoints, about 11.5 MB).
pub fn run_1mb<S: CheckpointStore + Clone>(
    c: &mut Criterion,
    rt: &Runtime,
    group: &str,
    (store, raw): (&S, &dyn RawTable),
    stages: PipelineBuilder,
) {
    let p = stages
        .name("bench1mb")
        .store(store.clone())
        .build()
        .expect("valid");
    let input = Context::new()
        .set("blob", vec![7u8; journal::MB])
        .expect("1 MB");
    rt.block_on(p.invoke("once", input.clone()))
        .and_then(Outcome::completed)
        .expect("run");
    let (steps, bytes) = rt.block_on(raw.steps_written("bench1mb/once"));
    eprintln!("{group}: a 10-stage durable run wrote {steps} steps, {bytes} bytes");
    let mut g = c.benchmark_group(group);
    g.bench_function("durable_10_stages", |b| {
        b.iter(|| rt.block_on(p.invoke("run", input.clone())).expect("run"));
    });
    g.finish();
}

/// The runs the list benches fill their store with, and how many failed.
pub const LIST_RUNS: i64 = 100_000;
/// See [`LIST_RUNS`]: one in 2,000.
pub const LIST_FAILED: usize = 50;

/// Writes the two seed runs of the list benches through `store`, each with
/// a released lease as a worker leaves it: `orders/seed-done` (completed)
/// and `orders/seed-failed`. The bench copies their rows into
/// [`LIST_RUNS`] runs.
pub async fn list_seeds<S: CheckpointStore>(store: &S) {
    let checkpoint = fluxio_core::store::conformance::checkpoint;
    let done = checkpoint("seed-done", 3).in_pipeline("orders").completed();
    let failed = checkpoint("seed-failed", 3)
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
}

/// `<group>/{failed_100,first_page_100,unindexed_scan}`: `list_runs` of
/// the failed runs, of a first page, and of a filter no index covers (the
/// worst case), on `store` holding [`LIST_RUNS`] runs of `orders`; against
/// `<group>/count_baseline` (`count` counts the run table in plain SQL)
/// and `<group>/load_baseline` (a point lookup by key).
pub fn list<S, F, Fut>(c: &mut Criterion, rt: &Runtime, group: &str, store: &S, count: F)
where
    S: CheckpointStore,
    F: Fn() -> Fut,
    Fut: Future<Output = i64>,
{
    assert_eq!(rt.block_on(count()), LIST_RUNS);
    let failed = RunFilter::new()
        .pipeline("orders")
        .state(RunState::Failed)
        .limit(100);
    let page = rt.block_on(store.list_runs(&failed)).expect("list");
    assert_eq!((page.runs.len(), page.next), (LIST_FAILED, None));
    let first = RunFilter::new().pipeline("orders").limit(100);
    let page = rt.block_on(store.list_runs(&first)).expect("list");
    assert_eq!(page.runs.len(), 100);
    let mut unindexed = RunFilter::new().pipeline("orders");
    unindexed.updated_before_ms = Some(0);
    let page = rt.block_on(store.list_runs(&unindexed)).expect("list");
    assert!(page.runs.is_empty());

    let mut g = c.benchmark_group(group);
    for (name, filter) in [
        ("failed_100", &failed),
        ("first_page_100", &first),
        ("unindexed_scan", &unindexed),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| rt.block_on(store.list_runs(filter)).expect("list"));
        });
    }
    g.bench_function("count_baseline", |b| b.iter(|| rt.block_on(count())));
    g.bench_function("load_baseline", |b| {
        b.iter(|| {
            rt.block_on(store.load("orders/seed-failed"))
                .expect("load")
                .expect("stored")
        });
    });
    g.finish();
}

/// Steps in the run `console` (feature `console`) shows on its run page.
pub const CONSOLE_STEPS: u32 = 1_000;

/// `<group>/{runs_page_failed,runs_page_first,run_page_1000_steps,pipelines_page}`: the
/// web console's pages (rule 38) over `store` holding [`LIST_RUNS`] runs of
/// `orders` (see [`list`]), each beside the store call it is built on, in
/// the same run: `list_failed_50`, `list_first_50` (`list_runs` of the
/// page's filter), `count_runs` (of every run) and `history_1000` (`history` of a run of
/// [`CONSOLE_STEPS`] checkpoints, which this writes first).
#[cfg(feature = "console")]
pub fn console(
    c: &mut Criterion,
    rt: &Runtime,
    group: &str,
    store: std::sync::Arc<dyn CheckpointStore>,
) {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    let long = "orders/long-run";
    rt.block_on(async {
        // each step writes one key: a journal of deltas, as a run writes it
        // (under its lease)
        let lease = store
            .acquire_lease(long, Duration::from_secs(60))
            .await
            .expect("lease");
        let mut ctx = Context::new();
        for ip in 0..CONSOLE_STEPS {
            let before = ctx.snapshot();
            ctx = ctx.set(format!("key-{ip:04}"), ip).expect("set");
            let mut cp = crate::checkpoint("long-run", ip).in_pipeline("orders");
            cp.seq = ip;
            cp.context = ctx.snapshot();
            if ip > 0 {
                cp.change = fluxio_core::store::Change::between(&before, &cp.context);
            }
            store
                .save_fenced(cp, &lease)
                .await
                .expect("a step of the long run");
        }
        store.release_lease(lease).await.expect("released");
    });
    let kept = rt.block_on(store.history(long)).expect("history").len();
    assert_eq!(kept, CONSOLE_STEPS as usize, "the long run's journal");
    let app = fluxio_ui::Console::new(std::sync::Arc::clone(&store)).router();
    let get = |uri: &'static str| {
        let app = app.clone();
        async move {
            let response = app
                .oneshot(Request::get(uri).body(Body::empty()).expect("a request"))
                .await
                .expect("answered");
            assert_eq!(response.status(), StatusCode::OK, "{uri}");
            response
                .into_body()
                .collect()
                .await
                .expect("a body")
                .to_bytes()
                .len()
        }
    };
    let failed = RunFilter::new()
        .pipeline("orders")
        .state(RunState::Failed)
        .limit(50);
    let first = RunFilter::new().pipeline("orders").limit(50);
    let mut g = c.benchmark_group(group);
    g.bench_function("runs_page_failed", |b| {
        b.iter(|| rt.block_on(get("/?pipeline=orders&state=failed")));
    });
    g.bench_function("list_failed_50", |b| {
        b.iter(|| rt.block_on(store.list_runs(&failed)).expect("list"));
    });
    g.bench_function("runs_page_first", |b| {
        b.iter(|| rt.block_on(get("/?pipeline=orders")));
    });
    g.bench_function("list_first_50", |b| {
        b.iter(|| rt.block_on(store.list_runs(&first)).expect("list"));
    });
    g.bench_function("run_page_1000_steps", |b| {
        b.iter(|| rt.block_on(get("/runs/orders/long-run")));
    });
    g.bench_function("history_1000", |b| {
        b.iter(|| rt.block_on(store.history(long)).expect("history"));
    });
    g.bench_function("pipelines_page", |b| {
        b.iter(|| rt.block_on(get("/pipelines")));
    });
    g.bench_function("count_runs", |b| {
        b.iter(|| {
            rt.block_on(store.count_runs(&RunFilter::new()))
                .expect("count")
        });
    });
    g.finish();
}
