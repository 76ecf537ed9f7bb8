//! A durable pipeline on PostgreSQL fails at a stage and is resumed by
//! another store instance (another process, as far as the database can
//! tell): only the failed stage and the ones after it run again.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use fluxio::{Context, RunStatus, StageResult, ctx, pipeline, stage};

static CALLS: [AtomicU32; 4] = [const { AtomicU32::new(0) }; 4];
static GATEWAY_DOWN: AtomicBool = AtomicBool::new(true);

#[derive(Debug, thiserror::Error)]
#[error("the payment gateway is down")]
struct GatewayDown;

#[stage]
async fn reserve(ctx: Context) -> StageResult {
    CALLS[0].fetch_add(1, Ordering::SeqCst);
    Ok(ctx.set("reserved", true)?)
}

#[stage]
async fn price(ctx: Context) -> StageResult {
    CALLS[1].fetch_add(1, Ordering::SeqCst);
    let items: Vec<u64> = ctx.get("items")?;
    Ok(ctx.set("total", items.iter().sum::<u64>())?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    CALLS[2].fetch_add(1, Ordering::SeqCst);
    if GATEWAY_DOWN.load(Ordering::SeqCst) {
        return Err(Box::new(GatewayDown));
    }
    let total: u64 = ctx.get("total")?;
    Ok(ctx.set("receipt", format!("paid {total}"))?)
}

#[stage]
async fn ship(ctx: Context) -> StageResult {
    CALLS[3].fetch_add(1, Ordering::SeqCst);
    Ok(ctx.set("shipped", true)?)
}

fn calls() -> [u32; 4] {
    [0, 1, 2, 3].map(|i| CALLS[i].load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_failed_run_resumes_from_the_failed_stage_on_another_store_instance() -> anyhow::Result<()>
{
    let Some(url) = common::server().await else {
        return Ok(());
    };
    let schema = common::fresh_schema("resume");

    let first = pipeline![reserve, price, charge, ship]
        .store(common::store(&url, &schema).await)
        .build()?;
    let input = ctx! { "items" => vec![1999u64, 2201] }?;
    let err = first
        .invoke("order-42", input)
        .await
        .expect_err("the gateway is down");
    assert!(err.stage_error::<GatewayDown>().is_some(), "{err}");
    assert_eq!(calls(), [1, 1, 1, 0]);
    drop(first);

    // A second store instance on the same schema: a new pool, as another
    // worker process would have.
    let other = common::store(&url, &schema).await;
    let second = pipeline![reserve, price, charge, ship]
        .store(other.clone())
        .build()?;
    let cp = second
        .checkpoint("order-42")
        .await?
        .expect("a failure leaves a checkpoint");
    assert_eq!(
        (cp.step.as_str(), cp.status, cp.is_failed()),
        ("charge", RunStatus::Failed, true)
    );

    GATEWAY_DOWN.store(false, Ordering::SeqCst);
    let out = second.resume("order-42").await?;
    assert_eq!(calls(), [1, 1, 2, 1], "only `charge` and `ship` ran again");
    assert_eq!(out.get::<String>("receipt")?, "paid 4200");
    assert!(out.get::<bool>("shipped")?);

    // The completed run has a retention; its lease was released.
    let (status, expires): (String, bool) = sqlx::query_as(&format!(
        "SELECT status, expires_at IS NOT NULL FROM \"{schema}\".fluxio_checkpoints \
         WHERE run_id = 'order-42'"
    ))
    .fetch_one(other.pool())
    .await?;
    assert_eq!((status.as_str(), expires), ("completed", true));
    let released: bool = sqlx::query_scalar(&format!(
        "SELECT expires_at IS NULL FROM \"{schema}\".fluxio_checkpoints_leases \
         WHERE run_id = 'order-42'"
    ))
    .fetch_one(other.pool())
    .await?;
    assert!(released);

    // Resuming a completed run runs nothing.
    assert_eq!(second.resume("order-42").await?, out);
    assert_eq!(calls(), [1, 1, 2, 1]);
    drop((second, other));
    common::drop_schema(&url, &schema).await;
    Ok(())
}
