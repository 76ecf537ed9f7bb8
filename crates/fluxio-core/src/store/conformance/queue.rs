//! Checks of queues (contract rule 31): a queue's slots are leases on keys
//! no run has, and workers start enqueued runs only within the queue's
//! limits, on every store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::waits::{indexed, worker};
use super::{Harness, namespace, suite_pipeline, suite_stage};
use crate::compile::Node;
use crate::context::Context;
use crate::error::Error;
use crate::queue::{Enqueue, Enqueued, Queue};
use crate::recovery::RecoveryWorker;
use crate::stage::{Output, ResourceReq, Resources, StageFuture};
use crate::store::{CheckpointStore as _, DueFilter, MAX_UNTIL_MS, RunFilter, RunStatus};
use crate::testing::TestClock;

const TTL: Duration = Duration::from_secs(30);

/// Rule 31: a slot is a lease on a key no run has: taken once, refused to
/// a second taker, free again when given back, or when its time-to-live
/// lapses (a rate token); no listing of runs shows it.
pub async fn rule31_a_queue_slot_is_a_lease_no_listing_shows<H: Harness>(h: &H) {
    let store = h.store(&namespace("rule31_slots")).await;
    let slot = "%rule31/slot/0";
    let lease = store.acquire_lease(slot, TTL).await.expect("a free slot");
    assert!(
        matches!(
            store.acquire_lease(slot, TTL).await,
            Err(Error::RunIdInUse { .. })
        ),
        "a held slot is refused"
    );
    if let Ok(page) = store.list_runs(&RunFilter::new()).await {
        assert!(
            page.runs.iter().all(|r| !r.key.starts_with('%')),
            "a slot is not a run: {:?}",
            page.runs
        );
    }
    let due = store.due_runs(&DueFilter::new(MAX_UNTIL_MS)).await;
    if let Ok(due) = &due {
        assert!(due.is_empty(), "a slot is never due: {due:?}");
    }
    store.release_lease(lease).await.expect("given back");
    let again = store.acquire_lease(slot, TTL).await.expect("free again");
    store.release_lease(again).await.expect("given back");
    // a store with the four required methods holds leases in the process,
    // with no time-to-live, and has no due-index for a queue's workers
    if due.is_err() {
        return;
    }
    let token = "%rule31/rate/0";
    let _spent = store
        .acquire_lease(token, Duration::from_millis(60))
        .await
        .expect("a token");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lapsed = store.acquire_lease(token, TTL).await.expect("lapsed");
    store.release_lease(lapsed).await.expect("given back");
}

/// How many of the queue's runs run at once, in all and per key, at most.
#[derive(Default)]
struct Gauge {
    running: usize,
    by_key: HashMap<String, usize>,
    most: usize,
    most_of_a_key: usize,
    calls: usize,
}

#[derive(Clone, Default)]
struct Gauged(Arc<Mutex<Gauge>>);

impl Gauged {
    fn with<T>(&self, f: impl FnOnce(&mut Gauge) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The stage `send`: counts itself running under its `tenant` for a
/// while.
fn gauged(ctx: Context, resources: &Resources) -> StageFuture {
    let gauge = resources.get::<Gauged>();
    StageFuture::new(async move {
        let gauge = gauge.ok_or("the gauge is registered")?;
        let tenant: String = ctx.get("tenant")?;
        gauge.with(|g| {
            g.calls += 1;
            g.running += 1;
            g.most = g.most.max(g.running);
            let of_key = g.by_key.entry(tenant.clone()).or_default();
            *of_key += 1;
            let of_key = *of_key;
            g.most_of_a_key = g.most_of_a_key.max(of_key);
        });
        tokio::time::sleep(Duration::from_millis(15)).await;
        gauge.with(|g| {
            g.running -= 1;
            *g.by_key.entry(tenant).or_default() -= 1;
        });
        Ok(Output::Context(ctx.set("sent", true)?))
    })
}

/// Rule 31: runs enqueued (once each, however often a client retries)
/// start only within the queue's limits, two at once and one per key
/// across three workers sweeping at once, and all of them complete; each
/// keeps its queue and key in its checkpoints.
pub async fn rule31_workers_start_queued_runs_within_the_limits<H: Harness>(h: &H) {
    const TAKES: &[fn() -> ResourceReq] = &[ResourceReq::of::<Gauged>];
    let store = h.store(&namespace("rule31_limits")).await;
    let (gauge, clock) = (Gauged::default(), TestClock::new());
    let nodes: Vec<Node> = vec![suite_stage("send", 1, TAKES, gauged)];
    let p = suite_pipeline(
        nodes,
        *b"fluxio/conformance/queue/v1\0\0\0\0\0",
        "mail",
        &gauge,
    )
    .clock(clock.clock())
    .queue(Queue::new("mail").concurrency(2).per_key(1))
    .store(store)
    .build()
    .expect("the pipeline builds");
    if !indexed(&p).await {
        return;
    }
    let tenants = ["a", "b", "c"];
    for i in 0..12 {
        let tenant = tenants[i % 3];
        let input = Context::new().set("tenant", tenant).expect("a value");
        let options = Enqueue::new().key(tenant);
        let id = format!("m{i}");
        assert_eq!(
            p.enqueue(&id, input.clone(), options.clone())
                .await
                .expect("enqueued"),
            Enqueued::Queued
        );
        assert_eq!(
            p.enqueue(&id, input, options).await.expect("again"),
            Enqueued::Exists,
            "a retried enqueue stores nothing"
        );
    }
    let queued = p.checkpoint("m4").await.expect("load").expect("stored");
    assert_eq!(queued.status, RunStatus::Sleeping);
    let entry = queued.queue.expect("a queue's run");
    assert_eq!(
        (entry.queue.as_str(), entry.key.as_deref()),
        ("mail", Some("b"))
    );
    assert!(entry.queued, "not started yet");
    assert_eq!(gauge.with(|g| g.calls), 0, "enqueue returns at once");

    let workers = [worker(&p), worker(&p), worker(&p)];
    for _ in 0..60 {
        let all = workers.iter().map(RecoveryWorker::run_once);
        for swept in futures::future::join_all(all).await {
            swept.expect("a sweep");
        }
        if gauge.with(|g| g.calls) >= 12 {
            break;
        }
        // a run whose key was busy is due again a second later
        clock.advance(Duration::from_secs(1)).expect("advance");
    }
    let (calls, most, most_of_a_key) = gauge.with(|g| (g.calls, g.most, g.most_of_a_key));
    assert_eq!(calls, 12, "every run ran once");
    assert!(most <= 2, "{most} ran at once; the queue allows 2");
    assert_eq!(most_of_a_key, 1, "one run per key at once");
    for i in 0..12 {
        let cp = p
            .checkpoint(&format!("m{i}"))
            .await
            .expect("load")
            .expect("stored");
        assert_eq!(cp.status, RunStatus::Completed, "m{i}");
        let entry = cp.queue.expect("still the queue's");
        assert!(!entry.queued, "m{i} started");
        assert_eq!(entry.key.as_deref(), Some(tenants[i % 3]));
    }
    // every slot was given back: a run enqueued now starts at the next sweep
    let input = Context::new().set("tenant", "a").expect("a value");
    p.enqueue("late", input, Enqueue::new().key("a"))
        .await
        .expect("enqueued");
    workers[0].run_once().await.expect("a sweep");
    let late = p.checkpoint("late").await.expect("load").expect("stored");
    assert_eq!(late.status, RunStatus::Completed, "no slot was left held");
}
