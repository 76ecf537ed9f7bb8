//! The worker process of the waits crash harness (`tests/tests/it/crash_waits.rs`).
//!
//! `fluxio-waits-worker <kind> <url-or-dir> <namespace> <run-id> <start|work> <lease-ms> <ledger-path>`
//!
//! It prints `ready` and waits for a line on stdin. `start` starts the run
//! (`Pipeline::start`, idempotent) and prints `parked <status>` when it
//! sleeps or waits, `ok <final context JSON>` when it completes. `work` runs
//! a `RecoveryWorker` of the pipeline (due runs every 20 ms, abandoned ones
//! every 50 ms, no backoff) until the run completes, then prints `ok ...`.
//! Failures print `error <message>`. The harness kills it with SIGKILL at
//! random moments.
//!
//! `family-start` and `family-work` do the same for the child-run test's
//! parent (`fluxio_tests::family`): `family-start` starts the parent on a
//! store that stops the process (`child-stored`) between storing the child
//! and recording it; `family-work` runs a worker of the parent and the
//! child until the parent completes. `ticks-work` runs a worker of the
//! schedule test's pipeline (`fluxio_tests::family::ticks_pipeline`) until
//! it is killed; `queue-work` does the same with the queue test's
//! pipeline (`fluxio_tests::queues::queue_pipeline`).

use std::io::BufRead as _;
use std::time::Duration;

use fluxio::recovery::{RecoveryPolicy, RecoveryWorker};
use fluxio::{Error, Outcome, RunStatus, ctx};
use fluxio_tests::{StoreKind, WorkerSettings, configure, waits_pipeline};

#[tokio::main]
async fn main() {
    let line = match run().await {
        Ok(line) => line,
        Err(Error::RunIdInUse { .. }) => "in_use".to_owned(),
        Err(e) => format!("error {e}"),
    };
    println!("{line}");
}

async fn run() -> fluxio::Result<String> {
    let args: Vec<String> = std::env::args().collect();
    let usage = || Error::Build {
        message: format!(
            "usage: fluxio-waits-worker <kind> <url> <ns> <run-id> <start|work> <lease-ms> <ledger>; got {args:?}"
        ),
    };
    if args.len() != 8 {
        return Err(usage());
    }
    let kind = StoreKind::parse(&args[1]).ok_or_else(usage)?;
    let lease_ms: u64 = args[6].parse().map_err(|_| usage())?;
    configure(WorkerSettings {
        ledger: Some(args[7].clone()),
        hold: None,
    });
    let store = kind.open(&args[2], &args[3]).await?;
    if let Some(mode) = args[5].strip_prefix("family-") {
        return family(mode, store, &args[4], lease_ms).await;
    }
    if args[5] == "ticks-work" {
        return ticks(store, lease_ms, fluxio_tests::family::ticks_pipeline()).await;
    }
    if args[5] == "queue-work" {
        return ticks(store, lease_ms, fluxio_tests::queues::queue_pipeline()).await;
    }
    let pipeline = waits_pipeline()
        .store_arc(store)
        .lease_ttl(Duration::from_millis(lease_ms))
        .build()?;
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let run_id = &args[4];
    let done = |ctx: fluxio::Context| {
        format!(
            "ok {}",
            serde_json::to_string(&ctx.snapshot()).unwrap_or_default()
        )
    };
    match args[5].as_str() {
        "start" => Ok(
            match pipeline.start(run_id, ctx! { "seed" => 11u64 }?).await? {
                Outcome::Completed(ctx) => done(ctx),
                Outcome::Sleeping { .. } => "parked sleeping".to_owned(),
                Outcome::Waiting { .. } => "parked waiting".to_owned(),
                other => format!("error unexpected {other:?}"),
            },
        ),
        "work" => {
            let worker = RecoveryWorker::builder()
                .pipeline(pipeline.clone())
                .due_poll(Duration::from_millis(20))
                .interval(Duration::from_millis(50))
                .policy(
                    RecoveryPolicy::new()
                        .max_attempts(1_000)
                        .backoff(Duration::ZERO, Duration::ZERO),
                )
                .build()?
                .spawn()?;
            let ended = pipeline.wait_for(run_id, Duration::from_secs(60)).await?;
            worker.shutdown(Duration::from_secs(5)).await?;
            Ok(match ended {
                Some(cp) if cp.status == RunStatus::Completed => done(cp.context.to_context()),
                Some(cp) => format!("error the run ended {:?}", cp.status),
                None => "error the run did not end in 60 s".to_owned(),
            })
        }
        _ => Err(usage()),
    }
}

/// The child-run test's modes: `start` the parent (stopping before it
/// records its child), or `work` on it and its child until it completes.
async fn family(
    mode: &str,
    store: std::sync::Arc<dyn fluxio::CheckpointStore>,
    run_id: &str,
    lease_ms: u64,
) -> fluxio::Result<String> {
    use fluxio_tests::family::{StopBeforePark, family_child, family_parent};
    let store = if mode == "start" {
        std::sync::Arc::new(StopBeforePark { inner: store })
    } else {
        store
    };
    let lease = Duration::from_millis(lease_ms);
    let child = family_child()
        .store_arc(store.clone())
        .lease_ttl(lease)
        .build()?;
    let parent = family_parent(child.clone())
        .store_arc(store)
        .lease_ttl(lease)
        .build()?;
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    if mode == "start" {
        let out = parent.start(run_id, ctx! { "seed" => 5u64 }?).await?;
        return Ok(format!("error the parent did not stop: {out:?}"));
    }
    let worker = RecoveryWorker::builder()
        .pipeline(parent.clone())
        .pipeline(child)
        .due_poll(Duration::from_millis(20))
        .interval(Duration::from_millis(50))
        .policy(RecoveryPolicy::new().backoff(Duration::ZERO, Duration::ZERO))
        .build()?
        .spawn()?;
    let ended = parent.wait_for(run_id, Duration::from_secs(60)).await?;
    worker.shutdown(Duration::from_secs(5)).await?;
    Ok(match ended {
        Some(cp) if cp.status == RunStatus::Completed => format!(
            "ok {}",
            serde_json::to_string(&cp.context).unwrap_or_default()
        ),
        Some(cp) => format!("error the run ended {:?}", cp.status),
        None => "error the run did not end in 60 s".to_owned(),
    })
}

/// The schedule test's worker: fires the pipeline's schedules and runs
/// their runs until the process is killed.
async fn ticks(
    store: std::sync::Arc<dyn fluxio::CheckpointStore>,
    lease_ms: u64,
    pipeline: fluxio::PipelineBuilder,
) -> fluxio::Result<String> {
    let pipeline = pipeline
        .store_arc(store)
        .lease_ttl(Duration::from_millis(lease_ms))
        .build()?;
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let _worker = RecoveryWorker::builder()
        .pipeline(pipeline)
        .due_poll(Duration::from_millis(50))
        .interval(Duration::from_millis(200))
        .policy(RecoveryPolicy::new().backoff(Duration::ZERO, Duration::ZERO))
        .build()?
        .spawn()?;
    println!("working");
    std::future::pending::<()>().await;
    Ok("ok".to_owned())
}
