//! What a Redis Cluster costs the store, against one server in the same run.
//!
//! `cargo bench -p fluxio-redis --bench cluster -- --warm-up-time 1 --measurement-time 5`,
//! with Redis at `FLUXIO_REDIS_URL` (the baseline) and `redis-server` and
//! `redis-cli` installed (the bench starts a local three-master cluster:
//! `fluxio_test_support::redis::cluster`); skipped with a message otherwise.
//!
//! - `cluster_save_fenced/{single,cluster}`: one fenced save of a ~1 KB
//!   checkpoint, the same run each time.
//! - `cluster_pipeline_10_stages/{single,cluster}`: one durable run of ten
//!   no-op stages (runs/s).
//! - `cluster_list/{single,cluster}`: a page of 100 of 400 runs of 20
//!   pipelines, every pipeline (the cluster merges its 16 buckets), and
//!   `*_one_pipeline`: the 20 runs of one pipeline (one bucket).

mod common;

use std::time::Duration;

use criterion::{Criterion, Throughput};
use fluxio::store::{CheckpointStore, RunFilter};
use fluxio::{Context, Outcome, StageResult, pipeline, stage};
use fluxio_core::store::conformance;
use fluxio_redis::RedisStore;
use fluxio_test_support::bench::{context_1kb, timed};

#[stage]
async fn noop(ctx: Context) -> StageResult {
    Ok(ctx)
}

const TTL: Duration = Duration::from_secs(120);

fn main() {
    let prefix = format!("fx_bench_cluster_{}", std::process::id());
    let Some((rt, _, single)) = common::start(&prefix, TTL) else {
        return;
    };
    let Some(cluster) = fluxio_test_support::redis::cluster() else {
        return;
    };
    let clustered = rt
        .block_on(
            RedisStore::cluster_builder(cluster.nodes().iter().cloned())
                .key_prefix(&prefix)
                .completed_retention(Some(TTL))
                .connect(),
        )
        .expect("connect to the local cluster");
    let stores = [("single", &single), ("cluster", &clustered)];
    let mut c = Criterion::default().configure_from_args();

    let mut g = c.benchmark_group("cluster_save_fenced");
    for (name, store) in stores {
        let mut cp = conformance::checkpoint("saved", 3).in_pipeline("bench");
        cp.context = context_1kb().snapshot();
        let lease = rt
            .block_on(store.acquire_lease(&cp.key(), TTL))
            .expect("lease");
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                timed(&rt, iters, || async {
                    store.save_fenced(cp.clone(), &lease).await.expect("saved");
                })
            });
        });
        rt.block_on(store.release_lease(lease)).expect("release");
    }
    g.finish();

    let mut g = c.benchmark_group("cluster_pipeline_10_stages");
    g.throughput(Throughput::Elements(1));
    let input = Context::new().set("order", 42u64).expect("serializes");
    for (name, store) in stores {
        let p = pipeline![noop, noop, noop, noop, noop, noop, noop, noop, noop, noop]
            .name("bench")
            .store(store.clone())
            .build()
            .expect("valid");
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                timed(&rt, iters, || async {
                    p.invoke("run", input.clone())
                        .await
                        .and_then(Outcome::completed)
                        .expect("completes");
                })
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("cluster_list");
    for (name, store) in stores {
        rt.block_on(async {
            for p in 0..20 {
                for r in 0..20 {
                    let cp = conformance::checkpoint(&format!("r{r}"), 1)
                        .in_pipeline(format!("list{p}").as_str());
                    store.save(cp).await.expect("save");
                }
            }
        });
        let every = RunFilter::new().limit(100);
        let mut one = RunFilter::new().limit(100);
        one.pipeline = Some("list7".to_owned());
        for (label, filter) in [
            (name.to_owned(), every),
            (format!("{name}_one_pipeline"), one),
        ] {
            g.bench_function(label, |b| {
                b.iter_custom(|iters| {
                    timed(&rt, iters, || async {
                        let page = store.list_runs(&filter).await.expect("list");
                        assert!(!page.runs.is_empty());
                    })
                });
            });
        }
    }
    g.finish();
    c.final_summary();

    // the single server's keys; the cluster goes with the bench's process
    rt.block_on(async {
        if let Some(mut raw) = fluxio_test_support::redis::raw().await {
            fluxio_test_support::redis::cleanup(&mut raw, &prefix).await;
        }
    });
}
