//! A schedule (contract rule 32) fired by two worker processes on one
//! SQLite file: every tick starts exactly one run.
//!
//! The schedule is a cron pattern with seconds (`*/2 * * * * *`: every two
//! seconds) in the `Europe/Paris` time zone; in production it would say
//! `0 9 * * MON-FRI`. This process stores it and spawns two worker
//! processes of the pipeline; each claims the schedule when it is due (one
//! of them, whichever asks first), starts the tick's run, and runs runs.
//! After ten seconds the schedule is paused, the runs finish, and the
//! example checks its claims: one run per tick, each id derived from its
//! tick, each run's stage run once (a ledger file outside the store), and
//! nothing skipped. It exits with an error if one fails.
//!
//! ```text
//! cargo run --example schedules
//! ```

use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use fluxio::recovery::RecoveryWorker;
use fluxio::schedule::{Overlap, Schedule};
use fluxio::store::{CheckpointStore, RunFilter, RunState};
use fluxio::{Context, Pipeline, SqliteStore, StageResult, pipeline, stage};

#[stage]
async fn send_report(ctx: Context) -> StageResult {
    let info = fluxio::StageInfo::current().ok_or("a stage runs in a pipeline")?;
    let ledger: String = ctx.get("ledger")?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)?;
    file.write_all(format!("{} {}\n", info.run_id, std::process::id()).as_bytes())?;
    println!(
        "    [pid {}] sent the report of {}",
        std::process::id(),
        info.run_id
    );
    Ok(ctx.set("sent", true)?)
}

fn reports(store: SqliteStore) -> anyhow::Result<Pipeline> {
    Ok(pipeline![send_report]
        .name("reports")
        .store(store)
        .build()?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let (Some("--worker"), Some(path)) = (args.get(1).map(String::as_str), args.get(2)) {
        // a worker process: fires the schedule and runs the runs, until killed
        let pipeline = reports(SqliteStore::connect(path).await?)?;
        let _worker = RecoveryWorker::builder()
            .pipeline(pipeline)
            .due_poll(Duration::from_millis(100))
            .build()?
            .spawn()?;
        std::future::pending::<()>().await;
    }

    let dir = std::env::temp_dir().join(format!("fluxio-schedules-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("reports.db");
    let path = path.to_str().context("a UTF-8 temp path")?.to_owned();
    let ledger = dir.join("ledger").to_string_lossy().into_owned();
    let store = SqliteStore::connect(&path).await?;
    let pipeline = reports(SqliteStore::connect(&path).await?)?;

    println!("1. a schedule every two seconds, in Europe/Paris, is stored:");
    let every_two = Schedule::cron("*/2 * * * * *", "Europe/Paris")?
        .input(&Context::new().set("ledger", &ledger)?)
        .overlap(Overlap::Skip);
    let info = pipeline.schedule("every-two-seconds", every_two).await?;
    println!(
        "    {} {} (next tick {:?} ms)",
        info.pipeline, info.every, info.next_ms
    );

    println!("2. two worker processes fire it for ten seconds:");
    let spawn = || {
        std::process::Command::new(std::env::current_exe()?)
            .args(["--worker", &path])
            .spawn()
    };
    let mut workers = vec![spawn()?, spawn()?];
    tokio::time::sleep(Duration::from_secs(10)).await;
    pipeline.pause_schedule("every-two-seconds").await?;
    // the runs started so far finish
    let runs = loop {
        let page = store
            .list_runs(&RunFilter::new().pipeline("reports"))
            .await?;
        if page.runs.iter().all(|r| r.state == RunState::Completed) {
            break page.runs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for worker in &mut workers {
        worker.kill()?;
        worker.wait()?;
    }

    println!("3. what the store and the ledger say:");
    let info = pipeline
        .schedules()
        .await?
        .pop()
        .context("the schedule is stored")?;
    let lines = std::fs::read_to_string(&ledger).unwrap_or_default();
    let ran: Vec<&str> = lines.lines().filter_map(|l| l.split(' ').next()).collect();
    let mut ids: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
    ids.sort_unstable();
    let mut unique = ran.clone();
    unique.sort_unstable();
    unique.dedup();
    println!(
        "    {} ticks started {} runs ({} skipped); the ledger shows {} stage calls",
        info.fired,
        runs.len(),
        info.skipped,
        ran.len()
    );
    ensure!(runs.len() >= 4, "a tick every two seconds for ten seconds");
    ensure!(
        info.fired as usize == runs.len(),
        "one run per tick started"
    );
    ensure!(info.skipped == 0, "no tick skipped");
    ensure!(
        ids.iter().all(|id| id.starts_with("every-two-seconds:")),
        "each run's id is derived from its tick: {ids:?}"
    );
    ensure!(
        ran.len() == runs.len() && unique.len() == ran.len(),
        "each run's stage ran once"
    );
    println!("    every claim holds: each tick ran exactly once across two processes");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
