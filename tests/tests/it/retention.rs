//! docs/CONTRACT.md rule 20, retention: `delete_completed` removes a run from
//! the store once it completed, on every store; failed and cancelled runs
//! stay. (Each store's time-based retention of completed runs is tested in
//! its own crate and by the conformance suite.)

use std::sync::Arc;

use fluxio::store::{CheckpointStore, InMemoryStore, run_key};
use fluxio::{Context, Error, Outcome, Pipeline, RunStatus, StageResult, pipeline, stage};
use fluxio_core::store::conformance::{namespace, skip_unless_ci};
use fluxio_tests::StoreKind;

use crate::common::{arm, calls, disarm, input, step};

#[stage]
async fn first(ctx: Context) -> StageResult {
    step(ctx, "first")
}

#[stage]
async fn second(ctx: Context) -> StageResult {
    step(ctx, "second")
}

async fn open(kind: Option<StoreKind>, test: &str) -> Option<Arc<dyn CheckpointStore>> {
    let Some(kind) = kind else {
        return Some(Arc::new(InMemoryStore::new()));
    };
    match kind.open(&kind.url(), &namespace(test)).await {
        Ok(store) => Some(store),
        Err(e) => skip_unless_ci(kind.name(), &e),
    }
}

fn deleting(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![first, second]
        .name("orders")
        .delete_completed(true)
        .store_arc(Arc::clone(store))
        .build()
        .expect("valid")
}

async fn completed_runs_are_deleted(kind: Option<StoreKind>, test: &str) {
    let Some(store) = open(kind, test).await else {
        return;
    };
    let p = deleting(&store);
    let key = run_key("orders", test);

    // a failure is kept, for a resume
    arm(test, "second");
    p.invoke(test, input(test)).await.expect_err("armed");
    let failed = store.load(&key).await.expect("load").expect("kept");
    assert_eq!(failed.status, RunStatus::Failed);
    disarm(test, "second");

    // the resume completes it: the result comes back, the run is gone
    let out = p
        .resume(test)
        .await
        .and_then(Outcome::completed)
        .expect("completes");
    assert_eq!(
        out.get::<Vec<String>>("path").expect("path"),
        ["first", "second"]
    );
    assert_eq!(store.load(&key).await.expect("load"), None, "deleted");
    assert!(!p.exists(test).await.expect("exists"));
    assert!(matches!(
        p.resume(test).await,
        Err(Error::CheckpointNotFound { .. })
    ));
    // the lease was given back: the id can run again at once
    let again = p
        .invoke(test, input(test))
        .await
        .and_then(Outcome::completed)
        .expect("runs again");
    assert_eq!(again, out);
    assert_eq!(calls(test, "first"), 2);
    assert_eq!(store.load(&key).await.expect("load"), None);
}

#[tokio::test]
async fn rule20_delete_completed_deletes_completed_runs_and_keeps_failed_ones_memory() {
    completed_runs_are_deleted(None, "r20_delete_memory").await;
}

#[tokio::test]
async fn rule20_delete_completed_deletes_completed_runs_and_keeps_failed_ones_sqlite() {
    completed_runs_are_deleted(Some(StoreKind::Sqlite), "r20_delete_sqlite").await;
}

#[tokio::test]
async fn rule20_delete_completed_deletes_completed_runs_and_keeps_failed_ones_redis() {
    completed_runs_are_deleted(Some(StoreKind::Redis), "r20_delete_redis").await;
}

#[tokio::test]
async fn rule20_delete_completed_deletes_completed_runs_and_keeps_failed_ones_postgres() {
    completed_runs_are_deleted(Some(StoreKind::Postgres), "r20_delete_postgres").await;
}

#[tokio::test]
async fn rule20_delete_completed_keeps_a_run_cancelled_in_its_last_stage() {
    let test = "r20_delete_cancelled";
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = deleting(&store);
    let gate = Arc::new(tokio::sync::Notify::new());
    let p2 = pipeline![first, waits]
        .name("orders")
        .delete_completed(true)
        .resource(Arc::clone(&gate))
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    drop(p);
    let run = tokio::spawn({
        let p2 = p2.clone();
        async move { p2.invoke(test, input(test)).await }
    });
    while calls(test, "waits") == 0 {
        tokio::task::yield_now().await;
    }
    p2.cancel(test).await.expect("cancel");
    gate.notify_one();
    let out = run.await.expect("no panic");
    assert!(matches!(out, Err(Error::Cancelled { .. })), "{out:?}");
    let kept = store
        .load(&run_key("orders", test))
        .await
        .expect("load")
        .expect("a cancelled run is kept");
    assert_eq!(kept.status, RunStatus::Cancelled);
}

#[stage]
async fn waits(ctx: Context, gate: fluxio::Resource<Arc<tokio::sync::Notify>>) -> StageResult {
    let ctx = step(ctx, "waits")?;
    gate.notified().await;
    Ok(ctx)
}
