//! docs/CONTRACT.md section 2: durable execution, rule by rule, on `InMemoryStore`.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Recording, StageFailed, a, arm, b, c, calls, disarm, input, journal};
use fluxio::store::{Checkpoint, CheckpointStore, InMemoryStore};
use fluxio::{Context, Error, Outcome, Pipeline, RunStatus, StageResult, pipeline, stage};
use tokio::sync::Notify;

fn abc(store: impl CheckpointStore) -> Pipeline {
    pipeline![a, b, c]
        .name("test")
        .store(store)
        .build()
        .expect("a valid pipeline")
}

fn path(ctx: &Context) -> Vec<String> {
    ctx.get_opt("path").unwrap_or_default()
}

async fn stored(p: &Pipeline, run_id: &str) -> Checkpoint {
    p.checkpoint(run_id)
        .await
        .expect("store works")
        .expect("a checkpoint is stored")
}

// Rule 1: a checkpoint before every stage call, and the checkpoint comes first.
#[tokio::test]
async fn rule1_checkpoint_is_saved_before_every_stage_call() {
    let t = "rule1";
    let p = abc(Recording::new(t));
    p.invoke("r1", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("run succeeds");
    assert_eq!(
        journal(t),
        [
            "delete",
            "save:a:Running",
            "call:a",
            "save:b:Running",
            "call:b",
            "save:c:Running",
            "call:c",
            "save::Completed"
        ]
    );
}

#[tokio::test]
async fn rule1_checkpoint_holds_run_version_ip_and_the_context_the_stage_starts_from() {
    let t = "rule1-content";
    arm(t, "c");
    let store = Arc::new(InMemoryStore::new());
    let p = pipeline![a, b, c]
        .name("test")
        .store_arc(store.clone())
        .build()
        .expect("valid");
    let err = p.invoke("r1c", input(t)).await.expect_err("c fails");
    assert!(matches!(err, Error::Stage { ref stage, .. } if stage == "c"));
    let cp = store
        .load("test/r1c")
        .await
        .expect("store works")
        .expect("checkpoint stored");
    assert_eq!((cp.pipeline.as_str(), cp.run_id.as_str()), ("test", "r1c"));
    assert_eq!(cp.version, p.version());
    assert_eq!(cp.step, "c");
    assert_eq!(
        path(&cp.context.to_context()),
        ["a", "b"],
        "the context c started from"
    );
    // the ip is c's CHECKPOINT instruction: 4 instructions per stage
    assert_eq!(cp.ip, 8);
    assert!(
        p.explain()
            .lines()
            .any(|l| l.trim_start().starts_with("8  CHECKPOINT  c")),
        "{}",
        p.explain()
    );
    assert!(cp.created_at_ms > 0 && cp.updated_at_ms >= cp.created_at_ms);
    disarm(t, "c");
}

// Rule 2: failure writes an error checkpoint at the failing stage, then the ORIGINAL error.
#[tokio::test]
async fn rule2_failure_leaves_error_checkpoint_and_returns_the_stage_error() {
    let t = "rule2";
    arm(t, "b");
    let p = abc(InMemoryStore::new());
    let err = p.invoke("r2", input(t)).await.expect_err("b fails");
    let own = err
        .stage_error::<StageFailed>()
        .expect("the stage's own error type comes back");
    assert_eq!(own, &StageFailed { stage: "b".into() });
    assert_eq!(err.stage(), Some("b"));

    let cp = stored(&p, "r2").await;
    assert!(cp.is_failed());
    assert_eq!(cp.status, RunStatus::Failed);
    assert_eq!(cp.step, "b");
    assert_eq!(
        cp.error_message.as_deref(),
        Some("stage `b` failed: stage b failed on purpose")
    );
    assert_eq!(path(&cp.context.to_context()), ["a"]);
    assert_eq!((calls(t, "a"), calls(t, "b"), calls(t, "c")), (1, 1, 0));
    disarm(t, "b");
}

#[tokio::test]
async fn rule2_resume_reruns_only_from_the_failed_stage() {
    let t = "rule2-resume";
    arm(t, "b");
    let p = abc(InMemoryStore::new());
    p.invoke("r2r", input(t)).await.expect_err("b fails");
    disarm(t, "b");
    let out = p
        .resume("r2r")
        .await
        .and_then(Outcome::completed)
        .expect("resume succeeds");
    assert_eq!(path(&out), ["a", "b", "c"]);
    assert_eq!(
        (calls(t, "a"), calls(t, "b"), calls(t, "c")),
        (1, 2, 1),
        "a ran once, b twice, c once"
    );
    assert_eq!(stored(&p, "r2r").await.status, RunStatus::Completed);
}

#[stage]
async fn panics(_ctx: Context) -> StageResult {
    panic!("boom at {}", 42)
}

#[stage]
fn panics_blocking(_ctx: Context) -> StageResult {
    panic!("blocking boom")
}

#[tokio::test]
async fn rule2_panic_is_a_failure_with_an_error_checkpoint() {
    let t = "rule2-panic";
    for (p, msg) in [
        (
            pipeline![a, panics]
                .name("test")
                .durable(true)
                .build()
                .expect("valid"),
            "boom at 42",
        ),
        (
            pipeline![a, panics_blocking]
                .name("test")
                .durable(true)
                .build()
                .expect("valid"),
            "blocking boom",
        ),
    ] {
        let err = p
            .invoke("r2p", input(t))
            .await
            .expect_err("the stage panics");
        assert!(
            matches!(&err, Error::StagePanic { message, .. } if message == msg),
            "{err}"
        );
        let cp = stored(&p, "r2p").await;
        assert!(cp.is_failed() && cp.error_message.as_deref().is_some_and(|m| m.contains(msg)));
        // the run id is free again
        p.invoke("r2p", input(t))
            .await
            .expect_err("panics again, not run-id-in-use");
    }
}

#[stage(timeout = "1s")]
async fn slow(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    common::record(&test, "call:slow");
    if ctx.get_opt::<bool>("fast") != Some(true)
        && common::journal(&test)
            .iter()
            .filter(|e| *e == "call:slow")
            .count()
            == 1
    {
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    Ok(ctx)
}

#[tokio::test(start_paused = true)]
async fn rule2_timeout_is_a_failure_and_resume_retries_it() {
    let t = "rule2-timeout";
    let p = pipeline![a, slow, c]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let err = p.invoke("r2t", input(t)).await.expect_err("slow times out");
    assert!(
        matches!(err, Error::StageTimeout { ref stage, timeout } if stage == "slow" && timeout == Duration::from_secs(1))
    );
    let cp = stored(&p, "r2t").await;
    assert_eq!((cp.step.as_str(), cp.is_failed()), ("slow", true));
    let out = p
        .resume("r2t")
        .await
        .and_then(Outcome::completed)
        .expect("second attempt is fast");
    assert_eq!(path(&out), ["a", "c"]);
    assert_eq!(calls(t, "a"), 1);
}

// Rule 3: every invoke is a fresh run.
#[tokio::test]
async fn rule3_invoke_on_an_existing_run_id_starts_over() {
    let t = "rule3";
    arm(t, "c");
    let p = abc(InMemoryStore::new());
    p.invoke("r3", input(t)).await.expect_err("c fails");
    disarm(t, "c");
    let out = p
        .invoke("r3", input(t).set("fresh", true).expect("ok"))
        .await
        .and_then(Outcome::completed)
        .expect("fresh run succeeds");
    assert_eq!(
        path(&out),
        ["a", "b", "c"],
        "started from the beginning, not from c"
    );
    assert!(out.get::<bool>("fresh").expect("the new input is used"));
    assert_eq!((calls(t, "a"), calls(t, "b"), calls(t, "c")), (2, 2, 2));
}

// Rule 4: explicit resume; a missing checkpoint is a dedicated error.
#[tokio::test]
async fn rule4_resume_of_a_missing_run_is_not_found_and_changes_nothing() {
    let store = Arc::new(InMemoryStore::new());
    let p = pipeline![a, b]
        .name("test")
        .store_arc(store.clone())
        .build()
        .expect("valid");
    let err = p.resume("nobody").await.expect_err("nothing stored");
    assert!(matches!(err, Error::CheckpointNotFound { ref run_id } if run_id == "test/nobody"));
    assert_eq!(err.to_string(), "no checkpoint found for run `test/nobody`");
    assert!(store.is_empty(), "resume created nothing");
    let err = p.replay("nobody", None).await.expect_err("nothing stored");
    assert!(matches!(err, Error::CheckpointNotFound { .. }));
}

#[tokio::test]
async fn rule4_resume_uses_the_stored_context() {
    let t = "rule4-ctx";
    arm(t, "b");
    let p = abc(InMemoryStore::new());
    p.invoke("r4", input(t).set("user_id", 7).expect("ok"))
        .await
        .expect_err("b fails");
    disarm(t, "b");
    let out = p
        .resume("r4")
        .await
        .and_then(Outcome::completed)
        .expect("resumes");
    assert_eq!(out.get::<u32>("user_id").expect("stored input survives"), 7);
}

// Rule 5: a checkpoint of another version is refused and left untouched.
#[tokio::test]
async fn rule5_resume_on_another_version_fails_naming_both_and_runs_nothing() {
    let t = "rule5";
    arm(t, "b");
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let old = pipeline![a, b, c]
        .name("test")
        .store_arc(store.clone())
        .build()
        .expect("valid");
    let new = pipeline![a, c, b]
        .name("test")
        .store_arc(store.clone())
        .build()
        .expect("valid");
    assert_ne!(old.version(), new.version());
    old.invoke("r5", input(t)).await.expect_err("b fails");
    let before = store.load("test/r5").await.expect("ok");
    let calls_before = journal(t).len();

    let err = new.resume("r5").await.expect_err("other version");
    match &err {
        Error::CheckpointVersion {
            run_id,
            checkpoint_version,
            pipeline_version,
            changes,
        } => {
            assert_eq!(run_id, "test/r5");
            let changes = changes
                .as_deref()
                .expect("the checkpoint records its structure");
            assert!(changes.shape.is_some(), "a, b, c -> a, c, b: {changes}");
            assert_eq!(checkpoint_version, old.version());
            assert_eq!(pipeline_version, new.version());
        }
        other => panic!("expected CheckpointVersion, got {other:?}"),
    }
    assert!(err.to_string().contains(old.version()) && err.to_string().contains(new.version()));
    assert!(matches!(
        new.replay("r5", Some("a")).await,
        Err(Error::CheckpointVersion { .. })
    ));
    assert_eq!(
        store.load("test/r5").await.expect("ok"),
        before,
        "checkpoint untouched"
    );
    assert_eq!(journal(t).len(), calls_before, "no stage ran");
    disarm(t, "b");
    old.resume("r5")
        .await
        .and_then(Outcome::completed)
        .expect("the old version still resumes it");
}

// Rule 6: one run per run id, race-free; different ids never block.
static GATE: Notify = Notify::const_new();
static ENTERED: AtomicUsize = AtomicUsize::new(0);

#[stage]
async fn gate(ctx: Context) -> StageResult {
    ENTERED.fetch_add(1, Ordering::SeqCst);
    GATE.notified().await;
    Ok(ctx)
}

async fn wait_entered(n: usize) {
    while ENTERED.load(Ordering::SeqCst) < n {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule6_concurrent_invokes_of_one_run_id_exactly_one_wins() {
    // This is the only test that uses GATE/ENTERED in the run-id-in-use form.
    const N: usize = 16;
    let p = pipeline![gate]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let start = Arc::new(tokio::sync::Barrier::new(N));
    let mut tasks = Vec::new();
    for _ in 0..N {
        let (p, start) = (p.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            p.invoke("contested", Context::new()).await
        }));
    }
    // the winner is parked in `gate`; the N-1 losers fail at once
    wait_entered(1).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tasks.iter().filter(|t| t.is_finished()).count() < N - 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "losers did not fail at once"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    GATE.notify_one();
    let (mut winners, mut in_use) = (0, 0);
    for t in tasks {
        match t.await.expect("task did not panic") {
            Ok(_) => winners += 1,
            Err(Error::RunIdInUse { ref run_id }) if run_id == "test/contested" => in_use += 1,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(winners, 1);
    assert_eq!(in_use, N - 1);
    assert_eq!(
        ENTERED.load(Ordering::SeqCst),
        1,
        "only the winner ran a stage"
    );
}

#[stage]
async fn hold(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    common::record(&test, "call:hold");
    let n: usize = ctx.get("hold_until")?;
    while calls(&test, "hold") < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(ctx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule6_different_run_ids_run_concurrently() {
    let t = "rule6-different";
    let p = pipeline![hold]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let input = input(t).set("hold_until", 2usize).expect("ok");
    // each run waits inside its stage until both are inside theirs:
    // this finishes only if the two runs execute at the same time
    let both =
        async { tokio::try_join!(p.invoke("x", input.clone()), p.invoke("y", input.clone())) };
    let (x, y) = tokio::time::timeout(Duration::from_secs(20), both)
        .await
        .expect("the runs did not block each other")
        .expect("both succeed");
    x.completed().and(y.completed()).expect("both succeed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule6_resume_and_replay_during_a_run_get_run_id_in_use() {
    let t = "rule6-resume";
    let p = pipeline![a, hold]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let input = input(t).set("hold_until", 2usize).expect("ok");
    let running = tokio::spawn({
        let p = p.clone();
        async move { p.invoke("busy", input).await }
    });
    while calls(t, "hold") < 1 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(matches!(
        p.resume("busy").await,
        Err(Error::RunIdInUse { .. })
    ));
    assert!(matches!(
        p.replay("busy", None).await,
        Err(Error::RunIdInUse { .. })
    ));
    assert!(matches!(
        p.invoke("busy", Context::new()).await,
        Err(Error::RunIdInUse { .. })
    ));
    common::record(t, "call:hold"); // let the running stage finish
    running
        .await
        .expect("no panic")
        .and_then(Outcome::completed)
        .expect("the owner finishes");
    p.resume("busy")
        .await
        .and_then(Outcome::completed)
        .expect("free again after the run");
}

#[tokio::test]
async fn rule6_a_cancelled_run_frees_its_run_id_and_keeps_its_checkpoint() {
    let t = "rule6-cancel";
    let p = pipeline![a, hold]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let input = input(t).set("hold_until", 1000usize).expect("ok");
    let run = p.invoke("cancelled", input);
    // drop the run while it waits inside `hold`
    assert!(
        tokio::time::timeout(Duration::from_millis(50), run)
            .await
            .is_err()
    );
    let cp = stored(&p, "cancelled").await;
    assert_eq!((cp.step.as_str(), cp.status), ("hold", RunStatus::Running));
    // the lease is released by a background task as the run is dropped
    tokio::task::yield_now().await;
    let err = p
        .invoke("cancelled", Context::new())
        .await
        .expect_err("no `test` key");
    assert!(
        !matches!(err, Error::RunIdInUse { .. }),
        "the id was freed: {err}"
    );
}

#[tokio::test]
async fn rule6_invalid_run_ids_are_rejected_by_name() {
    let p = pipeline![a]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    for bad in ["", "line\nbreak"] {
        let err = p.invoke(bad, Context::new()).await.expect_err("invalid");
        assert!(matches!(err, Error::InvalidRunId { .. }), "{err}");
    }
    let long = "x".repeat(513);
    assert!(matches!(
        p.resume(&long).await,
        Err(Error::InvalidRunId { .. })
    ));
}

// Rule 7: completion leaves a completed checkpoint; resuming it runs nothing.
#[tokio::test]
async fn rule7_completed_run_resumes_to_its_final_context_without_running() {
    let t = "rule7";
    let p = abc(InMemoryStore::new());
    let out = p
        .invoke("r7", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("succeeds");
    let cp = stored(&p, "r7").await;
    assert_eq!(cp.status, RunStatus::Completed);
    assert!(!cp.is_failed());
    assert_eq!(cp.ip as usize, p.program().instrs.len());
    assert_eq!(cp.context.to_context(), out);
    let before = journal(t).len();
    assert_eq!(
        p.resume("r7")
            .await
            .and_then(Outcome::completed)
            .expect("completed"),
        out
    );
    assert_eq!(journal(t).len(), before, "nothing ran");
}

// Rule 8: a user's own four-method store works, also as `Arc<dyn CheckpointStore>`.
#[derive(Debug, Default)]
struct BytesStore(std::sync::Mutex<std::collections::HashMap<String, Vec<u8>>>);

#[async_trait::async_trait]
impl CheckpointStore for BytesStore {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
        let bytes = checkpoint.to_bytes()?;
        self.0
            .lock()
            .map_err(|_| Error::store("bytes", "poisoned"))?
            .insert(checkpoint.key(), bytes);
        Ok(())
    }
    async fn load(&self, run_id: &str) -> fluxio::Result<Option<Checkpoint>> {
        let bytes = self
            .0
            .lock()
            .map_err(|_| Error::store("bytes", "poisoned"))?
            .get(run_id)
            .cloned();
        bytes
            .map(|b| Checkpoint::from_bytes(run_id, &b))
            .transpose()
    }
    async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
        self.0
            .lock()
            .map_err(|_| Error::store("bytes", "poisoned"))?
            .remove(run_id);
        Ok(())
    }
    async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
        Ok(self
            .0
            .lock()
            .map_err(|_| Error::store("bytes", "poisoned"))?
            .contains_key(run_id))
    }
}

#[tokio::test]
async fn rule8_a_four_method_store_runs_fails_and_resumes_through_dyn() {
    let t = "rule8";
    arm(t, "c");
    let store: Arc<dyn CheckpointStore> = Arc::new(BytesStore::default());
    let p = pipeline![a, b, c]
        .name("test")
        .store_arc(store.clone())
        .build()
        .expect("valid");
    p.invoke("r8", input(t)).await.expect_err("c fails");
    assert!(store.exists("test/r8").await.expect("ok"));
    disarm(t, "c");
    let out = p
        .resume("r8")
        .await
        .and_then(Outcome::completed)
        .expect("resumes from the bytes");
    assert_eq!(path(&out), ["a", "b", "c"]);
    assert_eq!((calls(t, "a"), calls(t, "b"), calls(t, "c")), (1, 1, 2));
    store.delete("test/r8").await.expect("ok");
    store
        .delete("test/r8")
        .await
        .expect("deleting twice is fine");
    assert!(!store.exists("test/r8").await.expect("ok"));
}

#[tokio::test]
async fn rule8_a_corrupt_stored_checkpoint_is_a_typed_error_and_stays_in_place() {
    let store = Arc::new(BytesStore::default());
    store
        .0
        .lock()
        .expect("not poisoned")
        .insert("test/bad".into(), b"not a checkpoint at all".to_vec());
    let p = pipeline![a]
        .name("test")
        .store_arc(store.clone())
        .build()
        .expect("valid");
    let err = p.resume("bad").await.expect_err("corrupt");
    assert!(
        matches!(err, Error::CorruptCheckpoint { ref run_id, .. } if run_id == "test/bad"),
        "{err}"
    );
    assert_eq!(
        store.0.lock().expect("ok").get("test/bad").map(Vec::len),
        Some(23),
        "bytes left for inspection"
    );
}

// Rule 9: replay and diff on failed and completed runs.
#[tokio::test]
async fn rule9_replay_from_a_step_reruns_from_there_with_the_context_before_it() {
    let t = "rule9";
    let p = abc(InMemoryStore::new());
    p.invoke("r9", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("succeeds");
    let out = p
        .replay("r9", Some("b"))
        .await
        .and_then(Outcome::completed)
        .expect("replays");
    // b started from the context it had the first time (rule 20), with
    // only a's step in the path; b and c ran again
    assert_eq!(path(&out), ["a", "b", "c"]);
    assert_eq!((calls(t, "a"), calls(t, "b"), calls(t, "c")), (1, 2, 2));
    let err = p
        .replay("r9", Some("nope"))
        .await
        .expect_err("unknown step");
    assert!(
        matches!(&err, Error::UnknownStep { step, available } if step == "nope" && available == &["a", "b", "c"])
    );
}

#[tokio::test]
async fn rule9_replay_of_a_failed_run_continues_from_the_failure() {
    let t = "rule9-failed";
    arm(t, "b");
    let p = abc(InMemoryStore::new());
    p.invoke("r9f", input(t)).await.expect_err("b fails");
    disarm(t, "b");
    let out = p
        .replay("r9f", None)
        .await
        .and_then(Outcome::completed)
        .expect("replays");
    assert_eq!(path(&out), ["a", "b", "c"]);
    assert_eq!(calls(t, "a"), 1);
}

#[tokio::test]
async fn rule9_diff_compares_two_runs_key_by_key() {
    let t = "rule9-diff";
    arm(t, "c");
    let p = abc(InMemoryStore::new());
    p.invoke("d1", input(t).set("user", 1).expect("ok"))
        .await
        .expect_err("c fails");
    disarm(t, "c");
    p.invoke(
        "d2",
        input(t)
            .set("user", 2)
            .expect("ok")
            .set("extra", "x")
            .expect("ok"),
    )
    .await
    .and_then(Outcome::completed)
    .expect("completes");
    let d = p.diff("d1", "d2").await.expect("both stored");
    let keys: Vec<&str> = d.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["extra", "path", "user"]);
    assert_eq!(d.entries[0].a, None, "absent in d1");
    assert_eq!(d.entries[0].b, Some(fluxio::Value::from("x")));
    assert_eq!(d.entries[2].a, Some(fluxio::Value::from(1i32)));
    assert_eq!(
        d.to_string(),
        "extra: <absent> | \"x\"\npath: [\"a\", \"b\"] | [\"a\", \"b\", \"c\"]\nuser: 1 | 2\n"
    );
    assert!(
        matches!(p.diff("d1", "missing").await, Err(Error::CheckpointNotFound { ref run_id }) if run_id == "test/missing")
    );
}

// Run ownership costs no store call per stage: acquire and release once per
// run, renew on a timer, one fenced write per checkpoint.
#[derive(Debug, Default)]
struct Counting {
    inner: InMemoryStore,
    calls: std::sync::Mutex<Vec<&'static str>>,
    /// Count `begin_run` and `finish_run` as one call each, as a store that
    /// does each in one round trip (a script, a transaction) would; else
    /// they are the trait's defaults, made of the other calls.
    native: bool,
}

impl Counting {
    fn note(&self, call: &'static str) {
        self.calls.lock().expect("not poisoned").push(call);
    }
}

#[async_trait::async_trait]
impl CheckpointStore for Counting {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
        self.note("save");
        self.inner.save(checkpoint).await
    }
    async fn load(&self, run_id: &str) -> fluxio::Result<Option<Checkpoint>> {
        self.note("load");
        self.inner.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
        self.note("delete");
        self.inner.delete(run_id).await
    }
    async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
        self.note("exists");
        self.inner.exists(run_id).await
    }
    async fn acquire_lease(
        &self,
        run_id: &str,
        ttl: Duration,
    ) -> fluxio::Result<fluxio::store::Lease> {
        self.note("acquire");
        self.inner.acquire_lease(run_id, ttl).await
    }
    async fn renew_lease(&self, lease: &fluxio::store::Lease, ttl: Duration) -> fluxio::Result<()> {
        self.note("renew");
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: fluxio::store::Lease) -> fluxio::Result<()> {
        self.note("release");
        self.inner.release_lease(lease).await
    }
    async fn save_fenced(
        &self,
        checkpoint: Checkpoint,
        lease: &fluxio::store::Lease,
    ) -> fluxio::Result<()> {
        self.note("save_fenced");
        self.inner.save_fenced(checkpoint, lease).await
    }
    async fn delete_fenced(
        &self,
        run_id: &str,
        lease: &fluxio::store::Lease,
    ) -> fluxio::Result<()> {
        self.note("delete_fenced");
        self.inner.delete_fenced(run_id, lease).await
    }
    async fn cancel(&self, run_id: &str) -> fluxio::Result<()> {
        self.note("cancel");
        self.inner.cancel(run_id).await
    }
    async fn begin_run(
        &self,
        first: Checkpoint,
        ttl: Duration,
        begin: fluxio::store::backend::Begin,
    ) -> fluxio::Result<fluxio::store::backend::Begun> {
        if !self.native {
            return fluxio::store::backend::begin_run_stepwise(self, first, ttl, begin).await;
        }
        self.note("begin_run");
        self.inner.begin_run(first, ttl, begin).await
    }
    async fn finish_run(
        &self,
        last: Checkpoint,
        lease: fluxio::store::Lease,
        delete: bool,
    ) -> fluxio::Result<()> {
        if !self.native {
            return fluxio::store::backend::finish_run_stepwise(self, last, lease, delete).await;
        }
        self.note("finish_run");
        self.inner.finish_run(last, lease, delete).await
    }
}

/// Rule 24: a 10-stage run makes 11 store calls when the store begins and
/// finishes runs in one call each: the lease, the old run's delete and the
/// first checkpoint in one; a checkpoint before each of the 9 other
/// stages; the completed checkpoint and the release in one.
#[tokio::test]
async fn rule24_a_ten_stage_run_makes_eleven_store_calls() {
    let t = "rule24-calls";
    let store = Arc::new(Counting {
        native: true,
        ..Counting::default()
    });
    let p = pipeline![a, b, c, a, b, c, a, b, c, a]
        .name("test")
        .store_arc(store.clone())
        .build()
        .expect("valid");
    let calls = || std::mem::take(&mut *store.calls.lock().expect("not poisoned"));
    // what a run of the ten stages calls after `before`
    let run = |before: &[&'static str]| {
        let mut all = before.to_vec();
        all.push("begin_run");
        all.extend(["save_fenced"; 9]);
        all.push("finish_run");
        all
    };

    let done = p
        .invoke("calls", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(calls(), run(&[]));
    assert_eq!(calls().len(), 0, "nothing after the run");
    // invoke again: begin_run replaces the stored run
    p.invoke("calls", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("runs again");
    assert_eq!(calls(), run(&[]));

    // start of a new run: an unleased look at what is stored, and (a named
    // pipeline) whether a run of before names waits under the bare id
    let started = p
        .start("fresh", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("starts");
    assert_eq!(calls(), run(&["load", "exists"]));
    assert_eq!(path(&started), path(&done));
    // a start of the completed run reads it and runs nothing
    assert_eq!(
        p.start("fresh", input(t))
            .await
            .and_then(Outcome::completed)
            .expect("done"),
        started
    );
    assert_eq!(calls(), ["load"]);

    // deleting completed runs costs no extra call either
    let deleting = pipeline![a, b, c, a, b, c, a, b, c, a]
        .name("deleting")
        .store_arc(store.clone())
        .delete_completed(true)
        .build()
        .expect("valid");
    deleting
        .invoke("gone", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(calls(), run(&[]));
    assert!(!deleting.exists("gone").await.expect("store works"));
}

/// Rule 24: a run that fails gives its lease back with its failed
/// checkpoint, and a resume writes its first checkpoint under a lease it
/// took alone (it must read the run under the lease first).
#[tokio::test]
async fn rule24_a_failed_run_ends_in_one_call_and_its_resume_in_one_more() {
    let t = "rule24-fail";
    let store = Arc::new(Counting {
        native: true,
        ..Counting::default()
    });
    let p = pipeline![a, b, c]
        .name("test")
        .store_arc(store.clone())
        .build()
        .expect("valid");
    arm(t, "b");
    p.invoke("f", input(t)).await.expect_err("b fails");
    let calls = std::mem::take(&mut *store.calls.lock().expect("not poisoned"));
    assert_eq!(calls, ["begin_run", "save_fenced", "finish_run"]);
    assert_eq!(stored(&p, "f").await.status, RunStatus::Failed);
    store.calls.lock().expect("not poisoned").clear();
    disarm(t, "b");
    p.resume("f")
        .await
        .and_then(Outcome::completed)
        .expect("resumes");
    let calls = std::mem::take(&mut *store.calls.lock().expect("not poisoned"));
    assert_eq!(
        calls,
        [
            "acquire",
            "load",
            "save_fenced",
            "save_fenced",
            "finish_run"
        ]
    );
}

#[tokio::test]
async fn rule6_ownership_adds_no_store_call_per_stage() {
    let t = "rule6-calls";
    let store = Arc::new(Counting::default());
    let p = pipeline![a, b, c, a, b, c, a, b, c, a]
        .name("test")
        .store_arc(store.clone())
        .build()
        .expect("valid");
    p.invoke("calls", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    let calls = store.calls.lock().expect("not poisoned").clone();
    let count = |name: &str| calls.iter().filter(|c| **c == name).count();
    assert_eq!(calls.first(), Some(&"acquire"));
    assert_eq!(calls.last(), Some(&"release"));
    assert_eq!(
        (count("acquire"), count("release"), count("delete_fenced")),
        (1, 1, 1)
    );
    assert_eq!(
        count("save_fenced"),
        11,
        "one checkpoint per stage plus the completed one"
    );
    assert_eq!(
        (count("save"), count("delete"), count("renew")),
        (0, 0, 0),
        "no unfenced writes, no renewal in a short run"
    );
}

#[tokio::test(start_paused = true)]
async fn rule6_a_long_stage_keeps_its_lease_by_renewal() {
    let t = "rule6-renew";
    let store = Arc::new(Counting::default());
    let p = pipeline![a, slow_but_ok]
        .name("test")
        .store_arc(store.clone())
        .lease_ttl(Duration::from_secs(3))
        .build()
        .expect("valid");
    p.invoke("renewed", input(t))
        .await
        .and_then(Outcome::completed)
        .expect("the lease outlives the 10 s stage");
    let renewals = store
        .calls
        .lock()
        .expect("not poisoned")
        .iter()
        .filter(|c| **c == "renew")
        .count();
    assert!(
        (8..=10).contains(&renewals),
        "renewed every second (a third of the 3 s ttl) for 10 s: {renewals}"
    );
}

#[stage]
async fn slow_but_ok(ctx: Context) -> StageResult {
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(ctx)
}

// Idempotency keys: a stage knows its run, position and attempt.
fn note_info(ctx: &Context) -> Result<(), fluxio::BoxError> {
    let info = fluxio::StageInfo::current().ok_or("no stage info inside a pipeline")?;
    let test: String = ctx.get("test")?;
    common::record(
        &test,
        format!(
            "info:{}:{}:{}",
            info.stage,
            info.idempotency_key(),
            info.attempt
        ),
    );
    Ok(())
}

#[stage]
async fn knows_async(ctx: Context) -> StageResult {
    note_info(&ctx)?;
    common::step(ctx, "knows_async")
}

#[stage]
fn knows_blocking(ctx: Context) -> StageResult {
    note_info(&ctx)?;
    common::step(ctx, "knows_blocking")
}

#[tokio::test]
async fn rule12_stages_get_one_idempotency_key_for_every_attempt() {
    let t = "idempotency";
    arm(t, "knows_async");
    let p = pipeline![a, knows_async, knows_blocking]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    p.invoke("idem", input(t)).await.expect_err("armed");
    assert_eq!(stored(&p, "idem").await.attempt, 1);
    p.resume("idem").await.expect_err("still armed");
    assert_eq!(
        stored(&p, "idem").await.attempt,
        2,
        "the failure checkpoint records the attempt"
    );
    disarm(t, "knows_async");
    p.resume("idem")
        .await
        .and_then(Outcome::completed)
        .expect("third attempt succeeds");
    let infos: Vec<String> = journal(t)
        .into_iter()
        .filter(|e| e.starts_with("info:"))
        .collect();
    // knows_async is the second stage: CALL at ip 4 + 2
    assert_eq!(
        infos,
        [
            "info:knows_async:test/idem/6:1",
            "info:knows_async:test/idem/6:2",
            "info:knows_async:test/idem/6:3",
            "info:knows_blocking:test/idem/10:1"
        ]
    );
    assert!(
        fluxio::StageInfo::current().is_none(),
        "no info outside a stage"
    );
    let direct = knows_async(input(t)).await;
    assert!(direct.is_err(), "called directly, there is no stage info");
}
