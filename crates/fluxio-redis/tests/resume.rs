//! A durable pipeline on Redis fails at a stage; a second store (a second
//! process) resumes it, running only the failed stage and the ones after it.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use fluxio::{
    CheckpointStore as _, Context, PipelineBuilder, RunStatus, StageResult, ctx, pipeline, stage,
};
use fluxio_redis::RedisStore;

static RUNS: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];
static CHARGE_FAILS: AtomicBool = AtomicBool::new(true);

#[derive(Debug, thiserror::Error)]
#[error("payment gateway timed out")]
struct GatewayDown;

#[stage]
async fn validate(ctx: Context) -> StageResult {
    RUNS[0].fetch_add(1, Ordering::SeqCst);
    let cents: u64 = ctx.get("cents")?;
    Ok(ctx.set("valid", cents > 0)?)
}

#[stage]
async fn reserve(ctx: Context) -> StageResult {
    RUNS[1].fetch_add(1, Ordering::SeqCst);
    Ok(ctx.set("reservation", "rsv-1")?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    RUNS[2].fetch_add(1, Ordering::SeqCst);
    if CHARGE_FAILS.load(Ordering::SeqCst) {
        return Err(Box::new(GatewayDown));
    }
    let cents: u64 = ctx.get("cents")?;
    Ok(ctx.set("charged", cents)?)
}

#[stage]
async fn receipt(ctx: Context) -> StageResult {
    RUNS[3].fetch_add(1, Ordering::SeqCst);
    Ok(ctx.set("receipt", "sent")?)
}

fn checkout() -> PipelineBuilder {
    pipeline![validate, reserve, charge, receipt].lease_ttl(Duration::from_secs(5))
}

fn runs() -> [usize; 4] {
    RUNS.each_ref().map(|r| r.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_resumes_in_another_process() -> anyhow::Result<()> {
    let Some(mut raw) = common::raw().await else {
        return Ok(());
    };
    let prefix = common::prefix("resume");
    let connect = || {
        RedisStore::builder(common::url())
            .key_prefix(&prefix)
            .ttl(Duration::from_secs(120))
            .connect()
    };
    let run_id = "order-42";

    // "process" one: the gateway is down, the run fails at `charge`
    let first = checkout().store(connect().await?).build()?;
    let err = first
        .invoke(run_id, ctx! { "cents" => 1999u64 }?)
        .await
        .expect_err("charge fails");
    assert!(err.stage_error::<GatewayDown>().is_some(), "{err}");
    assert_eq!(runs(), [1, 1, 1, 0]);
    drop(first);

    // what Redis holds: a failure checkpoint at `charge`, and no lease
    let cp = connect()
        .await?
        .load(run_id)
        .await?
        .expect("a failure leaves a checkpoint");
    assert_eq!(
        (cp.step.as_str(), cp.status, cp.is_failed()),
        ("charge", RunStatus::Failed, true)
    );
    assert_eq!(
        common::keys(&mut raw, &prefix).await,
        vec![
            format!("{prefix}.epoch:{run_id}"),
            format!("{prefix}:{run_id}")
        ],
        "the lease was released"
    );

    // "process" two: a new connection and a new pipeline value
    CHARGE_FAILS.store(false, Ordering::SeqCst);
    let second = checkout().store(connect().await?).build()?;
    let out = second.resume(run_id).await?;
    assert_eq!(
        runs(),
        [1, 1, 2, 1],
        "only `charge` and `receipt` ran again"
    );
    assert_eq!(out.get::<u64>("charged")?, 1999);
    assert_eq!(out.get::<String>("reservation")?, "rsv-1");
    assert_eq!(out.get::<String>("receipt")?, "sent");

    // completed: a third resume runs nothing and returns the same context
    let cp = second
        .checkpoint(run_id)
        .await?
        .expect("completed checkpoint");
    assert_eq!(cp.status, RunStatus::Completed);
    assert_eq!(second.resume(run_id).await?, out);
    assert_eq!(runs(), [1, 1, 2, 1]);

    common::cleanup(&mut raw, &prefix).await;
    Ok(())
}
