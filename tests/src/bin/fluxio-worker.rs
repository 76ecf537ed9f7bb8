//! A worker process for the multi-process tests.
//!
//! `fluxio-worker <redis|postgres|sqlite> <url> <namespace> <run-id> <invoke|resume|start|drop> <lease-ms> <ledger-path> <stage=ms|->`
//!
//! It connects, prints `ready`, waits for a line on stdin (so a test can
//! start many workers at the same instant), runs the worker pipeline, and
//! prints one outcome line: `ok <final context as JSON>`, `in_use`,
//! `lease_lost`, `cancelled` (the run was cancelled, rule 14: by another
//! process while it ran, or before a resume) or `error <message>`, exiting
//! with 0, 10, 11, 12 or 1.
//!
//! `drop` (rule 15) invokes the run and drops it, mid-stage, when a second
//! line arrives on stdin; then it shuts the pipeline down (which gives the
//! dropped run's lease back), prints `released` and `ok {}`, and exits at
//! once, as a worker told to stop does.

use std::io::BufRead as _;
use std::time::Duration;

use fluxio::{Context, Error, Pipeline};
use fluxio_tests::{StoreKind, WorkerSettings, configure, worker_pipeline};

#[tokio::main]
async fn main() {
    let code = match run().await {
        Ok(out) => {
            println!(
                "ok {}",
                serde_json::to_string(&out.snapshot()).unwrap_or_default()
            );
            0
        }
        Err(Error::RunIdInUse { .. }) => {
            println!("in_use");
            10
        }
        Err(Error::LeaseLost { .. }) => {
            println!("lease_lost");
            11
        }
        Err(Error::Cancelled { .. }) => {
            println!("cancelled");
            12
        }
        Err(e) => {
            println!("error {e}");
            1
        }
    };
    std::process::exit(code);
}

async fn run() -> fluxio::Result<Context> {
    let args: Vec<String> = std::env::args().collect();
    let usage = || Error::Build {
        message: format!(
            "usage: fluxio-worker <redis|postgres|sqlite> <url> <ns> <run-id> <invoke|resume|start|drop> <lease-ms> <ledger> <stage=ms|->; got {args:?}"
        ),
    };
    if args.len() != 9 {
        return Err(usage());
    }
    let kind = StoreKind::parse(&args[1]).ok_or_else(usage)?;
    let lease_ms: u64 = args[6].parse().map_err(|_| usage())?;
    let hold = match args[8].split_once('=') {
        Some((stage, ms)) => Some((stage.to_owned(), ms.parse().map_err(|_| usage())?)),
        None => None,
    };
    configure(WorkerSettings {
        ledger: Some(args[7].clone()),
        hold,
    });
    let store = kind.open(&args[2], &args[3]).await?;
    let pipeline = worker_pipeline()
        .store_arc(store)
        .lease_ttl(Duration::from_millis(lease_ms))
        .build()?;
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    match args[5].as_str() {
        "invoke" => pipeline.invoke(&args[4], Context::new()).await,
        "resume" => pipeline.resume(&args[4]).await,
        "start" => pipeline.start(&args[4], Context::new()).await,
        "drop" => drop_and_shut_down(&pipeline, &args[4]).await,
        _ => Err(usage()),
    }
}

/// Invokes `run_id`, drops the run when a line arrives on stdin, and shuts
/// the pipeline down.
async fn drop_and_shut_down(pipeline: &Pipeline, run_id: &str) -> fluxio::Result<Context> {
    let (stop, stopped) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        let _ = stop.send(());
    });
    tokio::select! {
        out = pipeline.invoke(run_id, Context::new()) => {
            return Err(Error::Build {
                message: format!("the run ended before it was dropped: {out:?}"),
            });
        }
        _ = stopped => {} // the run's future is dropped here, mid-stage
    }
    pipeline.shutdown(Duration::from_secs(20)).await?;
    println!("released");
    Ok(Context::new())
}
