//! Time travel through a run's history (contract rule 20): every checkpoint
//! a run wrote is kept, so an operator can list its steps, look at the
//! context as it was before any of them, replay from there, fork a new run
//! from there, and diff two points.
//!
//! ```text
//! cargo run --example time_travel
//! ```
//!
//! The run is kept in a SQLite file, as a service would keep it. Each
//! checkpoint after the first writes only the keys that changed (rule 18):
//! the example prints how many bytes the file holds for a run whose
//! context carries a 256 KiB receipt image.

use std::sync::atomic::{AtomicBool, Ordering};

use fluxio::{Context, SqliteStore, StageResult, ctx, pipeline, stage};

/// While set, the card is declined.
static DECLINE: AtomicBool = AtomicBool::new(true);

#[stage]
async fn load_cart(ctx: Context) -> StageResult {
    let prices: Vec<u64> = ctx.get("prices_cents")?;
    Ok(ctx.set("subtotal_cents", prices.iter().sum::<u64>())?)
}

#[stage]
async fn apply_coupon(ctx: Context) -> StageResult {
    let subtotal: u64 = ctx.get("subtotal_cents")?;
    let off = if ctx.get_opt::<String>("coupon").as_deref() == Some("TENOFF") {
        subtotal / 10
    } else {
        0
    };
    Ok(ctx
        .set("discount_cents", off)?
        .set("total_cents", subtotal - off)?)
}

#[stage]
async fn add_tax(ctx: Context) -> StageResult {
    let total: u64 = ctx.get("total_cents")?;
    Ok(ctx
        .set("tax_cents", total / 5)?
        .set("total_cents", total + total / 5)?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    let total: u64 = ctx.get("total_cents")?;
    if DECLINE.load(Ordering::SeqCst) {
        return Err(format!("card declined for {total} cents").into());
    }
    Ok(ctx.set("charged_cents", total)?.remove("coupon"))
}

fn show(title: &str, ctx: &Context) {
    println!("{title}");
    for (key, value) in ctx.iter().filter(|(k, _)| *k != "receipt_png") {
        println!("    {key} = {value}");
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("fluxio-time-travel-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = SqliteStore::connect(dir.join("runs.db")).await?;
    let checkout = pipeline![load_cart, apply_coupon, add_tax, charge]
        .name("checkout")
        .store(store)
        .build()?;

    println!("1. order-1 runs; the card is declined at `charge`, then it goes through");
    let input = ctx! {
        "prices_cents" => vec![1_250u64, 4_999, 300],
        "coupon" => "TENOFF",
        "receipt_png" => vec![0x89u8; 256 * 1024],
    }?;
    let failed = checkout.invoke("order-1", input).await;
    println!(
        "   invoke: {}",
        failed.err().map_or("ok".into(), |e| e.to_string())
    );
    DECLINE.store(false, Ordering::SeqCst);
    let done = checkout.resume("order-1").await?.completed()?;
    println!(
        "   resume: charged {} cents",
        done.get::<u64>("charged_cents")?
    );

    println!("\n2. its history, step by step");
    let history = checkout.history("order-1").await?;
    print!("{history}");

    println!("\n3. the context as it was before `add_tax` (not the final one)");
    show(
        "   order-1@add_tax:",
        &checkout.context_at("order-1@add_tax").await?,
    );

    println!("\n4. a replay from `add_tax` starts from that context, so tax is not added twice");
    let replayed = checkout
        .replay("order-1", Some("add_tax"))
        .await?
        .completed()?;
    println!(
        "   replayed: total {} cents (the first pass: {})",
        replayed.get::<u64>("total_cents")?,
        done.get::<u64>("total_cents")?
    );

    println!(
        "\n5. a fork: a new run, order-1-copy, from before `apply_coupon`; order-1 is untouched"
    );
    let before = checkout.history("order-1").await?.checkpoints;
    let fork = checkout
        .fork("order-1", "apply_coupon", "order-1-copy")
        .await?
        .completed()?;
    let after = checkout.history("order-1").await?.checkpoints;
    println!(
        "   order-1-copy charged {} cents; order-1 still holds {before} checkpoints ({after} now)",
        fork.get::<u64>("charged_cents")?
    );
    print!("{}", checkout.history("order-1-copy").await?);

    println!("\n6. what `apply_coupon` and `add_tax` changed: a diff of two points");
    print!(
        "{}",
        checkout
            .diff("order-1@apply_coupon", "order-1@charge")
            .await?
    );

    // the database and its write-ahead log
    let size: u64 = std::fs::read_dir(&dir)?
        .filter_map(|entry| entry.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "\nSQLite holds {} KiB for {} checkpoints of two runs carrying a 256 KiB receipt",
        size / 1024,
        before + checkout.history("order-1-copy").await?.checkpoints
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
