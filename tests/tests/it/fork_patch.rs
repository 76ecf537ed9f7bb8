//! docs/CONTRACT.md rule 20, an operator's tools: `fork_with` reruns a run
//! from a step on a corrected context, recording the change in the new
//! run's history, and `plan` says what a resume or replay would run
//! without running a stage body.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use fluxio::store::CheckpointStore;

use fluxio::{
    Context, Error, InMemoryStore, Outcome, Pipeline, Route, StageResult, pipeline, stage,
};

fn memory() -> Arc<dyn CheckpointStore> {
    Arc::new(InMemoryStore::new())
}

/// Stage bodies run, by run (the tests of this file run side by side).
static BODIES: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

fn body_ran() {
    let run = fluxio::StageInfo::current().map_or_else(String::new, |i| i.run_id.to_string());
    *BODIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(run)
        .or_default() += 1;
}

fn ran(run: &str) -> u32 {
    BODIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(run)
        .copied()
        .unwrap_or(0)
}

#[stage]
async fn validate(ctx: Context) -> StageResult {
    body_ran();
    Ok(ctx.set("valid", true)?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    body_ran();
    let card: String = ctx.get("card")?;
    if card != "4242" {
        return Err(format!("card {card} declined").into());
    }
    Ok(ctx.set("charged", true)?)
}

#[stage]
async fn shipping(ctx: Context) -> StageResult<Route> {
    body_ran();
    let fast = ctx.get_opt::<bool>("express").unwrap_or(false);
    Ok(Route::to(if fast { "express" } else { "standard" }))
}

#[stage]
async fn express(ctx: Context) -> StageResult {
    Ok(ctx.set("days", 1)?)
}

#[stage]
async fn standard(ctx: Context) -> StageResult {
    Ok(ctx.set("days", 5)?)
}

#[stage]
async fn notify(ctx: Context) -> StageResult {
    Ok(ctx.set("notified", true)?)
}

fn orders(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![validate, charge, shipping => { "express" => express, "standard" => [standard] }, notify]
        .name("orders")
        .store_arc(Arc::clone(store))
        .build()
        .expect("valid")
}

fn input() -> Context {
    Context::new()
        .set("card", "4000")
        .and_then(|c| c.set("coupon", "SPRING"))
        .expect("set")
}

#[tokio::test]
async fn rule20_fork_with_reruns_from_a_step_on_a_corrected_context_and_records_it() {
    let p = orders(&memory());
    p.invoke("o-1", input()).await.expect_err("declined");
    let out = p
        .fork_with("o-1", "charge", "o-1-fixed", |ctx| {
            Ok(ctx.set("card", "4242")?.remove("coupon"))
        })
        .await
        .expect("the fork completes");
    let Outcome::Completed(done) = out else {
        panic!("completed: {out:?}")
    };
    assert_eq!(done.get::<u32>("days").expect("days"), 5);
    assert!(done.get_opt::<String>("coupon").is_none());

    let history = p.history("o-1-fixed").await.expect("history");
    let origin = history.forked_from.clone().expect("the fork is recorded");
    assert_eq!(origin.run, "orders/o-1");
    assert_eq!(origin.step, "charge");
    assert_eq!(origin.set, ["card"]);
    assert_eq!(origin.removed, ["coupon"]);
    assert!(
        history
            .to_string()
            .contains("forked from orders/o-1 at charge, set card, removed coupon"),
        "{history}"
    );
    // the original run is untouched
    let cp = p.checkpoint("o-1").await.expect("load").expect("stored");
    assert!(cp.is_failed());
    assert_eq!(
        cp.context.to_context().get::<String>("card").expect("card"),
        "4000"
    );
    // a plain fork records where it came from too, with nothing changed
    p.fork("o-1", "validate", "o-1-again")
        .await
        .expect_err("declined again");
    let again = p.history("o-1-again").await.expect("history");
    let origin = again.forked_from.expect("recorded");
    assert!(!origin.patched());
}

#[tokio::test]
async fn rule20_a_failing_patch_or_a_taken_run_id_writes_nothing() {
    let p = orders(&memory());
    p.invoke("o-2", input()).await.expect_err("declined");
    let err = p
        .fork_with("o-2", "charge", "o-2b", |ctx| {
            let n: u64 = ctx.get("no_such_key")?;
            ctx.set("n", n + 1)
        })
        .await
        .expect_err("the patch fails");
    assert!(matches!(err, Error::MissingKey { .. }), "{err}");
    assert!(
        p.checkpoint("o-2b").await.expect("load").is_none(),
        "nothing written"
    );
    let err = p
        .fork_with("o-2", "charge", "o-2", Ok)
        .await
        .expect_err("its own id");
    assert!(matches!(err, Error::InvalidRunId { .. }), "{err}");
    p.invoke("o-3", input()).await.expect_err("declined");
    let err = p
        .fork_with("o-2", "charge", "o-3", |ctx| ctx.set("card", "4242"))
        .await
        .expect_err("a stored run");
    assert!(matches!(err, Error::InvalidRunId { .. }), "{err}");
    let cp = p.checkpoint("o-3").await.expect("load").expect("stored");
    assert!(cp.is_failed(), "o-3 untouched: {cp:?}");
}

#[tokio::test]
async fn rule20_plan_says_what_would_run_without_running_a_body() {
    let p = orders(&memory());
    p.invoke("o-4", input()).await.expect_err("declined");
    let before = ran("orders/o-4");
    assert!(before > 0, "the run's bodies were counted");
    let plan = p.plan("o-4", None).await.expect("a plan");
    let names: Vec<&str> = plan.steps.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(
        names,
        ["charge", "shipping", "express", "standard", "notify"]
    );
    assert!(plan.steps[2].when == [("shipping".to_owned(), "express".to_owned())]);
    assert!(plan.steps[3].when == [("shipping".to_owned(), "standard".to_owned())]);
    assert!(plan.steps[4].when.is_empty());
    assert!(plan.steps.iter().all(|s| !s.completed_before));
    assert_eq!(plan.context.get::<String>("card").expect("card"), "4000");
    assert_eq!(plan.version, p.version());
    let shown = plan.to_string();
    assert!(
        shown.contains("standard  (if shipping -> standard)"),
        "{shown}"
    );

    let from = p.plan("o-4", Some("validate")).await.expect("a plan");
    assert_eq!(from.steps[0].step, "validate");
    assert!(from.steps[0].completed_before, "{from}");
    assert!(
        !from.context.contains_key("valid"),
        "the context before validate"
    );
    assert_eq!(ran("orders/o-4"), before, "no stage body ran");
    assert!(
        p.checkpoint("o-4")
            .await
            .expect("load")
            .expect("stored")
            .is_failed()
    );
}

#[tokio::test]
async fn rule20_plan_is_refused_as_the_resume_would_be() {
    let store = memory();
    let p = orders(&store);
    assert!(matches!(
        p.plan("nobody", None).await,
        Err(Error::CheckpointNotFound { .. })
    ));
    p.invoke("o-5", input()).await.expect_err("declined");
    assert!(matches!(
        p.plan("o-5", Some("no_such_stage")).await,
        Err(Error::UnknownStep { .. })
    ));
    let other = pipeline![validate, charge]
        .name("orders")
        .store_arc(store)
        .build()
        .expect("valid");
    assert!(matches!(
        other.plan("o-5", None).await,
        Err(Error::CheckpointVersion { .. })
    ));
    p.cancel("o-5").await.expect("cancelled");
    assert!(matches!(
        p.plan("o-5", None).await,
        Err(Error::Cancelled { .. })
    ));
    let done = p
        .fork_with("o-5", "charge", "o-6", |ctx| ctx.set("card", "4242"))
        .await
        .expect("completes");
    assert!(matches!(done, Outcome::Completed(_)));
    let plan = p.plan("o-6", None).await.expect("a plan");
    assert!(plan.steps.is_empty(), "{plan}");
}
