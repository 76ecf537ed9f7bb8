//! docs/CONTRACT.md rule 24: durability modes, on a store whose fenced
//! writes the tests can hold back.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{StageFailed, a, arm, b, c, calls, disarm, input};
use fluxio::store::backend::{Begin, Begun};
use fluxio::store::{Checkpoint, CheckpointStore, InMemoryStore, Lease};
use fluxio::{Context, Durability, Error, Outcome, Pipeline, RunStatus, pipeline};
use tokio::sync::Semaphore;

/// An in-memory store that counts its calls, begins and finishes runs in
/// one call each, and lets fenced saves through only as the test allows.
#[derive(Debug)]
struct Gated {
    inner: InMemoryStore,
    calls: std::sync::Mutex<Vec<&'static str>>,
    gate: Semaphore,
    /// Fenced saves waiting at the gate.
    waiting: AtomicUsize,
    /// Refuse fenced saves after this many, as if the lease were lost.
    lose_after: AtomicUsize,
}

impl Gated {
    fn open() -> Arc<Self> {
        Arc::new(Gated {
            inner: InMemoryStore::new(),
            calls: std::sync::Mutex::default(),
            gate: Semaphore::new(Semaphore::MAX_PERMITS),
            waiting: AtomicUsize::new(0),
            lose_after: AtomicUsize::new(usize::MAX),
        })
    }

    fn closed() -> Arc<Self> {
        let g = Self::open();
        g.gate.forget_permits(Semaphore::MAX_PERMITS);
        g
    }

    fn note(&self, call: &'static str) {
        self.calls.lock().expect("not poisoned").push(call);
    }

    fn take_calls(&self) -> Vec<&'static str> {
        std::mem::take(&mut *self.calls.lock().expect("not poisoned"))
    }

    async fn until_waiting(&self) {
        for _ in 0..500 {
            if self.waiting.load(Ordering::SeqCst) > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no fenced save reached the gate");
    }
}

#[async_trait::async_trait]
impl CheckpointStore for Gated {
    async fn save(&self, cp: Checkpoint) -> fluxio::Result<()> {
        self.inner.save(cp).await
    }
    async fn load(&self, run_id: &str) -> fluxio::Result<Option<Checkpoint>> {
        self.note("load");
        self.inner.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
        self.inner.delete(run_id).await
    }
    async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
        self.note("exists");
        self.inner.exists(run_id).await
    }
    async fn history(&self, run_id: &str) -> fluxio::Result<Vec<Checkpoint>> {
        self.inner.history(run_id).await
    }
    async fn acquire_lease(&self, run_id: &str, ttl: Duration) -> fluxio::Result<Lease> {
        self.note("acquire");
        self.inner.acquire_lease(run_id, ttl).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> fluxio::Result<()> {
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: Lease) -> fluxio::Result<()> {
        self.note("release");
        self.inner.release_lease(lease).await
    }
    async fn save_fenced(&self, cp: Checkpoint, lease: &Lease) -> fluxio::Result<()> {
        self.note("save_fenced");
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let permit = self.gate.acquire().await.expect("the gate stays");
        permit.forget();
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        if self.lose_after.fetch_sub(1, Ordering::SeqCst) == 0 {
            return Err(Error::LeaseLost {
                run_id: lease.run_id().to_owned(),
                token: lease.token(),
            });
        }
        self.inner.save_fenced(cp, lease).await
    }
    async fn delete_fenced(&self, run_id: &str, lease: &Lease) -> fluxio::Result<()> {
        self.note("delete_fenced");
        self.inner.delete_fenced(run_id, lease).await
    }
    async fn cancel(&self, run_id: &str) -> fluxio::Result<()> {
        self.inner.cancel(run_id).await
    }
    async fn begin_run(
        &self,
        first: Checkpoint,
        ttl: Duration,
        begin: Begin,
    ) -> fluxio::Result<Begun> {
        self.note("begin_run");
        self.inner.begin_run(first, ttl, begin).await
    }
    async fn finish_run(&self, last: Checkpoint, lease: Lease, delete: bool) -> fluxio::Result<()> {
        self.note("finish_run");
        self.inner.finish_run(last, lease, delete).await
    }
}

fn ten(store: &Arc<Gated>, mode: Durability) -> Pipeline {
    ten_flushing(store, mode, Duration::ZERO)
}

/// `Async` sends each checkpoint once the write before it is acknowledged,
/// after `flush`.
fn ten_flushing(store: &Arc<Gated>, mode: Durability, flush: Duration) -> Pipeline {
    pipeline![a, b, c, a, b, c, a, b, c, a]
        .name("modes")
        .store_arc(store.clone())
        .durability(mode)
        .async_flush(flush)
        .build()
        .expect("valid")
}

fn path(ctx: &Context) -> Vec<String> {
    ctx.get_opt("path").unwrap_or_default()
}

const TEN: [&str; 10] = ["a", "b", "c", "a", "b", "c", "a", "b", "c", "a"];

/// Rule 24, Sync: a stage starts only once the checkpoint before it is
/// written: with the write held back, the second stage does not run.
#[tokio::test]
async fn rule24_sync_waits_for_each_checkpoint_before_its_stage() {
    let t = "rule24-sync";
    let store = Gated::closed();
    let p = ten(&store, Durability::Sync);
    let run = tokio::spawn({
        let p = p.clone();
        async move { p.invoke("s", input(t)).await }
    });
    store.until_waiting().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(calls(t, "a"), 1, "only the first stage ran");
    assert_eq!(calls(t, "b"), 0, "b waits for its checkpoint");
    store.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    let done = run
        .await
        .expect("no panic")
        .and_then(Outcome::completed)
        .expect("completes");
    assert_eq!(path(&done), TEN);
}

/// Rule 24, Async: the stages run while a checkpoint write is held back;
/// the run returns only once every write it sent is acknowledged, and its
/// journal is whole: numbered without gaps, ending completed.
#[tokio::test]
async fn rule24_async_runs_on_while_writes_are_in_flight_and_returns_once_all_are_acknowledged() {
    let t = "rule24-async";
    let store = Gated::closed();
    let p = ten(&store, Durability::Async);
    let run = tokio::spawn({
        let p = p.clone();
        async move { p.invoke("s", input(t)).await }
    });
    // every stage runs while the write of the second checkpoint waits
    for _ in 0..500 {
        if calls(t, "a") == 4 && calls(t, "c") == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        (calls(t, "a"), calls(t, "b"), calls(t, "c")),
        (4, 3, 3),
        "all ten stages ran without waiting for the store"
    );
    assert_eq!(
        store.waiting.load(Ordering::SeqCst),
        1,
        "one write in flight"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !run.is_finished(),
        "the run waits for its writes before it returns"
    );
    let stored = p
        .checkpoint("s")
        .await
        .expect("store works")
        .expect("begun");
    assert_eq!(
        (stored.seq, stored.status),
        (0, RunStatus::Running),
        "only the first checkpoint (written with the lease) is stored yet"
    );
    store.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    let done = run
        .await
        .expect("no panic")
        .and_then(Outcome::completed)
        .expect("completes");
    assert_eq!(path(&done), TEN);

    let history = store.inner.history("modes/s").await.expect("history");
    let seqs: Vec<u32> = history.iter().map(|c| c.seq).collect();
    assert_eq!(
        seqs,
        (0..history.len() as u32).collect::<Vec<_>>(),
        "no gaps"
    );
    assert!(
        history.len() < 11,
        "checkpoints made while a write was in flight were replaced by newer ones: {seqs:?}"
    );
    let last = history.last().expect("a journal");
    assert_eq!(last.status, RunStatus::Completed);
    assert_eq!(
        last.context.to_context(),
        done,
        "the journal folds to the result"
    );
    let calls = store.take_calls();
    assert_eq!(calls.first(), Some(&"begin_run"));
    assert_eq!(calls.last(), Some(&"finish_run"));
}

/// Rule 24, Async: a checkpoint waits `async_flush` before it is sent, and a
/// newer one replaces it: a run of quick stages writes its first and last
/// checkpoints only, and its end does not wait out the flush.
#[tokio::test]
async fn rule24_async_quick_stages_write_only_the_first_and_last_checkpoints() {
    let t = "rule24-async-flush";
    let store = Gated::open();
    let p = ten_flushing(&store, Durability::Async, Duration::from_secs(600));
    let done = tokio::time::timeout(Duration::from_secs(60), p.invoke("q", input(t)))
        .await
        .expect("the run's end wakes the writer instead of waiting 10 minutes")
        .and_then(Outcome::completed)
        .expect("completes");
    assert_eq!(path(&done), TEN);
    assert_eq!(store.take_calls(), ["begin_run", "finish_run"]);
    let history = store.inner.history("modes/q").await.expect("history");
    assert_eq!(history.iter().map(|c| c.seq).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(history[1].context.to_context(), done);
    // the default waits 2 ms, and longer than an hour is refused
    let refused = pipeline![a]
        .store_arc(store.clone())
        .async_flush(Duration::from_secs(3601))
        .build();
    assert!(
        matches!(
            refused,
            Err(Error::InvalidSetting {
                setting: "async_flush",
                ..
            })
        ),
        "{refused:?}"
    );
}

/// Rule 24, Async: a background write that is refused (here: the lease
/// was lost) stops the run at its next checkpoint with that error, and the
/// failed write's checkpoint is not stored.
#[tokio::test]
async fn rule24_async_stops_the_run_when_a_background_write_is_refused() {
    let t = "rule24-async-lost";
    let store = Gated::open();
    store.lose_after.store(0, Ordering::SeqCst);
    let p = ten(&store, Durability::Async);
    match p.invoke("lost", input(t)).await {
        Err(Error::LeaseLost { run_id, .. }) => assert_eq!(run_id, "modes/lost"),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(
        calls(t, "a") < 4,
        "the run stopped before its end: {} calls of a",
        calls(t, "a")
    );
}

/// Rule 24, Async: a run dropped while a background write is in flight
/// keeps its lease until that write returns, so no other owner can begin
/// the run while a write of the old one may still land.
#[tokio::test]
async fn rule24_async_a_dropped_run_keeps_its_lease_until_its_write_in_flight_returns() {
    let t = "rule24-async-drop";
    let store = Gated::closed();
    let p = ten(&store, Durability::Async);
    let run = tokio::spawn({
        let p = p.clone();
        async move { p.invoke("d", input(t)).await }
    });
    store.until_waiting().await;
    run.abort();
    assert!(run.await.expect_err("aborted").is_cancelled());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        matches!(
            store
                .inner
                .acquire_lease("modes/d", Duration::from_secs(30))
                .await,
            Err(Error::RunIdInUse { .. })
        ),
        "the write in flight still holds the lease"
    );
    store.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    let mut freed = false;
    for _ in 0..500 {
        if let Ok(lease) = store
            .inner
            .acquire_lease("modes/d", Duration::from_secs(30))
            .await
        {
            store.inner.release_lease(lease).await.expect("release");
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(freed, "the lease is given back once the write returned");
    p.shutdown(Duration::from_secs(5))
        .await
        .expect("no lease left");
}

/// Rule 24, Exit: a run writes nothing until it ends: its lease, the old
/// run cleared, and its completed checkpoint with the release: three calls
/// for ten stages. A failure is written; a resume continues from it.
#[tokio::test]
async fn rule24_exit_writes_only_the_end_of_a_run() {
    let t = "rule24-exit";
    let store = Gated::open();
    let p = ten(&store, Durability::Exit);
    let done = p
        .invoke("e", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("completes");
    assert_eq!(path(&done), TEN);
    assert_eq!(
        store.take_calls(),
        ["acquire", "delete_fenced", "finish_run"]
    );
    let history = store.inner.history("modes/e").await.expect("history");
    assert_eq!(history.len(), 1, "one checkpoint: the completed one");
    assert_eq!(history[0].status, RunStatus::Completed);

    // a failure is written, and the run resumes from the failed stage
    let small = pipeline![a, b, c]
        .name("modes-fail")
        .store_arc(store.clone())
        .durability(Durability::Exit)
        .build()
        .expect("valid");
    arm(t, "c");
    let err = small.invoke("f", input(t)).await.expect_err("c fails");
    assert_eq!(
        err.stage_error::<StageFailed>(),
        Some(&StageFailed { stage: "c".into() }),
        "the stage's error: {err}"
    );
    assert_eq!(
        store.take_calls(),
        ["acquire", "delete_fenced", "finish_run"]
    );
    let failed = small
        .checkpoint("f")
        .await
        .expect("store")
        .expect("written");
    assert_eq!(
        (failed.status, failed.step.as_str()),
        (RunStatus::Failed, "c")
    );
    disarm(t, "c");
    let before = (calls(t, "a"), calls(t, "b"));
    small
        .resume("f")
        .await
        .and_then(Outcome::completed)
        .expect("resumes");
    assert_eq!(
        (calls(t, "a"), calls(t, "b")),
        before,
        "a and b do not run again"
    );
    assert_eq!(
        store.take_calls(),
        ["load", "acquire", "load", "finish_run"]
    );
}

/// Rule 24, Exit: `start` of a run that crashed (nothing stored) runs it
/// from the beginning; `start` of the completed run returns its result.
#[tokio::test]
async fn rule24_exit_start_runs_again_what_was_never_written() {
    let t = "rule24-exit-start";
    let store = Gated::open();
    let p = ten(&store, Durability::Exit);
    let first = p
        .start("x", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("completes");
    let again = p
        .start("x", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("its result");
    assert_eq!(first, again);
    assert_eq!(calls(t, "b"), 3, "the second start ran nothing");
}

#[test]
fn rule24_durability_names_parse_and_print() {
    for mode in [Durability::Sync, Durability::Async, Durability::Exit] {
        assert_eq!(
            mode.to_string().parse::<Durability>().expect("parses"),
            mode
        );
    }
    assert_eq!(
        "ASYNC".parse::<Durability>().expect("any case"),
        Durability::Async
    );
    assert_eq!(Durability::default(), Durability::Sync);
    match "fast".parse::<Durability>() {
        Err(Error::InvalidSetting { setting, message }) => {
            assert_eq!(setting, "durability");
            assert!(message.contains("fast"), "{message}");
        }
        other => panic!("expected InvalidSetting, got {other:?}"),
    }
}
