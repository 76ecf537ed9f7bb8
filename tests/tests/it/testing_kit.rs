//! The test kit (`fluxio::testing`): one stage alone, with middleware, its
//! stream chunks and exactly the keys it wrote.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fluxio::middleware::{Backoff, Retry};
use fluxio::testing::StageTest;
use fluxio::{Context, Emitter, StageResult, Value, ctx, pipeline, stage};

#[stage]
async fn greet(ctx: Context) -> StageResult {
    let name: String = ctx.get("name")?;
    Ok(ctx
        .set("greeting", format!("hello, {name}"))?
        .remove("draft"))
}

#[tokio::test]
async fn a_stage_runs_alone_and_reports_exactly_its_writes() {
    let input = ctx! { "name" => "Ada", "draft" => true }.expect("ok");
    let run = StageTest::of::<greet>().run(input).await.expect("runs");
    run.assert_wrote(&["greeting", "draft"]);
    assert_eq!(
        run.context.get::<String>("greeting").expect("set"),
        "hello, Ada"
    );
    assert!(!run.context.contains_key("draft"));
    assert!(run.chunks.is_empty() && run.route.is_none());
}

#[test]
#[should_panic(
    expected = "the stage wrote [\"draft\", \"greeting\"], expected exactly [\"greeting\"]"
)]
fn assert_wrote_fails_on_extra_writes() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let run = rt
        .block_on(StageTest::of::<greet>().run(ctx! { "name" => "Ada" }.expect("ok")))
        .expect("runs");
    run.assert_wrote(&["greeting"]);
}

static FLAKY_CALLS: AtomicU32 = AtomicU32::new(0);

#[stage]
async fn flaky(ctx: Context) -> StageResult {
    if FLAKY_CALLS.fetch_add(1, Ordering::SeqCst) < 2 {
        return Err("transient".into());
    }
    Ok(ctx.set("done", true)?)
}

#[tokio::test(start_paused = true)]
async fn a_stage_runs_through_middleware() {
    let run = StageTest::of::<flaky>()
        .middleware(Retry::new(3).backoff(Backoff::Fixed(Duration::from_millis(10))))
        .run(Context::new())
        .await
        .expect("the third attempt succeeds");
    assert_eq!(FLAKY_CALLS.load(Ordering::SeqCst), 3);
    run.assert_wrote(&["done"]);
}

#[stage]
async fn words(ctx: Context, out: Emitter) -> StageResult {
    for w in ["a", "b", "c"] {
        out.emit(w).await?;
    }
    Ok(ctx)
}

#[tokio::test]
async fn a_stream_stage_s_chunks_are_collected() {
    let run = StageTest::of::<words>()
        .run(Context::new())
        .await
        .expect("runs");
    assert_eq!(
        run.chunks,
        [Value::from("a"), Value::from("b"), Value::from("c")]
    );
    run.assert_wrote(&["words_stream_result"]);
}

#[stage]
async fn pick(ctx: Context) -> StageResult<fluxio::Route> {
    let vip: bool = ctx.get("vip")?;
    Ok(fluxio::Route::to(if vip { "vip" } else { "plain" }).with("priority", u8::from(vip))?)
}

#[tokio::test]
async fn a_router_reports_its_route_and_patch() {
    let run = StageTest::of::<pick>()
        .run(ctx! { "vip" => true }.expect("ok"))
        .await
        .expect("runs");
    assert_eq!(run.route.as_deref(), Some("vip"));
    run.assert_wrote(&["priority"]);
    // run_step on a built pipeline goes through the pipeline's middleware too
    let p = pipeline![pick => { "vip" => greet, "plain" => greet }]
        .build()
        .expect("valid");
    let out = p
        .run_step("pick", ctx! { "vip" => false }.expect("ok"))
        .await
        .expect("runs");
    assert_eq!(out.get::<u8>("priority").expect("patched"), 0);
}

/// How many chunks `ticker` emitted so far.
static EMITTED: AtomicU32 = AtomicU32::new(0);

#[stage]
async fn ticker(ctx: Context, out: Emitter) -> StageResult {
    for n in 1..=3u32 {
        out.emit(n).await?;
        EMITTED.store(n, Ordering::SeqCst);
    }
    Ok(ctx)
}

#[tokio::test]
async fn a_stream_stage_s_chunks_are_seen_one_by_one_as_it_emits_them() {
    let mut live = StageTest::of::<ticker>().stream(Context::new());
    let first = tokio::time::timeout(Duration::from_secs(5), live.next())
        .await
        .expect("the first chunk comes before the stage ends");
    assert_eq!(first, Some(Value::from(1u32)));
    // the stage runs at most one chunk ahead of its reader: it emitted
    // the second and waits at the third
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        EMITTED.load(Ordering::SeqCst),
        2,
        "one chunk ahead of the reader, no more"
    );
    assert_eq!(live.next().await, Some(Value::from(2u32)));
    let run = live.finish().await.expect("the stage returns");
    assert_eq!(EMITTED.load(Ordering::SeqCst), 3);
    assert_eq!(
        run.chunks,
        [Value::from(1u32), Value::from(2u32), Value::from(3u32)]
    );
    run.assert_wrote(&["ticker_stream_result"]);
}
