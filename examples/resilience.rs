//! Cache an expensive stage, rate-limit a call to a partner API, and stop
//! hammering a dead dependency with a circuit breaker.
//!
//! ```text
//! cargo run --example resilience
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use fluxio::middleware::{Cache, CircuitBreaker, MemoryCacheStore, RateLimit};
use fluxio::{Context, Error, StageResult, ctx, pipeline, stage};

static RENDERS: AtomicU32 = AtomicU32::new(0);

/// Expensive: cached by the stage's code and the context it is given.
#[stage]
async fn render(ctx: Context) -> StageResult {
    RENDERS.fetch_add(1, Ordering::SeqCst);
    let name: String = ctx.get("name")?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(ctx.set("page", format!("<h1>{name}</h1>"))?)
}

/// A partner API that allows 5 calls per second.
#[stage]
async fn notify(ctx: Context) -> StageResult {
    Ok(ctx.set("notified", true)?)
}

/// A dependency that is down.
#[stage]
async fn inventory(_ctx: Context) -> StageResult {
    Err("connection refused".into())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let p = pipeline![render, notify]
        .stage_middleware(
            "render",
            Cache::new(MemoryCacheStore::new(100)).ttl(Duration::from_secs(60)),
        )
        .stage_middleware("notify", RateLimit::per_second(5))
        .build()?;
    let started = Instant::now();
    for i in 0..10 {
        p.invoke(&format!("page-{i}"), ctx! { "name" => "Ada" }?)
            .await?
            .completed()?;
    }
    println!(
        "10 runs: render ran {} time(s) (the rest were cache hits); notify was spaced to 5/s: {:.1?}",
        RENDERS.load(Ordering::SeqCst),
        started.elapsed()
    );

    let breaker = CircuitBreaker::new(3).cool_down(Duration::from_secs(30));
    let q = pipeline![inventory]
        .stage_middleware("inventory", breaker)
        .build()?;
    for i in 1..=5 {
        match q.invoke(&format!("stock-{i}"), Context::new()).await {
            Err(Error::CircuitOpen { stage }) => {
                println!("call {i}: circuit open for `{stage}`: failed fast, not called")
            }
            Err(e) => println!("call {i}: {e}"),
            Ok(_) => println!("call {i}: ok"),
        }
    }
    Ok(())
}
