//! The worker process of the crash-test harness (`tests/tests/it/crash.rs`).
//!
//! `fluxio-crash-worker <redis|redis-cluster|postgres|sqlite> <url-or-dir> <namespace> <run-id> <invoke|resume> <lease-ms> <ledger-path> [sync|async|exit]`
//!
//! It prints `ready`, waits for a line on stdin, runs (or resumes) the crash
//! pipeline, and prints `ok <final context JSON>`, `in_use`, `lease_lost` or
//! `error <message>`. The harness kills it with SIGKILL at random moments.

use std::io::BufRead as _;
use std::time::Duration;

use fluxio::{Error, Outcome, ctx};
use fluxio_tests::{StoreKind, WorkerSettings, configure, crash_pipeline};

#[tokio::main]
async fn main() {
    let (line, code) = match run().await {
        Ok(out) => (
            format!(
                "ok {}",
                serde_json::to_string(&out.snapshot()).unwrap_or_default()
            ),
            0,
        ),
        Err(Error::RunIdInUse { .. }) => ("in_use".to_owned(), 10),
        Err(Error::LeaseLost { .. }) => ("lease_lost".to_owned(), 11),
        Err(e) => (format!("error {e}"), 1),
    };
    println!("{line}");
    std::process::exit(code);
}

async fn run() -> fluxio::Result<fluxio::Context> {
    let args: Vec<String> = std::env::args().collect();
    let usage = || Error::Build {
        message: format!(
            "usage: fluxio-crash-worker <kind> <url> <ns> <run-id> <invoke|resume> <lease-ms> <ledger> [durability]; got {args:?}"
        ),
    };
    if !(8..=9).contains(&args.len()) {
        return Err(usage());
    }
    let durability: fluxio::Durability = args.get(8).map_or("sync", String::as_str).parse()?;
    let kind = StoreKind::parse(&args[1]).ok_or_else(usage)?;
    let lease_ms: u64 = args[6].parse().map_err(|_| usage())?;
    configure(WorkerSettings {
        ledger: Some(args[7].clone()),
        hold: None,
    });
    let store = kind.open(&args[2], &args[3]).await?;
    let pipeline = crash_pipeline()
        .store_arc(store)
        .lease_ttl(Duration::from_millis(lease_ms))
        .durability(durability)
        .build()?;
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    match args[5].as_str() {
        "invoke" => pipeline
            .invoke(
                &args[4],
                ctx! { "seed" => 11u64, "route" => "x", "fail_first_attempt_of" => "c4" }?,
            )
            .await
            .and_then(Outcome::completed),
        "resume" => pipeline.resume(&args[4]).await.and_then(Outcome::completed),
        _ => Err(usage()),
    }
}
