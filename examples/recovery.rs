//! Recovery (contract rule 22): a worker process is killed with SIGKILL
//! while it holds five runs; a recovery worker finds them abandoned and
//! finishes them.
//!
//! ```text
//! cargo run --example recovery
//! ```
//!
//! Nothing to install: the runs live in an embedded SQLite file. The
//! listings are `fluxio runs list`'s, run through the CLI's library.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use fluxio::recovery::{RecoveryEvent, RecoveryPolicy, RecoveryWorker};
use fluxio::store::{CheckpointStore, RunFilter, RunState};
use fluxio::{Context, PipelineBuilder, SqliteStore, StageInfo, StageResult, pipeline, stage};

const LEASE: Duration = Duration::from_secs(1);
const RUNS: usize = 5;

fn announce(stage: &str, ctx: &Context) -> fluxio::Result<()> {
    let order: String = ctx.get("order")?;
    let attempt = StageInfo::current().map_or(1, |i| i.attempt);
    println!(
        "    [pid {}] {stage} {order} (attempt {attempt})",
        std::process::id()
    );
    Ok(())
}

#[stage]
async fn reserve(ctx: Context) -> StageResult {
    announce("reserve", &ctx)?;
    Ok(ctx.set("reserved", true)?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    announce("charge", &ctx)?;
    if std::env::var_os("DEMO_SLOW_CHARGE").is_some() {
        // the first worker is killed while its runs wait here
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    Ok(ctx.set("charged_cents", 4_990u64)?)
}

#[stage]
async fn ship(ctx: Context) -> StageResult {
    announce("ship", &ctx)?;
    let order: String = ctx.get("order")?;
    Ok(ctx.set("tracking", format!("TRK-{order}"))?)
}

fn orders() -> PipelineBuilder {
    pipeline![reserve, charge, ship].name("orders")
}

/// `--worker <db>`: a worker that starts `RUNS` runs at once.
async fn worker(db: &Path) -> anyhow::Result<()> {
    let p = orders()
        .store(SqliteStore::connect(db).await?)
        .lease_ttl(LEASE)
        .build()?;
    let runs: Vec<_> = (1..=RUNS)
        .map(|i| {
            let p = p.clone();
            tokio::spawn(async move {
                let order = format!("order-{i}");
                let input = Context::new().set("order", order.clone())?;
                p.invoke(&order, input).await
            })
        })
        .collect();
    for run in runs {
        run.await??.completed()?;
    }
    Ok(())
}

/// Runs `fluxio runs list --pipeline orders` on the demo's file, and
/// returns the runs' states.
async fn list(db: &Path, store: &dyn CheckpointStore) -> anyhow::Result<Vec<RunState>> {
    let url = format!("sqlite://{}", db.display());
    let exit = tokio::task::spawn_blocking(move || {
        fluxio_cli::run([
            "fluxio",
            "--store",
            &url,
            "runs",
            "list",
            "--pipeline",
            "orders",
        ])
    })
    .await?;
    anyhow::ensure!(exit == fluxio_cli::Exit::Ok, "fluxio runs list: {exit:?}");
    let page = store
        .list_runs(&RunFilter::new().pipeline("orders"))
        .await?;
    Ok(page.runs.iter().map(|r| r.state).collect())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--worker") && args.len() == 3 {
        return worker(Path::new(&args[2])).await;
    }
    let db = std::env::temp_dir().join(format!("fluxio-recovery-demo-{}.db", std::process::id()));
    println!("fluxio recovery demo, runs in {}\n", db.display());

    println!(
        "1. a worker process starts {RUNS} orders; it is killed with SIGKILL while they are in `charge`:"
    );
    let mut first = Command::new(std::env::current_exe()?)
        .args(["--worker", &db.to_string_lossy()])
        .env("DEMO_SLOW_CHARGE", "1")
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = first
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut charging = 0;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        if line.contains("] charge ") {
            charging += 1;
            if charging == RUNS {
                break;
            }
        }
    }
    first.kill()?; // SIGKILL: the runs' leases are left to lapse
    println!("    -> killed ({})\n", first.wait()?);

    let store = SqliteStore::connect(&db).await?;
    println!("2. `fluxio runs list` right after the kill: the dead worker's leases still hold");
    list(&db, &store).await?;
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    println!(
        "\n   and {} ms later, once they lapsed:",
        (LEASE + Duration::from_millis(200)).as_millis()
    );
    let before = list(&db, &store).await?;

    println!(
        "\n3. a recovery worker (as a service runs one beside its pipelines) takes them over:"
    );
    let pipeline = orders().store(store.clone()).lease_ttl(LEASE).build()?;
    let handle = RecoveryWorker::builder()
        .pipeline(pipeline.clone())
        .concurrency(4)
        .interval(Duration::from_millis(200))
        .policy(RecoveryPolicy::new().backoff(Duration::ZERO, Duration::from_secs(60)))
        .on_event(|event| {
            if let RecoveryEvent::Recovered { key } = event {
                println!("    recovered {key}");
            }
        })
        .build()?
        .spawn()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let done = store
            .list_runs(
                &RunFilter::new()
                    .pipeline("orders")
                    .state(RunState::Completed),
            )
            .await?;
        if done.runs.len() == RUNS || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown(Duration::from_secs(5)).await?;
    pipeline.shutdown(Duration::from_secs(5)).await?;

    println!("\n4. `fluxio runs list` after recovery:");
    let after = list(&db, &store).await?;
    let _ = std::fs::remove_file(&db);
    for ext in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    anyhow::ensure!(
        before.iter().all(|s| *s == RunState::Abandoned),
        "the killed worker's runs were not all abandoned: {before:?}"
    );
    anyhow::ensure!(
        after.len() == RUNS && after.iter().all(|s| *s == RunState::Completed),
        "the recovery worker did not finish every run: {after:?}"
    );
    println!(
        "\nreserve ran once per order (before the kill); charge ran again (attempt 2) and ship once, in this process."
    );
    Ok(())
}
