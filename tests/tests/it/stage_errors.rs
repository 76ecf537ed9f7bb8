//! A stage's error type: any `std::error::Error + Send + Sync + 'static`,
//! `Box<dyn Error + Send + Sync>` or `anyhow::Error`, each downcastable with
//! `Error::stage_error`.

use std::error::Error as _;

use fluxio::{Context, Error, Outcome, pipeline, stage};

#[derive(Debug, thiserror::Error)]
#[error("card declined")]
struct Declined;

#[stage]
async fn anyhow_async(ctx: Context) -> anyhow::Result<Context> {
    let order: u32 = ctx.get("order")?;
    Err(anyhow::Error::new(Declined).context(format!("charging order {order}")))
}

#[stage]
fn anyhow_blocking(_ctx: Context) -> Result<Context, anyhow::Error> {
    anyhow::bail!("ledger closed")
}

#[stage]
async fn anyhow_router(_ctx: Context) -> anyhow::Result<fluxio::Route> {
    Err(anyhow::Error::new(Declined))
}

#[stage]
async fn noop(ctx: Context) -> anyhow::Result<Context> {
    Ok(ctx.set("ran", true)?)
}

#[stage]
async fn boxed(_ctx: Context) -> Result<Context, Box<dyn std::error::Error + Send + Sync>> {
    Err(Box::new(Declined))
}

async fn fail(p: fluxio::PipelineBuilder) -> Error {
    p.build()
        .expect("builds")
        .invoke("r", fluxio::ctx! { "order" => 7u32 }.expect("ok"))
        .await
        .expect_err("the stage fails")
}

#[tokio::test]
async fn an_anyhow_error_is_reachable_with_its_context_and_root_cause() {
    let err = fail(pipeline![anyhow_async]).await;
    assert_eq!(err.stage(), Some("anyhow_async"));
    assert_eq!(
        err.to_string(),
        "stage `anyhow_async` failed: charging order 7"
    );
    let any = err
        .stage_error_any::<anyhow::Error>()
        .expect("the stage's anyhow::Error");
    assert!(any.downcast_ref::<Declined>().is_some());
    assert_eq!(any.root_cause().to_string(), "card declined");
    // the std source chain goes on into anyhow's chain
    let source = err.source().expect("the stage's error");
    assert_eq!(source.to_string(), "charging order 7");
    assert_eq!(
        source.source().map(ToString::to_string).as_deref(),
        Some("card declined")
    );
}

#[tokio::test]
async fn anyhow_works_in_blocking_stages_and_routers() {
    let err = fail(pipeline![anyhow_blocking]).await;
    let any = err.stage_error_any::<anyhow::Error>().expect("anyhow");
    assert_eq!(any.to_string(), "ledger closed");

    let err = fail(pipeline![anyhow_router => { "x" => noop }]).await;
    let any = err.stage_error_any::<anyhow::Error>().expect("anyhow");
    assert!(any.is::<Declined>());
}

#[tokio::test]
async fn an_anyhow_stage_that_succeeds_runs_on() {
    let out = pipeline![noop]
        .build()
        .expect("builds")
        .invoke("r", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert!(out.get::<bool>("ran").expect("set"));
}

#[tokio::test]
async fn a_boxed_error_downcasts_to_the_boxed_type() {
    let err = fail(pipeline![boxed]).await;
    assert!(err.stage_error::<Declined>().is_some(), "{err:?}");
    assert_eq!(err.to_string(), "stage `boxed` failed: card declined");
}
