//! Contract rule 24: what folding a run's first and last round trips
//! (`begin_run`, `finish_run`) buys, at one concurrent run.
//!
//! `cargo bench -p fluxio-redis --bench trips -- --warm-up-time 1 --measurement-time 5`,
//! with Redis at `FLUXIO_REDIS_URL` (see `fluxio_test_support::redis`);
//! skipped with a message when it is unreachable.
//!
//! - `store_10_stages/*`: the store calls of one durable run of ten stages
//!   each setting one key, one run at a time: `begin_run`, nine
//!   `save_fenced`, `finish_run`. `native` is the RedisStore's (11 round
//!   trips); `default_calls` the same RedisStore behind a wrapper that
//!   keeps the trait's default `begin_run` and `finish_run`, the calls one
//!   by one (acquire, delete, fenced save; nine fenced saves; fenced
//!   save, release: 14 round trips; 15 while `acquire_lease` took two). The ratio `native / default_calls` in runs/s is printed from
//!   interleaved rounds in the summary.
//! - `pipeline_10_stages/*`: `Pipeline::invoke` of ten stages each setting
//!   one key on the same two stores.
//! - `durability_10_stages/{sync,async,exit}`: `Pipeline::invoke` of the
//!   same ten stages on the native store in each durability mode; the
//!   summary prints `async / sync` and `exit / sync` in runs/s from
//!   interleaved rounds.

mod common;

use std::time::{Duration, Instant};

use criterion::Criterion;
use fluxio::store::{Change, Checkpoint, CheckpointStore};
use fluxio::{Context, Durability, Outcome, Pipeline, StageResult, pipeline, stage};
use fluxio_test_support::bench::timed;
use fluxio_test_support::counted::Counted;
use fluxio_test_support::runs::drive;

const TTL: Duration = Duration::from_secs(120);

#[stage]
async fn count_up(ctx: Context) -> StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?)
}

/// The eleven checkpoints of a 10-stage run of `run`: a whole one, then a
/// delta per stage setting one key; the last one completed.
fn journal(run: &str) -> Vec<Checkpoint> {
    let mut ctx = Context::new().set("order", 42u64).expect("serializes");
    let mut out = Vec::new();
    for seq in 0..=10u32 {
        let before = ctx.clone();
        if seq > 0 {
            ctx = ctx.set("n", u64::from(seq)).expect("serializes");
        }
        let mut cp = Checkpoint::new(run, "0123456789ab", seq, "count_up", ctx.snapshot())
            .in_pipeline("trips");
        cp.seq = seq;
        if seq > 0 {
            cp.change = Change::between(&before.snapshot(), &ctx.snapshot());
        }
        out.push(cp);
    }
    if let Some(last) = out.last_mut() {
        last.status = fluxio::store::RunStatus::Completed;
    }
    out
}

fn pipeline_on(store: impl CheckpointStore) -> Pipeline {
    pipeline_in(store, Durability::Sync)
}

fn pipeline_in(store: impl CheckpointStore, mode: Durability) -> Pipeline {
    pipeline![
        count_up, count_up, count_up, count_up, count_up, count_up, count_up, count_up, count_up,
        count_up
    ]
    .name("trips")
    .store(store)
    .durability(mode)
    .build()
    .expect("valid")
}

/// Runs/s of `a` and `b` from interleaved rounds (which goes first
/// alternating), so that load from other processes hits both alike.
fn interleaved<A, B, FA, FB>(rt: &tokio::runtime::Runtime, mut a: A, mut b: B) -> (f64, f64)
where
    A: FnMut() -> FA,
    B: FnMut() -> FB,
    FA: Future<Output = ()>,
    FB: Future<Output = ()>,
{
    let (mut ta, mut tb, mut n) = (Duration::ZERO, Duration::ZERO, 0u32);
    rt.block_on(async {
        for round in 0..400 {
            for a_first in [round % 2 == 0, round % 2 == 1] {
                let start = Instant::now();
                if a_first {
                    a().await;
                    ta += start.elapsed();
                } else {
                    b().await;
                    tb += start.elapsed();
                }
            }
            n += 1;
        }
    });
    (
        f64::from(n) / ta.as_secs_f64(),
        f64::from(n) / tb.as_secs_f64(),
    )
}

/// [`interleaved`] runs of the pipelines `a` and `b`: their runs/s.
fn interleaved_runs(rt: &tokio::runtime::Runtime, a: &Pipeline, b: &Pipeline) -> (f64, f64) {
    interleaved(rt, || run_once(a), || run_once(b))
}

/// One run of `p`, to its end.
async fn run_once(p: &Pipeline) {
    p.invoke("run", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
}

fn main() {
    let prefix = format!("fx_bench_trips_{}", std::process::id());
    let Some((rt, url, native)) = common::start(&format!("{prefix}_n"), TTL) else {
        return;
    };
    let defaults = Counted::stepwise(
        common::connect(&rt, &url, &format!("{prefix}_d"), TTL).expect("connect"),
    );
    let j = journal("run");

    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("store_10_stages");
    g.bench_function("native", |b| {
        b.iter_custom(|iters| timed(&rt, iters, || drive(&native, &j)));
    });
    g.bench_function("default_calls", |b| {
        b.iter_custom(|iters| timed(&rt, iters, || drive(&defaults, &j)));
    });
    g.finish();

    let p_native = pipeline_on(native.clone());
    let p_default = pipeline_on(Counted::stepwise(defaults.inner.clone()));
    let mut g = c.benchmark_group("pipeline_10_stages");
    for (name, p) in [("native", &p_native), ("default_calls", &p_default)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| timed(&rt, iters, || run_once(p)));
        });
    }
    g.finish();

    let modes = [Durability::Sync, Durability::Async, Durability::Exit]
        .map(|mode| (mode, pipeline_in(native.clone(), mode)));
    let mut g = c.benchmark_group("durability_10_stages");
    for (mode, p) in &modes {
        g.bench_function(mode.as_str(), |b| {
            b.iter_custom(|iters| timed(&rt, iters, || run_once(p)));
        });
    }
    g.finish();
    c.final_summary();

    let (n, d) = interleaved(&rt, || drive(&native, &j), || drive(&defaults, &j));
    println!(
        "\nsummary (1 concurrent run, 400 interleaved rounds):\n  store calls of a \
         10-stage run: native {n:.0} runs/s, default calls {d:.0} runs/s, ratio {:.2}",
        n / d
    );
    let (n, d) = interleaved_runs(&rt, &p_native, &p_default);
    println!(
        "  Pipeline::invoke of 10 stages: native {n:.0} runs/s, default calls {d:.0} runs/s, \
         ratio {:.2}",
        n / d
    );
    for (mode, p) in &modes[1..] {
        let sync = &modes[0].1;
        let (m, s) = interleaved_runs(&rt, p, sync);
        println!(
            "  Pipeline::invoke of 10 stages, {mode} against sync: {m:.0} against {s:.0} runs/s, \
             ratio {:.2}",
            m / s
        );
    }
    rt.block_on(async {
        let Ok(client) = redis::Client::open(url.as_str()) else {
            return;
        };
        let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
            return;
        };
        for p in [format!("{prefix}_n"), format!("{prefix}_d")] {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{p}*"))
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            if !keys.is_empty() {
                let _ = redis::cmd("DEL")
                    .arg(keys)
                    .query_async::<()>(&mut conn)
                    .await;
            }
        }
    });
}
