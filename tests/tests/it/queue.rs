//! docs/CONTRACT.md rule 31, queues, through the facade: priority, a
//! rate, a sleeping run that holds no slot, an enqueue dropped half-way,
//! and bad input.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fluxio::queue::{Enqueue, Enqueued, Queue};
use fluxio::recovery::RecoveryWorker;
use fluxio::store::CheckpointStore;
use fluxio::testing::TestClock;
use fluxio::{Context, Error, InMemoryStore, Pipeline, RunStatus, StageResult, pipeline, stage};

/// The run ids whose stage started, in order, by test (`test` key).
static ORDER: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn order(test: &str) -> Vec<String> {
    ORDER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|(t, _)| t == test)
        .map(|(_, id)| id.clone())
        .collect()
}

#[stage]
async fn note(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    let info = fluxio::StageInfo::current().ok_or("inside a pipeline")?;
    ORDER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((test, info.run_id.to_string()));
    Ok(ctx.set("noted", true)?)
}

#[stage]
async fn after(ctx: Context) -> StageResult {
    Ok(ctx.set("after", true)?)
}

fn input(test: &str) -> Context {
    Context::new().set("test", test).expect("a value")
}

fn worker(p: &Pipeline) -> RecoveryWorker {
    RecoveryWorker::builder()
        .pipeline(p.clone())
        .build()
        .expect("a worker")
}

async fn status(p: &Pipeline, id: &str) -> RunStatus {
    p.checkpoint(id)
        .await
        .expect("load")
        .expect("stored")
        .status
}

#[tokio::test]
async fn rule31_a_higher_priority_starts_first() {
    let clock = TestClock::new();
    let p = pipeline![note]
        .name("prio")
        .store(InMemoryStore::new())
        .clock(clock.clock())
        .queue(Queue::new("prio").concurrency(1))
        .build()
        .expect("builds");
    for id in ["low-1", "low-2"] {
        p.enqueue(id, input("prio"), Enqueue::new())
            .await
            .expect("enqueued");
    }
    clock.advance(Duration::from_secs(60)).expect("advance");
    p.enqueue("urgent", input("prio"), Enqueue::new().priority(1))
        .await
        .expect("enqueued");
    let w = worker(&p);
    for _ in 0..3 {
        w.run_once().await.expect("a sweep");
    }
    assert_eq!(
        order("prio"),
        ["prio/urgent", "prio/low-1", "prio/low-2"],
        "priority first, then the order enqueued"
    );
}

#[tokio::test]
async fn rule31_a_rate_starts_at_most_n_per_period() {
    let p = pipeline![note]
        .name("rated")
        .store(InMemoryStore::new())
        .queue(Queue::new("rated").rate(2, Duration::from_millis(1_500)))
        .build()
        .expect("builds");
    for i in 0..5 {
        p.enqueue(&format!("r{i}"), input("rated"), Enqueue::new())
            .await
            .expect("enqueued");
    }
    let w = worker(&p);
    w.run_once().await.expect("a sweep");
    assert_eq!(order("rated").len(), 2, "two tokens, two starts");
    w.run_once().await.expect("a sweep");
    assert_eq!(order("rated").len(), 2, "no token left in the period");
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    w.run_once().await.expect("a sweep");
    assert_eq!(order("rated").len(), 4, "the tokens lapsed with the period");
}

#[tokio::test]
async fn rule31_a_sleeping_run_holds_no_slot_and_takes_one_again_when_woken() {
    let clock = TestClock::new();
    let p = pipeline![note, sleep!("1h"), after]
        .name("napper")
        .store(InMemoryStore::new())
        .clock(clock.clock())
        .queue(Queue::new("napper").concurrency(1))
        .build()
        .expect("builds");
    for id in ["a", "b"] {
        p.enqueue(id, input("napper"), Enqueue::new())
            .await
            .expect("enqueued");
    }
    let w = worker(&p);
    w.run_once().await.expect("a sweep");
    w.run_once().await.expect("a sweep");
    assert_eq!(
        order("napper"),
        ["napper/a", "napper/b"],
        "b started while a slept: a sleeping run holds no slot"
    );
    assert_eq!(status(&p, "a").await, RunStatus::Sleeping);
    clock.advance(Duration::from_secs(3_601)).expect("advance");
    w.run_once().await.expect("a sweep");
    w.run_once().await.expect("a sweep");
    assert_eq!(status(&p, "a").await, RunStatus::Completed);
    assert_eq!(status(&p, "b").await, RunStatus::Completed);
}

#[tokio::test]
async fn rule31_an_enqueue_dropped_half_way_is_recovered_into_the_queue() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![note]
        .name("dropped")
        .store_arc(Arc::clone(&store))
        .lease_ttl(Duration::from_millis(300))
        .queue(Queue::new("dropped").concurrency(1))
        .build()
        .expect("builds");
    // a client killed between the enqueue's two writes: its call never ends
    let stalled = pipeline![note]
        .name("dropped")
        .store(fluxio_tests::family::StopBeforePark {
            inner: Arc::clone(&store),
        })
        .lease_ttl(Duration::from_millis(300))
        .queue(Queue::new("dropped").concurrency(1))
        .build()
        .expect("builds");
    let call = stalled.enqueue("half", input("dropped"), Enqueue::new());
    let timed_out = tokio::time::timeout(Duration::from_millis(100), call).await;
    assert!(timed_out.is_err(), "the call stands between its writes");
    let stored = p.checkpoint("half").await.expect("load").expect("stored");
    assert_eq!(stored.status, RunStatus::Running, "stored, not queued");
    // the client's retry finds it
    let retried = p
        .enqueue("half", input("dropped"), Enqueue::new())
        .await
        .expect("the retry answers");
    assert_eq!(retried, Enqueued::Exists);
    // once the dropped call's lease lapsed, a worker runs it, in the queue
    tokio::time::sleep(Duration::from_millis(500)).await;
    let w = RecoveryWorker::builder()
        .pipeline(p.clone())
        .policy(fluxio::recovery::RecoveryPolicy::new().backoff(Duration::ZERO, Duration::ZERO))
        .build()
        .expect("a worker");
    for _ in 0..3 {
        w.run_once().await.expect("a sweep");
    }
    assert_eq!(order("dropped"), ["dropped/half"], "it ran once");
    let done = p.checkpoint("half").await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    assert!(done.queue.is_some(), "still the queue's run");
}

#[tokio::test]
async fn rule31_bad_input_is_refused_naming_what_is_wrong() {
    let build = |q: Queue| {
        pipeline![note]
            .name("bad")
            .store(InMemoryStore::new())
            .queue(q)
            .build()
            .map(drop)
    };
    for (q, says) in [
        (Queue::new("bad").concurrency(0), "concurrency 0"),
        (
            Queue::new("bad").per_key(usize::MAX),
            "per-key concurrency 18446744073709551615",
        ),
        (Queue::new("bad").rate(0, Duration::ZERO), "a rate of 0"),
        (Queue::new("bad").rate(1, Duration::MAX), "period"),
        (Queue::new(""), "name"),
    ] {
        let err = build(q).expect_err(says).to_string();
        assert!(err.contains(says), "{says}: {err}");
    }
    let not_durable = pipeline![note]
        .queue(Queue::new("q"))
        .build()
        .expect_err("a queue needs a store")
        .to_string();
    assert!(
        not_durable.contains("queue `q` needs a durable pipeline"),
        "{not_durable}"
    );

    let plain = pipeline![note]
        .name("plain")
        .store(InMemoryStore::new())
        .build()
        .expect("builds");
    match plain.enqueue("x", Context::new(), Enqueue::new()).await {
        Err(Error::InvalidSetting { setting, message }) => {
            assert_eq!(setting, "queue");
            assert!(message.contains("`plain` has no queue"), "{message}");
        }
        other => panic!("expected InvalidSetting, got {other:?}"),
    }
    let p = pipeline![note]
        .name("keys")
        .store(InMemoryStore::new())
        .queue(Queue::new("keys").per_key(1))
        .build()
        .expect("builds");
    for key in [String::new(), "k".repeat(10_000), "a\0b".to_owned()] {
        match p
            .enqueue("x", Context::new(), Enqueue::new().key(&key))
            .await
        {
            Err(Error::InvalidSetting {
                setting: "key",
                message,
            }) => {
                assert!(message.len() < 300, "{message}");
            }
            other => panic!("expected a refused key, got {other:?}"),
        }
    }
    assert!(matches!(
        p.enqueue("", Context::new(), Enqueue::new()).await,
        Err(Error::InvalidRunId { .. })
    ));
    assert!(
        p.checkpoint("x").await.expect("load").is_none(),
        "nothing stored for refused input"
    );
}

#[stage]
async fn note_v2(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    let info = fluxio::StageInfo::current().ok_or("inside a pipeline")?;
    ORDER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((test, format!("v2 {}", info.run_id)));
    Ok(ctx.set("noted", 2)?)
}

#[tokio::test]
async fn rule31_after_a_redeploy_queued_runs_start_on_the_new_version() {
    let clock = TestClock::new();
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let v1 = pipeline![note, sleep!("1h"), after]
        .name("deploy")
        .store_arc(Arc::clone(&store))
        .clock(clock.clock())
        .queue(Queue::new("deploy").concurrency(1))
        .build()
        .expect("builds");
    v1.enqueue("started", input("deploy"), Enqueue::new())
        .await
        .expect("enqueued");
    worker(&v1).run_once().await.expect("a sweep");
    assert_eq!(status(&v1, "started").await, RunStatus::Sleeping);
    v1.enqueue("queued", input("deploy"), Enqueue::new())
        .await
        .expect("enqueued");
    // the new build: another stage, another version
    let v2 = pipeline![note_v2, sleep!("1h"), after]
        .name("deploy")
        .store_arc(Arc::clone(&store))
        .clock(clock.clock())
        .queue(Queue::new("deploy").concurrency(1))
        .build()
        .expect("builds");
    assert_ne!(v1.version(), v2.version());
    clock.advance(Duration::from_secs(3_601)).expect("advance");
    let w = worker(&v2);
    for _ in 0..3 {
        w.run_once().await.expect("a sweep");
        clock.advance(Duration::from_secs(3_601)).expect("advance");
    }
    let queued = v2
        .checkpoint("queued")
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(
        queued.status,
        RunStatus::Completed,
        "it ran on the new build"
    );
    assert_eq!(queued.version, v2.version());
    assert_eq!(
        queued
            .context
            .to_context()
            .get::<u64>("noted")
            .expect("noted"),
        2
    );
    // a run that started goes on only on its own version (rule 13)
    let started = v1
        .checkpoint("started")
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(
        (started.status, started.version.as_str()),
        (RunStatus::Sleeping, v1.version())
    );
    assert_eq!(order("deploy"), ["deploy/started", "v2 deploy/queued"]);
}
