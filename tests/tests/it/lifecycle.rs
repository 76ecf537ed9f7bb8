//! docs/CONTRACT.md section 5, lifecycle: named pipelines (rule 10), stable
//! idempotency keys (rule 12) and code changes (rule 13), on `InMemoryStore`.
//! The store side of rule 10 is in the conformance suite, on every store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fluxio::store::{CheckpointStore, InMemoryStore};
use fluxio::{
    Context, Error, Outcome, Pipeline, ResumeOptions, StageInfo, StageResult, pipeline, stage,
};

/// What the stages of one test saw, in order.
static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Whether `charge_v1` has its bug (it fails while this is set).
static BUG: AtomicBool = AtomicBool::new(true);

fn see(what: String) {
    SEEN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(what);
}

fn seen() -> Vec<String> {
    std::mem::take(
        &mut *SEEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
}

/// Tests in this file share `SEEN` and `BUG`: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn key_of(stage: &str) -> Result<(), fluxio::BoxError> {
    let info = StageInfo::current().ok_or("no stage info")?;
    see(format!(
        "{stage}:{}:{}",
        info.idempotency_key(),
        info.attempt
    ));
    Ok(())
}

#[stage]
async fn validate(ctx: Context) -> StageResult {
    key_of("validate")?;
    Ok(ctx.set("validated", true)?)
}

#[stage(name = "charge")]
async fn charge_v1(ctx: Context) -> StageResult {
    key_of("charge_v1")?;
    if BUG.load(Ordering::SeqCst) {
        return Err("bug: the amount is read in cents and charged in euros".into());
    }
    Ok(ctx.set("charged", "v1")?)
}

#[stage(name = "charge")]
async fn charge_v2(ctx: Context) -> StageResult {
    key_of("charge_v2")?;
    Ok(ctx.set("charged", "v2")?)
}

#[stage]
async fn receipt(ctx: Context) -> StageResult {
    key_of("receipt")?;
    Ok(ctx.set("receipt", true)?)
}

#[stage]
async fn audit(ctx: Context) -> StageResult {
    key_of("audit")?;
    Ok(ctx.set("audited", true)?)
}

// ---- rule 10 ------------------------------------------------------------------

#[test]
fn rule10_pipeline_names_are_checked_at_build() {
    for bad in ["", "orders/eu", "a b", "ünïcode", &"x".repeat(65)] {
        match pipeline![validate].name(bad).durable(true).build() {
            Err(Error::InvalidSetting { setting, message }) => {
                assert_eq!(setting, "name", "{bad:?}");
                assert!(message.contains("pipeline name"), "{message}");
            }
            other => panic!("{bad:?}: expected InvalidSetting, got {other:?}"),
        }
    }
    let p = pipeline![validate]
        .name("orders-v2_eu.1")
        .durable(true)
        .build()
        .expect("a valid name");
    assert_eq!(p.name(), "orders-v2_eu.1");
    assert_eq!(p.name().len(), 14);
    let longest = "x".repeat(64);
    assert!(pipeline![validate].name(&longest).build().is_ok());
}

#[tokio::test]
async fn rule10_two_pipelines_sharing_a_store_and_a_run_id_stay_apart() {
    let _serial = SERIAL.lock().await;
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let orders = pipeline![validate, receipt]
        .name("orders")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    let emails = pipeline![validate, audit]
        .name("emails")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    let out_o = orders
        .invoke("42", Context::new().set("who", "orders").expect("set"))
        .await
        .and_then(Outcome::completed)
        .expect("orders runs");
    let out_e = emails
        .invoke("42", Context::new().set("who", "emails").expect("set"))
        .await
        .and_then(Outcome::completed)
        .expect("emails runs");
    assert_eq!(out_o.get::<String>("who").expect("who"), "orders");
    assert_eq!(out_e.get::<String>("who").expect("who"), "emails");
    // each pipeline sees its own checkpoint under the shared run id
    let cp_o = orders
        .checkpoint("42")
        .await
        .expect("load")
        .expect("stored");
    let cp_e = emails
        .checkpoint("42")
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(
        (cp_o.pipeline.as_str(), cp_o.key()),
        ("orders", "orders/42".into())
    );
    assert_eq!(
        (cp_e.pipeline.as_str(), cp_e.key()),
        ("emails", "emails/42".into())
    );
    assert!(cp_o.context.to_context().get::<bool>("receipt").is_ok());
    assert!(cp_e.context.to_context().get::<bool>("audited").is_ok());
    // a fresh invoke of one (which deletes its old checkpoint first) leaves the other
    emails
        .invoke("42", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("emails again");
    assert_eq!(
        orders.checkpoint("42").await.expect("load"),
        Some(cp_o),
        "orders/42 untouched by emails/42"
    );
    // the keys carry the name
    let keys = seen();
    assert!(
        keys.contains(&"receipt:orders/42/6:1".to_owned()),
        "{keys:?}"
    );
    assert!(keys.contains(&"audit:emails/42/6:1".to_owned()), "{keys:?}");
}

#[tokio::test]
async fn rule10_errors_name_the_pipeline_and_the_run() {
    let p = pipeline![validate]
        .name("orders")
        .durable(true)
        .build()
        .expect("valid");
    let err = p.resume("missing").await.expect_err("nothing stored");
    assert!(
        matches!(&err, Error::CheckpointNotFound { run_id } if run_id == "orders/missing"),
        "{err:?}"
    );
    assert!(err.to_string().contains("orders/missing"), "{err}");
    // a run id that fits alone but not with the name is refused, naming why
    let long = "r".repeat(fluxio::store::MAX_RUN_ID_LEN - 3);
    let err = p
        .invoke(&long, Context::new())
        .await
        .expect_err("too long with the name");
    assert!(
        matches!(&err, Error::InvalidRunId { reason, .. } if reason.contains("pipeline's name")),
        "{err:?}"
    );
}

#[test]
fn rule10_a_durable_pipeline_without_a_name_is_refused_saying_how_to_name_it() {
    let builds = [
        ("durable(true)", pipeline![validate].durable(true).build()),
        (
            "store",
            pipeline![validate].store(InMemoryStore::new()).build(),
        ),
    ];
    for (how, built) in builds {
        match built {
            Err(Error::InvalidSetting { setting, message }) => {
                assert_eq!(setting, "name", "{how}");
                assert!(message.contains(".name(\"orders\")"), "{how}: {message}");
            }
            other => panic!("{how}: expected InvalidSetting, got {other:?}"),
        }
    }
    // a pipeline that keeps nothing needs no name
    let plain = pipeline![validate].build().expect("not durable");
    assert_eq!(plain.name(), "");
}

/// A run stored before pipelines had names (format 1 decodes with no
/// pipeline, and was kept under its bare run id), made here from a run of
/// `orders_v1` so that its version is one this build has.
async fn stored_before_names(
    store: &Arc<dyn CheckpointStore>,
    run_id: &str,
) -> fluxio::store::Checkpoint {
    BUG.store(true, Ordering::SeqCst);
    let v1 = orders_v1(store);
    v1.invoke(run_id, Context::new())
        .await
        .expect_err("the bug");
    let mut cp = v1.checkpoint(run_id).await.expect("load").expect("stored");
    store.delete(&cp.key()).await.expect("delete");
    cp.pipeline = String::new();
    cp.structure = None;
    store.save(cp.clone()).await.expect("save");
    cp
}

#[tokio::test]
async fn rule10_a_run_stored_before_names_is_adopted_by_its_named_pipeline() {
    let _serial = SERIAL.lock().await;
    let store = store();
    let old = stored_before_names(&store, "o-7").await;
    assert_eq!(old.key(), "o-7", "kept under the bare run id");
    let v1 = orders_v1(&store);
    assert_eq!(
        v1.checkpoint("o-7").await.expect("load"),
        Some(old.clone()),
        "shown before it is adopted"
    );

    // another version of the code cannot adopt it: it was not written by it
    let v2 = orders_v2(&store);
    let err = v2.resume("o-7").await.expect_err("other code");
    assert!(
        matches!(&err, Error::CheckpointVersion { run_id, changes: None, .. } if run_id == "orders/o-7"),
        "{err:?}"
    );
    assert_eq!(v2.checkpoint("o-7").await.expect("load"), None);
    assert_eq!(
        store.load("o-7").await.expect("load"),
        Some(old.clone()),
        "untouched"
    );

    // the version that wrote it adopts it under its name and finishes it
    BUG.store(false, Ordering::SeqCst);
    let _ = seen();
    let out = v1
        .resume("o-7")
        .await
        .and_then(Outcome::completed)
        .expect("adopted and resumed");
    assert_eq!(out.get::<String>("charged").expect("charged"), "v1");
    let ran = seen();
    assert!(!ran.iter().any(|s| s.starts_with("validate:")), "{ran:?}");
    assert_eq!(store.load("o-7").await.expect("load"), None, "moved");
    let cp = store
        .load("orders/o-7")
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(cp.pipeline, "orders");
    assert_eq!(cp.status, fluxio::RunStatus::Completed);
    // a run stored under a name is never read through the bare id
    assert_eq!(
        orders_v1(&store).checkpoint("o-7").await.expect("load"),
        Some(cp)
    );
}

// ---- rule 11 ------------------------------------------------------------------

/// Stage names that ran, in order, from what `key_of` saw.
fn ran(seen: &[String]) -> Vec<&str> {
    seen.iter().filter_map(|s| s.split(':').next()).collect()
}

#[tokio::test]
async fn rule11_start_runs_a_new_run_and_returns_a_completed_one_without_running_a_stage() {
    let _serial = SERIAL.lock().await;
    BUG.store(false, Ordering::SeqCst);
    let store = store();
    let p = orders_v1(&store);
    let _ = seen();
    let input = Context::new().set("cents", 1999u64).expect("set");
    let first = p
        .start("s-1", input.clone())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(ran(&seen()), ["validate", "charge_v1", "receipt"]);
    let stored = p.checkpoint("s-1").await.expect("load");
    for _ in 0..3 {
        let again = p
            .start("s-1", input.clone())
            .await
            .and_then(Outcome::completed)
            .expect("the stored result");
        assert_eq!(again, first);
    }
    // even with other input: the run exists, so its result is the answer
    let other = p
        .start("s-1", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("the stored result");
    assert_eq!(other, first);
    assert_eq!(seen(), Vec::<String>::new(), "no stage ran");
    assert_eq!(
        p.checkpoint("s-1").await.expect("load"),
        stored,
        "untouched"
    );
    // `invoke` stays fresh by default (rule 3): it runs the stages again
    p.invoke("s-1", input)
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(ran(&seen()), ["validate", "charge_v1", "receipt"]);
}

#[tokio::test]
async fn rule11_start_resumes_a_failed_run_from_its_failed_stage() {
    let _serial = SERIAL.lock().await;
    BUG.store(true, Ordering::SeqCst);
    let store = store();
    let p = orders_v1(&store);
    let _ = seen();
    let err = p.start("s-2", Context::new()).await.expect_err("the bug");
    assert!(
        matches!(err, Error::Stage { ref stage, .. } if stage == "charge"),
        "{err}"
    );
    assert_eq!(ran(&seen()), ["validate", "charge_v1"]);
    BUG.store(false, Ordering::SeqCst);
    let out = p
        .start("s-2", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("resumed");
    assert_eq!(
        ran(&seen()),
        ["charge_v1", "receipt"],
        "validate is not run again"
    );
    assert!(
        out.get::<bool>("validated")
            .expect("kept from the first call")
    );
    assert_eq!(
        p.start("s-2", Context::new())
            .await
            .and_then(Outcome::completed)
            .expect("done"),
        out
    );
    assert_eq!(seen(), Vec::<String>::new());
}

#[tokio::test]
async fn rule11_start_resumes_a_running_run_whose_owner_lease_lapsed() {
    let _serial = SERIAL.lock().await;
    BUG.store(true, Ordering::SeqCst);
    let store = store();
    let p = orders_v1(&store);
    p.invoke("s-3", Context::new()).await.expect_err("the bug");
    // make it look like a worker died in `charge`: a running checkpoint and
    // a lease nobody will renew or release
    let mut cp = p.checkpoint("s-3").await.expect("load").expect("stored");
    cp.status = fluxio::RunStatus::Running;
    cp.error_message = None;
    store.save(cp).await.expect("save");
    let lease = store
        .acquire_lease("orders/s-3", std::time::Duration::from_millis(50))
        .await
        .expect("lease");
    let err = p
        .start("s-3", Context::new())
        .await
        .expect_err("live lease");
    assert!(
        matches!(&err, Error::RunIdInUse { run_id } if run_id == "orders/s-3"),
        "{err:?}"
    );
    std::mem::forget(lease); // the owner is gone
    tokio::time::sleep(std::time::Duration::from_millis(120)).await;
    BUG.store(false, Ordering::SeqCst);
    let _ = seen();
    let out = p
        .start("s-3", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("taken over");
    assert_eq!(ran(&seen()), ["charge_v1", "receipt"]);
    assert_eq!(out.get::<String>("charged").expect("charged"), "v1");
}

#[tokio::test]
async fn rule11_start_of_a_live_run_is_run_id_in_use_and_the_run_finishes_once() {
    let _serial = SERIAL.lock().await;
    BUG.store(false, Ordering::SeqCst);
    let store = store();
    let p = pipeline![validate, wait_for_gate, receipt]
        .name("orders")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    let _ = seen();
    let running = {
        let p = p.clone();
        tokio::spawn(async move { p.start("s-4", Context::new()).await })
    };
    while !ran(&SEEN.lock().expect("not poisoned")).contains(&"wait_for_gate") {
        tokio::task::yield_now().await;
    }
    for _ in 0..4 {
        let err = p.start("s-4", Context::new()).await.expect_err("running");
        assert!(
            matches!(&err, Error::RunIdInUse { run_id } if run_id == "orders/s-4"),
            "{err:?}"
        );
    }
    GATE.notify_one();
    let out = running
        .await
        .expect("no panic")
        .and_then(Outcome::completed)
        .expect("completes");
    assert_eq!(
        p.start("s-4", Context::new())
            .await
            .and_then(Outcome::completed)
            .expect("result"),
        out
    );
    assert_eq!(ran(&seen()), ["validate", "wait_for_gate", "receipt"]);
}

#[tokio::test]
async fn rule11_start_needs_a_store() {
    let p = pipeline![validate].build().expect("valid");
    let err = p
        .start("s-5", Context::new())
        .await
        .expect_err("not durable");
    assert!(
        matches!(err, Error::NotDurable { operation: "start" }),
        "{err:?}"
    );
}

static GATE: tokio::sync::Notify = tokio::sync::Notify::const_new();

#[stage]
async fn wait_for_gate(ctx: Context) -> StageResult {
    key_of("wait_for_gate")?;
    GATE.notified().await;
    Ok(ctx)
}

#[tokio::test]
async fn rule12_every_attempt_of_a_position_has_one_key_and_positions_differ() {
    let _serial = SERIAL.lock().await;
    BUG.store(true, Ordering::SeqCst);
    let p = pipeline![validate, charge_v1, receipt]
        .name("pay")
        .durable(true)
        .build()
        .expect("valid");
    let _ = seen();
    p.invoke("o-9", Context::new()).await.expect_err("the bug");
    p.resume("o-9").await.expect_err("still the bug");
    BUG.store(false, Ordering::SeqCst);
    p.resume("o-9")
        .await
        .and_then(Outcome::completed)
        .expect("fixed by configuration");
    let charges: Vec<String> = seen()
        .into_iter()
        .filter(|s| s.starts_with("charge_v1:"))
        .collect();
    assert_eq!(
        charges,
        [
            "charge_v1:pay/o-9/6:1",
            "charge_v1:pay/o-9/6:2",
            "charge_v1:pay/o-9/6:3"
        ],
        "one key, three attempts"
    );
    BUG.store(true, Ordering::SeqCst);
}

#[stage]
async fn left(ctx: Context) -> StageResult {
    key_of("left")?;
    Ok(ctx.set("left", 1)?)
}

#[stage]
async fn right(ctx: Context) -> StageResult {
    key_of("right")?;
    Ok(ctx.set("right", 1)?)
}

#[stage]
async fn pick(_ctx: Context) -> Result<fluxio::Route, fluxio::BoxError> {
    key_of("pick")?;
    Ok(fluxio::Route::to("x"))
}

#[tokio::test]
async fn rule12_branches_and_routing_bodies_have_keys_of_their_own() {
    let _serial = SERIAL.lock().await;
    let p = pipeline![parallel![left, right], pick => { "x" => [audit], "y" => [receipt] }]
        .name("shapes")
        .durable(true)
        .build()
        .expect("valid");
    let _ = seen();
    p.invoke("k", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    let keys: Vec<String> = seen()
        .into_iter()
        .map(|s| s.split(':').nth(1).unwrap_or_default().to_owned())
        .collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    let mut unique = keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 4, "every position its own key: {keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("shapes/k/")), "{keys:?}");
}

// ---- rule 13 ------------------------------------------------------------------

fn store() -> Arc<dyn CheckpointStore> {
    Arc::new(InMemoryStore::new())
}

/// The pipeline `orders` with the buggy `charge`.
fn orders_v1(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![validate, charge_v1, receipt]
        .name("orders")
        .store_arc(Arc::clone(store))
        .build()
        .expect("valid")
}

/// The pipeline `orders` with `charge` fixed: same shape, new code.
fn orders_v2(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![validate, charge_v2, receipt]
        .name("orders")
        .store_arc(Arc::clone(store))
        .build()
        .expect("valid")
}

#[tokio::test]
async fn rule13_a_changed_stage_is_named_and_resumes_only_when_allowed() {
    let _serial = SERIAL.lock().await;
    BUG.store(true, Ordering::SeqCst);
    let store = store();
    let v1 = orders_v1(&store);
    v1.invoke("o-1", Context::new()).await.expect_err("the bug");
    let before = v1.checkpoint("o-1").await.expect("load");

    // the fix: stage `charge` has new code; the shape is the same
    let v2 = orders_v2(&store);
    assert_ne!(v1.version(), v2.version());
    let err = v2.resume("o-1").await.expect_err("other code");
    match &err {
        Error::CheckpointVersion {
            run_id, changes, ..
        } => {
            assert_eq!(run_id, "orders/o-1");
            let changes = changes.as_deref().expect("format 2 records the structure");
            assert_eq!(changes.code_changed, ["charge"]);
            assert!(changes.same_shape(), "{changes}");
        }
        other => panic!("expected CheckpointVersion, got {other:?}"),
    }
    let message = err.to_string();
    for part in ["`charge`", "allow_code_changes", "Pipeline::hold"] {
        assert!(message.contains(part), "{part} in: {message}");
    }
    assert_eq!(
        v1.checkpoint("o-1").await.expect("load"),
        before,
        "untouched"
    );
    let _ = seen();

    let done = v2
        .resume_with("o-1", ResumeOptions::new().allow_code_changes(true))
        .await
        .and_then(Outcome::completed)
        .expect("the fix resumes");
    assert_eq!(done.get::<String>("charged").expect("charged"), "v2");
    let ran: Vec<String> = seen();
    assert!(
        !ran.iter().any(|s| s.starts_with("validate:")),
        "validate ran before the crash and is not run again: {ran:?}"
    );
    assert!(
        ran.iter()
            .any(|s| s.starts_with("charge_v2:orders/o-1/6:2")),
        "{ran:?}"
    );
    let after = v2.checkpoint("o-1").await.expect("load").expect("stored");
    assert_eq!(
        after.version,
        v2.version(),
        "the run finished on the new version"
    );
}

#[tokio::test]
async fn rule13_a_changed_shape_is_refused_even_when_code_changes_are_allowed() {
    let _serial = SERIAL.lock().await;
    BUG.store(true, Ordering::SeqCst);
    let store = store();
    let v1 = orders_v1(&store);
    v1.invoke("o-2", Context::new()).await.expect_err("the bug");
    let v2 = pipeline![validate, audit, charge_v2, receipt]
        .name("orders")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    let err = v2
        .resume_with("o-2", ResumeOptions::new().allow_code_changes(true))
        .await
        .expect_err("a stage was inserted");
    match &err {
        Error::CheckpointVersion { changes, .. } => {
            let changes = changes.as_deref().expect("recorded");
            assert_eq!(changes.added, ["audit"]);
            assert!(!changes.same_shape());
            assert!(changes.shape.is_some());
        }
        other => panic!("expected CheckpointVersion, got {other:?}"),
    }
    assert!(err.to_string().contains("stages added: `audit`"), "{err}");
    assert!(err.to_string().contains("shape changed"), "{err}");
}

#[tokio::test]
async fn rule13_a_held_old_version_finishes_its_runs_while_new_runs_use_the_new() {
    let _serial = SERIAL.lock().await;
    BUG.store(true, Ordering::SeqCst);
    let store = store();
    let v1 = orders_v1(&store);
    v1.invoke("old-run", Context::new())
        .await
        .expect_err("the bug");
    BUG.store(false, Ordering::SeqCst); // the outage the bug depended on is over
    let v2 = orders_v2(&store).hold(v1.clone()).expect("same name");
    assert_eq!(v2.held_versions(), [v1.version()]);
    let old = v2
        .resume("old-run")
        .await
        .and_then(Outcome::completed)
        .expect("resumes on the old code");
    assert_eq!(old.get::<String>("charged").expect("charged"), "v1");
    let new = v2
        .invoke("new-run", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(new.get::<String>("charged").expect("charged"), "v2");
    BUG.store(true, Ordering::SeqCst);

    let other = pipeline![validate]
        .name("emails")
        .durable(true)
        .build()
        .expect("valid");
    match v2.clone().hold(other) {
        Err(Error::InvalidSetting { setting, message }) => {
            assert_eq!(setting, "hold");
            assert!(message.contains("emails"), "{message}");
        }
        other => panic!("expected InvalidSetting, got {other:?}"),
    }
}
