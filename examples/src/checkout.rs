//! An order checkout: validate, reserve stock and check fraud in parallel,
//! charge the card, ship by the route the order asks for, send a receipt.
//!
//! `charge_card` talks to a flaky payment gateway: set [`GATEWAY_DOWN`] and it
//! fails, as a real gateway would time out.

use std::sync::atomic::{AtomicBool, Ordering};

use fluxio::{Context, PipelineBuilder, StageResult, pipeline, stage};

/// While set, `charge_card` fails with [`GatewayDown`].
pub static GATEWAY_DOWN: AtomicBool = AtomicBool::new(false);

/// The payment gateway did not answer.
#[derive(Debug, thiserror::Error)]
#[error("payment gateway timed out")]
pub struct GatewayDown;

fn log(stage: &str) {
    println!("    ran {stage}");
}

/// Checks the order and computes its total.
#[stage]
pub async fn validate(ctx: Context) -> StageResult {
    log("validate");
    let items: Vec<u64> = ctx.get("item_prices_cents")?;
    if items.is_empty() {
        return Err("an order needs at least one item".into());
    }
    Ok(ctx.set("total_cents", items.iter().sum::<u64>())?)
}

/// Reserves the items (runs in parallel with `fraud_check`).
#[stage(reads = ["item_prices_cents"], writes = ["reservation"])]
pub async fn reserve_stock(ctx: Context) -> StageResult {
    log("reserve_stock");
    let n = ctx.get::<Vec<u64>>("item_prices_cents")?.len();
    Ok(ctx.set("reservation", format!("rsv-{n}-items"))?)
}

/// Scores the order (a plain function: runs on the blocking pool).
#[stage(reads = ["total_cents"], writes = ["fraud_score"])]
pub fn fraud_check(ctx: Context) -> StageResult {
    log("fraud_check");
    let total: u64 = ctx.get("total_cents")?;
    Ok(ctx.set("fraud_score", if total > 100_000 { 0.7 } else { 0.05 })?)
}

/// Charges the card through the payment gateway.
#[stage(timeout = "10s")]
pub async fn charge_card(ctx: Context) -> StageResult {
    log("charge_card");
    if GATEWAY_DOWN.load(Ordering::SeqCst) {
        return Err(Box::new(GatewayDown));
    }
    let total: u64 = ctx.get("total_cents")?;
    Ok(ctx.set("charged_cents", total)?)
}

/// Picks the shipping route the order asked for.
#[stage]
pub async fn shipping(ctx: Context) -> StageResult<fluxio::Route> {
    log("shipping");
    let speed: String = ctx
        .get_opt("shipping")
        .unwrap_or_else(|| "standard".to_owned());
    Ok(fluxio::Route::to(speed).with("carrier", "acme")?)
}

/// Books an express courier.
#[stage]
pub async fn express(ctx: Context) -> StageResult {
    log("express");
    Ok(ctx.set("delivery_days", 1)?)
}

/// Books standard post.
#[stage]
pub async fn standard(ctx: Context) -> StageResult {
    log("standard");
    Ok(ctx.set("delivery_days", 5)?)
}

/// Sends the receipt.
#[stage]
pub async fn send_receipt(ctx: Context) -> StageResult {
    log("send_receipt");
    let total: u64 = ctx.get("charged_cents")?;
    Ok(ctx.set(
        "receipt",
        format!("charged ${}.{:02}", total / 100, total % 100),
    )?)
}

/// The checkout pipeline.
pub fn pipeline() -> PipelineBuilder {
    pipeline![
        validate,
        parallel![reserve_stock, fraud_check],
        charge_card,
        shipping => { "express" => express, "standard" => standard },
        send_receipt,
    ]
}
