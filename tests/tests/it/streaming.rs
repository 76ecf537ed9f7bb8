//! docs/CONTRACT.md section 4: streaming stages, `Pipeline::stream`, backpressure,
//! cancellation on drop, `<stage>_stream_result`, durability and retry.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use fluxio::middleware::{Backoff, Retry};
use fluxio::{
    Context, Emitter, Error, InMemoryStore, Outcome, RunStatus, StageInfo, StageKind, StageResult,
    StreamEvent, Value, ctx, pipeline, stage,
};
use futures::StreamExt as _;

/// Splits a finished stream into its chunk values and its last item.
fn split(events: Vec<fluxio::Result<StreamEvent>>) -> (Vec<Value>, fluxio::Result<Context>) {
    let mut chunks = Vec::new();
    let mut last = None;
    for e in events {
        match e {
            Ok(StreamEvent::Chunk(c)) => chunks.push(c.value),
            Ok(StreamEvent::Done(ctx)) => last = Some(Ok(ctx)),
            Err(e) => last = Some(Err(e)),
            Ok(other) => panic!("unexpected event {other:?}"),
        }
    }
    (chunks, last.expect("the stream ends with a final item"))
}

fn u64s(values: &[Value]) -> Vec<u64> {
    values
        .iter()
        .map(|v| match v {
            Value::U64(n) => *n,
            other => panic!("not a u64: {other:?}"),
        })
        .collect()
}

// ---- order, empty streams, stored results ------------------------------------

/// Emits 0..n.
#[stage]
async fn count_to(ctx: Context, out: Emitter) -> StageResult {
    let n: u64 = ctx.get("n")?;
    for i in 0..n {
        out.emit(i).await?;
    }
    Ok(ctx.set("counted", true)?)
}

#[stage]
async fn after(ctx: Context) -> StageResult {
    let seen: Vec<u64> = ctx.get("count_to_stream_result")?;
    Ok(ctx.set("seen_by_next_stage", seen.len())?)
}

#[tokio::test]
async fn a_stage_with_an_emitter_is_a_stream_stage() {
    let p = pipeline![count_to].build().expect("valid");
    assert_eq!(p.program().stages[0].meta().kind, StageKind::Stream);
}

#[tokio::test]
async fn chunks_arrive_in_order_then_the_final_context() {
    let p = pipeline![count_to, after].build().expect("valid");
    let events: Vec<_> = p
        .stream("order", ctx! { "n" => 5u64 }.expect("ctx"))
        .collect()
        .await;
    assert_eq!(events.len(), 6, "{events:?}");
    for e in &events[..5] {
        let Ok(StreamEvent::Chunk(c)) = e else {
            panic!("expected a chunk, got {e:?}")
        };
        assert_eq!(c.stage, "count_to");
    }
    let (chunks, done) = split(events);
    assert_eq!(u64s(&chunks), [0, 1, 2, 3, 4]);
    let done = done.expect("completed");
    assert!(done.get::<bool>("counted").expect("set"));
    assert_eq!(
        done.get::<Vec<u64>>("count_to_stream_result")
            .expect("stored"),
        [0, 1, 2, 3, 4]
    );
    assert_eq!(done.get::<usize>("seen_by_next_stage").expect("set"), 5);
}

#[tokio::test]
async fn a_stream_with_zero_chunks_yields_only_the_final_context() {
    let p = pipeline![count_to].build().expect("valid");
    let events: Vec<_> = p
        .stream("empty", ctx! { "n" => 0u64 }.expect("ctx"))
        .collect()
        .await;
    assert_eq!(events.len(), 1, "{events:?}");
    let (chunks, done) = split(events);
    assert!(chunks.is_empty());
    let done = done.expect("completed");
    assert_eq!(
        done.value("count_to_stream_result").as_deref(),
        Some(&Value::Seq(Vec::new()))
    );
}

#[tokio::test]
async fn invoke_collects_the_chunks_into_the_context() {
    let p = pipeline![count_to, after].build().expect("valid");
    let out = p
        .invoke("plain", ctx! { "n" => 3u64 }.expect("ctx"))
        .await
        .and_then(Outcome::completed)
        .expect("ok");
    assert_eq!(
        out.get::<Vec<u64>>("count_to_stream_result")
            .expect("stored"),
        [0, 1, 2]
    );
    assert_eq!(out.get::<usize>("seen_by_next_stage").expect("set"), 3);
    // run_step too
    let alone = p
        .run_step("count_to", ctx! { "n" => 2u64 }.expect("ctx"))
        .await
        .expect("ok");
    assert_eq!(
        alone
            .get::<Vec<u64>>("count_to_stream_result")
            .expect("stored"),
        [0, 1]
    );
}

#[tokio::test]
async fn a_stream_stage_can_be_called_directly_with_a_collecting_emitter() {
    let out = Emitter::collecting("count_to");
    let ctx = count_to(ctx! { "n" => 2u64 }.expect("ctx"), out)
        .await
        .expect("ok");
    assert!(ctx.get::<bool>("counted").expect("set"));
    let out = Emitter::collecting("x");
    out.emit("a").await.expect("collects");
    assert_eq!(out.chunks(), [Value::String("a".into())]);
}

// ---- cancellation ---------------------------------------------------------------

static ENDLESS_EMITTED: AtomicUsize = AtomicUsize::new(0);
static ENDLESS_DROPPED: AtomicBool = AtomicBool::new(false);

struct DropFlag(&'static AtomicBool);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Emits until `limit` (default: forever); records its own drop.
#[stage]
async fn endless(ctx: Context, out: Emitter) -> StageResult {
    let limit: u64 = ctx.get("limit").unwrap_or(u64::MAX);
    let _guard = DropFlag(&ENDLESS_DROPPED);
    let mut i = 0u64;
    while i < limit {
        out.emit(i).await?;
        ENDLESS_EMITTED.fetch_add(1, Ordering::SeqCst);
        i += 1;
    }
    Ok(ctx)
}

#[tokio::test]
async fn dropping_the_stream_cancels_the_producer_and_frees_the_run_id() {
    let p = pipeline![endless]
        .name("test")
        .store(InMemoryStore::new())
        .stream_buffer(2)
        .build()
        .expect("valid");
    let mut s = p.stream("cancel", Context::new());
    for want in 0..3u64 {
        match s.next().await {
            Some(Ok(StreamEvent::Chunk(c))) => assert_eq!(c.value, Value::U64(want)),
            other => panic!("expected a chunk, got {other:?}"),
        }
    }
    assert!(!ENDLESS_DROPPED.load(Ordering::SeqCst));
    drop(s);
    // the stage's future is dropped (its guard runs) without reading more
    tokio::time::timeout(Duration::from_secs(10), async {
        while !ENDLESS_DROPPED.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the producer was cancelled");
    let emitted = ENDLESS_EMITTED.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        ENDLESS_EMITTED.load(Ordering::SeqCst),
        emitted,
        "nothing runs after the drop"
    );
    assert!(emitted <= 3 + 2 + 1, "bounded by the buffer: {emitted}");
    // the run id is free again (the lease is released in the background)
    let out = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match p
                .invoke("cancel", ctx! { "limit" => 2u64 }.expect("ctx"))
                .await
            {
                Err(Error::RunIdInUse { .. }) => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                other => break other,
            }
        }
    })
    .await
    .expect("the run id was released")
    .and_then(Outcome::completed)
    .expect("a new run of the id completes");
    assert_eq!(
        out.get::<Vec<u64>>("endless_stream_result")
            .expect("stored"),
        [0, 1]
    );
}

// ---- isolation -------------------------------------------------------------------

#[stage]
async fn tagged(ctx: Context, out: Emitter) -> StageResult {
    let tag: String = ctx.get("tag")?;
    for i in 0..20 {
        out.emit(format!("{tag}-{i}")).await?;
        tokio::task::yield_now().await;
    }
    Ok(ctx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_streams_do_not_mix() {
    let p = pipeline![tagged].stream_buffer(1).build().expect("valid");
    let a = p
        .stream("a", ctx! { "tag" => "a" }.expect("ctx"))
        .collect::<Vec<_>>();
    let b = p
        .stream("b", ctx! { "tag" => "b" }.expect("ctx"))
        .collect::<Vec<_>>();
    let (a, b) = futures::join!(a, b);
    for (tag, events) in [("a", a), ("b", b)] {
        let (chunks, done) = split(events);
        let want: Vec<Value> = (0..20)
            .map(|i| Value::String(format!("{tag}-{i}")))
            .collect();
        assert_eq!(chunks, want);
        assert_eq!(
            done.expect("completed")
                .get::<Vec<String>>("tagged_stream_result")
                .expect("stored")
                .len(),
            20
        );
    }
}

// ---- backpressure -------------------------------------------------------------

static EAGER_EMITTED: AtomicUsize = AtomicUsize::new(0);

#[stage]
async fn eager(ctx: Context, out: Emitter) -> StageResult {
    for i in 0..10u64 {
        out.emit(i).await?;
        EAGER_EMITTED.fetch_add(1, Ordering::SeqCst);
    }
    Ok(ctx)
}

#[tokio::test(start_paused = true)]
async fn a_consumer_that_does_not_read_blocks_the_stage_at_the_buffer_size() {
    let p = pipeline![eager].stream_buffer(1).build().expect("valid");
    let mut s = p.stream("slow", Context::new());
    tokio::time::sleep(Duration::from_secs(60)).await;
    // one chunk in the buffer, the second emit waiting for room
    assert_eq!(EAGER_EMITTED.load(Ordering::SeqCst), 1);
    let first = s.next().await;
    assert!(
        matches!(first, Some(Ok(StreamEvent::Chunk(_)))),
        "{first:?}"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(EAGER_EMITTED.load(Ordering::SeqCst), 2, "one more per read");
    let rest: Vec<_> = s.collect().await;
    let (chunks, done) = split(rest);
    assert_eq!(u64s(&chunks), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    done.expect("completed");
    assert_eq!(EAGER_EMITTED.load(Ordering::SeqCst), 10);
}

// ---- durability -----------------------------------------------------------------

static GATE_OPEN: AtomicBool = AtomicBool::new(false);

#[stage]
async fn gated(ctx: Context, out: Emitter) -> StageResult {
    out.emit("first").await?;
    while !GATE_OPEN.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    out.emit("second").await?;
    Ok(ctx)
}

#[tokio::test]
async fn a_durable_stream_holds_the_run_id_for_the_whole_stream() {
    let p = pipeline![gated]
        .name("test")
        .store(InMemoryStore::new())
        .build()
        .expect("valid");
    let mut s = p.stream("locked", Context::new());
    let first = s.next().await;
    assert!(
        matches!(&first, Some(Ok(StreamEvent::Chunk(c))) if c.value == Value::String("first".into())),
        "{first:?}"
    );
    let err = p
        .invoke("locked", Context::new())
        .await
        .expect_err("the stream owns the id");
    assert!(matches!(err, Error::RunIdInUse { .. }), "{err:?}");
    GATE_OPEN.store(true, Ordering::SeqCst);
    let (chunks, done) = split(s.collect().await);
    assert_eq!(chunks, [Value::String("second".into())]);
    done.expect("completed");
    let cp = p.checkpoint("locked").await.expect("load").expect("saved");
    assert_eq!(cp.status, RunStatus::Completed);
}

static FLAKY_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Emits two chunks, then fails on its first attempt.
#[stage]
async fn flaky_stream(ctx: Context, out: Emitter) -> StageResult {
    FLAKY_CALLS.fetch_add(1, Ordering::SeqCst);
    out.emit("a").await?;
    out.emit("b").await?;
    let attempt = StageInfo::current().map_or(0, |i| i.attempt);
    if attempt == 1 {
        return Err("first attempt fails".into());
    }
    Ok(ctx.set("attempt", attempt)?)
}

#[tokio::test]
async fn resuming_after_a_failure_in_a_stream_stage_reruns_the_stage() {
    let p = pipeline![flaky_stream]
        .name("test")
        .store(InMemoryStore::new())
        .build()
        .expect("valid");
    let (chunks, done) = split(p.stream("flaky", Context::new()).collect().await);
    assert_eq!(
        chunks,
        [Value::String("a".into()), Value::String("b".into())]
    );
    let err = done.expect_err("the first attempt fails");
    assert!(
        matches!(&err, Error::Stage { stage, .. } if stage == "flaky_stream"),
        "{err:?}"
    );
    let cp = p.checkpoint("flaky").await.expect("load").expect("saved");
    assert_eq!(cp.status, RunStatus::Failed);
    assert_eq!(&*cp.step, "flaky_stream");
    let out = p
        .resume("flaky")
        .await
        .and_then(Outcome::completed)
        .expect("the rerun succeeds");
    assert_eq!(FLAKY_CALLS.load(Ordering::SeqCst), 2, "the stage re-ran");
    assert_eq!(out.get::<u32>("attempt").expect("set"), 2);
    // the re-run's own chunks, not the failed attempt's appended
    assert_eq!(
        out.get::<Vec<String>>("flaky_stream_stream_result")
            .expect("stored"),
        ["a", "b"]
    );
}

// ---- retry ------------------------------------------------------------------------

static FAILING_CALLS: AtomicUsize = AtomicUsize::new(0);

#[stage]
async fn always_fails(_ctx: Context, out: Emitter) -> StageResult {
    FAILING_CALLS.fetch_add(1, Ordering::SeqCst);
    out.emit("partial").await?;
    Err("boom".into())
}

#[tokio::test(start_paused = true)]
async fn retry_does_not_rerun_a_failing_stream_stage() {
    let p = pipeline![always_fails]
        .middleware(Retry::new(3).backoff(Backoff::Fixed(Duration::from_millis(10))))
        .build()
        .expect("valid");
    let (chunks, done) = split(p.stream("retry", Context::new()).collect().await);
    assert_eq!(chunks, [Value::String("partial".into())], "no duplicates");
    let err = done.expect_err("fails");
    assert!(matches!(err, Error::Stage { .. }), "{err:?}");
    assert_eq!(FAILING_CALLS.load(Ordering::SeqCst), 1);
}
