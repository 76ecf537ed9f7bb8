//! The queue test's pipeline (contract rule 31): one stage, `mail`, that
//! writes `start RUN TENANT MICROS PID` to the ledger, works 20 ms, and
//! writes `end RUN TENANT MICROS PID`; its queue, `mail`, runs 3 at once
//! and 1 per tenant.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fluxio::queue::Queue;
use fluxio::{Context, PipelineBuilder, StageResult, pipeline, stage};

use crate::{SETTINGS, WorkerSettings, append_line};

/// Microseconds since the Unix epoch: the ledger's stamps.
#[must_use]
pub fn micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

fn stamp(what: &str, run: &str, tenant: &str) -> std::io::Result<()> {
    if let Some(path) = &SETTINGS.get_or_init(WorkerSettings::default).ledger {
        let line = format!("{what} {run} {tenant} {} {}", micros(), std::process::id());
        append_line(path, &line)?;
    }
    Ok(())
}

#[stage]
async fn mail(ctx: Context) -> StageResult {
    let tenant: String = ctx.get("tenant")?;
    let info = fluxio::StageInfo::current().ok_or("the stage runs inside a pipeline")?;
    let run = info.run_id.to_string();
    stamp("start", &run, &tenant)?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    stamp("end", &run, &tenant)?;
    Ok(ctx.set("sent", true)?)
}

/// The queue test's pipeline, `mail`, with its queue.
pub fn queue_pipeline() -> PipelineBuilder {
    pipeline![mail]
        .name(QUEUE_PIPELINE)
        .queue(Queue::new("mail").concurrency(3).per_key(1))
}

/// [`queue_pipeline`]'s name.
pub const QUEUE_PIPELINE: &str = "mail";
