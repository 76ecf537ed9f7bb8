//! Middleware: retry a flaky stage with exponential backoff and jitter, and
//! bound every stage with a timeout.
//!
//! ```text
//! cargo run --example middleware
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fluxio::middleware::{Backoff, Retry, Timeout};
use fluxio::{Context, StageResult, ctx, pipeline, stage};

static CALLS: AtomicU32 = AtomicU32::new(0);

#[derive(Debug, thiserror::Error)]
#[error("the exchange-rate service answered 503")]
struct Unavailable;

/// Fails twice, then answers.
#[stage]
async fn fetch_rate(ctx: Context) -> StageResult {
    let call = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    println!("fetch_rate: call {call}");
    if call < 3 {
        return Err(Box::new(Unavailable));
    }
    Ok(ctx.set("eur_usd", 1.08)?)
}

#[stage]
async fn convert(ctx: Context) -> StageResult {
    let (rate, eur): (f64, f64) = (ctx.get("eur_usd")?, ctx.get("eur")?);
    Ok(ctx.set("usd", (eur * rate * 100.0).round() / 100.0)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let retry = Retry::new(5)
        .backoff(Backoff::Exponential {
            initial: Duration::from_millis(50),
            factor: 2.0,
            max: Duration::from_secs(1),
        })
        .jitter(true)
        .retry_if(|e| e.stage_error::<Unavailable>().is_some());
    let p = pipeline![fetch_rate, convert]
        .stage_middleware("fetch_rate", retry)
        .middleware(Timeout(Duration::from_secs(5)))
        .build()?;
    let out = p
        .invoke("convert-1", ctx! { "eur" => 20.0 }?)
        .await?
        .completed()?;
    println!(
        "20 EUR = {} USD after {} calls of fetch_rate",
        out.get::<f64>("usd")?,
        CALLS.load(Ordering::SeqCst)
    );
    Ok(())
}
