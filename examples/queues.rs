//! A rate-limited email queue (contract rule 31) drained by two worker
//! processes on one SQLite file.
//!
//! The queue `emails` lets 2 emails be sent at once across both workers,
//! 1 per tenant at once (a tenant's mail server takes one connection), and
//! 5 per second (the email provider's rate limit). This process enqueues 20
//! emails for 4 tenants (and one of them again, as a client's retry would:
//! it is stored once), then spawns two worker processes of the pipeline.
//! Each email's stage writes its start and end to a ledger file outside the
//! store. When all are sent the example checks its claims on the ledger:
//! every email sent once, never more than 2 at once, never two of a tenant
//! at once, never more than 5 starting within a second. It exits with an
//! error if one fails.
//!
//! ```text
//! cargo run --example queues
//! ```

use std::collections::HashMap;
use std::io::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, ensure};
use fluxio::queue::{Enqueue, Enqueued, Queue};
use fluxio::recovery::RecoveryWorker;
use fluxio::store::{CheckpointStore, RunFilter, RunState};
use fluxio::{Context, Pipeline, SqliteStore, StageResult, pipeline, stage};

const EMAILS: usize = 20;
const TENANTS: [&str; 4] = ["acme", "globex", "initech", "umbrella"];

fn micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

#[stage]
async fn send_email(ctx: Context) -> StageResult {
    let info = fluxio::StageInfo::current().ok_or("a stage runs in a pipeline")?;
    let (ledger, tenant): (String, String) = (ctx.get("ledger")?, ctx.get("tenant")?);
    let line = |what: &str| format!("{what} {} {tenant} {}\n", info.run_id, micros());
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)?;
    file.write_all(line("start").as_bytes())?;
    println!(
        "    [pid {}] sending {} for {tenant}",
        std::process::id(),
        info.run_id
    );
    // the email provider's call
    tokio::time::sleep(Duration::from_millis(150)).await;
    file.write_all(line("end").as_bytes())?;
    Ok(ctx.set("sent", true)?)
}

fn emails(store: SqliteStore) -> anyhow::Result<Pipeline> {
    let queue = Queue::new("emails")
        .concurrency(2)
        .per_key(1)
        .rate(5, Duration::from_secs(1));
    Ok(pipeline![send_email]
        .name("emails")
        .store(store)
        .queue(queue)
        .build()?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let (Some("--worker"), Some(path)) = (args.get(1).map(String::as_str), args.get(2)) {
        // a worker process: starts the queue's runs as they fit, until killed
        let pipeline = emails(SqliteStore::connect(path).await?)?;
        let _worker = RecoveryWorker::builder()
            .pipeline(pipeline)
            .due_poll(Duration::from_millis(50))
            .build()?
            .spawn()?;
        std::future::pending::<()>().await;
    }

    let dir = std::env::temp_dir().join(format!("fluxio-queues-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("emails.db");
    let path = path.to_str().context("a UTF-8 temp path")?.to_owned();
    let ledger = dir.join("ledger").to_string_lossy().into_owned();
    let store = SqliteStore::connect(&path).await?;
    let pipeline = emails(SqliteStore::connect(&path).await?)?;

    println!(
        "1. {EMAILS} emails for {} tenants are enqueued:",
        TENANTS.len()
    );
    let started = std::time::Instant::now();
    for i in 0..EMAILS {
        let tenant = TENANTS[i % TENANTS.len()];
        let input = Context::new()
            .set("ledger", &ledger)?
            .set("tenant", tenant)?;
        let queued = pipeline
            .enqueue(&format!("email-{i}"), input, Enqueue::new().key(tenant))
            .await?;
        ensure!(queued == Enqueued::Queued, "email-{i} is new");
    }
    let retried = pipeline
        .enqueue("email-0", Context::new(), Enqueue::new())
        .await?;
    println!(
        "    in {:?}, nothing sent yet; enqueueing email-0 again: {retried:?}",
        started.elapsed()
    );
    ensure!(
        retried == Enqueued::Exists,
        "a retried enqueue stores nothing"
    );

    println!("2. two worker processes drain the queue (2 at once, 1 per tenant, 5 a second):");
    let spawn = || {
        std::process::Command::new(std::env::current_exe()?)
            .args(["--worker", &path])
            .spawn()
    };
    let mut workers = vec![spawn()?, spawn()?];
    let drained = std::time::Instant::now();
    loop {
        let filter = RunFilter::new()
            .pipeline("emails")
            .state(RunState::Completed)
            .limit(100);
        if store.list_runs(&filter).await?.runs.len() >= EMAILS {
            break;
        }
        ensure!(
            drained.elapsed() < Duration::from_secs(120),
            "the queue drains in two minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = drained.elapsed();
    for worker in &mut workers {
        worker.kill()?;
        worker.wait()?;
    }

    println!("3. what the ledger says:");
    let text = std::fs::read_to_string(&ledger)?;
    let mut events: Vec<(u128, i32, String)> = Vec::new();
    let mut starts: Vec<u128> = Vec::new();
    let mut sent: HashMap<String, usize> = HashMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        ensure!(parts.len() == 4, "a ledger line: {line:?}");
        let at: u128 = parts[3].parse()?;
        let delta = if parts[0] == "start" {
            starts.push(at);
            1
        } else {
            *sent.entry(parts[1].to_owned()).or_default() += 1;
            -1
        };
        events.push((at, delta, parts[2].to_owned()));
    }
    events.sort_by_key(|(at, delta, _)| (*at, *delta));
    let (mut running, mut most) = (0, 0);
    let mut by_tenant: HashMap<String, i32> = HashMap::new();
    let mut most_of_a_tenant = 0;
    for (_, delta, tenant) in &events {
        running += delta;
        most = most.max(running);
        let of = by_tenant.entry(tenant.clone()).or_default();
        *of += delta;
        most_of_a_tenant = most_of_a_tenant.max(*of);
    }
    starts.sort_unstable();
    // starts within 900 ms of each other: the limit is 5 per second, kept by
    // the store's leases; the stamps are taken a little after
    let busiest = (0..starts.len())
        .map(|i| {
            starts[i..]
                .iter()
                .take_while(|s| **s < starts[i] + 900_000)
                .count()
        })
        .max()
        .unwrap_or(0);
    println!(
        "    {} emails sent in {took:?}: at most {most} at once, {most_of_a_tenant} per tenant, \
         {busiest} starting within 0.9 s",
        sent.len()
    );
    ensure!(sent.len() == EMAILS, "every email was sent");
    ensure!(sent.values().all(|n| *n == 1), "each email was sent once");
    ensure!(most <= 2, "never more than 2 at once");
    ensure!(most_of_a_tenant <= 1, "never two of a tenant at once");
    ensure!(busiest <= 5, "never more than 5 starts within a second");
    ensure!(
        took >= Duration::from_secs(2),
        "20 emails at 5 a second take more than 2 seconds"
    );
    println!("    every claim holds: the limits held across two processes");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
