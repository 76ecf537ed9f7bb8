//! A pipeline built without a store has no checkpoints: every operation that
//! reads them fails with `Error::NotDurable`, naming the operation and how to
//! make the pipeline durable.

use fluxio::{Context, Error, Outcome, StageResult, pipeline, stage};

#[stage]
async fn step(ctx: Context) -> StageResult {
    Ok(ctx.set("ran", true)?)
}

/// The operation named by a `NotDurable` error, and its message.
fn operation(result: Result<impl std::fmt::Debug, Error>) -> (&'static str, String) {
    let err = result.expect_err("a pipeline without a store refuses it");
    let message = err.to_string();
    match err {
        Error::NotDurable { operation } => (operation, message),
        other => panic!("expected Error::NotDurable, got {other:?}"),
    }
}

#[tokio::test]
async fn every_checkpoint_operation_on_a_pipeline_without_a_store_is_not_durable() {
    let p = pipeline![step].build().expect("valid");
    assert!(!p.is_durable());
    let results = [
        ("resume", operation(p.resume("run-1").await)),
        ("replay", operation(p.replay("run-1", None).await)),
        ("replay", operation(p.replay("run-1", Some("step")).await)),
        ("diff", operation(p.diff("run-1", "run-2").await)),
        ("checkpoint", operation(p.checkpoint("run-1").await)),
        ("exists", operation(p.exists("run-1").await)),
    ];
    for (expected, (named, message)) in results {
        assert_eq!(named, expected);
        assert!(
            message.contains(&format!("`{expected}`")),
            "the message names the operation: {message}"
        );
        assert!(
            message.contains(".store(...)") && message.contains(".durable(true)"),
            "the message says how to fix it: {message}"
        );
    }
    // invoke needs no store: the same pipeline still runs
    let out = p
        .invoke("run-1", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert!(out.get::<bool>("ran").expect("set"));
}

#[tokio::test]
async fn a_durable_pipeline_is_not_refused() {
    let p = pipeline![step]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    assert!(p.is_durable());
    assert!(!p.exists("run-1").await.expect("a store"));
    assert!(matches!(
        p.resume("run-1").await,
        Err(Error::CheckpointNotFound { .. })
    ));
}
