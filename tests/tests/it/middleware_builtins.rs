//! docs/CONTRACT.md section 4, built-in middleware: cache, circuit breaker and
//! rate limit.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fluxio::middleware::{
    Cache, CacheEntry, CacheKey, CircuitBreaker, CircuitState, MemoryCacheStore, Middleware, Next,
    RateLimit,
};
use fluxio::stage::{Output, StageDef};
use fluxio::value::Value;
use fluxio::{Context, Error, Outcome, Pipeline, Stage, StageResult, ctx, pipeline, stage};
use tokio::time::Instant;

// ---- per-test bookkeeping -------------------------------------------------------
// Tests run in parallel in one process: every stage keys its counters by the
// `test` context key.

static COUNTERS: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

/// Counts a call of `name` and returns the count.
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

fn input(test: &str, n: u32) -> Context {
    ctx! { "test" => test, "n" => n }.expect("serializable")
}

#[derive(Debug, thiserror::Error)]
#[error("boom")]
struct Boom;

// ---- cache ----------------------------------------------------------------------

#[stage]
async fn doubler(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    let n: u32 = ctx.get("n")?;
    bump(&format!("{test}-doubler"));
    Ok(ctx.set("doubled", n * 2)?)
}

fn cached_doubler(store: &Arc<MemoryCacheStore>, ttl: Option<Duration>) -> Pipeline {
    let cache = Cache::new(Arc::clone(store));
    let cache = match ttl {
        Some(ttl) => cache.ttl(ttl),
        None => cache,
    };
    pipeline![doubler].middleware(cache).build().expect("valid")
}

#[tokio::test]
async fn a_cache_hit_skips_the_call_and_returns_the_same_context() {
    let store = Arc::new(MemoryCacheStore::new(16));
    let p = cached_doubler(&store, None);
    let first = p
        .invoke("a", input("hit", 21))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    let second = p
        .invoke("b", input("hit", 21))
        .await
        .and_then(Outcome::completed)
        .expect("hits");
    assert_eq!(
        calls("hit-doubler"),
        1,
        "the second call was served by the cache"
    );
    assert_eq!(second.get::<u32>("doubled").expect("cached write"), 42);
    assert_eq!(first, second);
    assert_eq!(
        first.written().collect::<Vec<_>>(),
        second.written().collect::<Vec<_>>(),
        "a hit writes the keys a call writes"
    );
    assert_eq!(store.len(), 1);

    // run_step goes through the middleware too
    let stepped = p.run_step("doubler", input("hit", 21)).await.expect("hits");
    assert_eq!(stepped.get::<u32>("doubled").expect("cached write"), 42);
    assert_eq!(calls("hit-doubler"), 1);
}

#[tokio::test(start_paused = true)]
async fn cached_results_expire_after_their_ttl() {
    let store = Arc::new(MemoryCacheStore::new(16));
    let p = cached_doubler(&store, Some(Duration::from_secs(60)));
    p.invoke("a", input("ttl", 1))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    tokio::time::advance(Duration::from_secs(59)).await;
    p.invoke("b", input("ttl", 1))
        .await
        .and_then(Outcome::completed)
        .expect("hits");
    assert_eq!(calls("ttl-doubler"), 1, "still fresh after 59 s");
    tokio::time::advance(Duration::from_secs(1)).await;
    p.invoke("c", input("ttl", 1))
        .await
        .and_then(Outcome::completed)
        .expect("runs again");
    assert_eq!(calls("ttl-doubler"), 2, "expired after 60 s");
    p.invoke("d", input("ttl", 1))
        .await
        .and_then(Outcome::completed)
        .expect("hits");
    assert_eq!(calls("ttl-doubler"), 2, "the new result is cached");
}

#[tokio::test]
async fn a_full_store_evicts_the_least_recently_used_entry() {
    let store = Arc::new(MemoryCacheStore::new(2));
    let p = cached_doubler(&store, None);
    let run = |n| {
        let p = &p;
        async move { p.run_step("doubler", input("lru", n)).await.expect("runs") }
    };
    run(1).await;
    run(2).await;
    assert_eq!(calls("lru-doubler"), 2);
    run(1).await; // a hit: 1 is now the most recently used
    assert_eq!(calls("lru-doubler"), 2);
    run(3).await; // full: evicts 2
    assert_eq!(calls("lru-doubler"), 3);
    assert_eq!(store.len(), 2, "never more than the capacity");
    run(1).await;
    run(3).await;
    assert_eq!(calls("lru-doubler"), 3, "1 and 3 are still cached");
    run(2).await;
    assert_eq!(calls("lru-doubler"), 4, "2 was evicted");
}

#[tokio::test]
async fn different_contexts_get_different_keys() {
    let stage = <doubler as StageDef>::stage();
    let key = |ctx: &Context| CacheKey::new(&stage, ctx).expect("encodable");
    let base = input("keys", 1);
    let reordered = ctx! { "n" => 1u32, "test" => "keys" }.expect("ok");
    assert_eq!(
        key(&base),
        key(&reordered),
        "insertion order does not count"
    );
    assert_eq!(
        key(&base),
        key(&base.clone().clear_written()),
        "the written set does not count"
    );
    assert_ne!(key(&base), key(&input("keys", 2)), "another value");
    assert_ne!(
        key(&base),
        key(&base.clone().set("n", "1").expect("ok")),
        "another type"
    );
    assert_ne!(
        key(&base),
        key(&base.clone().set("extra", ()).expect("ok")),
        "another key"
    );
    assert_ne!(
        key(&base),
        CacheKey::new(&<counted_branch as StageDef>::stage(), &base).expect("encodable"),
        "another stage"
    );
    assert_eq!(key(&base).stage(), "doubler");

    // Through the pipeline: each context is a miss once.
    let store = Arc::new(MemoryCacheStore::new(16));
    let p = cached_doubler(&store, None);
    for n in [1, 2, 1, 2] {
        p.invoke("k", input("keys", n))
            .await
            .and_then(Outcome::completed)
            .expect("runs");
    }
    assert_eq!(calls("keys-doubler"), 2);
    assert_eq!(store.len(), 2);
}

#[test]
fn cache_keys_and_entries_fail_with_fluxio_errors_that_keep_their_cause() {
    // A value nested past MAX_DEPTH cannot be encoded: no key, no bytes.
    let deep = (0..=fluxio::value::MAX_DEPTH).fold(Value::Unit, |v, _| Value::Some(Box::new(v)));
    let ctx = Context::new().set_value("deep", deep);
    let stage = <doubler as StageDef>::stage();
    for (result, what) in [
        (
            CacheKey::new(&stage, &ctx).map(|_| ()),
            "hash the context for a cache key",
        ),
        (
            CacheEntry::writes(&ctx).to_bytes().map(|_| ()),
            "encode a cache entry",
        ),
        (
            CacheEntry::from_bytes(&[9]).map(|_| ()),
            "decode a cache entry",
        ),
    ] {
        let err = result.expect_err(what);
        let message = err.to_string();
        assert!(
            matches!(&err, Error::Encoding { what: w, .. } if *w == what),
            "{err:?}"
        );
        assert!(
            message.starts_with(&format!("cannot {what}: ")),
            "{message}"
        );
        let cause = std::error::Error::source(&err).expect("the encoder's error is kept");
        assert!(message.ends_with(&cause.to_string()), "{message}");
    }
}

#[stage]
async fn counted_branch(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    let n: u32 = ctx.get("n")?;
    bump(&format!("{test}-branch"));
    Ok(ctx.set("from_cached", n + 100)?)
}

#[stage]
async fn plain_branch(ctx: Context) -> StageResult {
    Ok(ctx.set("from_plain", true)?)
}

#[stage]
async fn after_merge(ctx: Context) -> StageResult {
    let cached: u32 = ctx.get("from_cached")?;
    let plain: bool = ctx.get("from_plain")?;
    Ok(ctx.set("joined", format!("{cached}/{plain}"))?)
}

#[tokio::test]
async fn cached_branch_writes_survive_the_merge() {
    let store = Arc::new(MemoryCacheStore::new(16));
    let p = pipeline![parallel![counted_branch, plain_branch], after_merge]
        .stage_middleware("counted_branch", Cache::new(Arc::clone(&store)))
        .build()
        .expect("valid");
    for run in ["first", "second"] {
        let out = p
            .invoke(run, input("merge", 5))
            .await
            .and_then(Outcome::completed)
            .expect("runs");
        assert_eq!(
            out.get::<u32>("from_cached").expect("the branch's key"),
            105,
            "{run}"
        );
        assert!(out.was_written("from_cached"), "{run}");
        assert_eq!(out.get::<String>("joined").expect("set"), "105/true");
    }
    assert_eq!(
        calls("merge-branch"),
        1,
        "the second run took the branch from the cache"
    );
}

#[stage]
async fn writes_from_cached_too(ctx: Context) -> StageResult {
    Ok(ctx.set("from_cached", 0)?)
}

#[tokio::test]
async fn a_cached_branch_still_conflicts_with_a_branch_writing_the_same_key() {
    let store = Arc::new(MemoryCacheStore::new(16));
    let p = pipeline![parallel![counted_branch, writes_from_cached_too]]
        .stage_middleware("counted_branch", Cache::new(Arc::clone(&store)))
        .build()
        .expect("valid");
    for run in ["first", "second"] {
        let err = p
            .invoke(run, input("conflict", 1))
            .await
            .expect_err("both branches write from_cached");
        assert!(
            matches!(err, Error::MergeConflict { ref keys, .. } if keys == &["from_cached"]),
            "{run}: {err}"
        );
    }
    assert_eq!(
        calls("conflict-branch"),
        1,
        "the branch succeeded and was cached"
    );
}

#[stage]
async fn fails_when_asked(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    bump(&format!("{test}-fails"));
    if ctx.get::<bool>("fail")? {
        return Err(Box::new(Boom));
    }
    Ok(ctx.set("ok", true)?)
}

#[tokio::test]
async fn errors_are_never_cached() {
    let store = Arc::new(MemoryCacheStore::new(16));
    let p = pipeline![fails_when_asked]
        .middleware(Cache::new(Arc::clone(&store)))
        .build()
        .expect("valid");
    let failing = ctx! { "test" => "errors", "fail" => true }.expect("ok");
    for run in ["a", "b"] {
        let err = p.invoke(run, failing.clone()).await.expect_err("fails");
        assert!(err.stage_error::<Boom>().is_some());
    }
    assert_eq!(calls("errors-fails"), 2, "each failing call ran");
    assert!(store.is_empty());
}

#[stage]
async fn pick(ctx: Context) -> StageResult<fluxio::Route> {
    let test: String = ctx.get("test")?;
    bump(&format!("{test}-pick"));
    let n: u32 = ctx.get("n")?;
    let route = if n % 2 == 0 { "even" } else { "odd" };
    Ok(fluxio::Route::to(route).with("picked", n)?)
}

#[stage]
async fn even(ctx: Context) -> StageResult {
    Ok(ctx.set("parity", "even")?)
}

#[stage]
async fn odd(ctx: Context) -> StageResult {
    Ok(ctx.set("parity", "odd")?)
}

#[tokio::test]
async fn router_decisions_are_cached_with_their_patch() {
    let store = Arc::new(MemoryCacheStore::new(16));
    let p = pipeline![pick => { "even" => even, "odd" => odd }]
        .stage_middleware("pick", Cache::new(Arc::clone(&store)))
        .build()
        .expect("valid");
    for (run, n, parity) in [("a", 3, "odd"), ("b", 3, "odd"), ("c", 4, "even")] {
        let out = p
            .invoke(run, input("route", n))
            .await
            .and_then(Outcome::completed)
            .expect("runs");
        assert_eq!(out.get::<String>("parity").expect("routed"), parity);
        assert_eq!(out.get::<u32>("picked").expect("patch applied"), n);
    }
    assert_eq!(calls("route-pick"), 2, "the second odd decision was cached");
}

// ---- circuit breaker ------------------------------------------------------------

/// How `guarded` behaves in one test.
#[derive(Debug)]
struct Control {
    calls: AtomicU32,
    fail: AtomicBool,
    open: tokio::sync::watch::Sender<bool>,
}

static CONTROLS: Mutex<Option<HashMap<String, Arc<Control>>>> = Mutex::new(None);

fn control(test: &str) -> Arc<Control> {
    let mut all = CONTROLS.lock().expect("not poisoned");
    Arc::clone(
        all.get_or_insert_with(HashMap::new)
            .entry(test.to_owned())
            .or_insert_with(|| {
                Arc::new(Control {
                    calls: AtomicU32::new(0),
                    fail: AtomicBool::new(false),
                    open: tokio::sync::watch::channel(true).0,
                })
            }),
    )
}

/// Counts its calls, waits while its gate is closed, then fails or succeeds
/// as its test's [`Control`] says.
#[stage]
async fn guarded(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    let c = control(&test);
    c.calls.fetch_add(1, Ordering::SeqCst);
    let mut open = c.open.subscribe();
    open.wait_for(|open| *open).await?;
    if c.fail.load(Ordering::SeqCst) {
        return Err(Box::new(Boom));
    }
    Ok(ctx.set("guarded", true)?)
}

fn guarded_pipeline(breaker: &CircuitBreaker) -> Arc<Pipeline> {
    Arc::new(
        pipeline![guarded, doubler]
            .middleware(breaker.clone())
            .build()
            .expect("valid"),
    )
}

fn is_circuit_open(r: &fluxio::Result<Context>) -> bool {
    matches!(r, Err(Error::CircuitOpen { stage }) if stage == "guarded")
}

#[tokio::test(start_paused = true)]
async fn the_breaker_opens_after_n_consecutive_failures_and_then_fails_fast() {
    let c = control("opens");
    let breaker = CircuitBreaker::new(3).cool_down(Duration::from_secs(10));
    let p = guarded_pipeline(&breaker);
    let step = || p.run_step("guarded", input("opens", 0));

    c.fail.store(true, Ordering::SeqCst);
    step().await.expect_err("fails");
    step().await.expect_err("fails");
    assert_eq!(
        breaker.state("guarded"),
        CircuitState::Closed { failures: 2 }
    );
    c.fail.store(false, Ordering::SeqCst);
    step().await.expect("a success resets the count");
    assert_eq!(
        breaker.state("guarded"),
        CircuitState::Closed { failures: 0 }
    );
    c.fail.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        let err = step().await.expect_err("fails");
        assert!(err.stage_error::<Boom>().is_some(), "{err}");
    }
    assert_eq!(breaker.state("guarded"), CircuitState::Open);
    assert_eq!(c.calls.load(Ordering::SeqCst), 6);

    c.fail.store(false, Ordering::SeqCst);
    for _ in 0..5 {
        let r = step().await;
        assert!(is_circuit_open(&r), "{r:?}");
    }
    assert_eq!(
        c.calls.load(Ordering::SeqCst),
        6,
        "an open circuit does not call the stage"
    );
    let err = p.invoke("run", input("opens", 0)).await.expect_err("open");
    assert_eq!(err.to_string(), "circuit open for stage `guarded`");

    // Circuits are per stage: `doubler` is unaffected.
    assert_eq!(
        breaker.state("doubler"),
        CircuitState::Closed { failures: 0 }
    );
    p.run_step("doubler", input("opens", 1))
        .await
        .expect("another stage's circuit is closed");

    // Still open just before the cool-down ends.
    tokio::time::advance(Duration::from_millis(9_999)).await;
    assert!(is_circuit_open(&step().await));
    assert_eq!(c.calls.load(Ordering::SeqCst), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn half_open_admits_exactly_one_probe_under_50_concurrent_calls() {
    let c = control("probe");
    let cool_down = Duration::from_millis(50);
    let breaker = CircuitBreaker::new(1).cool_down(cool_down);
    let p = guarded_pipeline(&breaker);

    c.fail.store(true, Ordering::SeqCst);
    p.run_step("guarded", input("probe", 0))
        .await
        .expect_err("fails");
    assert_eq!(breaker.state("guarded"), CircuitState::Open);
    tokio::time::sleep(cool_down + Duration::from_millis(10)).await;

    // The probe will succeed, but only once the gate opens.
    c.fail.store(false, Ordering::SeqCst);
    c.open.send_replace(false);
    let before = c.calls.load(Ordering::SeqCst);
    let start = Arc::new(tokio::sync::Barrier::new(50));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let (p, start) = (Arc::clone(&p), Arc::clone(&start));
        calls.spawn(async move {
            start.wait().await;
            p.run_step("guarded", input("probe", 0)).await
        });
    }
    let mut fast = 0;
    while fast < 49 {
        let r = tokio::time::timeout(Duration::from_secs(10), calls.join_next())
            .await
            .expect("the other calls fail fast")
            .expect("a call is left")
            .expect("the task did not panic");
        assert!(is_circuit_open(&r), "only the probe may run: {r:?}");
        fast += 1;
    }
    assert_eq!(
        c.calls.load(Ordering::SeqCst) - before,
        1,
        "exactly one probe"
    );
    assert_eq!(breaker.state("guarded"), CircuitState::HalfOpen);

    c.open.send_replace(true);
    let probe = tokio::time::timeout(Duration::from_secs(10), calls.join_next())
        .await
        .expect("the probe ends")
        .expect("the probe is left")
        .expect("the task did not panic");
    assert!(
        probe
            .expect("the probe succeeds")
            .get::<bool>("guarded")
            .expect("set")
    );
    assert!(calls.is_empty());
    assert_eq!(
        breaker.state("guarded"),
        CircuitState::Closed { failures: 0 }
    );
    p.run_step("guarded", input("probe", 0))
        .await
        .expect("closed again");
    assert_eq!(c.calls.load(Ordering::SeqCst) - before, 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_the_circuit_and_a_successful_one_closes_it() {
    let c = control("reopen");
    let breaker = CircuitBreaker::new(1).cool_down(Duration::from_secs(10));
    let p = guarded_pipeline(&breaker);
    let step = || p.run_step("guarded", input("reopen", 0));

    c.fail.store(true, Ordering::SeqCst);
    step().await.expect_err("fails");
    assert_eq!(breaker.state("guarded"), CircuitState::Open);
    tokio::time::advance(Duration::from_secs(10)).await;
    let err = step().await.expect_err("the probe fails");
    assert!(err.stage_error::<Boom>().is_some(), "the probe ran: {err}");
    assert_eq!(breaker.state("guarded"), CircuitState::Open);
    assert_eq!(c.calls.load(Ordering::SeqCst), 2);

    // A fresh cool-down starts from the failed probe.
    c.fail.store(false, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(5)).await;
    assert!(is_circuit_open(&step().await));
    assert_eq!(c.calls.load(Ordering::SeqCst), 2);
    tokio::time::advance(Duration::from_secs(5)).await;
    step().await.expect("the probe succeeds");
    assert_eq!(
        breaker.state("guarded"),
        CircuitState::Closed { failures: 0 }
    );
    step().await.expect("closed");
    assert_eq!(c.calls.load(Ordering::SeqCst), 4);
}

/// Answers with a control error without calling the stage.
#[derive(Debug)]
struct InUse;

#[async_trait::async_trait]
impl Middleware for InUse {
    async fn call(&self, _stage: &Stage, _ctx: Context, _next: Next<'_>) -> fluxio::Result<Output> {
        Err(Error::RunIdInUse { run_id: "x".into() })
    }
}

#[tokio::test]
async fn only_the_chosen_errors_count_as_failures() {
    let breaker = CircuitBreaker::new(1);
    let p = pipeline![guarded]
        .middleware(breaker.clone())
        .middleware(InUse)
        .build()
        .expect("valid");
    for _ in 0..3 {
        let err = p
            .run_step("guarded", input("control-errors", 0))
            .await
            .expect_err("in use");
        assert!(matches!(err, Error::RunIdInUse { .. }));
    }
    assert_eq!(
        breaker.state("guarded"),
        CircuitState::Closed { failures: 0 },
        "fluxio's control errors are not the stage failing"
    );

    let breaker = CircuitBreaker::new(1).failure_if(|e| matches!(e, Error::RunIdInUse { .. }));
    let p = pipeline![guarded]
        .middleware(breaker.clone())
        .middleware(InUse)
        .build()
        .expect("valid");
    p.run_step("guarded", input("control-errors", 0))
        .await
        .expect_err("in use");
    assert_eq!(breaker.state("guarded"), CircuitState::Open);
}

// ---- rate limit -----------------------------------------------------------------

static STAMPS: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());

fn stamps(name: &str) -> Vec<Instant> {
    STAMPS
        .lock()
        .expect("not poisoned")
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, t)| *t)
        .collect()
}

/// Records when it was called.
#[stage]
async fn stamped(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    STAMPS
        .lock()
        .expect("not poisoned")
        .push((format!("{test}-stamped"), Instant::now()));
    Ok(ctx.set("stamped", true)?)
}

#[stage]
async fn stamped_too(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    STAMPS
        .lock()
        .expect("not poisoned")
        .push((format!("{test}-stamped_too"), Instant::now()));
    Ok(ctx.set("stamped_too", true)?)
}

/// Milliseconds from `start` of each stamp, sorted.
fn offsets(name: &str, start: Instant) -> Vec<u128> {
    let mut ms: Vec<u128> = stamps(name)
        .into_iter()
        .map(|t| (t - start).as_millis())
        .collect();
    ms.sort_unstable();
    ms
}

#[tokio::test(start_paused = true)]
async fn the_rate_limit_spaces_calls_and_never_errors() {
    let p = pipeline![stamped]
        .middleware(RateLimit::per_second(10))
        .build()
        .expect("valid");
    let start = Instant::now();
    let results =
        futures::future::join_all((0..10).map(|_| p.run_step("stamped", input("spaced", 0)))).await;
    assert!(
        results.iter().all(Result::is_ok),
        "waits, never errors: {results:?}"
    );
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "10 calls at 10/s take at least 900 ms: {:?}",
        start.elapsed()
    );
    let at = offsets("spaced-stamped", start);
    assert_eq!(at.len(), 10);
    assert_eq!(at[0], 0, "the first call goes at once");
    for pair in at.windows(2) {
        assert!(pair[1] - pair[0] >= 100, "spaced by 100 ms: {at:?}");
    }

    // Sequential runs wait too.
    let start = Instant::now();
    for run in 0..5 {
        p.invoke(&format!("seq-{run}"), input("sequential", 0))
            .await
            .and_then(Outcome::completed)
            .expect("runs");
    }
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_burst_goes_at_once_then_the_rate_holds() {
    let p = pipeline![stamped]
        .middleware(RateLimit::per_second(10).burst(5))
        .build()
        .expect("valid");
    let start = Instant::now();
    let results =
        futures::future::join_all((0..8).map(|_| p.run_step("stamped", input("burst", 0)))).await;
    assert!(results.iter().all(Result::is_ok));
    let at = offsets("burst-stamped", start);
    assert_eq!(&at[..5], [0; 5], "the burst: {at:?}");
    assert!(
        at[5] >= 100 && at[6] >= 200 && at[7] >= 300,
        "then 10/s: {at:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn limits_are_per_stage_unless_shared() {
    let per_stage = pipeline![stamped, stamped_too]
        .middleware(RateLimit::per_second(1))
        .build()
        .expect("valid");
    let start = Instant::now();
    per_stage
        .invoke("r", input("per-stage", 0))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert!(
        start.elapsed() < Duration::from_millis(10),
        "each stage has its own limit: {:?}",
        start.elapsed()
    );

    let shared = pipeline![stamped, stamped_too]
        .middleware(RateLimit::per_second(1).shared())
        .build()
        .expect("valid");
    let start = Instant::now();
    shared
        .invoke("r", input("shared", 0))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "the second stage waits for the first's slot: {:?}",
        start.elapsed()
    );
    assert_eq!(offsets("shared-stamped", start), [0]);
    assert!(offsets("shared-stamped_too", start)[0] >= 1000);
}
