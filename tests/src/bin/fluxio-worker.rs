//! A worker process for the multi-process tests.
//!
//! `fluxio-worker <redis|redis-cluster|postgres|sqlite> <url> <namespace> <run-id> <invoke|resume|start|drop> <lease-ms> <ledger-path> <stage=ms|->`
//!
//! It connects, prints `ready`, waits for a line on stdin (so a test can
//! start many workers at the same instant), runs the worker pipeline, and
//! prints one outcome line: `ok <final context as JSON>`, `in_use`,
//! `lease_lost`, `cancelled` (the run was cancelled, rule 14: by another
//! process while it ran, or before a resume) or `error <message>`, exiting
//! with 0, 10, 11, 12 or 1.
//!
//! `abandon` (rule 22): `<run-id>` is `prefix:count`; it invokes `count`
//! runs `prefix-0`... at once (the test holds them in a stage and kills
//! the process with SIGKILL: a worker that died holding several runs).
//!
//! `recover` (rule 22): runs a recovery worker over the worker pipeline
//! (16 runs at a time, a sweep every 100 ms, no backoff) until a second
//! line arrives on stdin; then it shuts the worker and the pipeline down
//! and prints `ok {"recovered": n}`, `n` being the runs it resumed to
//! completion.
//!
//! `drop` (rule 15) invokes the run and drops it, mid-stage, when a second
//! line arrives on stdin; then it shuts the pipeline down (which gives the
//! dropped run's lease back), prints `released` and `ok {}`, and exits at
//! once, as a worker told to stop does.

use std::io::BufRead as _;
use std::time::Duration;

use fluxio::{Context, Error, Outcome, Pipeline};
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
            "usage: fluxio-worker <redis|redis-cluster|postgres|sqlite> <url> <ns> <run-id> <invoke|resume|start|drop> <lease-ms> <ledger> <stage=ms|->; got {args:?}"
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
        "invoke" => pipeline
            .invoke(&args[4], Context::new())
            .await
            .and_then(Outcome::completed),
        "resume" => pipeline.resume(&args[4]).await.and_then(Outcome::completed),
        "start" => pipeline
            .start(&args[4], Context::new())
            .await
            .and_then(Outcome::completed),
        "drop" => drop_and_shut_down(&pipeline, &args[4]).await,
        "abandon" => abandon(&pipeline, &args[4]).await,
        "recover" => recover(pipeline).await,
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

/// Invokes the runs `prefix-0`..`prefix-{count-1}` at once, until the
/// process is killed.
async fn abandon(pipeline: &Pipeline, spec: &str) -> fluxio::Result<Context> {
    let bad = || Error::Build {
        message: format!("abandon wants <prefix>:<count>, got {spec:?}"),
    };
    let (prefix, count) = spec.split_once(':').ok_or_else(bad)?;
    let count: usize = count.parse().map_err(|_| bad())?;
    let runs = (0..count).map(|i| {
        let pipeline = pipeline.clone();
        let id = format!("{prefix}-{i}");
        tokio::spawn(async move { pipeline.invoke(&id, Context::new()).await })
    });
    let runs: Vec<_> = runs.collect();
    for run in runs {
        let _ = run.await;
    }
    Err(Error::Build {
        message: "the runs ended before the process was killed".to_owned(),
    })
}

/// Runs a recovery worker until a line arrives on stdin.
async fn recover(pipeline: Pipeline) -> fluxio::Result<Context> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use fluxio::recovery::{RecoveryEvent, RecoveryPolicy, RecoveryWorker};

    let recovered = Arc::new(AtomicUsize::new(0));
    let handle = RecoveryWorker::builder()
        .pipeline(pipeline.clone())
        .concurrency(16)
        .interval(Duration::from_millis(100))
        .policy(RecoveryPolicy::new().backoff(Duration::ZERO, Duration::ZERO))
        .on_event({
            let recovered = Arc::clone(&recovered);
            move |e| {
                if let RecoveryEvent::Recovered { .. } = e {
                    recovered.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
        .build()?
        .spawn()?;
    let (stop, stopped) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        let _ = stop.send(());
    });
    let _ = stopped.await;
    handle.shutdown(Duration::from_secs(10)).await?;
    pipeline.shutdown(Duration::from_secs(10)).await?;
    Context::new().set("recovered", recovered.load(Ordering::SeqCst) as u64)
}
