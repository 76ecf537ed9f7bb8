//! Schema checks: a stage declares the keys it needs and the keys it must
//! produce as `Deserialize` types; a run that breaks them fails with a
//! validation error naming the stage and the field.
//!
//! ```text
//! cargo run --example validation
//! ```

use fluxio::{Context, StageResult, ctx, pipeline, stage};
use serde::Deserialize;

#[derive(Deserialize)]
#[allow(dead_code)]
struct Order {
    order_id: u64,
    amount_cents: u64,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Invoice {
    invoice_number: String,
}

#[stage(input = Order, output = Invoice)]
async fn invoice(ctx: Context) -> StageResult {
    let id: u64 = ctx.get("order_id")?;
    Ok(ctx.set("invoice_number", format!("INV-{id:06}"))?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let p = pipeline![invoice].build()?;
    let ok = p.invoke("good", ctx! { "order_id" => 42u64, "amount_cents" => 1999u64, "note" => "extra keys are fine" }?).await?.completed()?;
    println!("valid order -> {}", ok.get::<String>("invoice_number")?);
    let err = p
        .invoke(
            "bad",
            ctx! { "order_id" => "forty-two", "amount_cents" => 1999u64 }?,
        )
        .await
        .expect_err("mistyped");
    println!("mistyped order -> {err}");
    let err = p
        .invoke("worse", ctx! { "order_id" => 7u64 }?)
        .await
        .expect_err("missing");
    println!("incomplete order -> {err}");
    Ok(())
}
