//! The main example: a run whose stage fails leaves an error checkpoint; a
//! resume continues from the failed stage and skips the stages already done.
//!
//! ```text
//! cargo run --example resume
//! ```

use std::sync::atomic::Ordering;

use fluxio::{InMemoryStore, ctx};
use fluxio_examples::checkout::{self, GATEWAY_DOWN, GatewayDown};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pipeline = checkout::pipeline()
        .name("checkout")
        .store(InMemoryStore::new())
        .build()?;
    let run_id = "order-42";
    println!(
        "checkout pipeline, version {}, run `{run_id}`\n",
        pipeline.version()
    );

    println!("1. invoke (the payment gateway is down):");
    GATEWAY_DOWN.store(true, Ordering::SeqCst);
    let input = ctx! { "item_prices_cents" => vec![1999u64, 2201], "shipping" => "express" }?;
    let err = pipeline
        .invoke(run_id, input)
        .await
        .expect_err("the gateway is down");
    println!("    -> failed: {err}");
    assert!(
        err.stage_error::<GatewayDown>().is_some(),
        "the stage's own error type comes back"
    );
    let cp = pipeline
        .checkpoint(run_id)
        .await?
        .expect("a failure leaves a checkpoint");
    println!(
        "    checkpoint: step `{}`, status {:?}, error = {}, context keys {:?}\n",
        cp.step,
        cp.status,
        cp.is_failed(),
        cp.context.iter().map(|(k, _)| k).collect::<Vec<_>>()
    );

    println!(
        "2. resume (the gateway is back; stages before `{}` do not run again):",
        cp.step
    );
    GATEWAY_DOWN.store(false, Ordering::SeqCst);
    let out = pipeline.resume(run_id).await?.completed()?;
    println!(
        "    -> completed: {}, delivery in {} day(s), reservation {}\n",
        out.get::<String>("receipt")?,
        out.get::<u32>("delivery_days")?,
        out.get::<String>("reservation")?
    );

    println!("3. resume again (the run is complete, nothing runs):");
    let again = pipeline.resume(run_id).await?.completed()?;
    assert_eq!(again, out);
    println!("    -> same final context, {} keys", again.len());
    Ok(())
}
