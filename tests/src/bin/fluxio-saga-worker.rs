//! The worker process of the compensation crash harness
//! (`tests/tests/it/crash_compensation.rs`, contract rule 35).
//!
//! `fluxio-saga-worker <kind> <url> <ns> <run-id> <start|resume> <lease-ms> <ledger>`
//!
//! It prints `ready`, waits for a line on stdin, starts (or resumes) the run
//! of the saga pipeline (`s1`, `s2`, `s3` with the compensators `u1`, `u2`,
//! `u3`, then `refuse`, which fails for good), and prints `ok` once the run
//! failed for good (compensated), `in_use`, or `error <message>`. Every
//! stage and compensator appends `<name> start <key> <pid>` to the ledger
//! when it starts and `<name> end <key> <pid>` when it ends, a few random
//! milliseconds later, so that the harness's SIGKILLs land inside them.

use std::io::{BufRead as _, Write as _};
use std::time::Duration;

use fluxio::{Context, Error, StageInfo, StageResult, TerminalError, pipeline, stage};
use fluxio_tests::StoreKind;

/// The ledger's path (set once, before the pipeline runs).
static LEDGER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn write(line: &str) {
    let Some(path) = LEDGER.get() else { return };
    // one `write` of the whole line to a file opened for appending
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// Notes the start, waits 0-19 ms (pseudo-random per call), notes the end.
async fn body(name: &str) {
    let key = StageInfo::current().map_or_else(String::new, |i| i.idempotency_key());
    let pid = std::process::id();
    write(&format!("{name} start {key} {pid}"));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    tokio::time::sleep(Duration::from_millis(u64::from(nanos % 20))).await;
    write(&format!("{name} end {key} {pid}"));
}

#[stage]
async fn u1(ctx: Context) -> StageResult {
    body("u1").await;
    Ok(ctx)
}

#[stage]
async fn u2(ctx: Context) -> StageResult {
    body("u2").await;
    Ok(ctx)
}

#[stage]
async fn u3(ctx: Context) -> StageResult {
    body("u3").await;
    Ok(ctx)
}

#[stage(compensate = u1)]
async fn s1(ctx: Context) -> StageResult {
    body("s1").await;
    Ok(ctx.set("s1", true)?)
}

#[stage(compensate = u2)]
async fn s2(ctx: Context) -> StageResult {
    body("s2").await;
    Ok(ctx.set("s2", true)?)
}

#[stage(compensate = u3)]
async fn s3(ctx: Context) -> StageResult {
    body("s3").await;
    Ok(ctx.set("s3", true)?)
}

#[stage]
async fn refuse(_ctx: Context) -> StageResult {
    body("refuse").await;
    Err(TerminalError::new("refused for good").into())
}

#[tokio::main]
async fn main() {
    let line = match run().await {
        Ok(()) => "ok".to_owned(),
        Err(Error::RunIdInUse { .. }) => "in_use".to_owned(),
        Err(e) => format!("error {e}"),
    };
    println!("{line}");
}

async fn run() -> fluxio::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = || Error::Build {
        message: format!(
            "usage: fluxio-saga-worker <kind> <url> <ns> <run-id> <start|resume> <lease-ms> <ledger>; got {args:?}"
        ),
    };
    if args.len() != 8 {
        return Err(usage());
    }
    let kind = StoreKind::parse(&args[1]).ok_or_else(usage)?;
    let lease_ms: u64 = args[6].parse().map_err(|_| usage())?;
    let _ = LEDGER.set(args[7].clone());
    let store = kind.open(&args[2], &args[3]).await?;
    let p = pipeline![s1, s2, s3, refuse]
        .name("sagas")
        .store_arc(store)
        .lease_ttl(Duration::from_millis(lease_ms))
        .build()?;
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let ended = match args[5].as_str() {
        "start" => p.start(&args[4], Context::new()).await.map(|_| ()),
        "resume" => p.resume(&args[4]).await.map(|_| ()),
        _ => return Err(usage()),
    };
    match ended {
        // the run failed for good: the first call gets the stage's error,
        // every later one `FailedForGood`
        Err(e) if e.is_terminal() => Ok(()),
        Ok(()) => Err(Error::Build {
            message: "the saga completed".to_owned(),
        }),
        Err(e) => Err(e),
    }
}
