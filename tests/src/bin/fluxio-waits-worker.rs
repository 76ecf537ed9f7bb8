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
