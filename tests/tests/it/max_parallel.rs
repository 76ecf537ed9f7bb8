//! `PipelineBuilder::max_parallel` (the reference runtime's `max_workers`):
//! at most n branches of a parallel block run at once, durable or not.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fluxio::{Context, InMemoryStore, PipelineBuilder, StageResult, pipeline, stage};

static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);

async fn busy(ctx: Context, key: &str) -> StageResult {
    let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
    MOST.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(30)).await;
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    Ok(ctx.set(key, true)?)
}

#[stage(writes = ["a"])]
async fn a(ctx: Context) -> StageResult {
    busy(ctx, "a").await
}
#[stage(writes = ["b"])]
async fn b(ctx: Context) -> StageResult {
    busy(ctx, "b").await
}
#[stage(writes = ["c"])]
async fn c(ctx: Context) -> StageResult {
    busy(ctx, "c").await
}
#[stage(writes = ["d"])]
async fn d(ctx: Context) -> StageResult {
    busy(ctx, "d").await
}
#[stage(writes = ["e"])]
async fn e(ctx: Context) -> StageResult {
    busy(ctx, "e").await
}

fn shape() -> PipelineBuilder {
    pipeline![parallel![a, b, c, d, e]].name("wide")
}

async fn most_at_once(builder: PipelineBuilder) -> usize {
    MOST.store(0, Ordering::SeqCst);
    let p = builder.build().expect("builds");
    let done = p
        .invoke("w-1", Context::new())
        .await
        .expect("runs")
        .completed()
        .expect("completes");
    for key in ["a", "b", "c", "d", "e"] {
        assert!(done.get::<bool>(key).expect("every branch ran"), "{key}");
    }
    MOST.load(Ordering::SeqCst)
}

/// One test, so that the counters are not shared with another at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_parallel_bounds_the_branches_of_a_block_durable_or_not() {
    assert_eq!(
        most_at_once(shape()).await,
        5,
        "unbounded: all five at once"
    );
    assert_eq!(most_at_once(shape().max_parallel(2)).await, 2);
    assert_eq!(
        most_at_once(shape().max_parallel(2).store(InMemoryStore::new())).await,
        2,
        "a durable run's block too"
    );
    assert_eq!(
        most_at_once(shape().max_parallel(0)).await,
        1,
        "0 counts as 1"
    );
    let bounded = shape().max_parallel(2).build().expect("builds");
    let free = shape().build().expect("builds");
    assert_eq!(bounded.version(), free.version(), "not part of the version");
}
