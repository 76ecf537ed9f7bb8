//! Rules 15 and 16 (docs/CONTRACT.md, section 5): a run stopped on purpose
//! gives its lease back at once, and a blocking stage body never runs twice
//! at once for one run, keeping the run's lease until it returns.
//!
//! - rule 15 across processes: a worker process drops a durable run
//!   mid-stage, shuts its pipeline down and exits; this process resumes the
//!   run well within a second, although the lease's time-to-live is 30 s
//!   (SQLite, Redis and Postgres).
//! - rule 15 in one process, on every built-in store: a dropped run's lease
//!   is back once `shutdown` returns, and a shut-down pipeline starts nothing.
//! - rule 16: timed-out, retried and dropped blocking bodies hold their
//!   stage position and the run's lease until they return.
//!
//! The Redis and Postgres tests skip loudly without a server, unless `CI` is
//! set (then they fail).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fluxio::middleware::{Backoff, Retry, Timeout};
use fluxio::store::CheckpointStore;
use fluxio::store::run_key;
use fluxio::{
    Context, Error, InMemoryStore, Outcome, Pipeline, PipelineBuilder, RunStatus, StageInfo,
    StageResult, ctx, pipeline, stage,
};
use fluxio_core::store::conformance::{namespace, skip_unless_ci};
use fluxio_tests::process::Worker;
use fluxio_tests::{StoreKind, WORKER_PIPELINE};

const LEASE_TTL: Duration = Duration::from_secs(30);
/// How long a test waits for something it is sure will happen.
const PATIENCE: Duration = Duration::from_secs(30);

// ---- synchronisation between tests and stages --------------------------------

/// A one-way gate: closed until opened, then open for good.
#[derive(Default)]
struct Latch {
    open: Mutex<bool>,
    changed: Condvar,
}

impl Latch {
    fn open(&self) {
        *self.open.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.changed.notify_all();
    }

    fn is_open(&self) -> bool {
        *self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks the thread until open; panics after [`PATIENCE`].
    fn wait(&self) {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let (open, _) = self
            .changed
            .wait_timeout_while(open, PATIENCE, |open| !*open)
            .unwrap_or_else(PoisonError::into_inner);
        assert!(*open, "a latch stayed closed for {PATIENCE:?}");
    }

    /// Waits without blocking the async worker.
    async fn opened(self: Arc<Self>) {
        tokio::task::spawn_blocking(move || self.wait())
            .await
            .expect("the latch waiter does not panic");
    }
}

/// The latch `name` of test `test`.
fn latch(test: &str, name: &str) -> Arc<Latch> {
    static LATCHES: Mutex<Option<HashMap<String, Arc<Latch>>>> = Mutex::new(None);
    let mut latches = LATCHES.lock().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(
        latches
            .get_or_insert_with(HashMap::new)
            .entry(format!("{test}/{name}"))
            .or_default(),
    )
}

/// Every body of a blocking stage in test `test`: when it started and, once
/// it returned, when it ended.
type Bodies = Vec<(Instant, Option<Instant>)>;

fn bodies_of(test: &str) -> Bodies {
    body_log(|log| log.get(test).cloned().unwrap_or_default())
}

fn body_log<T>(f: impl FnOnce(&mut HashMap<String, Bodies>) -> T) -> T {
    static LOG: Mutex<Option<HashMap<String, Bodies>>> = Mutex::new(None);
    f(LOG
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new))
}

/// Records a body's start; returns its number in the test (0 for the first).
fn body_starts(test: &str) -> usize {
    body_log(|log| {
        let bodies = log.entry(test.to_owned()).or_default();
        bodies.push((Instant::now(), None));
        bodies.len() - 1
    })
}

fn body_ends(test: &str, n: usize) {
    body_log(|log| {
        if let Some(body) = log.get_mut(test).and_then(|b| b.get_mut(n)) {
            body.1 = Some(Instant::now());
        }
    });
}

/// Panics when two bodies of `test` ran at the same time.
fn assert_no_overlap(test: &str) -> Bodies {
    let mut bodies = bodies_of(test);
    bodies.sort_by_key(|(start, _)| *start);
    for pair in bodies.windows(2) {
        let next_start = pair[1].0;
        match pair[0].1 {
            Some(end) => assert!(
                end <= next_start,
                "{test}: a body started {:?} before the one before it returned",
                end - next_start
            ),
            None => panic!("{test}: a body started while the one before it still runs"),
        }
    }
    bodies
}

fn input(test: &str) -> Context {
    ctx! { "test" => test }.expect("a string is a value")
}

fn test_of(ctx: &Context) -> Result<String, fluxio::Error> {
    ctx.get("test")
}

// ---- stages -----------------------------------------------------------------

/// On its first attempt: opens `<test>/entered` and never returns (the test
/// drops the run). On a later attempt (a resume) it returns at once.
#[stage]
async fn park(ctx: Context) -> StageResult {
    let attempt = StageInfo::current()
        .ok_or("park runs in a pipeline")?
        .attempt;
    if attempt == 1 {
        latch(&test_of(&ctx)?, "entered").open();
        std::future::pending::<()>().await;
    }
    Ok(ctx.set("parked_attempt", attempt)?)
}

/// A blocking stage: its first body opens `<test>/entered` and blocks until
/// the test opens `<test>/go`; later bodies return at once. Every body is
/// logged.
#[stage]
fn hold(ctx: Context) -> StageResult {
    let test = test_of(&ctx)?;
    let n = body_starts(&test);
    if n == 0 {
        latch(&test, "entered").open();
        latch(&test, "go").wait();
    }
    body_ends(&test, n);
    Ok(ctx.set("hold_bodies", n + 1)?)
}

/// A blocking stage whose first body takes 400 ms; later ones return at once.
/// Every body is logged.
#[stage]
fn slow_first(ctx: Context) -> StageResult {
    let test = test_of(&ctx)?;
    let n = body_starts(&test);
    if n == 0 {
        std::thread::sleep(Duration::from_millis(400));
    }
    body_ends(&test, n);
    Ok(ctx.set("slow_first_bodies", n + 1)?)
}

// ---- stores -----------------------------------------------------------------

/// The store of `kind` (`None`: a new `InMemoryStore`) in a namespace of its
/// own, or `None` when its server is down (the test then skips).
async fn open_store(kind: Option<StoreKind>, test: &str) -> Option<Arc<dyn CheckpointStore>> {
    let Some(kind) = kind else {
        return Some(Arc::new(InMemoryStore::new()));
    };
    match kind.open(&kind.url(), &namespace(test)).await {
        Ok(store) => Some(store),
        Err(e) => skip_unless_ci(kind.name(), &e),
    }
}

fn on(builder: PipelineBuilder, store: &Arc<dyn CheckpointStore>) -> Pipeline {
    builder
        .name("test")
        .store_arc(Arc::clone(store))
        .lease_ttl(LEASE_TTL)
        .build()
        .expect("a valid pipeline")
}

// ---- rule 15 in one process ---------------------------------------------------

async fn dropped_run_is_free_after_shutdown(kind: Option<StoreKind>, test: &str) {
    let Some(store) = open_store(kind, test).await else {
        return;
    };
    let worker = on(pipeline![park], &store);
    let other = on(pipeline![park], &store);
    let run_id = format!("{test}-run");

    tokio::select! {
        out = worker.invoke(&run_id, input(test)) => panic!("the run ended: {out:?}"),
        () = latch(test, "entered").opened() => {}
    }
    // the run was dropped in the middle of `park`
    worker
        .shutdown(PATIENCE)
        .await
        .expect("the dropped run's lease is given back");

    let cp = other
        .checkpoint(&run_id)
        .await
        .expect("load")
        .expect("stored");
    assert_eq!((cp.step.as_str(), cp.status), ("park", RunStatus::Running));
    let out = other
        .resume(&run_id)
        .await
        .and_then(Outcome::completed)
        .expect("resumed at once, not refused while the 30 s lease runs");
    assert_eq!(out.get::<u32>("parked_attempt").expect("set"), 2);

    // the shut-down pipeline starts nothing, whatever the operation
    for refused in [
        worker.invoke("another", input(test)).await,
        worker.resume(&run_id).await,
        worker.replay(&run_id, None).await,
    ] {
        assert!(
            matches!(refused, Err(Error::ShutDown { .. })),
            "{refused:?}"
        );
    }
    worker
        .shutdown(PATIENCE)
        .await
        .expect("a second shutdown has nothing to wait for");
}

#[tokio::test]
async fn rule15_a_dropped_run_is_resumed_at_once_after_shutdown_memory() {
    dropped_run_is_free_after_shutdown(None, "r15_memory").await;
}

#[tokio::test]
async fn rule15_a_dropped_run_is_resumed_at_once_after_shutdown_sqlite() {
    dropped_run_is_free_after_shutdown(Some(StoreKind::Sqlite), "r15_sqlite").await;
}

#[tokio::test]
async fn rule15_a_dropped_run_is_resumed_at_once_after_shutdown_redis() {
    dropped_run_is_free_after_shutdown(Some(StoreKind::Redis), "r15_redis").await;
}

#[tokio::test]
async fn rule15_a_dropped_run_is_resumed_at_once_after_shutdown_postgres() {
    dropped_run_is_free_after_shutdown(Some(StoreKind::Postgres), "r15_postgres").await;
}

#[tokio::test]
async fn rule15_a_dropped_stream_is_released_by_shutdown() {
    let test = "r15_stream";
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let worker = on(pipeline![park], &store);
    let stream = worker.stream("streamed", input(test));
    latch(test, "entered").opened().await;
    drop(stream);
    worker.shutdown(PATIENCE).await.expect("released");
    let refused = futures::StreamExt::next(&mut worker.stream("later", input(test))).await;
    assert!(
        matches!(refused, Some(Err(Error::ShutDown { .. }))),
        "{refused:?}"
    );
    on(pipeline![park], &store)
        .resume("streamed")
        .await
        .and_then(Outcome::completed)
        .expect("free at once");
}

#[tokio::test]
async fn rule15_shutdown_waits_for_running_runs_within_its_bound() {
    let test = "r15_running";
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let worker = on(pipeline![hold], &store);
    let running = tokio::spawn({
        let worker = worker.clone();
        async move { worker.invoke("running", input(test)).await }
    });
    latch(test, "entered").opened().await;

    // the run is inside `hold` until the test opens `go`: shutdown gives up
    let err = worker
        .shutdown(Duration::from_millis(50))
        .await
        .expect_err("a running run still holds its lease");
    assert!(
        matches!(err, Error::ShutdownTimeout { held: 1, .. }),
        "{err}"
    );
    assert!(matches!(
        worker.invoke("new", input(test)).await,
        Err(Error::ShutDown { .. })
    ));

    // a run that was already running is not interrupted
    latch(test, "go").open();
    let out = running
        .await
        .expect("no panic")
        .and_then(Outcome::completed)
        .expect("the running run ends normally");
    assert_eq!(out.get::<usize>("hold_bodies").expect("set"), 1);
    worker.shutdown(PATIENCE).await.expect("nothing held now");
}

#[tokio::test]
async fn rule15_a_pipeline_that_is_not_durable_shuts_down_at_once() {
    let p = pipeline![slow_first].build().expect("valid");
    p.shutdown(Duration::ZERO)
        .await
        .expect("no leases to wait for");
    let refused = p.invoke("x", input("r15_not_durable")).await;
    assert!(
        matches!(refused, Err(Error::ShutDown { .. })),
        "{refused:?}"
    );
}

// ---- rule 15 across processes ---------------------------------------------------

/// Records when a run started (after it took its lease and loaded its
/// checkpoint).
#[derive(Clone, Debug, Default)]
struct StartedAt(Arc<Mutex<Option<Instant>>>);

impl fluxio::callback::Callback for StartedAt {
    fn on_pipeline_start(&self, _run_id: &str, _version: &str) -> fluxio::callback::CallbackResult {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        Ok(())
    }
}

fn dropped_run_is_resumed_by_another_process_at_once(kind: StoreKind) {
    let ns = namespace(&format!("release_{}", kind.name()));
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let url = kind.url();
    let store = match rt.block_on(kind.open(&url, &ns)) {
        Ok(store) => store,
        Err(e) => return skip_unless_ci(kind.name(), &e).unwrap_or(()),
    };
    let ledger = std::env::temp_dir().join(format!(
        "fluxio-release-{}-{}.ledger",
        kind.name(),
        std::process::id()
    ));
    let run_id = "dropped";

    // a worker process with a 30 s lease, held inside s2 for a minute
    let mut child = Worker::spawn(
        env!("CARGO_BIN_EXE_fluxio-worker"),
        [
            kind.name(),
            url.as_str(),
            ns.as_str(),
            run_id,
            "drop",
            "30000",
            &ledger.to_string_lossy(),
            "s2=60000",
        ],
    );
    if let Err(e) = child.ready() {
        panic!("worker {} failed before it was ready: {e}", child.pid());
    }
    child.go();
    child.expect(&["in s2"]);
    child.send("stop"); // it drops the run, shuts down, exits
    assert_eq!(child.expect(&["released", "error"]), "released");
    let (outcome, code) = child.outcome_and_exit();
    let exited = Instant::now();
    assert_eq!((outcome.as_str(), code), ("ok {}", Some(0)));

    let cp = rt
        .block_on(store.load(&run_key(WORKER_PIPELINE, run_id)))
        .expect("load")
        .expect("stored");
    assert_eq!(
        (cp.step.as_str(), cp.status),
        ("s2", RunStatus::Running),
        "the run was dropped in s2"
    );

    let started = StartedAt::default();
    let resumer = fluxio_tests::worker_pipeline()
        .store_arc(Arc::clone(&store))
        .lease_ttl(LEASE_TTL)
        .callback(started.clone())
        .build()
        .expect("valid");
    let resumed = rt
        .block_on(resumer.resume(run_id))
        .expect("not refused: the dropped run's lease was given back");
    let at = started
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .expect("the resume started");
    let delay = at.saturating_duration_since(exited);
    eprintln!(
        "{}: resumed {delay:?} after the dropping process exited (lease ttl {LEASE_TTL:?})",
        kind.name()
    );
    // a correctness bound (the lease did not have to lapse), not a benchmark
    assert!(
        delay < Duration::from_secs(1),
        "{}: the resume waited {delay:?}",
        kind.name()
    );

    let uninterrupted = rt
        .block_on(
            fluxio_tests::worker_pipeline()
                .build()
                .expect("valid")
                .invoke("reference", Context::new()),
        )
        .expect("runs");
    assert_eq!(resumed, uninterrupted);
    let _ = std::fs::remove_file(&ledger);
}

#[test]
fn rule15_a_dropped_run_is_resumed_by_another_process_at_once_sqlite() {
    dropped_run_is_resumed_by_another_process_at_once(StoreKind::Sqlite);
}

#[test]
fn rule15_a_dropped_run_is_resumed_by_another_process_at_once_redis() {
    dropped_run_is_resumed_by_another_process_at_once(StoreKind::Redis);
}

#[test]
fn rule15_a_dropped_run_is_resumed_by_another_process_at_once_postgres() {
    dropped_run_is_resumed_by_another_process_at_once(StoreKind::Postgres);
}

// ---- rule 16 ------------------------------------------------------------------

#[tokio::test]
async fn rule16_timed_out_and_retried_blocking_bodies_never_overlap() {
    for durable in [false, true] {
        let test = format!("r16_overlap_{durable}");
        // each attempt may take 300 ms; the first body takes 400 ms; the
        // retry comes 10 ms after the timeout, while the first body runs
        let p = pipeline![slow_first]
            .name("test")
            .durable(durable)
            .middleware(Retry::new(10).backoff(Backoff::Fixed(Duration::from_millis(10))))
            .middleware(Timeout(Duration::from_millis(300)))
            .build()
            .expect("valid");
        let out = p
            .invoke("overlap", input(&test))
            .await
            .and_then(Outcome::completed)
            .expect("a retry after the first body returned succeeds");
        let bodies = assert_no_overlap(&test);
        assert!(
            bodies.len() >= 2,
            "the first attempt timed out and a retry ran the body again: {bodies:?}"
        );
        assert_eq!(
            out.get::<usize>("slow_first_bodies").expect("set"),
            bodies.len()
        );
    }
}

#[tokio::test]
async fn rule16_a_retry_waits_for_the_timed_out_blocking_body() {
    let test = "r16_retry_waits";
    let p = pipeline![hold]
        .name("test")
        .durable(true)
        .middleware(Retry::new(3).backoff(Backoff::Fixed(Duration::from_millis(1))))
        .middleware(Timeout(Duration::from_millis(50)))
        .build()
        .expect("valid");
    // the first body blocks until `go`: every attempt times out, and the
    // retries wait for it instead of starting the body again
    let err = p
        .invoke("retry-waits", input(test))
        .await
        .expect_err("all three attempts time out");
    assert!(matches!(err, Error::StageTimeout { .. }), "{err}");
    assert_eq!(bodies_of(test).len(), 1, "only the first body started");
    assert!(latch(test, "entered").is_open());

    latch(test, "go").open();
    p.shutdown(PATIENCE).await.expect("the body returned");
    assert_no_overlap(test);
    assert_eq!(
        bodies_of(test).len(),
        1,
        "the waiting retries started nothing"
    );
}

async fn dropped_blocking_body_keeps_the_lease(kind: Option<StoreKind>, test: &str) {
    let Some(store) = open_store(kind, test).await else {
        return;
    };
    let worker = on(pipeline![hold], &store);
    let other = on(pipeline![hold], &store);
    let run_id = format!("{test}-run");

    let run = tokio::spawn({
        let (worker, run_id, input) = (worker.clone(), run_id.clone(), input(test));
        async move { worker.invoke(&run_id, input).await }
    });
    latch(test, "entered").opened().await;
    run.abort();
    assert!(run.await.expect_err("aborted").is_cancelled());

    // the body still runs: the run id stays taken, in every way
    let refused = other.resume(&run_id).await;
    assert!(
        matches!(refused, Err(Error::RunIdInUse { .. })),
        "{refused:?}"
    );
    let refused = other.invoke(&run_id, input(test)).await;
    assert!(
        matches!(refused, Err(Error::RunIdInUse { .. })),
        "{refused:?}"
    );
    let err = worker
        .shutdown(Duration::from_millis(50))
        .await
        .expect_err("the body holds the lease");
    assert!(
        matches!(err, Error::ShutdownTimeout { held: 1, .. }),
        "{err}"
    );

    // once it returns, the lease is given back
    latch(test, "go").open();
    worker.shutdown(PATIENCE).await.expect("released");
    let out = other
        .resume(&run_id)
        .await
        .and_then(Outcome::completed)
        .expect("free at once");
    assert_eq!(out.get::<usize>("hold_bodies").expect("set"), 2);
    assert_no_overlap(test);
}

#[tokio::test]
async fn rule16_a_dropped_runs_blocking_body_keeps_the_lease_until_it_returns_memory() {
    dropped_blocking_body_keeps_the_lease(None, "r16_drop_memory").await;
}

#[tokio::test]
async fn rule16_a_dropped_runs_blocking_body_keeps_the_lease_until_it_returns_sqlite() {
    dropped_blocking_body_keeps_the_lease(Some(StoreKind::Sqlite), "r16_drop_sqlite").await;
}

#[tokio::test]
async fn rule16_a_dropped_runs_blocking_body_keeps_the_lease_until_it_returns_redis() {
    dropped_blocking_body_keeps_the_lease(Some(StoreKind::Redis), "r16_drop_redis").await;
}

#[tokio::test]
async fn rule16_a_dropped_runs_blocking_body_keeps_the_lease_until_it_returns_postgres() {
    dropped_blocking_body_keeps_the_lease(Some(StoreKind::Postgres), "r16_drop_postgres").await;
}

/// A store with only the four required methods: leases are the in-process
/// table, held by the `Lease` value itself.
#[derive(Debug, Default)]
struct FourMethods(InMemoryStore);

#[async_trait::async_trait]
impl CheckpointStore for FourMethods {
    async fn save(&self, checkpoint: fluxio::Checkpoint) -> fluxio::Result<()> {
        self.0.save(checkpoint).await
    }
    async fn load(&self, run_id: &str) -> fluxio::Result<Option<fluxio::Checkpoint>> {
        self.0.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
        self.0.delete(run_id).await
    }
    async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
        self.0.exists(run_id).await
    }
}

#[tokio::test]
async fn rule16_a_timed_out_blocking_body_keeps_the_lease_after_its_run_failed() {
    let test = "r16_timeout";
    let store: Arc<dyn CheckpointStore> = Arc::new(FourMethods::default());
    let worker = pipeline![hold]
        .name("test")
        .store_arc(Arc::clone(&store))
        .stage_middleware("hold", Timeout(Duration::from_millis(50)))
        .build()
        .expect("valid");
    let other = on(pipeline![hold], &store);

    let err = worker
        .invoke("timed-out", input(test))
        .await
        .expect_err("the stage times out");
    assert!(matches!(err, Error::StageTimeout { .. }), "{err}");
    let cp = other
        .checkpoint("timed-out")
        .await
        .expect("load")
        .expect("stored");
    assert_eq!((cp.step.as_str(), cp.status), ("hold", RunStatus::Failed));

    // the run failed and returned, but its body is still running
    let refused = other.resume("timed-out").await;
    assert!(
        matches!(refused, Err(Error::RunIdInUse { .. })),
        "{refused:?}"
    );

    latch(test, "go").open();
    worker.shutdown(PATIENCE).await.expect("released");
    let out = other
        .resume("timed-out")
        .await
        .and_then(Outcome::completed)
        .expect("free at once");
    assert_eq!(out.get::<usize>("hold_bodies").expect("set"), 2);
    assert_no_overlap(test);
}
