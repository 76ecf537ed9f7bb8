//! Runs that wait (contract rules 25-28), in two processes on one SQLite file.
//!
//! An expense is submitted, the manager is reminded after a sleep, and the
//! run waits for the manager's approval until a deadline. Nothing of a
//! waiting run stays in memory: this process runs a worker
//! (`RecoveryWorker`), which continues each run when it is due; the
//! manager's approval comes from another process, which only has the store.
//!
//! Two expenses: `expense-1` is approved by the other process and paid;
//! nobody approves `expense-2`, which takes the timeout route and is
//! escalated. The deadlines here are seconds, read from the run's input
//! (`deadline_at = "approve_by"`): in production the input says 72 hours.
//! The example checks each claim and exits with an error if one fails.
//!
//! ```text
//! cargo run --example approval
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use fluxio::recovery::RecoveryWorker;
use fluxio::{Context, Outcome, Pipeline, RunStatus, SqliteStore, StageResult, pipeline, stage};

/// What a manager decides.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Approval {
    approved: bool,
    by: String,
}

static REMINDERS: AtomicU32 = AtomicU32::new(0);

fn say(what: &str) {
    println!("    [pid {}] {what}", std::process::id());
}

#[stage]
async fn submit(ctx: Context) -> StageResult {
    let amount: u64 = ctx.get("cents")?;
    say(&format!(
        "submitted an expense of {:.2} EUR",
        amount as f64 / 100.0
    ));
    Ok(ctx.set("submitted", true)?)
}

#[stage]
async fn remind(ctx: Context) -> StageResult {
    REMINDERS.fetch_add(1, Ordering::SeqCst);
    say("reminded the manager");
    Ok(ctx.set("reminded", true)?)
}

#[stage]
async fn pay(ctx: Context) -> StageResult {
    let decision: Approval = ctx.get("decision")?;
    say(&format!(
        "decision by {}: approved = {}",
        decision.by, decision.approved
    ));
    Ok(ctx.set("paid", decision.approved)?)
}

#[stage]
async fn escalate(ctx: Context) -> StageResult {
    say("nobody approved in time: escalated to finance");
    Ok(ctx.set("escalated", true)?)
}

fn expenses(store: SqliteStore) -> anyhow::Result<Pipeline> {
    Ok(pipeline![
        submit,
        sleep!(until = "remind_at"),
        remind,
        wait!("approval" as Approval into "decision", deadline_at = "approve_by") => {
            "approval" => pay,
            "timeout" => escalate,
        },
    ]
    .name("expenses")
    .store(store)
    .build()?)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let (Some("--approve"), Some(path), Some(run_id)) =
        (args.get(1).map(String::as_str), args.get(2), args.get(3))
    {
        // the manager's process: only the store, and the pipeline's code
        let pipeline = expenses(SqliteStore::connect(path).await?)?;
        let approval = Approval {
            approved: true,
            by: "manager (another process)".into(),
        };
        let delivered = pipeline.signal(run_id, "approval", &approval).await?;
        say(&format!("signalled `approval` to {run_id}: {delivered:?}"));
        return Ok(());
    }

    let dir = std::env::temp_dir().join(format!("fluxio-approval-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("expenses.db");
    let path = path.to_str().context("a UTF-8 temp path")?.to_owned();
    let pipeline = expenses(SqliteStore::connect(&path).await?)?;
    println!(
        "pipeline version {} on SQLite ({path})\n",
        pipeline.version()
    );

    println!("1. two expenses are submitted; each sleeps until its reminder:");
    let now = now_ms();
    for (run, approve_in) in [("expense-1", 4_000), ("expense-2", 2_500)] {
        let input = Context::new()
            .set("cents", 12_900u64)?
            .set("remind_at", now + 500)?
            .set("approve_by", now + approve_in)?;
        match pipeline.start(run, input).await? {
            Outcome::Sleeping { until_ms, .. } => say(&format!(
                "{run} sleeps for {} ms; its call returned, nothing of it is held",
                until_ms.saturating_sub(now)
            )),
            other => bail!("{run} should sleep, got {other:?}"),
        }
    }

    println!("\n2. a worker continues each run when it is due:");
    let worker = RecoveryWorker::builder()
        .pipeline(pipeline.clone())
        .due_poll(Duration::from_millis(100))
        .build()?
        .spawn()?;
    for run in ["expense-1", "expense-2"] {
        wait_for_status(&pipeline, run, RunStatus::Waiting).await?;
        say(&format!("{run} waits for `approval`"));
    }

    println!("\n3. the manager approves expense-1 from another process:");
    let status = std::process::Command::new(std::env::current_exe()?)
        .args(["--approve", &path, "expense-1"])
        .status()?;
    ensure!(status.success(), "the approving process failed: {status}");

    println!("\n4. the worker pays expense-1; expense-2 reaches its deadline:");
    let one = pipeline
        .wait_for("expense-1", Duration::from_secs(30))
        .await?
        .context("expense-1 ended")?;
    let two = pipeline
        .wait_for("expense-2", Duration::from_secs(30))
        .await?
        .context("expense-2 ended")?;
    worker.shutdown(Duration::from_secs(5)).await?;

    println!("\n5. checks:");
    let (one, two) = (one.context.to_context(), two.context.to_context());
    check(
        "expense-1 completed, paid on the other process's approval",
        {
            let decision: Approval = one.get("decision")?;
            one.get::<bool>("paid")? && decision.by.contains("another process")
        },
    )?;
    check("expense-2 completed through the timeout route", {
        two.get::<bool>("escalated")? && !two.contains_key("decision")
    })?;
    check(
        "each manager was reminded once",
        REMINDERS.load(Ordering::SeqCst) == 2,
    )?;
    let late = pipeline
        .signal(
            "expense-2",
            "approval",
            &Approval {
                approved: true,
                by: "late".into(),
            },
        )
        .await;
    check(
        "a late approval of expense-2 is refused with a typed error",
        matches!(late, Err(fluxio::Error::RunFinished { .. })),
    )?;
    let history = pipeline.history("expense-1").await?;
    println!("\n{history}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn check(claim: &str, holds: bool) -> anyhow::Result<()> {
    if !holds {
        bail!("claim failed: {claim}");
    }
    println!("    ok: {claim}");
    Ok(())
}

/// Waits (at most 30 s) until `run` is stored as `status`.
async fn wait_for_status(p: &Pipeline, run: &str, status: RunStatus) -> anyhow::Result<()> {
    for _ in 0..300 {
        if p.checkpoint(run)
            .await?
            .is_some_and(|cp| cp.status == status)
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{run} did not reach {status:?} in 30 s")
}
