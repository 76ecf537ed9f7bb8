//! `pipeline![]`: a pipeline without stages returns its input unchanged,
//! durable or not, and has a version of its own.

use fluxio::{Context, InMemoryStore, Outcome, RunStatus, StageResult, ctx, pipeline, stage};

#[stage]
async fn one(ctx: Context) -> StageResult {
    Ok(ctx)
}

#[tokio::test]
async fn an_empty_pipeline_returns_its_input() {
    let input = ctx! { "n" => 1, "s" => "x" }.expect("ok");
    let p = pipeline![].build().expect("builds");
    assert!(p.program().stage_names().is_empty());
    assert_eq!(
        p.invoke("r", input.clone())
            .await
            .and_then(Outcome::completed)
            .expect("runs"),
        input
    );
}

#[tokio::test]
async fn a_durable_empty_pipeline_completes_and_resumes() {
    let input = ctx! { "n" => 1 }.expect("ok");
    let p = pipeline![]
        .name("test")
        .store(InMemoryStore::new())
        .build()
        .expect("builds");
    assert_eq!(
        p.invoke("r", input.clone())
            .await
            .and_then(Outcome::completed)
            .expect("runs"),
        input
    );
    let cp = p.checkpoint("r").await.expect("loads").expect("stored");
    assert_eq!(cp.status, RunStatus::Completed);
    assert_eq!(
        p.resume("r")
            .await
            .and_then(Outcome::completed)
            .expect("resumes"),
        input
    );
}

#[test]
fn an_empty_pipeline_has_a_version_of_its_own() {
    let empty = pipeline![].build().expect("builds");
    let other = pipeline![one].build().expect("builds");
    assert_eq!(empty.version().len(), 12);
    assert_ne!(empty.version(), other.version());
    assert_eq!(
        empty.version(),
        pipeline![].build().expect("builds").version()
    );
}
