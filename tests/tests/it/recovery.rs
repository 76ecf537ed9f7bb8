//! Contract rule 22, recovery workers, on `InMemoryStore` (the real
//! processes and shared stores are in `multiprocess.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fluxio::recovery::{RecoveryEvent, RecoveryPolicy, RecoveryWorker};
use fluxio::store::{CheckpointStore, InMemoryStore, RunFilter, RunState, retry_run};
use fluxio::{Context, Outcome, Pipeline, RunStatus, StageResult, pipeline, stage};

/// How many times `finish` ran for each run id.
static LEDGER: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Whether `finish` fails.
static FAIL: AtomicBool = AtomicBool::new(false);
/// Whether `finish` waits for `GATE`.
static WAIT: AtomicBool = AtomicBool::new(false);
static GATE: tokio::sync::Notify = tokio::sync::Notify::const_new();
static ENTERED: tokio::sync::Notify = tokio::sync::Notify::const_new();
/// Tests here share the statics: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn ledger() -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for id in std::mem::take(
        &mut *LEDGER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    ) {
        *counts.entry(id).or_default() += 1;
    }
    counts
}

#[stage]
async fn prepare(ctx: Context) -> StageResult {
    Ok(ctx.set("prepared", true)?)
}

#[stage]
async fn finish(ctx: Context) -> StageResult {
    let id: String = ctx.get("id")?;
    if WAIT.load(Ordering::SeqCst) {
        ENTERED.notify_one();
        GATE.notified().await;
    }
    LEDGER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(id);
    if FAIL.load(Ordering::SeqCst) {
        return Err("the payment service is down".into());
    }
    Ok(ctx.set("finished", true)?)
}

#[stage]
async fn audit(ctx: Context) -> StageResult {
    Ok(ctx.set("audited", true)?)
}

fn orders(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![prepare, finish]
        .name("orders")
        .store_arc(Arc::clone(store))
        .build()
        .expect("valid")
}

fn orders_v2(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![prepare, finish, audit]
        .name("orders")
        .store_arc(Arc::clone(store))
        .build()
        .expect("valid")
}

fn quick() -> RecoveryPolicy {
    RecoveryPolicy::new().backoff(Duration::ZERO, Duration::ZERO)
}

/// `n` runs of `p` left as a dead worker leaves them: running at `finish`,
/// nobody holding their lease.
async fn abandon(p: &Pipeline, store: &Arc<dyn CheckpointStore>, n: usize) -> Vec<String> {
    FAIL.store(true, Ordering::SeqCst);
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("o-{i}");
        let input = Context::new().set("id", id.clone()).expect("set");
        p.invoke(&id, input).await.expect_err("finish fails");
        let mut cp = p.checkpoint(&id).await.expect("load").expect("stored");
        cp.status = RunStatus::Running;
        cp.error_message = None;
        store.save(cp).await.expect("save");
        ids.push(id);
    }
    FAIL.store(false, Ordering::SeqCst);
    let _ = ledger();
    ids
}

async fn states(store: &Arc<dyn CheckpointStore>) -> HashMap<String, RunState> {
    let page = store
        .list_runs(&RunFilter::new().limit(10_000))
        .await
        .expect("list");
    page.runs.into_iter().map(|r| (r.run_id, r.state)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule22_abandoned_runs_are_resumed_exactly_once_across_workers() {
    let _serial = SERIAL.lock().await;
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let ids = abandon(&orders(&store), &store, 60).await;
    let workers: Vec<RecoveryWorker> = (0..3)
        .map(|_| {
            RecoveryWorker::builder()
                .pipeline(orders(&store))
                .concurrency(4)
                .policy(quick())
                .build()
                .expect("worker")
        })
        .collect();
    let sweeps = futures_join(workers.iter().map(|w| {
        let w = w.clone();
        async move { w.run_once().await }
    }))
    .await;
    let resumed: usize = sweeps
        .iter()
        .map(|s| s.as_ref().expect("sweep").resumed)
        .sum();
    assert_eq!(resumed, 60, "{sweeps:?}");
    let counts = ledger();
    for id in &ids {
        assert_eq!(counts.get(id), Some(&1), "{id} finished once: {counts:?}");
    }
    assert!(
        states(&store)
            .await
            .values()
            .all(|s| *s == RunState::Completed),
        "every run completed"
    );
    // nothing is left: another sweep finds nothing
    let again = workers[0].run_once().await.expect("sweep");
    assert_eq!((again.found, again.resumed), (0, 0));
}

/// A tiny join of futures, without a dependency.
async fn futures_join<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("no panic"));
    }
    out
}

#[tokio::test]
async fn rule22_failed_runs_are_retried_only_by_policy_and_after_their_backoff() {
    let _serial = SERIAL.lock().await;
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = orders(&store);
    FAIL.store(true, Ordering::SeqCst);
    let input = Context::new().set("id", "f-1").expect("set");
    p.invoke("f-1", input).await.expect_err("fails");
    FAIL.store(false, Ordering::SeqCst);
    let _ = ledger();

    let default = RecoveryWorker::builder()
        .pipeline(orders(&store))
        .build()
        .expect("worker");
    let sweep = default.run_once().await.expect("sweep");
    assert_eq!(sweep.found, 0, "failed runs are not retried by default");
    assert!(ledger().is_empty());

    let slow = RecoveryWorker::builder()
        .pipeline(orders(&store))
        .policy(
            RecoveryPolicy::new()
                .retry_failed(true)
                .backoff(Duration::from_secs(3600), Duration::from_secs(3600)),
        )
        .build()
        .expect("worker");
    let sweep = slow.run_once().await.expect("sweep");
    assert_eq!(
        (sweep.found, sweep.deferred, sweep.resumed),
        (1, 1, 0),
        "not due: its recovery time is written into the due-index"
    );
    let again = slow.run_once().await.expect("sweep");
    assert_eq!(
        (again.found, again.left, again.deferred, again.resumed),
        (1, 1, 0, 0),
        "written once"
    );
    assert!(ledger().is_empty());

    let due = RecoveryWorker::builder()
        .pipeline(orders(&store))
        .policy(quick().retry_failed(true))
        .build()
        .expect("worker");
    let sweep = due.run_once().await.expect("sweep");
    assert_eq!(sweep.resumed, 1);
    assert_eq!(ledger().get("f-1"), Some(&1));
    assert_eq!(states(&store).await["f-1"], RunState::Completed);
}

#[tokio::test]
async fn rule22_a_run_that_keeps_failing_needs_attention_until_an_operator_retries_it() {
    let _serial = SERIAL.lock().await;
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = orders(&store);
    let events = Arc::new(Mutex::new(Vec::new()));
    let worker = RecoveryWorker::builder()
        .pipeline(orders(&store))
        .policy(quick().retry_failed(true).max_attempts(3))
        .on_event({
            let events = Arc::clone(&events);
            move |e| {
                if let RecoveryEvent::GaveUp {
                    key,
                    attempts,
                    error_message,
                } = e
                {
                    events.lock().expect("events").push((
                        key.clone(),
                        *attempts,
                        error_message.clone(),
                    ));
                }
            }
        })
        .build()
        .expect("worker");
    FAIL.store(true, Ordering::SeqCst);
    let input = Context::new().set("id", "bad-1").expect("set");
    p.invoke("bad-1", input).await.expect_err("fails");
    let mut sweeps = Vec::new();
    for _ in 0..4 {
        sweeps.push(worker.run_once().await.expect("sweep"));
    }
    // attempts 2 and 3 fail again; then it is given up on, and left
    assert_eq!(
        sweeps
            .iter()
            .map(|s| (s.failed, s.gave_up))
            .collect::<Vec<_>>(),
        [(1, 0), (1, 0), (0, 1), (0, 0)]
    );
    assert_eq!(ledger().get("bad-1"), Some(&3), "three attempts in all");
    let cp = p.checkpoint("bad-1").await.expect("load").expect("stored");
    assert_eq!((cp.status, cp.attempt), (RunStatus::NeedsAttention, 3));
    assert!(
        cp.error_message
            .as_deref()
            .is_some_and(|m| m.contains("the payment service is down")),
        "{cp:?}"
    );
    assert_eq!(states(&store).await["bad-1"], RunState::NeedsAttention);
    {
        let events = events.lock().expect("events");
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!((events[0].0.as_str(), events[0].1), ("orders/bad-1", 3));
    }

    // the operator fixes the payment service and hands the run back
    FAIL.store(false, Ordering::SeqCst);
    let retried = retry_run(&store, "orders/bad-1").await.expect("retry");
    assert_eq!((retried.status, retried.attempt), (RunStatus::Running, 0));
    let sweep = worker.run_once().await.expect("sweep");
    assert_eq!(sweep.resumed, 1);
    assert_eq!(ledger().get("bad-1"), Some(&1));
    let history = p.history("bad-1").await.expect("history");
    assert!(history.to_string().contains("completed"), "{history}");
}

#[tokio::test]
async fn rule22_runs_of_a_version_the_worker_does_not_hold_are_left_alone_and_reported_once() {
    let _serial = SERIAL.lock().await;
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let newer = orders_v2(&store);
    abandon(&newer, &store, 2).await;
    let reported = Arc::new(Mutex::new(Vec::new()));
    let old_worker = RecoveryWorker::builder()
        .pipeline(orders(&store))
        .policy(quick())
        .on_event({
            let reported = Arc::clone(&reported);
            move |e| {
                if let RecoveryEvent::NotHeld { key, version } = e {
                    reported
                        .lock()
                        .expect("reported")
                        .push((key.clone(), version.clone()));
                }
            }
        })
        .build()
        .expect("worker");
    for _ in 0..2 {
        let sweep = old_worker.run_once().await.expect("sweep");
        assert_eq!((sweep.not_held, sweep.resumed), (2, 0));
    }
    let mut reported = reported.lock().expect("reported").clone();
    reported.sort();
    assert_eq!(
        reported,
        [
            ("orders/o-0".to_owned(), newer.version().to_owned()),
            ("orders/o-1".to_owned(), newer.version().to_owned())
        ],
        "each run is reported once"
    );
    assert!(ledger().is_empty());
    assert!(
        states(&store)
            .await
            .values()
            .all(|s| *s == RunState::Abandoned),
        "left as they were"
    );

    // a worker holding both versions finishes them on the version that wrote them
    let both = RecoveryWorker::builder()
        .pipeline(orders(&store))
        .pipeline(orders_v2(&store))
        .policy(quick())
        .build()
        .expect("worker");
    assert_eq!(both.run_once().await.expect("sweep").resumed, 2);
    let out = newer
        .checkpoint("o-0")
        .await
        .expect("load")
        .expect("stored");
    assert!(out.context.to_context().contains_key("audited"), "ran v2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule22_shutdown_stops_taking_runs_and_gives_the_leases_back() {
    let _serial = SERIAL.lock().await;
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    abandon(&orders(&store), &store, 3).await;
    WAIT.store(true, Ordering::SeqCst);
    let p = orders(&store);
    let handle = RecoveryWorker::builder()
        .pipeline(p.clone())
        .concurrency(1)
        .interval(Duration::from_millis(5))
        .policy(quick())
        .build()
        .expect("worker")
        .spawn()
        .expect("spawn");
    ENTERED.notified().await;
    // one run is in `finish`, the others wait for the worker's one permit
    handle
        .shutdown(Duration::from_millis(20))
        .await
        .expect("shutdown");
    WAIT.store(false, Ordering::SeqCst);
    p.shutdown(Duration::from_secs(5))
        .await
        .expect("leases back");
    assert!(ledger().is_empty(), "the dropped run did not finish");
    let states = states(&store).await;
    assert_eq!(states.len(), 3);
    assert!(
        states.values().all(|s| *s == RunState::Abandoned),
        "every run is free for the next worker: {states:?}"
    );
    for id in ["o-0", "o-1", "o-2"] {
        let lease = store
            .acquire_lease(&format!("orders/{id}"), Duration::from_secs(1))
            .await
            .expect("free");
        store.release_lease(lease).await.expect("release");
    }
}

#[tokio::test]
async fn rule22_a_worker_needs_durable_pipelines() {
    let err = RecoveryWorker::builder().build().expect_err("no pipelines");
    assert!(err.to_string().contains("at least one pipeline"), "{err}");
    let plain = pipeline![prepare].build().expect("valid");
    let err = RecoveryWorker::builder()
        .pipeline(plain)
        .build()
        .expect_err("not durable");
    assert!(err.to_string().contains("give it a store"), "{err}");
}

/// The snapshotter of this test binary's global metrics recorder.
fn metrics_snapshotter() -> &'static metrics_util::debugging::Snapshotter {
    static SNAPSHOTTER: std::sync::OnceLock<metrics_util::debugging::Snapshotter> =
        std::sync::OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this binary");
        snapshotter
    })
}

/// The metrics of pipeline `pipeline`: name -> counter/gauge value, or the
/// number of histogram samples.
fn metrics_of(pipeline: &str) -> HashMap<String, f64> {
    use metrics_util::debugging::DebugValue;
    let mut out = HashMap::new();
    for (key, _, _, value) in metrics_snapshotter().snapshot().into_vec() {
        let key = key.key();
        if !key
            .labels()
            .any(|l| l.key() == "pipeline" && l.value() == pipeline)
        {
            continue;
        }
        let v = match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Gauge(g) => g.into_inner(),
            DebugValue::Histogram(samples) => samples.len() as f64,
        };
        *out.entry(key.name().to_owned()).or_default() += v;
    }
    out
}

#[tokio::test]
async fn metrics_count_runs_checkpoints_and_recoveries() {
    let _serial = SERIAL.lock().await;
    metrics_snapshotter();
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let metered = || {
        pipeline![prepare, finish]
            .name("metered")
            .store_arc(Arc::clone(&store))
            .build()
            .expect("valid")
    };
    let p = metered();
    let input = |id: &str| Context::new().set("id", id.to_owned()).expect("set");
    p.invoke("m-1", input("m-1"))
        .await
        .and_then(Outcome::completed)
        .expect("completes");
    FAIL.store(true, Ordering::SeqCst);
    p.invoke("m-2", input("m-2")).await.expect_err("fails");
    FAIL.store(false, Ordering::SeqCst);
    p.invoke("m-3", input("m-3"))
        .await
        .and_then(Outcome::completed)
        .expect("completes");
    p.cancel("m-3")
        .await
        .expect_err("a completed run cannot be cancelled");
    let worker = RecoveryWorker::builder()
        .pipeline(metered())
        .policy(quick().retry_failed(true))
        .build()
        .expect("worker");
    assert_eq!(worker.run_once().await.expect("sweep").resumed, 1);
    let _ = ledger();
    let m = metrics_of("metered");
    assert_eq!(m.get("fluxio_runs_started_total"), Some(&4.0), "{m:?}");
    assert_eq!(m.get("fluxio_runs_completed_total"), Some(&3.0), "{m:?}");
    assert_eq!(m.get("fluxio_runs_failed_total"), Some(&1.0), "{m:?}");
    assert_eq!(m.get("fluxio_runs_recovered_total"), Some(&1.0), "{m:?}");
    assert_eq!(m.get("fluxio_runs_in_flight"), Some(&0.0), "{m:?}");
    // 3 writes a run (before each stage, then completed or failed), and 2
    // for the resume (before finish again, then completed)
    assert_eq!(
        m.get("fluxio_checkpoint_write_seconds"),
        Some(&11.0),
        "{m:?}"
    );
}
