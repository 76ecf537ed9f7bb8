//! Structured logs and traces: a span per run (`fluxio.run`: run_id, version)
//! and per stage (`fluxio.stage`: run_id, stage, ip, attempt), plus a callback
//! that reports step timings.
//!
//! ```text
//! cargo run --example tracing
//! ```
//!
//! Point the same spans at any OpenTelemetry backend (Jaeger, Tempo, Langfuse)
//! by adding a `tracing-opentelemetry` layer to the subscriber.

use std::time::Duration;

use fluxio::callback::{Callback, CallbackResult, StepEvent};
use fluxio::{Context, InMemoryStore, StageResult, ctx, pipeline, stage};
use tracing_subscriber::fmt::format::FmtSpan;

#[stage]
async fn load(ctx: Context) -> StageResult {
    tracing::info!("loading the user");
    Ok(ctx.set("name", "Ada")?)
}

#[stage]
async fn greet(ctx: Context) -> StageResult {
    let name: String = ctx.get("name")?;
    tracing::info!(%name, "greeting");
    Ok(ctx.set("greeting", format!("hello, {name}"))?)
}

/// Prints every step's duration.
#[derive(Debug)]
struct Timings;

impl Callback for Timings {
    fn on_step_end(
        &self,
        step: &StepEvent<'_>,
        took: Duration,
        error: Option<&fluxio::Error>,
    ) -> CallbackResult {
        println!(
            "callback: {} took {took:?}{}",
            step.stage,
            if error.is_some() { " and failed" } else { "" }
        );
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_span_events(FmtSpan::CLOSE)
        .with_target(false)
        .init();
    let p = pipeline![load, greet]
        .name("greetings")
        .store(InMemoryStore::new())
        .callback(Timings)
        .build()?;
    let out = p
        .invoke("traced-run", ctx! { "user_id" => 1u64 }?)
        .await?
        .completed()?;
    println!("{}", out.get::<String>("greeting")?);
    Ok(())
}
