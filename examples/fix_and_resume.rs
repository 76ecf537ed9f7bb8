//! Living through a bug fix: a run fails on a bug, the fix is deployed, the
//! failed run is finished on the fixed code, an old version is kept for the
//! runs it started, and a client's retry gets the result without running
//! anything again.
//!
//! ```text
//! cargo run --example fix_and_resume
//! ```
//!
//! The two "deploys" are two pipelines over one SQLite file, as two builds
//! of a service would be.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use fluxio::{Context, Error, ResumeOptions, SqliteStore, StageResult, ctx, pipeline, stage};

/// Stage calls, counted, so the example can show what ran.
static CALLS: AtomicU32 = AtomicU32::new(0);
/// While set, the payment gateway is down and `charge` fails.
static GATEWAY_DOWN: AtomicBool = AtomicBool::new(false);

fn ran(stage: &str) {
    CALLS.fetch_add(1, Ordering::SeqCst);
    println!("      ran {stage}");
}

#[stage]
async fn load_order(ctx: Context) -> StageResult {
    ran("load_order");
    let cents: Vec<u64> = ctx.get("item_prices_cents")?;
    Ok(ctx.set("subtotal_cents", cents.iter().sum::<u64>())?)
}

/// Release 1: divides the percentage by 10 instead of 100, so a 10 %
/// discount is the whole order, which its sanity check refuses.
#[stage(name = "apply_discount")]
async fn apply_discount_v1(ctx: Context) -> StageResult {
    ran("apply_discount (release 1)");
    let subtotal: u64 = ctx.get("subtotal_cents")?;
    let percent: u64 = ctx.get_opt("discount_percent").unwrap_or(0).min(100);
    let discount = subtotal * percent / 10;
    if discount >= subtotal && percent > 0 {
        return Err(format!("a discount of {discount} cents makes the order free").into());
    }
    Ok(ctx.set("total_cents", subtotal - discount)?)
}

/// Release 2: the fix.
#[stage(name = "apply_discount")]
async fn apply_discount_v2(ctx: Context) -> StageResult {
    ran("apply_discount (release 2)");
    let subtotal: u64 = ctx.get("subtotal_cents")?;
    let percent: u64 = ctx.get_opt("discount_percent").unwrap_or(0).min(100);
    Ok(ctx.set("total_cents", subtotal - subtotal * percent / 100)?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    ran("charge");
    if GATEWAY_DOWN.load(Ordering::SeqCst) {
        return Err("payment gateway timed out".into());
    }
    let total: u64 = ctx.get("total_cents")?;
    // a real charge would send this key, so a repeated call charges once
    let key = fluxio::StageInfo::current().map(|i| i.idempotency_key());
    Ok(ctx
        .set("charged_cents", total)?
        .set("charge_key", key.unwrap_or_default())?)
}

/// The service as release 1 or release 2 builds it.
fn release(store: &SqliteStore, fixed: bool) -> fluxio::Result<fluxio::Pipeline> {
    let builder = if fixed {
        pipeline![load_order, apply_discount_v2, charge]
    } else {
        pipeline![load_order, apply_discount_v1, charge]
    };
    builder.name("invoices").store(store.clone()).build()
}

/// The error of a call that must fail here.
fn failed<T: std::fmt::Debug>(result: fluxio::Result<T>, why: &str) -> anyhow::Result<Error> {
    match result {
        Ok(out) => anyhow::bail!("{why}: expected a failure, got {out:?}"),
        Err(e) => Ok(e),
    }
}

fn calls() -> u32 {
    CALLS.swap(0, Ordering::SeqCst)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("fluxio-fix-and-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = SqliteStore::connect(dir.join("runs.db")).await?;
    let order = ctx! { "item_prices_cents" => vec![1999u64, 2201], "discount_percent" => 10u64 }?;

    println!("1. release 1 starts invoice `inv-1` and hits its bug:");
    let v1 = release(&store, false)?;
    let err = v1.start("inv-1", order.clone()).await.expect_err("the bug");
    println!("    -> failed: {err}\n");

    println!("2. release 2 (the fix) is deployed; a plain resume is refused:");
    let v2 = release(&store, true)?;
    let refused = failed(v2.resume("inv-1").await, "a resume on other code")?;
    anyhow::ensure!(
        matches!(&refused, Error::CheckpointVersion { changes: Some(c), .. } if c.code_changed == ["apply_discount"]),
        "the error names the changed stage: {refused:?}"
    );
    println!("    -> {refused}\n");
    anyhow::ensure!(calls() == 2, "only release 1's two stages ran");

    println!("3. the operator opts in to the code change (same shape, only stage code changed):");
    let fixed = v2
        .resume_with("inv-1", ResumeOptions::new().allow_code_changes(true))
        .await?
        .completed()?;
    println!(
        "    -> completed: charged {} cents with key `{}`",
        fixed.get::<u64>("charged_cents")?,
        fixed.get::<String>("charge_key")?
    );
    anyhow::ensure!(fixed.get::<u64>("charged_cents")? == 3780);
    anyhow::ensure!(calls() == 2, "load_order did not run again");
    println!("    (load_order ran before the failure and did not run again)\n");

    println!("4. the client retries its request: `start` hands back the result, running nothing:");
    let retried = v2.start("inv-1", order.clone()).await?.completed()?;
    anyhow::ensure!(retried == fixed && calls() == 0);
    println!("    -> same final context, 0 stages ran\n");

    println!("5. keeping release 1 for the runs it started (`hold`):");
    GATEWAY_DOWN.store(true, Ordering::SeqCst);
    let small = ctx! { "item_prices_cents" => vec![5000u64] }?;
    let down = failed(v1.start("inv-2", small.clone()).await, "the gateway")?;
    println!("    inv-2 on release 1 -> failed: {down}");
    GATEWAY_DOWN.store(false, Ordering::SeqCst);
    let _ = calls();
    let worker = release(&store, true)?.hold(release(&store, false)?)?;
    println!(
        "    the worker runs release 2 and holds {:?}",
        worker.held_versions()
    );
    let finished = worker.resume("inv-2").await?.completed()?;
    let cp = worker
        .checkpoint("inv-2")
        .await?
        .ok_or_else(|| anyhow::anyhow!("inv-2 is stored"))?;
    anyhow::ensure!(worker.held_versions() == [cp.version.as_str()]);
    println!(
        "    -> inv-2 finished on release 1's code (it was started there), charged {} cents",
        finished.get::<u64>("charged_cents")?
    );
    let new = worker.start("inv-3", small).await?.completed()?;
    println!(
        "    -> inv-3, a new run, used release 2: charged {} cents",
        new.get::<u64>("charged_cents")?
    );
    let cp = worker
        .checkpoint("inv-3")
        .await?
        .ok_or_else(|| anyhow::anyhow!("inv-3 is stored"))?;
    anyhow::ensure!(cp.version == worker.version());

    drop((v1, v2, worker, store));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
