//! Fix-and-resume across attribute changes (issue 32): a stage's
//! idempotency key and a checkpoint's place belong to the pipeline's shape
//! (docs/CONTRACT.md rules 12 and 13), not to how many instructions the
//! stages' attributes compile to; and `start` of a completed run returns its
//! result on any code (rule 11). On `InMemoryStore`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fluxio::middleware::{Retry, Timeout};
use fluxio::store::{CheckpointStore, InMemoryStore};
use fluxio::{
    Context, Error, Outcome, PipelineBuilder, ResumeOptions, StageInfo, StageResult, pipeline,
    stage,
};

/// What the stages of one test saw: `stage:key:attempt`, in order.
static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// While set, `pay` (every variant) fails after "charging".
static DECLINE: AtomicBool = AtomicBool::new(false);
/// Tests in this file share `SEEN` and `DECLINE`: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn lock_seen() -> std::sync::MutexGuard<'static, Vec<String>> {
    SEEN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn seen() -> Vec<String> {
    std::mem::take(&mut *lock_seen())
}

fn note(stage: &str) -> Result<(), fluxio::BoxError> {
    let info = StageInfo::current().ok_or("no stage info")?;
    lock_seen().push(format!(
        "{stage}:{}:{}",
        info.idempotency_key(),
        info.attempt
    ));
    Ok(())
}

/// The keys `stage` was called with, in order.
fn keys_of(seen: &[String], stage: &str) -> Vec<String> {
    seen.iter()
        .filter_map(|s| {
            let mut parts = s.split(':');
            (parts.next() == Some(stage)).then(|| parts.next().unwrap_or_default().to_owned())
        })
        .collect()
}

/// The stages that ran, in order.
fn ran(seen: &[String]) -> Vec<&str> {
    seen.iter().filter_map(|s| s.split(':').next()).collect()
}

#[derive(serde::Deserialize)]
#[allow(dead_code)] // read by the schema check only
struct PrepIn {
    order: String,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct PayOut {
    paid: bool,
}

// `prep`, `pay` and `ship` as v1 has them, and the same bodies with
// attributes that compile to more (or no more) instructions.

/// The body of every `prep`.
fn prepare(ctx: Context) -> StageResult {
    note("prep")?;
    Ok(ctx.set("prepared", true)?)
}

/// The body of every `pay`: it fails after "charging" while `DECLINE` is set.
fn charge(ctx: Context) -> StageResult {
    note("pay")?;
    if DECLINE.load(Ordering::SeqCst) {
        return Err("the gateway charged the card, then the connection dropped".into());
    }
    Ok(ctx.set("paid", true)?)
}

/// One stage function per variant: `name` with the `#[stage(...)]`
/// options after it, running `body`.
macro_rules! variants {
    ($body:ident: $($fn_name:ident => ($($options:tt)*);)*) => {
        $(
            #[stage($($options)*)]
            async fn $fn_name(ctx: Context) -> StageResult {
                $body(ctx)
            }
        )*
    };
}

variants! { prepare:
    prep => (name = "prep");
    prep_in => (name = "prep", input = PrepIn);
    prep_in_out => (name = "prep", input = PrepIn, output = PrepIn);
    prep_rw => (name = "prep", reads = ["order"], writes = ["prepared"]);
}

variants! { charge:
    pay => (name = "pay");
    pay_in => (name = "pay", input = PrepIn);
    pay_out => (name = "pay", output = PayOut);
    pay_in_out => (name = "pay", input = PrepIn, output = PayOut);
    pay_timeout => (name = "pay", timeout = "30s");
    pay_rw => (name = "pay", reads = ["order"], writes = ["paid"]);
}

/// The body of every `ship`.
fn deliver(ctx: Context) -> StageResult {
    note("ship")?;
    Ok(ctx.set("shipped", true)?)
}

variants! { deliver:
    ship => (name = "ship");
    ship_out => (name = "ship", output = PayOut);
}

fn store() -> Arc<dyn CheckpointStore> {
    Arc::new(InMemoryStore::new())
}

fn order() -> Context {
    Context::new().set("order", "order-1").expect("a string")
}

fn allow() -> ResumeOptions {
    ResumeOptions::new().allow_code_changes(true)
}

/// `builder` named `pay`, on `store`.
fn on(builder: PipelineBuilder, store: &Arc<dyn CheckpointStore>) -> fluxio::Pipeline {
    builder
        .name("pay")
        .store_arc(Arc::clone(store))
        .build()
        .expect("valid")
}

/// v1 (`prep, pay, ship`) on `store`, whose run `order-1` failed inside
/// `pay` after charging. Returns its stored checkpoint and the keys `pay`
/// was called with; `DECLINE` is off again.
async fn declined_v1(
    store: &Arc<dyn CheckpointStore>,
) -> (Option<fluxio::Checkpoint>, Vec<String>) {
    let v1 = on(pipeline![prep, pay, ship], store);
    let _ = seen();
    DECLINE.store(true, Ordering::SeqCst);
    let err = v1.start("order-1", order()).await.expect_err("declined");
    DECLINE.store(false, Ordering::SeqCst);
    assert!(
        matches!(&err, Error::Stage { stage, .. } if stage == "pay"),
        "{err}"
    );
    let keys = keys_of(&seen(), "pay");
    (v1.checkpoint("order-1").await.expect("load"), keys)
}

/// v1 (`prep, pay, ship`) fails inside `pay` after charging; `v2` resumes
/// the run with code changes allowed. Returns the keys `pay` was called
/// with, v1's attempt first, and what ran on v2.
async fn fix_and_resume(v2: PipelineBuilder) -> (Vec<String>, Vec<String>) {
    let store = store();
    let (before, mut keys) = declined_v1(&store).await;
    let v2 = on(v2, &store);
    let before = before.expect("stored");
    assert_ne!(before.version, v2.version(), "v2 is other code");
    let done = v2
        .resume_with("order-1", allow())
        .await
        .and_then(Outcome::completed)
        .expect("the fix resumes");
    assert!(done.get::<bool>("paid").expect("paid"));
    let on_v2 = seen();
    keys.extend(keys_of(&on_v2, "pay"));
    (keys, on_v2)
}

#[tokio::test]
async fn rule12_a_stage_keeps_its_key_when_it_gains_an_input_schema_on_fix_and_resume() {
    let _serial = SERIAL.lock().await;
    let (keys, ran_v2) = fix_and_resume(pipeline![prep, pay_in, ship]).await;
    assert_eq!(
        keys,
        ["pay/order-1/6", "pay/order-1/6"],
        "the gateway sees one charge"
    );
    assert_eq!(ran(&ran_v2), ["pay", "ship"], "prep is not run again");
    assert!(ran_v2[0].ends_with(":2"), "attempt 2: {ran_v2:?}");
}

#[tokio::test]
async fn rule12_the_key_is_the_same_across_every_attribute_code_changes_accept() {
    let _serial = SERIAL.lock().await;
    let variants: Vec<(&str, PipelineBuilder)> = vec![
        ("pay gains input", pipeline![prep, pay_in, ship]),
        ("pay gains output", pipeline![prep, pay_out, ship]),
        (
            "pay gains input and output",
            pipeline![prep, pay_in_out, ship],
        ),
        ("pay gains a timeout", pipeline![prep, pay_timeout, ship]),
        (
            "pay gains reads and writes (nothing to fold with)",
            pipeline![prep, pay_rw, ship],
        ),
        ("prep gains input", pipeline![prep_in, pay, ship]),
        (
            "prep gains input and output",
            pipeline![prep_in_out, pay, ship],
        ),
        ("ship gains output", pipeline![prep, pay, ship_out]),
        ("all of them", pipeline![prep_in_out, pay_in_out, ship_out]),
    ];
    for (what, v2) in variants {
        let (keys, ran_v2) = fix_and_resume(v2).await;
        assert_eq!(keys, ["pay/order-1/6", "pay/order-1/6"], "{what}");
        assert_eq!(ran(&ran_v2), ["pay", "ship"], "{what}");
    }
    // middleware adds no instruction, and its retries are attempts of one key
    let (keys, _) = fix_and_resume(
        pipeline![prep, pay_in, ship]
            .stage_middleware("pay", Retry::new(3))
            .stage_middleware("pay", Timeout(std::time::Duration::from_secs(30))),
    )
    .await;
    assert_eq!(keys, ["pay/order-1/6", "pay/order-1/6"], "middleware");
}

#[tokio::test]
async fn rule13_a_schema_added_before_the_failed_stage_resumes_at_the_failed_stage() {
    let _serial = SERIAL.lock().await;
    let store = store();
    let (before, _) = declined_v1(&store).await;

    let v2 = on(pipeline![prep_in_out, pay, ship], &store);
    let err = v2.resume("order-1").await.expect_err("other code");
    match &err {
        Error::CheckpointVersion { changes, .. } => {
            let changes = changes.as_deref().expect("recorded");
            assert_eq!(changes.code_changed, ["prep"]);
            assert!(changes.same_shape(), "{changes}");
        }
        other => panic!("expected CheckpointVersion, got {other:?}"),
    }
    assert!(err.to_string().contains("allow_code_changes"), "{err}");
    assert_eq!(v2.checkpoint("order-1").await.expect("load"), before);

    // what the message offers works: the run continues at `pay`
    let done = v2
        .resume_with("order-1", allow())
        .await
        .and_then(Outcome::completed)
        .expect("healthy data resumes");
    assert!(done.get::<bool>("shipped").expect("shipped"));
    let on_v2 = seen();
    assert_eq!(ran(&on_v2), ["pay", "ship"], "prep is not run again");
    assert_eq!(keys_of(&on_v2, "pay"), ["pay/order-1/6"]);
    // and the history has one place for `pay` across both versions
    let history = v2.history("order-1").await.expect("history");
    let pays: Vec<u32> = (history.steps.iter())
        .filter(|s| s.stage == "pay")
        .map(|s| s.ip)
        .collect();
    assert_eq!(pays.len(), 2, "{history}");
    assert!(pays.iter().all(|ip| *ip == pays[0]), "{history}");
}

#[stage]
async fn left(ctx: Context) -> StageResult {
    note("left")?;
    Ok(ctx.set("left", 1)?)
}

#[stage(name = "left", input = PrepIn, output = PrepIn)]
async fn left_in_out(ctx: Context) -> StageResult {
    note("left")?;
    Ok(ctx.set("left", 1)?)
}

#[stage]
async fn right(ctx: Context) -> StageResult {
    note("right")?;
    Ok(ctx.set("right", 1)?)
}

#[stage]
async fn pick(_ctx: Context) -> Result<fluxio::Route, fluxio::BoxError> {
    note("pick")?;
    Ok(fluxio::Route::to("card"))
}

#[stage(name = "pick", input = PrepIn)]
async fn pick_in(_ctx: Context) -> Result<fluxio::Route, fluxio::BoxError> {
    note("pick")?;
    Ok(fluxio::Route::to("card"))
}

#[tokio::test]
async fn rule12_keys_in_branches_and_routing_bodies_stay_distinct_and_stable_across_schemas() {
    let _serial = SERIAL.lock().await;
    let store = store();
    let v1 = on(
        pipeline![prep, parallel![left, right], pick => { "card" => [pay, ship], "cash" => [ship] }],
        &store,
    );
    let _ = seen();
    DECLINE.store(true, Ordering::SeqCst);
    v1.invoke("order-1", order()).await.expect_err("declined");
    let on_v1 = seen();
    let v1_keys: Vec<String> = ["prep", "left", "right", "pick", "pay"]
        .iter()
        .flat_map(|s| keys_of(&on_v1, s))
        .collect();
    let mut unique = v1_keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 5, "every position its own key: {v1_keys:?}");
    DECLINE.store(false, Ordering::SeqCst);

    let v2 = on(
        pipeline![prep_in, parallel![left_in_out, right], pick_in => { "card" => [pay_in_out, ship_out], "cash" => [ship_out] }],
        &store,
    );
    v2.resume_with("order-1", allow())
        .await
        .and_then(Outcome::completed)
        .expect("resumes");
    let on_v2 = seen();
    assert_eq!(ran(&on_v2), ["pay", "ship"], "{on_v2:?}");
    assert_eq!(keys_of(&on_v2, "pay"), keys_of(&on_v1, "pay"));
    // a fresh run of v2 gives every stage the key it had on v1
    v2.invoke("order-2", order())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    let fresh_v2 = seen();
    let v1_fresh = {
        let other = on(
            pipeline![prep, parallel![left, right], pick => { "card" => [pay, ship], "cash" => [ship] }],
            &store,
        );
        other
            .invoke("order-2", order())
            .await
            .and_then(Outcome::completed)
            .expect("runs");
        seen()
    };
    for stage in ["prep", "left", "right", "pick", "pay", "ship"] {
        assert_eq!(
            keys_of(&fresh_v2, stage),
            keys_of(&v1_fresh, stage),
            "{stage}"
        );
    }
}

#[tokio::test]
async fn rule13_reads_and_writes_that_fold_stages_into_a_parallel_block_are_a_shape_change() {
    let _serial = SERIAL.lock().await;
    let store = store();
    let (before, _) = declined_v1(&store).await;
    // `prep` and `pay` now declare independent reads and writes: auto
    // parallelism runs them as one parallel block, so `pay` has no
    // checkpoint of its own any more
    let v2 = on(pipeline![prep_rw, pay_rw, ship], &store);
    assert!(v2.explain().contains("FORK"), "{}", v2.explain());
    let err = v2
        .resume_with("order-1", allow())
        .await
        .expect_err("refused up front");
    match &err {
        Error::CheckpointVersion { changes, .. } => {
            let changes = changes.as_deref().expect("recorded");
            assert!(!changes.same_shape(), "{changes}");
            assert!(changes.shape.is_some(), "{changes}");
        }
        other => panic!("expected CheckpointVersion, got {other:?}"),
    }
    assert!(err.to_string().contains("shape changed"), "{err}");
    assert_eq!(seen(), Vec::<String>::new(), "nothing ran");
    assert_eq!(v2.checkpoint("order-1").await.expect("load"), before);
}

#[tokio::test]
async fn rule11_start_of_a_completed_run_returns_its_result_on_any_code() {
    let _serial = SERIAL.lock().await;
    let store = store();
    let v1 = on(pipeline![prep, pay, ship], &store);
    let _ = seen();
    let yesterday = v1
        .start("order-1", order())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(ran(&seen()), ["prep", "pay", "ship"]);
    let stored = v1.checkpoint("order-1").await.expect("load");

    // today: the same shape on other code, and another shape
    let same_shape = on(pipeline![prep_in, pay_in_out, ship], &store);
    let other_shape = on(pipeline![prep, ship], &store);
    for today in [&same_shape, &other_shape] {
        assert_ne!(today.version(), v1.version());
        let again = today
            .start("order-1", Context::new())
            .await
            .and_then(Outcome::completed)
            .expect("yesterday's result");
        assert_eq!(again, yesterday);
        assert_eq!(seen(), Vec::<String>::new(), "no stage ran");
        assert_eq!(
            today.checkpoint("order-1").await.expect("load"),
            stored,
            "untouched"
        );
    }
}

#[tokio::test]
async fn rule11_start_of_a_failed_run_on_other_code_is_a_version_error_and_runs_nothing() {
    let _serial = SERIAL.lock().await;
    let store = store();
    let (before, _) = declined_v1(&store).await;
    let v2 = on(pipeline![prep, pay_in, ship], &store);
    let err = v2
        .start("order-1", order())
        .await
        .expect_err("start never changes code on its own");
    match &err {
        Error::CheckpointVersion { changes, .. } => {
            assert!(changes.as_deref().is_some_and(|c| c.same_shape()), "{err}");
        }
        other => panic!("expected CheckpointVersion, got {other:?}"),
    }
    assert_eq!(seen(), Vec::<String>::new(), "nothing ran");
    assert_eq!(v2.checkpoint("order-1").await.expect("load"), before);
    // the run continues once the caller opts in
    v2.resume_with("order-1", allow())
        .await
        .and_then(Outcome::completed)
        .expect("resumes");
    assert_eq!(keys_of(&seen(), "pay"), ["pay/order-1/6"]);
}

#[tokio::test]
async fn rule20_replay_and_fork_from_a_step_on_other_code_are_version_errors_not_missing_steps() {
    let _serial = SERIAL.lock().await;
    let store = store();
    let v1 = on(pipeline![prep, pay, ship], &store);
    v1.invoke("order-1", order())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    let v2 = on(pipeline![prep_in, pay, ship], &store);
    let _ = seen();
    let replayed = v2
        .replay("order-1", Some("pay"))
        .await
        .expect_err("other code");
    assert!(
        matches!(replayed, Error::CheckpointVersion { .. }),
        "the step is in the history; the code is what differs: {replayed:?}"
    );
    let forked = v2
        .fork("order-1", "pay", "order-1-again")
        .await
        .expect_err("other code");
    assert!(
        matches!(forked, Error::CheckpointVersion { .. }),
        "{forked:?}"
    );
    assert_eq!(seen(), Vec::<String>::new(), "nothing ran");
    // on the code that wrote it, a replay from `pay` keeps `pay`'s key
    let v1_in = on(pipeline![prep_in, pay_in, ship], &store);
    v1_in
        .invoke("order-3", order())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    let first = keys_of(&seen(), "pay");
    v1_in
        .replay("order-3", Some("pay"))
        .await
        .and_then(Outcome::completed)
        .expect("replays");
    let again = seen();
    assert_eq!(ran(&again), ["pay", "ship"]);
    assert_eq!(keys_of(&again, "pay"), first);
    assert_eq!(first, ["pay/order-3/6"]);
}

#[tokio::test]
async fn rule12_a_run_checkpointed_by_ip_before_positions_keeps_its_keys_to_its_end() {
    let _serial = SERIAL.lock().await;
    let store = store();
    // `prep` has a schema: its `VALIDATE` puts `pay`'s checkpoint at ip 5
    // and its `CALL` at ip 7, positions 4 and 6
    let p = on(pipeline![prep_in, pay, ship], &store);
    assert!(p.explain().contains("VALIDATE"), "{}", p.explain());
    DECLINE.store(true, Ordering::SeqCst);
    p.invoke("order-1", order()).await.expect_err("declined");
    let _ = seen();
    // what the release before positions stored: the ip, with `pay`'s key
    // `pay/order-1/7` already given to the gateway
    let mut cp = p
        .checkpoint("order-1")
        .await
        .expect("load")
        .expect("stored");
    assert_eq!((cp.ip, cp.step.as_str()), (4, "pay"), "a position now");
    cp.ip = 5;
    store.delete(&cp.key()).await.expect("delete");
    store.save(cp).await.expect("save");

    // a resume that fails again keeps the run's numbering...
    let err = p.resume("order-1").await.expect_err("still declined");
    assert!(matches!(err, Error::Stage { .. }), "{err:?}");
    let cp = p
        .checkpoint("order-1")
        .await
        .expect("load")
        .expect("stored");
    assert_eq!((cp.ip, cp.step.as_str(), cp.attempt), (5, "pay", 2));
    // ...and the next one finishes the run: `pay` had one key throughout
    DECLINE.store(false, Ordering::SeqCst);
    let done = p
        .resume("order-1")
        .await
        .and_then(Outcome::completed)
        .expect("resumes");
    assert!(done.get::<bool>("shipped").expect("shipped"));
    let all = seen();
    assert_eq!(ran(&all), ["pay", "pay", "ship"], "prep is not run again");
    assert_eq!(keys_of(&all, "pay"), ["pay/order-1/7", "pay/order-1/7"]);
    // a new run numbers by position
    p.invoke("order-2", order())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(keys_of(&seen(), "pay"), ["pay/order-2/6"]);
}

#[tokio::test]
async fn rule13_an_ip_numbered_checkpoint_whose_step_moved_on_new_code_is_a_shape_change() {
    let _serial = SERIAL.lock().await;
    let store = store();
    let old = on(pipeline![prep_in, pay, ship], &store);
    DECLINE.store(true, Ordering::SeqCst);
    old.invoke("order-1", order()).await.expect_err("declined");
    DECLINE.store(false, Ordering::SeqCst);
    // stored by the release before positions: `pay`'s checkpoint at ip 5
    let mut cp = old
        .checkpoint("order-1")
        .await
        .expect("load")
        .expect("stored");
    cp.ip = 5;
    store.delete(&cp.key()).await.expect("delete");
    store.save(cp.clone()).await.expect("save");
    let _ = seen();
    // the new code drops `prep`'s schema: ip 5 is no step of it, and
    // position 5 is none either, so the step cannot be placed
    let new = on(pipeline![prep, pay, ship], &store);
    let err = new
        .resume_with("order-1", allow())
        .await
        .expect_err("cannot be placed");
    match &err {
        Error::CheckpointVersion { changes, .. } => {
            let changes = changes.as_deref().expect("recorded");
            assert_eq!(changes.moved, ["pay"]);
            assert!(!changes.same_shape(), "{changes}");
        }
        other => panic!("expected CheckpointVersion, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("is not at its place"), "{message}");
    assert!(message.contains("Pipeline::hold"), "{message}");
    assert_eq!(seen(), Vec::<String>::new(), "nothing ran");
    // the version that wrote it finishes it, by ip, with its old key
    let held = new.hold(old).expect("same name");
    held.resume("order-1")
        .await
        .and_then(Outcome::completed)
        .expect("resumes on the old code");
    assert_eq!(keys_of(&seen(), "pay"), ["pay/order-1/7"]);
}
