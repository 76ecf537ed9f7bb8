//! Issue 8 (hardening), the core's part: each test failed before its fix.
//! Tests of a docs/CONTRACT.md rule are named after it.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{a, b, input};
use fluxio::middleware::{CircuitBreaker, Middleware, Next, RateLimit};
use fluxio::stage::Output;
use fluxio::store::{Checkpoint, CheckpointStore};
use fluxio::{Context, Error, Outcome, RunStatus, Stage, StageResult, pipeline, stage};
use tokio::sync::Notify;

/// The usual shape of a custom store: four methods, state behind an `Arc`,
/// `Clone`. Stores bytes, like a real backend.
#[derive(Debug, Clone, Default)]
struct Shared(Arc<Mutex<HashMap<String, Vec<u8>>>>);

#[async_trait::async_trait]
impl CheckpointStore for Shared {
    async fn save(&self, cp: Checkpoint) -> fluxio::Result<()> {
        let bytes = cp.to_bytes()?;
        self.0.lock().expect("not poisoned").insert(cp.key(), bytes);
        Ok(())
    }
    async fn load(&self, run_id: &str) -> fluxio::Result<Option<Checkpoint>> {
        let bytes = self.0.lock().expect("not poisoned").get(run_id).cloned();
        bytes
            .map(|b| Checkpoint::from_bytes(run_id, &b))
            .transpose()
    }
    async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
        self.0.lock().expect("not poisoned").remove(run_id);
        Ok(())
    }
    async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
        Ok(self.0.lock().expect("not poisoned").contains_key(run_id))
    }
}

static CLONE_GATE: Notify = Notify::const_new();
static CLONE_ENTERED: AtomicUsize = AtomicUsize::new(0);

#[stage]
async fn parked(ctx: Context) -> StageResult {
    CLONE_ENTERED.fetch_add(1, Ordering::SeqCst);
    CLONE_GATE.notified().await;
    Ok(ctx)
}

// Rule 6 for a four-method store however it is cloned: before the fix the
// in-process lock was keyed by the store's address, and both runs were `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule6_clones_of_a_four_method_store_still_run_one_run_per_run_id() {
    let store = Shared::default();
    let first = pipeline![parked]
        .name("test")
        .store(store.clone())
        .build()
        .expect("valid");
    let second = pipeline![parked]
        .name("test")
        .store(store.clone())
        .build()
        .expect("valid");
    let running = tokio::spawn(async move { first.invoke("cloned", Context::new()).await });
    while CLONE_ENTERED.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // before the fix the second run entered `parked` too (and waited there)
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        second.invoke("cloned", Context::new()),
    )
    .await
    .expect("the second run is refused at once, not parked in the stage")
    .expect_err("the run id is held through the other clone");
    assert!(
        matches!(err, Error::RunIdInUse { ref run_id } if run_id == "test/cloned"),
        "{err}"
    );
    assert_eq!(
        CLONE_ENTERED.load(Ordering::SeqCst),
        1,
        "the second run ran no stage"
    );
    CLONE_GATE.notify_one();
    running
        .await
        .expect("no panic")
        .and_then(Outcome::completed)
        .expect("the first run finishes");
    // and the id is free again for either clone
    assert!(second.exists("cloned").await.expect("store works"));
}

mod other {
    use fluxio::{Context, StageResult, stage};

    #[stage(name = "a")]
    pub(super) async fn not_a(ctx: Context) -> StageResult {
        Ok(ctx.set("other", true)?)
    }
}

#[test]
fn two_different_stages_with_one_name_are_refused_naming_both_positions() {
    let err = pipeline![a, b, other::not_a]
        .build()
        .expect_err("ambiguous names");
    let msg = err.to_string();
    assert!(matches!(err, Error::Build { .. }), "{msg}");
    assert!(msg.contains("`a`"), "{msg}");
    assert!(msg.contains("stage 1 and stage 3"), "{msg}");
    // the same stage twice is fine
    pipeline![a, b, a].build().expect("one stage used twice");
}

#[test]
fn extreme_lease_ttls_are_refused_at_build_naming_the_setting() {
    for ttl in [
        Duration::ZERO,
        Duration::MAX,
        Duration::from_secs(u64::MAX),
        fluxio::store::MAX_LEASE_TTL + Duration::from_nanos(1),
    ] {
        let err = pipeline![a]
            .name("test")
            .durable(true)
            .lease_ttl(ttl)
            .build()
            .expect_err("out of range");
        assert!(
            matches!(
                err,
                Error::InvalidSetting {
                    setting: "lease_ttl",
                    ..
                }
            ),
            "{ttl:?}: {err}"
        );
        assert!(err.to_string().contains("lease_ttl"), "{err}");
    }
    for ttl in [fluxio::store::MIN_LEASE_TTL, fluxio::store::MAX_LEASE_TTL] {
        pipeline![a]
            .name("test")
            .durable(true)
            .lease_ttl(ttl)
            .build()
            .expect("in range");
    }
}

#[tokio::test]
async fn the_longest_lease_runs_on_the_in_memory_store() {
    let p = pipeline![a, b]
        .name("test")
        .durable(true)
        .lease_ttl(fluxio::store::MAX_LEASE_TTL)
        .build()
        .expect("in range");
    let out = p
        .invoke("long-lease", input("long-lease"))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(out.get::<Vec<String>>("path").expect("path"), ["a", "b"]);
}

#[test]
fn a_huge_stream_buffer_is_refused_at_build() {
    let err = pipeline![a]
        .stream_buffer(usize::MAX)
        .build()
        .expect_err("too big");
    assert!(
        matches!(
            err,
            Error::InvalidSetting {
                setting: "stream_buffer",
                ..
            }
        ),
        "{err}"
    );
}

#[derive(Debug, thiserror::Error)]
#[error("down")]
struct Down;

#[stage]
async fn always_fails(_ctx: Context) -> StageResult {
    Err(Box::new(Down))
}

// Before the fix: `Instant + Duration::MAX` panicked inside the middleware.
#[tokio::test(start_paused = true)]
async fn longest_cool_down_and_rate_limit_interval_do_not_panic() {
    let p = pipeline![always_fails]
        .middleware(CircuitBreaker::new(1).cool_down(Duration::MAX))
        .build()
        .expect("valid");
    let first = p.invoke("cb", Context::new()).await.expect_err("fails");
    assert!(matches!(first, Error::Stage { .. }), "{first}");
    let second = p.invoke("cb", Context::new()).await.expect_err("open");
    assert!(matches!(second, Error::CircuitOpen { .. }), "{second}");

    let p = pipeline![a]
        .middleware(RateLimit::new(1, Duration::MAX))
        .build()
        .expect("valid");
    let started = tokio::time::Instant::now();
    for i in 0..3 {
        p.invoke("rl", input(&format!("rl-{i}")))
            .await
            .and_then(Outcome::completed)
            .expect("the limit waits, never fails");
    }
    // the paused clock jumped over two clamped intervals
    assert!(started.elapsed() >= 2 * fluxio::middleware::MAX_WAIT);
}

#[derive(Debug)]
struct Panics;

#[async_trait::async_trait]
impl Middleware for Panics {
    async fn call(&self, stage: &Stage, ctx: Context, next: Next<'_>) -> fluxio::Result<Output> {
        if stage.name() == "b" {
            panic!("middleware bug");
        }
        next.run(ctx).await
    }
}

// Before the fix the panic unwound into the caller and no failure checkpoint
// was written.
#[tokio::test]
async fn a_panicking_middleware_fails_the_run_like_a_panicking_stage() {
    let store = Shared::default();
    let p = pipeline![a, b]
        .name("test")
        .store(store.clone())
        .middleware(Panics)
        .build()
        .expect("valid");
    let err = p
        .invoke("mw-panic", input("mw-panic"))
        .await
        .expect_err("the middleware panics");
    match &err {
        Error::StagePanic { stage, message } => {
            assert_eq!(stage, "b");
            assert!(message.contains("middleware bug"), "{message}");
        }
        other => panic!("expected StagePanic, got {other}"),
    }
    let cp = p
        .checkpoint("mw-panic")
        .await
        .expect("store works")
        .expect("a failure checkpoint");
    assert_eq!(cp.status, RunStatus::Failed);
    assert_eq!(cp.step, "b");
    // the lease was released: the same pipeline without the faulty
    // middleware (middleware is not part of the version) resumes at once
    let fixed = pipeline![a, b]
        .name("test")
        .store(store)
        .build()
        .expect("valid");
    let out = fixed
        .resume("mw-panic")
        .await
        .and_then(Outcome::completed)
        .expect("resumes at `b`");
    assert_eq!(out.get::<Vec<String>>("path").expect("path"), ["a", "b"]);
}

// Before the fix a NUL byte reached the store (a raw Postgres encoding error)
// and `diff` echoed a 10,000-character id in full.
#[tokio::test]
async fn read_apis_check_run_ids_like_invoke() {
    let p = pipeline![a]
        .name("test")
        .store(Shared::default())
        .build()
        .expect("valid");
    let long = "x".repeat(10_000);
    for bad in ["nul\0byte", "", long.as_str()] {
        let errs = [
            p.checkpoint(bad).await.map(|_| ()).expect_err("checkpoint"),
            p.exists(bad).await.map(|_| ()).expect_err("exists"),
            p.diff(bad, "ok").await.map(|_| ()).expect_err("diff a"),
            p.diff("ok", bad).await.map(|_| ()).expect_err("diff b"),
            p.replay(bad, None).await.map(|_| ()).expect_err("replay"),
            p.resume(bad).await.map(|_| ()).expect_err("resume"),
        ];
        for err in errs {
            assert!(matches!(err, Error::InvalidRunId { .. }), "{err}");
            assert!(err.to_string().len() < 200, "{err}");
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("connection refused")]
struct Refused;

#[derive(Debug, thiserror::Error)]
#[error("payment gateway unreachable")]
struct Unreachable(#[source] Refused);

#[derive(Debug, thiserror::Error)]
#[error("")]
struct Silent {
    code: u32,
}

#[stage]
async fn gateway(_ctx: Context) -> StageResult {
    Err(Box::new(Unreachable(Refused)))
}

#[stage]
async fn silent(_ctx: Context) -> StageResult {
    Err(Box::new(Silent { code: 503 }))
}

// Before the fix the stored message was `stage `gateway` failed: payment
// gateway unreachable` (no cause) and `stage `silent` failed: ` (nothing).
#[tokio::test]
async fn failure_checkpoints_store_the_whole_cause_chain() {
    let p = pipeline![gateway]
        .name("test")
        .store(Shared::default())
        .build()
        .expect("valid");
    let err = p.invoke("chain", Context::new()).await.expect_err("fails");
    assert!(err.stage_error::<Unreachable>().is_some());
    let cp = p
        .checkpoint("chain")
        .await
        .expect("store works")
        .expect("stored");
    assert_eq!(
        cp.error_message.as_deref(),
        Some("stage `gateway` failed: payment gateway unreachable: connection refused")
    );

    let p = pipeline![silent]
        .name("test")
        .store(Shared::default())
        .build()
        .expect("valid");
    let err = p.invoke("silent", Context::new()).await.expect_err("fails");
    assert!(err.to_string().contains("Silent { code: 503 }"), "{err}");
    let cp = p
        .checkpoint("silent")
        .await
        .expect("store works")
        .expect("stored");
    let stored = cp.error_message.expect("a message");
    assert!(stored.contains("Silent { code: 503 }"), "{stored}");
}

// Before the fix the lease code panicked (`tokio::spawn` outside a runtime).
#[test]
fn a_durable_invoke_outside_a_tokio_runtime_is_a_typed_error() {
    let p = pipeline![a]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let err = futures::executor::block_on(p.invoke("no-rt", input("no-rt")))
        .expect_err("needs a runtime");
    assert!(
        matches!(err, Error::NoRuntime { ref operation } if operation.contains("no-rt")),
        "{err}"
    );
    let err = futures::executor::block_on(p.resume("no-rt")).expect_err("needs a runtime");
    assert!(matches!(err, Error::NoRuntime { .. }), "{err}");
}

static FLAKY_CALLS: AtomicUsize = AtomicUsize::new(0);

#[stage]
async fn flaky(ctx: Context) -> StageResult {
    if FLAKY_CALLS.fetch_add(1, Ordering::SeqCst) % 40 < 39 {
        return Err(Box::new(Down));
    }
    Ok(ctx)
}

// Extreme backoffs: huge, NaN and negative factors, u32::MAX attempts.
#[tokio::test(start_paused = true)]
async fn extreme_retry_backoffs_neither_panic_nor_overflow() {
    use fluxio::middleware::{Backoff, Retry};
    let backoffs = [
        Backoff::Fixed(Duration::MAX),
        Backoff::Exponential {
            initial: Duration::MAX,
            factor: f32::MAX,
            max: Duration::MAX,
        },
        Backoff::Exponential {
            initial: Duration::from_millis(1),
            factor: f32::NAN,
            max: Duration::MAX,
        },
        Backoff::Exponential {
            initial: Duration::from_millis(1),
            factor: -3.0,
            max: Duration::ZERO,
        },
        Backoff::Exponential {
            initial: Duration::from_secs(1),
            factor: 1e30,
            max: Duration::MAX,
        },
    ];
    for (i, backoff) in backoffs.into_iter().enumerate() {
        for jitter in [false, true] {
            FLAKY_CALLS.store(0, Ordering::SeqCst);
            let p = pipeline![flaky]
                .middleware(Retry::new(u32::MAX).backoff(backoff).jitter(jitter))
                .build()
                .expect("valid");
            p.invoke(&format!("retry-{i}"), Context::new())
                .await
                .and_then(Outcome::completed)
                .expect("the 40th attempt succeeds");
            assert_eq!(FLAKY_CALLS.load(Ordering::SeqCst), 40);
        }
    }
}

// Before the fix `stream` panicked in `tokio::spawn`.
#[test]
fn a_stream_outside_a_tokio_runtime_yields_a_typed_error() {
    let p = pipeline![a]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let mut stream = p.stream("no-rt-stream", input("no-rt-stream"));
    let first = futures::executor::block_on(stream.recv()).expect("one item");
    assert!(
        matches!(first, Err(Error::NoRuntime { ref operation }) if operation.contains("no-rt-stream")),
        "{first:?}"
    );
    assert!(futures::executor::block_on(stream.recv()).is_none());
}

#[tokio::test(start_paused = true)]
async fn the_longest_timeouts_do_not_panic() {
    let p = pipeline![a]
        .middleware(fluxio::middleware::Timeout(Duration::MAX))
        .build()
        .expect("valid");
    p.invoke("timeout-max", input("timeout-max"))
        .await
        .and_then(Outcome::completed)
        .expect("never times out");
}

#[stage]
fn panics_on_the_pool(_ctx: Context) -> StageResult {
    panic!("blocking stage bug");
}

// Issue 9's trip-wire: before the fix a blocking stage that panicked left its
// `StageInfo` on the pool thread, and the next closure on that thread saw it.
#[tokio::test(flavor = "current_thread")]
async fn a_panicking_blocking_stage_leaves_no_stage_info_on_its_thread() {
    let p = pipeline![panics_on_the_pool].build().expect("valid");
    let err = p.invoke("stale", Context::new()).await.expect_err("panics");
    assert!(matches!(err, Error::StagePanic { .. }), "{err}");
    // the blocking pool reuses its idle thread for the next closures
    for _ in 0..8 {
        let seen = tokio::task::spawn_blocking(fluxio::StageInfo::current)
            .await
            .expect("no panic");
        assert_eq!(seen, None);
    }
}

#[stage(timeout = "1s")]
async fn with_timeout(ctx: Context) -> StageResult {
    Ok(ctx)
}

// Found by reading the code for docs/CONTRACT.md: a non-durable run with a
// stage timeout panicked in `tokio::time::timeout` outside a runtime.
#[test]
fn a_plain_invoke_outside_a_tokio_runtime_is_a_typed_error_too() {
    let p = pipeline![with_timeout].build().expect("valid");
    let err = futures::executor::block_on(p.invoke("no-rt-plain", Context::new()))
        .expect_err("needs a runtime");
    assert!(matches!(err, Error::NoRuntime { .. }), "{err}");
}

#[derive(Debug, Default, Clone)]
struct Versions(Arc<Mutex<Vec<String>>>);

impl fluxio::callback::Callback for Versions {
    fn on_pipeline_start(&self, _run_id: &str, version: &str) -> fluxio::callback::CallbackResult {
        self.0
            .lock()
            .expect("not poisoned")
            .push(version.to_owned());
        Ok(())
    }
}

// Callbacks got an empty version for pipelines that are not durable.
#[tokio::test]
async fn callbacks_get_the_version_of_every_pipeline() {
    let seen = Versions::default();
    let p = pipeline![a].callback(seen.clone()).build().expect("valid");
    p.invoke("v", input("v"))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(*seen.0.lock().expect("not poisoned"), [p.version()]);
}

/// `use fluxio::*` brings in no name of the prelude: before the rename,
/// `fluxio::Send` (the router's decision) shadowed the `Send` marker trait
/// here and `T: Send` did not compile.
mod glob_import {
    #[allow(unused_imports)]
    use fluxio::*;

    fn needs_send_and_sync<T: Send + Sync>(_: &T) {}

    #[test]
    fn the_prelude_is_not_shadowed() {
        let ctx = Context::new();
        needs_send_and_sync(&ctx);
        let decision: Route = Route::to("x");
        let _: Option<Result<(), Error>> = Some(Ok(()));
        assert_eq!(decision.route, "x");
    }
}
