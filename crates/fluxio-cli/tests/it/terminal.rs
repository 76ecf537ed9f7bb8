//! `fluxio runs show` and `runs retry` on a run that failed for good
//! (contract rule 35), on SQLite.

use std::sync::Arc;

use fluxio::store::CheckpointStore;
use fluxio::{Context, Error, Pipeline, StageResult, TerminalError, pipeline, stage};

use crate::common::sqlite;

#[stage]
async fn charge(ctx: Context) -> StageResult {
    if ctx.get_opt::<bool>("cleared").unwrap_or(false) {
        return Ok(ctx.set("charged", true)?);
    }
    Err(TerminalError::new("card declined for fraud").into())
}

fn orders(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![charge]
        .name("orders")
        .store_arc(Arc::clone(store))
        .build()
        .expect("a valid pipeline")
}

#[tokio::test]
async fn rule35_show_says_failed_for_good_and_retry_hands_it_back() {
    let t = sqlite("cli_terminal").await;
    let p = orders(&t.store);
    p.invoke("o-1", Context::new()).await.expect_err("fraud");
    t.run(&["runs", "show", "orders/o-1"], None)
        .code(0)
        .shows(&[
            "failed",
            "card declined for fraud",
            "for good",
            "TerminalError",
        ]);
    let json = t
        .run(&["runs", "show", "orders/o-1", "--json"], None)
        .code(0);
    assert!(
        json.stdout.contains("\"failed_for_good\": true"),
        "{}",
        json.all()
    );
    assert!(matches!(
        p.start("o-1", Context::new()).await,
        Err(Error::FailedForGood { .. })
    ));
    t.run(&["runs", "retry", "orders/o-1"], None).code(0);
    let shown = t.run(&["runs", "show", "orders/o-1"], None).code(0);
    assert!(!shown.stdout.contains("for good"), "{}", shown.all());
    p.resume("o-1")
        .await
        .expect_err("still fraud, failed for good again");
}

#[stage]
async fn release_seat(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[stage(compensate = release_seat)]
async fn hold_seat(ctx: Context) -> StageResult {
    Ok(ctx.set("seat", "12A")?)
}

#[tokio::test]
async fn rule35_show_tells_what_a_failed_run_undid() {
    let t = sqlite("cli_compensated").await;
    let p = pipeline![hold_seat, charge]
        .name("seats")
        .store_arc(Arc::clone(&t.store))
        .build()
        .expect("a valid pipeline");
    p.invoke("s-1", Context::new()).await.expect_err("fraud");
    t.run(&["runs", "show", "seats/s-1"], None).code(0).shows(&[
        "for good",
        "compensated 1 of 1: release_seat (for hold_seat)",
        "release_seat (undoes hold_seat)",
    ]);
    let json = t
        .run(&["runs", "show", "seats/s-1", "--json"], None)
        .code(0);
    assert!(
        json.stdout.contains("\"compensator\": \"release_seat\""),
        "{}",
        json.all()
    );
}
