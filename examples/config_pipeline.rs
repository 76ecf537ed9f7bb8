//! A pipeline whose shape is read from a TOML file (contract rule 33), run
//! durably on SQLite, failed in the middle and resumed.
//!
//! `examples/orders.toml` lists the steps by name; this program registers
//! the stages those names refer to and builds the pipeline from the file.
//! The example checks its claims: the pipeline from the file has the same
//! version as `pipeline![...]` of the same shape (so runs move between the
//! two), a run that fails at `charge` stops there, and a resume finishes it
//! without running the stages before `charge` again. A typo in the file is
//! a build error naming the place. It exits with an error if a claim fails.
//!
//! ```text
//! cargo run --example config_pipeline
//! ```

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use anyhow::{Context as _, ensure};
use fluxio::shape::{Shape, StageRegistry};
use fluxio::{Context, Route, SqliteStore, StageResult, pipeline, stage};

static CALLS: AtomicU32 = AtomicU32::new(0);
static CARD_DECLINED: AtomicBool = AtomicBool::new(true);

fn called(name: &str) {
    CALLS.fetch_add(1, Ordering::SeqCst);
    println!("    ran {name}");
}

#[stage]
async fn validate(ctx: Context) -> StageResult {
    called("validate");
    let items: Vec<u64> = ctx.get("items")?;
    Ok(ctx.set("valid", !items.is_empty())?)
}

#[stage(writes = ["total"])]
async fn price(ctx: Context) -> StageResult {
    called("price");
    let items: Vec<u64> = ctx.get("items")?;
    Ok(ctx.set("total", items.iter().sum::<u64>())?)
}

#[stage(writes = ["reserved"])]
async fn reserve_stock(ctx: Context) -> StageResult {
    called("reserve_stock");
    Ok(ctx.set("reserved", true)?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    called("charge");
    if CARD_DECLINED.load(Ordering::SeqCst) {
        return Err("the card was declined".into());
    }
    let total: u64 = ctx.get("total")?;
    Ok(ctx.set("charged", total)?)
}

#[stage]
fn by_size(ctx: Context) -> StageResult<Route> {
    let total: u64 = ctx.get("total")?;
    Ok(Route::to(if total > 1_000 { "freight" } else { "parcel" }))
}

#[stage]
async fn ship_parcel(ctx: Context) -> StageResult {
    called("ship_parcel");
    Ok(ctx.set("shipped", "parcel")?)
}

#[stage]
async fn book_freight(ctx: Context) -> StageResult {
    called("book_freight");
    Ok(ctx.set("booked", true)?)
}

#[stage]
async fn ship_freight(ctx: Context) -> StageResult {
    called("ship_freight");
    Ok(ctx.set("shipped", "freight")?)
}

fn registry() -> StageRegistry {
    StageRegistry::new()
        .with::<validate>()
        .with::<price>()
        .with::<reserve_stock>()
        .with::<charge>()
        .with::<by_size>()
        .with::<ship_parcel>()
        .with::<book_freight>()
        .with::<ship_freight>()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/orders.toml");
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let shape: Shape = toml::from_str(&text).context("orders.toml is not a shape")?;
    println!(
        "1. {path} describes {} steps; its pipeline is built:",
        shape.steps.len()
    );
    let dir = std::env::temp_dir().join(format!("fluxio-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("orders.db");
    std::fs::File::create(&db)?;
    let store = SqliteStore::connect(db.to_str().context("a UTF-8 temp path")?).await?;
    let orders = registry().builder(&shape)?.store(store).build()?;
    let by_macro = pipeline![
        validate,
        parallel![price, reserve_stock],
        charge,
        by_size => { "parcel" => [ship_parcel], "freight" => [book_freight, ship_freight] },
    ]
    .name("orders")
    .build()?;
    println!(
        "    version {} (pipeline![...] of the same shape: {})",
        orders.version(),
        by_macro.version()
    );
    ensure!(
        orders.version() == by_macro.version(),
        "the file and the macro make the same version"
    );

    println!("2. order-1 runs, and its card is declined:");
    let input = Context::new().set("items", vec![400u64, 900])?;
    let failed = orders.invoke("order-1", input).await;
    let err = failed.err().context("the charge fails")?;
    println!("    failed: {err}");
    let before = CALLS.load(Ordering::SeqCst);

    println!("3. the card works now; order-1 is resumed from its checkpoint:");
    CARD_DECLINED.store(false, Ordering::SeqCst);
    let done = orders.resume("order-1").await?.completed()?;
    let after = CALLS.load(Ordering::SeqCst) - before;
    let shipped: String = done.get("shipped")?;
    println!(
        "    completed: charged {}, shipped by {shipped}",
        done.get::<u64>("charged")?
    );
    ensure!(
        after == 3,
        "only charge, book_freight and ship_freight ran again: {after}"
    );
    ensure!(shipped == "freight", "1,300 goes by freight");

    println!("4. a typo in the file is a build error naming the place:");
    let typo: Shape = toml::from_str(&text.replace("\"reserve_stock\"", "\"reserve_stok\""))?;
    let err = registry().builder(&typo).err().context("a typo fails")?;
    println!("    {err}");
    ensure!(
        err.to_string().contains("steps[1].parallel[1][0]"),
        "the place is named"
    );
    println!("    every claim holds");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
