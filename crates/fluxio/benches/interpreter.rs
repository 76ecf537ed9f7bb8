//! Interpreter overhead and checkpoint cost.
//!
//! `cargo bench -p fluxio --bench interpreter`
//!
//! - `per_stage/*`: ten no-op stages run by the interpreter (not durable)
//!   against a hand-written chain of the same ten async calls. The overhead
//!   per stage is `(pipeline - hand_written) / 10`.
//! - `per_stage/set_one_key_{hand_written_10,pipeline_10}_{string,vec_u8}`:
//!   ten stages that each set one small key (a 12-byte string or
//!   `Vec<u8>`) on a context of twelve keys, by a hand-written chain and by
//!   the interpreter; per stage is the time divided by 10. These stages
//!   never wait, so `#[stage]` runs them in place;
//!   `per_stage/set_one_key_pipeline_10_string_awaiting` is the same stage
//!   after an `.await`, whose future is boxed.
//! - `per_stage/pipeline_10_one_middleware`: the same with one pass-through
//!   middleware on every stage (a pipeline without middleware calls stages
//!   directly, so an empty chain costs nothing).
//! - `per_stage/pipeline_10_one_callback`: the same with one callback whose
//!   methods do nothing.
//! - `durable/*`: the same ten stages, durable on an `InMemoryStore`, with a
//!   1 KB and a 1 MB context: a checkpoint is O(1) in the context's size, so
//!   the two should be close.
//! - `durable/set_one_key_10_{sync,async,exit}`: ten stages each setting one
//!   key on a context of twelve, durable on an `InMemoryStore` in each
//!   durability mode; compare with `per_stage/set_one_key_pipeline_10_string`.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_main};
use fluxio::middleware::{Middleware, Next};
use fluxio::stage::Output;
use fluxio::{
    Context, Durability, InMemoryStore, Outcome, Pipeline, Stage, StageResult, StartOptions,
    pipeline, stage,
};
use fluxio_test_support::bench::keys;

#[stage]
async fn noop(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage]
async fn set_string(ctx: Context) -> StageResult {
    Ok(ctx.set("out", "a small text")?)
}

/// `set_string` after an `.await` (of a future that is ready): its future
/// is boxed, where `set_string`'s, which never waits, is run in place.
#[stage]
async fn set_string_awaiting(ctx: Context) -> StageResult {
    std::future::ready(()).await;
    Ok(ctx.set("out", "a small text")?)
}

#[stage]
async fn set_bytes(ctx: Context) -> StageResult {
    Ok(ctx.set("out", [7u8; 12].to_vec())?)
}

/// A middleware that only calls the rest of the chain.
#[derive(Debug)]
struct PassThrough;

#[async_trait::async_trait]
impl Middleware for PassThrough {
    async fn call(&self, _stage: &Stage, ctx: Context, next: Next<'_>) -> fluxio::Result<Output> {
        next.run(ctx).await
    }
}

/// A callback that keeps every default (no-op) method.
#[derive(Debug)]
struct NoOp;

impl fluxio::callback::Callback for NoOp {}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn context_of(bytes: usize) -> Context {
    // many keys, so a deep copy (if one happened) would show
    let per_key = 100;
    (0..bytes / per_key).fold(Context::new(), |c, i| {
        c.set(format!("key-{i:06}"), "x".repeat(per_key))
            .expect("a string serializes")
    })
}

/// Benchmarks `invoke` of `p` on a clone of `input`, one run an iteration.
fn bench_invoke(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &tokio::runtime::Runtime,
    name: impl Into<String>,
    p: &Pipeline,
    input: &Context,
) {
    g.bench_function(name, |b| {
        b.iter(|| {
            rt.block_on(async {
                black_box(
                    p.invoke("bench", black_box(input.clone()))
                        .await
                        .and_then(Outcome::completed)
                        .expect("runs"),
                )
            })
        });
    });
}

/// Benchmarks ten direct calls of `stage` in a row on a clone of `input`,
/// no interpreter: the hand-written chain a pipeline of ten is compared with.
fn bench_hand_written<F: Future<Output = StageResult>>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &tokio::runtime::Runtime,
    name: &str,
    input: &Context,
    stage: impl Fn(Context) -> F,
) {
    g.bench_function(name, |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut ctx = black_box(input.clone());
                for _ in 0..10 {
                    ctx = stage(ctx).await.expect("the stage runs");
                }
                black_box(ctx)
            })
        });
    });
}

/// `set_one_key_{hand_written,pipeline}_10_{kind}`: ten calls of `stage` on
/// a context of twelve keys, by hand and by `ten`, the pipeline of ten.
fn bench_set_one_key<F: Future<Output = StageResult>>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &tokio::runtime::Runtime,
    kind: &str,
    ten: &Pipeline,
    stage: impl Fn(Context) -> F,
) {
    let twelve = keys(12);
    let name = format!("set_one_key_hand_written_10_{kind}");
    bench_hand_written(g, rt, &name, &twelve, stage);
    bench_invoke(
        g,
        rt,
        format!("set_one_key_pipeline_10_{kind}"),
        ten,
        &twelve,
    );
}

fn per_stage(c: &mut Criterion) {
    let rt = runtime();
    let p = pipeline![noop, noop, noop, noop, noop, noop, noop, noop, noop, noop]
        .build()
        .expect("valid");
    let input = context_of(1024);
    let mut g = c.benchmark_group("per_stage");
    bench_hand_written(&mut g, &rt, "hand_written_10", &input, noop);
    let twelve = keys(12);
    let strings = pipeline![
        set_string, set_string, set_string, set_string, set_string, set_string, set_string,
        set_string, set_string, set_string
    ]
    .build()
    .expect("valid");
    let bytes = pipeline![
        set_bytes, set_bytes, set_bytes, set_bytes, set_bytes, set_bytes, set_bytes, set_bytes,
        set_bytes, set_bytes
    ]
    .build()
    .expect("valid");
    bench_set_one_key(&mut g, &rt, "string", &strings, set_string);
    let awaiting = pipeline![
        set_string_awaiting,
        set_string_awaiting,
        set_string_awaiting,
        set_string_awaiting,
        set_string_awaiting,
        set_string_awaiting,
        set_string_awaiting,
        set_string_awaiting,
        set_string_awaiting,
        set_string_awaiting
    ]
    .build()
    .expect("valid");
    bench_invoke(
        &mut g,
        &rt,
        "set_one_key_pipeline_10_string_awaiting",
        &awaiting,
        &twelve,
    );
    bench_set_one_key(&mut g, &rt, "vec_u8", &bytes, set_bytes);
    let with_mw = pipeline![noop, noop, noop, noop, noop, noop, noop, noop, noop, noop]
        .middleware(PassThrough)
        .build()
        .expect("valid");
    bench_invoke(&mut g, &rt, "pipeline_10_one_middleware", &with_mw, &input);
    let with_cb = pipeline![noop, noop, noop, noop, noop, noop, noop, noop, noop, noop]
        .callback(NoOp)
        .build()
        .expect("valid");
    bench_invoke(&mut g, &rt, "pipeline_10_one_callback", &with_cb, &input);
    bench_invoke(&mut g, &rt, "pipeline_10", &p, &input);
    g.finish();
}

fn durable(c: &mut Criterion) {
    let rt = runtime();
    let p = pipeline![noop, noop, noop, noop, noop, noop, noop, noop, noop, noop]
        .name("bench")
        .store(InMemoryStore::new())
        .build()
        .expect("valid");
    let mut g = c.benchmark_group("durable");
    for (name, size) in [("context_1kb", 1024), ("context_1mb", 1024 * 1024)] {
        let input = context_of(size);
        bench_invoke(&mut g, &rt, name, &p, &input);
    }
    // the realistic stage: ten stages each setting one key on twelve, in
    // each durability mode (rule 24); per durable stage is the time / 10
    let twelve = keys(12);
    for mode in [Durability::Sync, Durability::Async, Durability::Exit] {
        let p = pipeline![
            set_string, set_string, set_string, set_string, set_string, set_string, set_string,
            set_string, set_string, set_string
        ]
        .name("bench-set")
        .store(InMemoryStore::new())
        .durability(mode)
        .build()
        .expect("valid");
        bench_invoke(&mut g, &rt, format!("set_one_key_10_{mode}"), &p, &twelve);
        if mode == Durability::Sync {
            // rule 30: the same run with a deadline, checked before each
            // stage (the clock read once a run, then the monotonic clock)
            let within = StartOptions::new().deadline_in(Duration::from_secs(3600));
            g.bench_function("set_one_key_10_sync_deadline", |b| {
                b.iter(|| {
                    rt.block_on(async {
                        black_box(
                            p.invoke_with("bench", black_box(twelve.clone()), within.clone())
                                .await
                                .and_then(Outcome::completed)
                                .expect("runs"),
                        )
                    })
                });
            });
        }
    }
    g.finish();
}

mod group {
    #![allow(missing_docs)]
    use super::{durable, per_stage};
    criterion::criterion_group!(benches, per_stage, durable);
}

criterion_main!(group::benches);
