//! A crash and a resume in two processes, on a shared store.
//!
//! The first process runs the pipeline and crashes (aborts) in the middle of
//! `enrich`. The second process, sharing the store, waits for the dead
//! worker's lease to lapse, resumes the run, and finishes it; `fetch`, which
//! finished before the crash, does not run again.

use std::sync::Arc;
use std::time::Duration;

use fluxio::store::CheckpointStore;
use fluxio::{Context, Error, PipelineBuilder, StageResult, ctx, pipeline, stage};

const CRASH_ENV: &str = "FLUXIO_DEMO_CRASH";

fn say(stage: &str) {
    println!("    [pid {}] ran {stage}", std::process::id());
}

#[stage]
async fn fetch(ctx: Context) -> StageResult {
    say("fetch");
    let id: u64 = ctx.get("order_id")?;
    Ok(ctx.set("items", vec![format!("sku-{id}-a"), format!("sku-{id}-b")])?)
}

#[stage]
async fn enrich(ctx: Context) -> StageResult {
    say("enrich");
    if std::env::var_os(CRASH_ENV).is_some() {
        println!(
            "    [pid {}] crashing in the middle of enrich",
            std::process::id()
        );
        std::process::abort();
    }
    let items: Vec<String> = ctx.get("items")?;
    Ok(ctx.set("weight_grams", 350 * items.len() as u64)?)
}

#[stage]
async fn publish(ctx: Context) -> StageResult {
    say("publish");
    let grams: u64 = ctx.get("weight_grams")?;
    Ok(ctx.set("label", format!("parcel of {grams} g"))?)
}

/// The demo's pipeline: fetch, enrich (crashes in the first process), publish.
pub fn demo_pipeline() -> PipelineBuilder {
    pipeline![fetch, enrich, publish]
}

/// Runs the demo: as the first process (spawning the crashing worker) or, with
/// `--worker <run-id>` on the command line, as that worker.
///
/// # Errors
/// A store or pipeline error.
pub async fn main(store: Arc<dyn CheckpointStore>, store_name: &str) -> anyhow::Result<()> {
    let lease = Duration::from_secs(2);
    let pipeline = demo_pipeline()
        .name("demo")
        .store_arc(store)
        .lease_ttl(lease)
        .build()?;
    let args: Vec<String> = std::env::args().collect();
    if let (Some("--worker"), Some(run_id)) = (args.get(1).map(String::as_str), args.get(2)) {
        pipeline
            .invoke(run_id, ctx! { "order_id" => 42u64 }?)
            .await?
            .completed()?;
        return Ok(());
    }

    let run_id = format!("demo-{}", std::process::id());
    println!(
        "pipeline version {} on {store_name}, run `{run_id}`\n",
        pipeline.version()
    );
    println!("1. a worker process starts the run and crashes:");
    let status = std::process::Command::new(std::env::current_exe()?)
        .args(["--worker", &run_id])
        .env(CRASH_ENV, "1")
        .status()?;
    println!("    worker exited: {status}\n");

    println!(
        "2. this process (pid {}) resumes it from the shared store:",
        std::process::id()
    );
    let out = loop {
        match pipeline.resume(&run_id).await {
            Err(Error::RunIdInUse { .. }) => {
                println!("    the dead worker's lease has not lapsed yet; waiting");
                tokio::time::sleep(lease / 2).await;
            }
            other => break other?.completed()?,
        }
    };
    println!("    -> {}", out.get::<String>("label")?);
    println!("\n`fetch` ran once, in the worker; `enrich` ran in both processes; `publish` here.");
    Ok(())
}
