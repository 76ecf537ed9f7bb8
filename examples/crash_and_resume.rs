//! The main example: a worker process is killed with SIGKILL in the middle of
//! a stage, and a second process resumes the run from the checkpoint on disk.
//!
//! ```text
//! cargo run --example crash_and_resume
//! ```
//!
//! Nothing to install: the checkpoints live in an embedded SQLite file.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use fluxio::{
    Context, InMemoryStore, PipelineBuilder, SqliteStore, StageInfo, StageResult, ctx, pipeline,
    stage,
};

const LEASE: Duration = Duration::from_secs(1);

fn announce(stage: &str) {
    let attempt = StageInfo::current().map_or(1, |i| i.attempt);
    let again = if attempt > 1 {
        format!(" (attempt {attempt})")
    } else {
        String::new()
    };
    println!("    [pid {}] {stage}{again}", std::process::id());
}

#[stage]
async fn fetch_orders(ctx: Context) -> StageResult {
    announce("fetch_orders");
    let day: String = ctx.get("day")?;
    Ok(ctx
        .set("orders", vec![1250u64, 990, 4100, 310])?
        .set("title", format!("sales on {day}"))?)
}

#[stage]
fn total(ctx: Context) -> StageResult {
    announce("total");
    let orders: Vec<u64> = ctx.get("orders")?;
    Ok(ctx.set("total_cents", orders.iter().sum::<u64>())?)
}

#[stage]
async fn render(ctx: Context) -> StageResult {
    announce("render");
    if std::env::var_os("DEMO_SLOW_RENDER").is_some() {
        // the first worker is killed while it waits here
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    let (title, cents): (String, u64) = (ctx.get("title")?, ctx.get("total_cents")?);
    Ok(ctx.set(
        "report",
        format!("{title}: ${}.{:02}", cents / 100, cents % 100),
    )?)
}

#[stage]
async fn publish(ctx: Context) -> StageResult {
    announce("publish");
    let report: String = ctx.get("report")?;
    Ok(ctx.set("published", format!("/reports/{}.txt", report.len()))?)
}

fn report_pipeline() -> PipelineBuilder {
    pipeline![fetch_orders, total, render, publish]
}

fn input() -> fluxio::Result<Context> {
    ctx! { "day" => "2026-11-29" }
}

/// `--worker <db> <run-id> <invoke|resume>`: one worker process.
/// The pipeline's name: the store keeps its runs under `report/<run id>`.
const NAME: &str = "report";

async fn worker(db: &Path, run_id: &str, mode: &str) -> anyhow::Result<()> {
    let store = SqliteStore::connect(db).await?;
    let p = report_pipeline()
        .name(NAME)
        .store(store)
        .lease_ttl(LEASE)
        .build()?;
    let out = match mode {
        "invoke" => p.invoke(run_id, input()?).await?.completed()?,
        _ => loop {
            match p.resume(run_id).await {
                Err(fluxio::Error::RunIdInUse { .. }) => tokio::time::sleep(LEASE / 4).await,
                other => break other?.completed()?,
            }
        },
    };
    println!("    -> completed: {}", out.get::<String>("report")?);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--worker") && args.len() == 5 {
        return worker(Path::new(&args[2]), &args[3], &args[4]).await;
    }

    let db = std::env::temp_dir().join(format!("fluxio-crash-demo-{}.db", std::process::id()));
    let run_id = "report-1";
    let version = report_pipeline().build()?.version().to_owned();
    println!(
        "fluxio crash demo: pipeline version {version}, checkpoints in {}\n",
        db.display()
    );

    println!(
        "1. worker process 1 starts run `{run_id}`; it is killed with SIGKILL inside `render`:"
    );
    let mut first = Command::new(std::env::current_exe()?)
        .args(["--worker", &db.to_string_lossy(), run_id, "invoke"])
        .env("DEMO_SLOW_RENDER", "1")
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = first
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        if line.ends_with("render") {
            break;
        }
    }
    first.kill()?; // SIGKILL: no cleanup, no destructor, no goodbye
    let status = first.wait()?;
    println!("    -> worker 1 killed ({status})\n");

    // an operator's view: the same pipeline over the same file
    let inspect = report_pipeline()
        .name(NAME)
        .store(SqliteStore::connect(&db).await?)
        .build()?;
    let cp = inspect
        .checkpoint(run_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no checkpoint"))?;
    println!(
        "2. on disk: the checkpoint written before `{}` (status {:?}, attempt {}), keys {:?}\n",
        cp.step,
        cp.status,
        cp.attempt,
        cp.context.iter().map(|(k, _)| k).collect::<Vec<_>>()
    );

    println!(
        "3. worker process 2 resumes the run (after the dead worker's {} s lease lapses):",
        LEASE.as_secs()
    );
    let status = Command::new(std::env::current_exe()?)
        .args(["--worker", &db.to_string_lossy(), run_id, "resume"])
        .status()?;
    anyhow::ensure!(status.success(), "worker 2 failed: {status}");

    let resumed = inspect
        .checkpoint(run_id)
        .await?
        .map(|cp| cp.context.to_context());
    println!("\n4. an uninterrupted run, for comparison:");
    let reference = report_pipeline()
        .name(NAME)
        .store(InMemoryStore::new())
        .build()?;
    let uninterrupted = reference.invoke("reference", input()?).await?.completed()?;
    println!(
        "\nfetch_orders and total ran once, in worker 1; render ran in both workers; publish in worker 2.\n\
         final context equals the uninterrupted run's: {}",
        resumed.as_ref() == Some(&uninterrupted)
    );
    let _ = std::fs::remove_file(&db);
    for ext in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    anyhow::ensure!(
        resumed.as_ref() == Some(&uninterrupted),
        "the resumed run differs from an uninterrupted one"
    );
    Ok(())
}
