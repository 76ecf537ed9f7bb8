//! Rule 14 (docs/CONTRACT.md, section 5): cancel a run by id. The owner
//! stops before its next stage (it learns of the cancel from its next fenced
//! checkpoint write), the run ends cancelled, and resuming or replaying it
//! is `Error::Cancelled`. On `InMemoryStore`, and on a store with only the
//! four required methods (the in-process default of `cancel`); across
//! processes on the shared stores: `multiprocess.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fluxio::callback::{Callback, CallbackResult};
use fluxio::store::{Checkpoint, CheckpointStore, InMemoryStore};
use fluxio::{
    Context, Error, Outcome, Pipeline, ResumeOptions, RunStatus, StageResult, StreamEvent,
    pipeline, stage,
};
use futures::StreamExt as _;
use tokio::sync::Semaphore;

use crate::common::{StageFailed, calls, input, step};

/// How long a test waits for something it is sure will happen.
const PATIENCE: Duration = Duration::from_secs(30);

/// Where the `held` stage of a test waits: it adds a permit to `entered`,
/// then takes one from `release`.
struct Gate {
    entered: Semaphore,
    release: Semaphore,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            entered: Semaphore::new(0),
            release: Semaphore::new(0),
        }
    }
}

fn gate(test: &str) -> Arc<Gate> {
    static GATES: Mutex<Option<HashMap<String, Arc<Gate>>>> = Mutex::new(None);
    let mut gates = GATES.lock().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(
        gates
            .get_or_insert_with(HashMap::new)
            .entry(test.to_owned())
            .or_default(),
    )
}

impl Gate {
    async fn wait_entered(&self) {
        let permit = tokio::time::timeout(PATIENCE, self.entered.acquire())
            .await
            .expect("the stage was entered in time")
            .expect("the semaphore is open");
        permit.forget();
    }

    fn open(&self) {
        self.release.add_permits(1_000);
    }
}

#[stage]
async fn first(ctx: Context) -> StageResult {
    step(ctx, "first")
}

/// Waits at its test's gate; fails afterwards when the context says `fail`.
#[stage]
async fn held(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    let gate = gate(&test);
    gate.entered.add_permits(1);
    gate.release.acquire().await?.forget();
    if ctx.get_opt::<bool>("fail") == Some(true) {
        crate::common::record(&test, "call:held");
        return Err(Box::new(StageFailed {
            stage: "held".to_owned(),
        }));
    }
    step(ctx, "held")
}

#[stage]
async fn third(ctx: Context) -> StageResult {
    step(ctx, "third")
}

/// Records how each run ended, as a callback sees it.
#[derive(Debug, Clone, Default)]
struct Ends(Arc<Mutex<Vec<String>>>);

impl Callback for Ends {
    fn on_pipeline_end(
        &self,
        run_id: &str,
        _took: Duration,
        error: Option<&Error>,
    ) -> CallbackResult {
        let outcome = match error {
            None => "completed",
            Some(Error::Cancelled { .. }) => "cancelled",
            Some(_) => "failed",
        };
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("{run_id} {outcome}"));
        Ok(())
    }
}

impl Ends {
    fn seen(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn three_stages(store: &Arc<dyn CheckpointStore>, ends: &Ends) -> Pipeline {
    pipeline![first, held, third]
        .name("cancel")
        .store_arc(Arc::clone(store))
        .callback(ends.clone())
        .build()
        .expect("a valid pipeline")
}

async fn stored(p: &Pipeline, run_id: &str) -> Checkpoint {
    p.checkpoint(run_id)
        .await
        .expect("the store works")
        .expect("a checkpoint is stored")
}

fn is_cancelled<T: std::fmt::Debug>(result: &fluxio::Result<T>, key: &str) -> bool {
    matches!(result, Err(Error::Cancelled { run_id }) if run_id == key)
}

/// A store with only the four required methods: `cancel`, the leases and
/// the fenced writes are the in-process defaults.
#[derive(Debug, Default)]
struct FourMethods(InMemoryStore);

#[async_trait::async_trait]
impl CheckpointStore for FourMethods {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
        self.0.save(checkpoint).await
    }
    async fn load(&self, run_id: &str) -> fluxio::Result<Option<Checkpoint>> {
        self.0.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
        self.0.delete(run_id).await
    }
    async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
        self.0.exists(run_id).await
    }
}

/// The whole story on one store: a run cancelled from another task while
/// its second stage waits stops there, ends cancelled, and stays cancelled;
/// a fresh invoke of the id runs it again.
async fn cancelled_while_a_stage_waits(store: Arc<dyn CheckpointStore>, test: &str) {
    let ends = Ends::default();
    let owner = three_stages(&store, &ends);
    let other = three_stages(&store, &Ends::default());
    let key = format!("cancel/{test}");
    let gate = gate(test);

    let run = tokio::spawn({
        let (owner, test) = (owner.clone(), test.to_owned());
        async move { owner.invoke(&test, input(&test)).await }
    });
    gate.wait_entered().await;
    let at_held = stored(&other, test).await;
    assert_eq!(
        (at_held.step.as_str(), at_held.status),
        ("held", RunStatus::Running)
    );

    // the cancel comes from another task, through another pipeline value
    tokio::spawn({
        let (other, test) = (other.clone(), test.to_owned());
        async move { other.cancel(&test).await }
    })
    .await
    .expect("no panic")
    .expect("a running run can be cancelled");
    let cancelled = stored(&other, test).await;
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert_eq!(
        (cancelled.ip, &cancelled.step, &cancelled.context),
        (at_held.ip, &at_held.step, &at_held.context),
        "cancelled where it stood"
    );

    gate.open();
    let out = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the owner stops")
        .expect("no panic");
    assert!(is_cancelled(&out, &key), "{out:?}");
    assert_eq!(calls(test, "held"), 1, "the held stage finished its body");
    assert_eq!(calls(test, "third"), 0, "no stage ran after the cancel");
    assert_eq!(
        stored(&other, test).await,
        cancelled,
        "the owner wrote nothing more"
    );
    assert_eq!(
        ends.seen(),
        [format!("{key} cancelled")],
        "callbacks see it"
    );

    // cancelled for good: nothing runs, nothing changes, and the lease is
    // free (the refusals are not RunIdInUse)
    let refused = [
        ("resume", other.resume(test).await),
        (
            "resume_with",
            other
                .resume_with(test, ResumeOptions::new().allow_code_changes(true))
                .await,
        ),
        ("replay", other.replay(test, None).await),
        (
            "replay from a step",
            other.replay(test, Some("first")).await,
        ),
        ("start (rule 11)", other.start(test, input(test)).await),
    ];
    for (what, result) in refused {
        assert!(is_cancelled(&result, &key), "{what}: {result:?}");
    }
    assert_eq!(
        (
            calls(test, "first"),
            calls(test, "held"),
            calls(test, "third")
        ),
        (1, 1, 0)
    );
    assert_eq!(stored(&other, test).await, cancelled);
    match other.cancel(test).await {
        Err(Error::RunFinished { run_id, status }) => {
            assert_eq!((run_id, status), (key.clone(), RunStatus::Cancelled));
        }
        other => panic!("a second cancel: {other:?}"),
    }

    // invoke is fresh: it deletes the cancelled run and runs the id again
    let out = owner
        .invoke(test, input(test))
        .await
        .and_then(Outcome::completed)
        .expect("a fresh run of the id completes");
    let path: Vec<String> = out.get("path").expect("path");
    assert_eq!(path, ["first", "held", "third"]);
    assert_eq!(stored(&other, test).await.status, RunStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_a_run_cancelled_while_its_stage_waits_stops_before_its_next_stage() {
    cancelled_while_a_stage_waits(Arc::new(InMemoryStore::new()), "r14_memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_a_four_method_store_cancels_its_runs_in_process() {
    cancelled_while_a_stage_waits(Arc::new(FourMethods::default()), "r14_four").await;
}

#[tokio::test]
async fn rule14_cancel_of_a_completed_run_is_run_finished_and_of_an_unknown_one_not_found() {
    let test = "r14_done";
    gate(test).open();
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = three_stages(&store, &Ends::default());
    p.invoke("done", input(test))
        .await
        .and_then(Outcome::completed)
        .expect("completes");
    let done = stored(&p, "done").await;
    match p.cancel("done").await {
        Err(Error::RunFinished { run_id, status }) => {
            assert_eq!(
                (run_id.as_str(), status),
                ("cancel/done", RunStatus::Completed)
            );
        }
        other => panic!("cancel of a completed run: {other:?}"),
    }
    assert_eq!(stored(&p, "done").await, done, "nothing changed");
    match p.cancel("never").await {
        Err(Error::CheckpointNotFound { run_id }) => assert_eq!(run_id, "cancel/never"),
        other => panic!("cancel of an unknown run: {other:?}"),
    }
    assert!(!p.exists("never").await.expect("exists"));
    assert!(matches!(
        p.cancel("").await,
        Err(Error::InvalidRunId { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_a_failing_stage_whose_failure_checkpoint_is_refused_ends_cancelled() {
    let test = "r14_fail";
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = three_stages(&store, &Ends::default());
    let run = tokio::spawn({
        let p = p.clone();
        let input = input(test).set("fail", true).expect("a bool");
        async move { p.invoke("failing", input).await }
    });
    gate(test).wait_entered().await;
    p.cancel("failing").await.expect("cancel");
    gate(test).open();
    let out = run.await.expect("no panic");
    assert!(
        is_cancelled(&out, "cancel/failing"),
        "Cancelled, not the stage's error: {out:?}"
    );
    assert_eq!(calls(test, "held"), 1, "the stage did fail");
    let cp = stored(&p, "failing").await;
    assert_eq!(
        (cp.status, cp.step.as_str(), cp.error_message),
        (RunStatus::Cancelled, "held", None),
        "the failure checkpoint was refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_a_run_cancelled_in_its_last_stage_does_not_complete() {
    let test = "r14_last";
    let p = pipeline![first, held]
        .name("cancel")
        .store(InMemoryStore::new())
        .build()
        .expect("valid");
    let run = tokio::spawn({
        let p = p.clone();
        async move { p.invoke("last", input(test)).await }
    });
    gate(test).wait_entered().await;
    p.cancel("last").await.expect("cancel");
    gate(test).open();
    let out = run.await.expect("no panic");
    assert!(is_cancelled(&out, "cancel/last"), "{out:?}");
    assert_eq!(calls(test, "held"), 1);
    let cp = stored(&p, "last").await;
    assert_eq!(
        (cp.status, cp.step.as_str()),
        (RunStatus::Cancelled, "held"),
        "the completed checkpoint was refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_a_cancelled_stream_ends_with_cancelled() {
    let test = "r14_stream";
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = three_stages(&store, &Ends::default());
    let mut stream = p.stream("streamed", input(test));
    gate(test).wait_entered().await;
    p.cancel("streamed").await.expect("cancel");
    gate(test).open();
    let mut last = None;
    while let Some(event) = tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("the stream ends")
    {
        last = Some(event);
    }
    match last {
        Some(Err(Error::Cancelled { run_id })) => assert_eq!(run_id, "cancel/streamed"),
        Some(Ok(StreamEvent::Done(_))) => panic!("the cancelled run completed"),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert_eq!(calls(test, "third"), 0);
}

#[tokio::test]
async fn rule14_cancel_on_a_pipeline_that_is_not_durable_is_not_durable() {
    let p = pipeline![first, third].build().expect("valid");
    match p.cancel("r").await {
        Err(Error::NotDurable { operation }) => assert_eq!(operation, "cancel"),
        other => panic!("expected NotDurable, got {other:?}"),
    }
}
