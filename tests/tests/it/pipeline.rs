//! docs/CONTRACT.md section 1: stages, parallel blocks, routing, auto-parallelism,
//! the version, explain and run_step.

use crate::common;

use std::sync::mpsc;
use std::time::Duration;

use common::{a, b, c, calls, input};
use fluxio::{Context, Error, Outcome, StageKind, StageResult, ctx, pipeline, stage};

// ---- stage kinds -------------------------------------------------------------

static TX: std::sync::Mutex<Option<mpsc::Sender<()>>> = std::sync::Mutex::new(None);

/// Waits (blocking the thread) for a signal that an async task sends. If this
/// ran on the runtime's only worker thread, the async task could never run.
#[stage]
fn blocking_wait(ctx: Context) -> StageResult {
    let (tx, rx) = mpsc::channel();
    *TX.lock().map_err(|_| "poisoned")? = Some(tx);
    rx.recv_timeout(Duration::from_secs(10))
        .map_err(|_| "the async task never ran: stage blocked the worker")?;
    Ok(ctx.set("thread", format!("{:?}", std::thread::current().id()))?)
}

#[tokio::test(flavor = "current_thread")]
async fn sync_stages_run_on_the_blocking_pool_not_on_the_async_worker() {
    let p = pipeline![blocking_wait].build().expect("valid");
    assert_eq!(p.program().stages[0].meta().kind, StageKind::Blocking);
    let signal = tokio::spawn(async {
        loop {
            if let Some(tx) = TX.lock().ok().and_then(|mut g| g.take()) {
                let _ = tx.send(());
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    let out = p
        .invoke("sync", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("the stage was not on the worker");
    signal.await.expect("signal task");
    let worker = format!("{:?}", std::thread::current().id());
    assert_ne!(out.get::<String>("thread").expect("set"), worker);
}

// ---- parallel -----------------------------------------------------------------

#[stage]
async fn left(ctx: Context) -> StageResult {
    Ok(ctx.set("left", 1)?)
}

#[stage]
fn right(ctx: Context) -> StageResult {
    Ok(ctx.set("right", 2)?)
}

#[stage]
async fn also_left(ctx: Context) -> StageResult {
    Ok(ctx.set("left", 3)?.set("shared", 0)?)
}

#[stage]
async fn writes_shared(ctx: Context) -> StageResult {
    Ok(ctx.set("shared", 1)?)
}

#[stage]
async fn sum(ctx: Context) -> StageResult {
    let s = ctx.get::<i32>("left")? + ctx.get::<i32>("right")?;
    Ok(ctx.set("sum", s)?)
}

#[tokio::test]
async fn parallel_branches_merge_their_writes() {
    let p = pipeline![parallel![left, right], sum]
        .build()
        .expect("valid");
    let out = p
        .invoke("par", ctx! { "seed" => true }.expect("ok"))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(out.get::<i32>("sum").expect("merged"), 3);
    assert!(out.get::<bool>("seed").expect("base kept"));
}

#[tokio::test]
async fn parallel_branches_with_sequences_and_nesting() {
    let t = "par-seq";
    let p = pipeline![parallel![[a, b], parallel![left, right]], sum]
        .build()
        .expect("valid");
    let out = p
        .invoke("par2", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(
        out.get::<Vec<String>>("path").expect("branch wrote path"),
        ["a", "b"]
    );
    assert_eq!(out.get::<i32>("sum").expect("nested merge"), 3);
}

#[tokio::test]
async fn merge_conflict_names_the_keys_and_the_branches() {
    let p = pipeline![parallel![left, also_left, writes_shared]]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let err = p
        .invoke("conflict", Context::new())
        .await
        .expect_err("conflict");
    match &err {
        Error::MergeConflict { keys, branches } => {
            assert_eq!(keys, &["left", "shared"]);
            assert_eq!(branches, &["left", "also_left", "writes_shared"]);
        }
        other => panic!("expected a merge conflict, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "merge conflict: `left`, `shared` written by more than one of the branches `left`, `also_left`, `writes_shared`"
    );
    // the failure checkpoint points at the parallel block
    let cp = p.checkpoint("conflict").await.expect("ok").expect("stored");
    assert!(cp.is_failed());
    assert_eq!(cp.step, "parallel(left, also_left, writes_shared)");
}

#[stage(writes = ["k"])]
async fn declares_k(ctx: Context) -> StageResult {
    Ok(ctx.set("k", 1)?)
}

#[stage(writes = ["k", "z"])]
async fn also_declares_k(ctx: Context) -> StageResult {
    Ok(ctx.set("k", 2)?)
}

#[test]
fn two_branches_declaring_the_same_write_is_a_build_error() {
    let err = pipeline![parallel![declares_k, [a, also_declares_k]]]
        .build()
        .expect_err("same write");
    assert!(matches!(err, Error::Build { .. }));
    assert_eq!(
        err.to_string(),
        "invalid pipeline: parallel branches both declare a write of `k`: stages `declares_k` and `also_declares_k`"
    );
}

static FIRED: tokio::sync::Notify = tokio::sync::Notify::const_new();

#[stage]
async fn background_ok(ctx: Context) -> StageResult {
    FIRED.notify_one();
    Ok(ctx.set("background", true)?)
}

#[stage]
async fn background_fails(_ctx: Context) -> StageResult {
    Err("background failure".into())
}

#[tokio::test]
async fn fire_and_forget_branches_run_but_never_merge_or_fail_the_run() {
    let p = pipeline![fire_and_forget![background_fails, background_ok], left]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let out = p
        .invoke("faf", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("branch errors do not propagate");
    assert_eq!(out.get::<i32>("left").expect("continued"), 1);
    assert!(!out.contains_key("background"), "nothing merged");
    tokio::time::timeout(Duration::from_secs(10), FIRED.notified())
        .await
        .expect("the background branch ran");
}

// ---- routing ------------------------------------------------------------------

#[stage]
async fn router(ctx: Context) -> StageResult<fluxio::Route> {
    let tier: String = ctx.get("tier")?;
    Ok(fluxio::Route::to(tier).with("routed", true)?)
}

#[stage]
async fn premium(ctx: Context) -> StageResult {
    let routed: bool = ctx.get("routed")?; // the patch is applied before the body
    Ok(ctx.set("took", "premium")?.set("saw_patch", routed)?)
}

#[stage]
async fn standard(ctx: Context) -> StageResult {
    Ok(ctx.set("took", "standard")?)
}

#[stage]
async fn inner_router(ctx: Context) -> StageResult<fluxio::Route> {
    let region: String = ctx.get("region")?;
    Ok(fluxio::Route::to(region))
}

#[stage]
async fn eu(ctx: Context) -> StageResult {
    Ok(ctx.set("region_done", "eu")?)
}

#[stage]
async fn us(ctx: Context) -> StageResult {
    Ok(ctx.set("region_done", "us")?)
}

#[stage]
async fn after(ctx: Context) -> StageResult {
    Ok(ctx.set("after", true)?)
}

fn routed() -> fluxio::Pipeline {
    pipeline![
        router => {
            "premium" => [premium, inner_router => { "eu" => eu, "us" => pipeline![us] }],
            "standard" => standard,
        },
        after,
    ]
    .name("test")
    .durable(true)
    .build()
    .expect("valid")
}

#[tokio::test]
async fn routing_takes_the_chosen_body_applies_the_patch_and_continues_after_the_block() {
    let p = routed();
    let out = p
        .invoke("route-std", ctx! { "tier" => "standard" }.expect("ok"))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(out.get::<String>("took").expect("set"), "standard");
    assert!(out.get::<bool>("routed").expect("patch applied"));
    assert!(out.get::<bool>("after").expect("continued after the block"));
    assert!(!out.contains_key("region_done"));
}

#[tokio::test]
async fn routing_nests() {
    let p = routed();
    let out = p
        .invoke(
            "route-nested",
            ctx! { "tier" => "premium", "region" => "us" }.expect("ok"),
        )
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(out.get::<String>("took").expect("set"), "premium");
    assert!(out.get::<bool>("saw_patch").expect("set"));
    assert_eq!(
        out.get::<String>("region_done").expect("nested route"),
        "us"
    );
    assert!(out.get::<bool>("after").expect("continued"));
}

#[tokio::test]
async fn unknown_route_lists_the_available_routes_and_leaves_an_error_checkpoint() {
    let p = routed();
    let err = p
        .invoke("route-unknown", ctx! { "tier" => "gold" }.expect("ok"))
        .await
        .expect_err("unknown");
    match &err {
        Error::UnknownRoute {
            router,
            route,
            available,
        } => {
            assert_eq!((router.as_str(), route.as_str()), ("router", "gold"));
            assert_eq!(available, &["premium", "standard"]);
        }
        other => panic!("expected UnknownRoute, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "router `router` chose unknown route `gold`; available routes: `premium`, `standard`"
    );
    let cp = p
        .checkpoint("route-unknown")
        .await
        .expect("ok")
        .expect("stored");
    assert_eq!((cp.step.as_str(), cp.is_failed()), ("router", true));
}

#[tokio::test]
async fn resume_inside_a_route_body_continues_there() {
    let t = "route-resume";
    common::arm(t, "c");
    let p = pipeline![router => { "x" => [a, c], "y" => b }, b]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let input = input(t).set("tier", "x").expect("ok");
    p.invoke("rr", input).await.expect_err("c fails");
    assert_eq!(
        p.checkpoint("rr").await.expect("ok").expect("stored").step,
        "c"
    );
    common::disarm(t, "c");
    let out = p
        .resume("rr")
        .await
        .and_then(Outcome::completed)
        .expect("resumes inside the body");
    assert_eq!(
        out.get::<Vec<String>>("path").expect("set"),
        ["a", "c", "b"]
    );
    assert_eq!((calls(t, "a"), calls(t, "c"), calls(t, "b")), (1, 2, 1));
}

// ---- auto-parallelism, explain, version, run_step ------------------------------

#[stage(reads = ["n"], writes = ["x"])]
async fn fx(ctx: Context) -> StageResult {
    let n: i32 = ctx.get("n")?;
    Ok(ctx.set("x", n + 1)?)
}

#[stage(reads = ["n"], writes = ["y"])]
fn fy(ctx: Context) -> StageResult {
    let n: i32 = ctx.get("n")?;
    Ok(ctx.set("y", n + 2)?)
}

#[stage(reads = ["x", "y"], writes = ["z"])]
async fn fz(ctx: Context) -> StageResult {
    let z = ctx.get::<i32>("x")? + ctx.get::<i32>("y")?;
    Ok(ctx.set("z", z)?)
}

#[tokio::test]
async fn auto_parallel_folds_independent_declared_stages_only() {
    let on = pipeline![fx, fy, fz].build().expect("valid");
    let off = pipeline![fx, fy, fz]
        .auto_parallel(false)
        .build()
        .expect("valid");
    let forks = |p: &fluxio::Pipeline| p.explain().matches("FORK").count();
    assert_eq!(
        forks(&on),
        1,
        "fx and fy fold; fz depends on both:\n{}",
        on.explain()
    );
    assert_eq!(forks(&off), 0);
    assert_ne!(
        on.version(),
        off.version(),
        "the programs differ, so must the versions"
    );
    let input = ctx! { "n" => 1 }.expect("ok");
    assert_eq!(
        on.invoke("ap", input.clone())
            .await
            .and_then(Outcome::completed)
            .expect("runs"),
        off.invoke("ap", input)
            .await
            .and_then(Outcome::completed)
            .expect("runs")
    );
}

#[stage(reads = [], writes = ["tier"])]
async fn declared_router(_ctx: Context) -> StageResult<fluxio::Route> {
    Ok(fluxio::Route::to("x").with("tier", "x")?)
}

#[test]
fn a_router_is_never_folded() {
    let p = pipeline![fx, declared_router => { "x" => fy }]
        .build()
        .expect("valid");
    assert_eq!(p.explain().matches("FORK").count(), 0, "{}", p.explain());
}

#[test]
fn explain_shows_the_version_and_the_instructions() {
    let p = pipeline![a, parallel![left, right], router => { "x" => b }]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let text = p.explain();
    assert!(
        text.starts_with(&format!(
            "pipeline version {} (durable, auto-parallel on,",
            p.version()
        )),
        "{text}"
    );
    for needle in [
        "CHECKPOINT  a",
        "EMIT        step_start a",
        "CALL        a",
        "FORK",
        "END_BRANCH",
        "JOIN",
        "ROUTE       by router: \"x\" ->",
        "JUMP",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn version_is_stable_for_equal_source_and_changes_with_shape() {
    let v = |p: fluxio::PipelineBuilder| p.build().expect("valid").version().to_owned();
    let v1 = v(pipeline![a, b, c]);
    assert_eq!(v1, v(pipeline![a, b, c]));
    assert_eq!(v1, v(pipeline![a, [b, c]]), "nested sequences flatten");
    assert_eq!(v1.len(), 12);
    assert!(
        v1.chars()
            .all(|ch| ch.is_ascii_hexdigit() && !ch.is_ascii_uppercase())
    );
    for other in [
        pipeline![a, c, b],
        pipeline![a, b],
        pipeline![a, parallel![b, c]],
        pipeline![a, fire_and_forget![b, c]],
    ] {
        assert_ne!(v1, v(other));
    }
    assert_ne!(
        v(pipeline![router => { "x" => a, "y" => b }]),
        v(pipeline![router => { "x" => a, "z" => b }]),
        "route keys are part of the shape"
    );
}

#[tokio::test]
async fn run_step_runs_one_stage_alone() {
    let p = pipeline![fx, fy, fz].build().expect("valid");
    let out = p
        .run_step("fy", ctx! { "n" => 40 }.expect("ok"))
        .await
        .expect("runs");
    assert_eq!(out.get::<i32>("y").expect("set"), 42);
    assert!(!out.contains_key("x"), "only fy ran");
    let err = p
        .run_step("nope", Context::new())
        .await
        .expect_err("unknown");
    assert!(matches!(err, Error::UnknownStep { ref step, .. } if step == "nope"));
}

#[stage(name = "renamed-stage")]
async fn with_a_name(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[test]
fn the_name_option_names_the_stage() {
    let p = pipeline![with_a_name].build().expect("valid");
    assert_eq!(p.program().stage_names(), ["renamed-stage"]);
}

#[stage]
async fn returns_fluxio_error(ctx: Context) -> Result<Context, fluxio::Error> {
    ctx.get::<u64>("absent")?;
    Ok(ctx)
}

#[tokio::test]
async fn a_stage_may_return_any_error_type_and_strict_reads_name_the_key() {
    let p = pipeline![returns_fluxio_error].build().expect("valid");
    let err = p
        .invoke("own-err", Context::new())
        .await
        .expect_err("missing key");
    let inner = err
        .stage_error::<fluxio::Error>()
        .expect("the stage's error is kept");
    assert!(
        matches!(inner, Error::MissingKey { key, expected } if key == "absent" && *expected == "u64")
    );
}

#[test]
fn the_function_stays_callable() {
    let out = c(input("callable")).expect("a plain call works");
    assert_eq!(out.get::<Vec<String>>("path").expect("set"), ["c"]);
}

// ---- schema checks ------------------------------------------------------------

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct NeedsUser {
    user_id: u64,
    tags: Vec<String>,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct MakesGreeting {
    greeting: String,
}

#[stage(input = NeedsUser, output = MakesGreeting)]
async fn greet(ctx: Context) -> StageResult {
    let id: u64 = ctx.get("user_id")?;
    if ctx.get_opt::<bool>("forget") == Some(true) {
        return Ok(ctx);
    }
    Ok(ctx.set("greeting", format!("hello {id}"))?)
}

#[tokio::test]
async fn schema_checks_pass_with_extra_keys_and_name_the_failing_field() {
    let p = pipeline![greet]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    assert!(
        p.explain().contains("VALIDATE    input greet")
            && p.explain().contains("VALIDATE    output greet")
    );
    let ok = ctx! { "user_id" => 7u64, "tags" => vec!["a"], "unrelated" => 1 }.expect("ok");
    assert_eq!(
        p.invoke("schema-ok", ok)
            .await
            .and_then(Outcome::completed)
            .expect("valid input")
            .get::<String>("greeting")
            .expect("set"),
        "hello 7"
    );

    let missing = ctx! { "user_id" => 7u64 }.expect("ok");
    let err = p
        .invoke("schema-missing", missing)
        .await
        .expect_err("tags missing");
    assert!(
        matches!(&err, Error::Validation { stage, message } if stage == "greet" && message == "input: missing field `tags`"),
        "{err}"
    );
    let cp = p
        .checkpoint("schema-missing")
        .await
        .expect("ok")
        .expect("stored");
    assert!(
        cp.is_failed(),
        "a validation failure leaves an error checkpoint like any failure"
    );

    let mistyped = ctx! { "user_id" => "seven", "tags" => Vec::<String>::new() }.expect("ok");
    let err = p
        .invoke("schema-type", mistyped)
        .await
        .expect_err("wrong type");
    assert!(
        matches!(&err, Error::Validation { message, .. } if message.starts_with("input: user_id: invalid type")),
        "{err}"
    );

    let forgets = ctx! { "user_id" => 1u64, "tags" => vec!["x"], "forget" => true }.expect("ok");
    let err = p
        .invoke("schema-output", forgets)
        .await
        .expect_err("no greeting");
    assert!(
        matches!(&err, Error::Validation { message, .. } if message == "output: missing field `greeting`"),
        "{err}"
    );
}

#[tokio::test]
async fn schema_checks_run_inside_parallel_branches() {
    let p = pipeline![parallel![greet, left]].build().expect("valid");
    let err = p
        .invoke("schema-branch", ctx! { "user_id" => 1u64 }.expect("ok"))
        .await
        .expect_err("tags missing");
    assert!(
        matches!(&err, Error::Validation { stage, .. } if stage == "greet"),
        "{err}"
    );
}
