//! docs/CONTRACT.md section 4, first slice: the middleware chain, retry and timeout.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fluxio::middleware::{Backoff, Middleware, Next, Retry, Timeout};
use fluxio::stage::Output;
use fluxio::{Context, Error, Outcome, RunStatus, Stage, StageResult, pipeline, stage};

/// Fails until it has been called `fail_times` (a context key) times in this
/// test (keyed by the `counter` key), then succeeds.
static COUNTERS: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

fn bump(name: &str) -> u32 {
    let mut c = COUNTERS.lock().expect("not poisoned");
    if let Some(entry) = c.iter_mut().find(|(n, _)| n == name) {
        entry.1 += 1;
        entry.1
    } else {
        c.push((name.to_owned(), 1));
        1
    }
}

fn calls(name: &str) -> u32 {
    COUNTERS
        .lock()
        .expect("not poisoned")
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, n)| *n)
}

#[derive(Debug, thiserror::Error)]
#[error("flaky failure number {0}")]
struct Flaky(u32);

#[stage]
async fn flaky(ctx: Context) -> StageResult {
    let counter: String = ctx.get("counter")?;
    let fail_times: u32 = ctx.get("fail_times")?;
    let n = bump(&counter);
    if n <= fail_times {
        return Err(Box::new(Flaky(n)));
    }
    Ok(ctx.set("succeeded_on", n)?)
}

fn input(counter: &str, fail_times: u32) -> Context {
    fluxio::ctx! { "counter" => counter, "fail_times" => fail_times }.expect("serializable")
}

#[tokio::test(start_paused = true)]
async fn retry_succeeds_after_n_failures() {
    let p = pipeline![flaky]
        .middleware(Retry::new(4))
        .build()
        .expect("valid");
    let out = p
        .invoke("r", input("succeeds", 3))
        .await
        .and_then(Outcome::completed)
        .expect("the fourth attempt succeeds");
    assert_eq!(out.get::<u32>("succeeded_on").expect("set"), 4);
    assert_eq!(calls("succeeds"), 4);
}

#[tokio::test(start_paused = true)]
async fn retry_exhausted_returns_the_last_error() {
    let p = pipeline![flaky]
        .name("test")
        .durable(true)
        .middleware(Retry::new(3))
        .build()
        .expect("valid");
    let err = p
        .invoke("r", input("exhausted", 10))
        .await
        .expect_err("always fails");
    assert_eq!(
        err.stage_error::<Flaky>().map(|f| f.0),
        Some(3),
        "the last attempt's error"
    );
    assert_eq!(calls("exhausted"), 3);
    let cp = p.checkpoint("r").await.expect("ok").expect("stored");
    assert_eq!(
        (cp.status, cp.attempt),
        (RunStatus::Failed, 1),
        "retries happen inside one checkpointed attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn fixed_and_exponential_backoff_wait_between_attempts() {
    let fixed = pipeline![flaky]
        .middleware(Retry::new(3).backoff(Backoff::Fixed(Duration::from_millis(100))))
        .build()
        .expect("valid");
    let started = tokio::time::Instant::now();
    fixed
        .invoke("r", input("fixed", 2))
        .await
        .and_then(Outcome::completed)
        .expect("third attempt");
    let waited = started.elapsed();
    // tokio's timer has millisecond granularity: a sleep may end up to 1 ms late
    assert!(
        waited >= Duration::from_millis(200) && waited <= Duration::from_millis(202),
        "two waits of 100 ms: {waited:?}"
    );

    let exponential = pipeline![flaky]
        .middleware(Retry::new(4).backoff(Backoff::Exponential {
            initial: Duration::from_millis(100),
            factor: 2.0,
            max: Duration::from_millis(300),
        }))
        .build()
        .expect("valid");
    let started = tokio::time::Instant::now();
    exponential
        .invoke("r", input("exponential", 3))
        .await
        .and_then(Outcome::completed)
        .expect("fourth attempt");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(600) && waited <= Duration::from_millis(603),
        "100, 200, then capped at 300: {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn jitter_adds_at_most_the_delay() {
    let p = pipeline![flaky]
        .middleware(
            Retry::new(5)
                .backoff(Backoff::Fixed(Duration::from_millis(100)))
                .jitter(true),
        )
        .build()
        .expect("valid");
    let started = tokio::time::Instant::now();
    p.invoke("r", input("jitter", 4))
        .await
        .and_then(Outcome::completed)
        .expect("fifth attempt");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_millis(800),
        "four waits of 100 ms plus jitter below 100 ms each: {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_if_chooses_which_errors_retry() {
    let p = pipeline![flaky]
        .middleware(Retry::new(5).retry_if(|e| e.stage_error::<std::io::Error>().is_some()))
        .build()
        .expect("valid");
    p.invoke("r", input("predicate", 3))
        .await
        .expect_err("a Flaky is not an io::Error");
    assert_eq!(calls("predicate"), 1, "no retry");
}

/// Answers with a control error without calling the stage.
#[derive(Debug, Default)]
struct InUse(AtomicU32);

#[async_trait::async_trait]
impl Middleware for InUse {
    async fn call(&self, _stage: &Stage, _ctx: Context, _next: Next<'_>) -> fluxio::Result<Output> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(Error::RunIdInUse { run_id: "x".into() })
    }
}

#[tokio::test(start_paused = true)]
async fn control_errors_never_retry_by_default() {
    let inner = std::sync::Arc::new(InUse::default());
    #[derive(Debug)]
    struct Shared(std::sync::Arc<InUse>);
    #[async_trait::async_trait]
    impl Middleware for Shared {
        async fn call(
            &self,
            stage: &Stage,
            ctx: Context,
            next: Next<'_>,
        ) -> fluxio::Result<Output> {
            self.0.call(stage, ctx, next).await
        }
    }
    let p = pipeline![flaky]
        .middleware(Retry::new(5))
        .middleware(Shared(inner.clone()))
        .build()
        .expect("valid");
    let err = p
        .invoke("r", input("control", 0))
        .await
        .expect_err("in use");
    assert!(matches!(err, Error::RunIdInUse { .. }));
    assert_eq!(inner.0.load(Ordering::SeqCst), 1, "not retried");
}

#[stage]
async fn sleepy(ctx: Context) -> StageResult {
    let counter: String = ctx.get("counter")?;
    if bump(&format!("{counter}-sleepy")) == 1 {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    Ok(ctx.set("woke", true)?)
}

#[tokio::test(start_paused = true)]
async fn timeout_middleware_leaves_an_error_checkpoint_and_resume_succeeds() {
    let p = pipeline![flaky, sleepy]
        .name("test")
        .durable(true)
        .stage_middleware("sleepy", Timeout(Duration::from_secs(2)))
        .build()
        .expect("valid");
    let err = p
        .invoke("t", input("timeout", 0))
        .await
        .expect_err("sleepy times out");
    assert!(
        matches!(err, Error::StageTimeout { ref stage, timeout } if stage == "sleepy" && timeout == Duration::from_secs(2))
    );
    let cp = p.checkpoint("t").await.expect("ok").expect("stored");
    assert_eq!((cp.step.as_str(), cp.is_failed()), ("sleepy", true));
    let out = p
        .resume("t")
        .await
        .and_then(Outcome::completed)
        .expect("the second call is quick");
    assert!(out.get::<bool>("woke").expect("set"));
}

/// Records the order in which middleware runs.
#[derive(Debug)]
struct Tag(&'static str, &'static Mutex<Vec<String>>);

#[async_trait::async_trait]
impl Middleware for Tag {
    async fn call(&self, stage: &Stage, ctx: Context, next: Next<'_>) -> fluxio::Result<Output> {
        self.1
            .lock()
            .expect("ok")
            .push(format!("{} > {}", self.0, stage.name()));
        let out = next.run(ctx).await;
        self.1
            .lock()
            .expect("ok")
            .push(format!("{} < {}", self.0, stage.name()));
        out
    }
}

#[stage]
async fn first(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage]
async fn second(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[tokio::test]
async fn pipeline_wide_middleware_is_outermost_in_declaration_order_then_per_stage() {
    static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let p = pipeline![first, second]
        .middleware(Tag("outer", &LOG))
        .stage_middleware("second", Tag("own", &LOG))
        .middleware(Tag("inner", &LOG))
        .build()
        .expect("valid");
    p.invoke("order", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(
        *LOG.lock().expect("ok"),
        [
            "outer > first",
            "inner > first",
            "inner < first",
            "outer < first",
            "outer > second",
            "inner > second",
            "own > second",
            "own < second",
            "inner < second",
            "outer < second",
        ]
    );
    LOG.lock().expect("ok").clear();
    p.run_step("second", Context::new()).await.expect("runs");
    assert_eq!(
        LOG.lock().expect("ok").len(),
        6,
        "run_step goes through the stage's middleware"
    );
}

#[test]
fn middleware_for_an_unknown_stage_is_a_build_error() {
    let err = pipeline![first]
        .stage_middleware("nope", Timeout(Duration::from_secs(1)))
        .build()
        .expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "invalid pipeline: middleware for unknown stage `nope`; stages: first"
    );
}
