//! `async fn` stages without `.await`: `#[stage]` runs them in place, at
//! their call, with no boxed future (issue 13). To the pipeline and to
//! the stage they are stages like any other: their info, their panics and
//! errors, routing, a timeout they cannot reach, a durable run.

use std::sync::{Arc, Mutex};

use fluxio::{
    Context, Error, InMemoryStore, Outcome, Route, StageInfo, StageResult, pipeline, stage,
};

type Seen = Arc<Mutex<Vec<(String, u32)>>>;

#[stage]
async fn note(ctx: Context, seen: fluxio::Resource<Seen>) -> StageResult {
    let info = StageInfo::current().ok_or("no stage info inside a stage")?;
    seen.lock()
        .map_err(|_| "poisoned")?
        .push((info.stage.to_owned(), info.position));
    Ok(ctx.set("noted", info.position)?)
}

#[stage]
async fn pick(ctx: Context) -> fluxio::Result<Route> {
    let n: u32 = ctx.get("n")?;
    Ok(Route::to(if n > 1 { "many" } else { "one" }))
}

#[stage]
async fn many(ctx: Context) -> StageResult {
    Ok(ctx.set("took", "many")?)
}

#[stage]
async fn one(ctx: Context) -> StageResult {
    Ok(ctx.set("took", "one")?)
}

#[stage]
async fn explode(_ctx: Context) -> StageResult {
    panic!("the ready stage blew up")
}

#[stage]
async fn refuse(ctx: Context) -> StageResult {
    let n: u32 = ctx.get("n")?;
    Err(format!("{n} is too many").into())
}

#[stage(timeout = "1ms")]
async fn busy(ctx: Context) -> StageResult {
    // no `.await`: nothing can interrupt it, so its timeout never fires
    std::thread::sleep(std::time::Duration::from_millis(20));
    Ok(ctx.set("busy", true)?)
}

#[tokio::test]
async fn a_stage_without_await_has_its_info_and_routes() {
    let seen = Seen::default();
    let p = pipeline![note, pick => { "many" => [many], "one" => [one] }, note]
        .resource(Arc::clone(&seen))
        .build()
        .expect("valid");
    let out = p
        .invoke("r1", Context::new().set("n", 3u32).expect("sets"))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(out.get::<String>("took").expect("set"), "many");
    let seen = seen.lock().expect("not poisoned").clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|(stage, _)| stage == "note"), "{seen:?}");
    assert!(seen[0].1 < seen[1].1, "positions {seen:?}");
    assert_eq!(
        StageInfo::current(),
        None,
        "no info is left behind after a run"
    );
}

#[tokio::test]
async fn a_panic_or_an_error_in_a_stage_without_await_names_the_stage() {
    let p = pipeline![explode].build().expect("valid");
    match p.invoke("r1", Context::new()).await {
        Err(Error::StagePanic { stage, message }) => {
            assert_eq!(stage, "explode");
            assert_eq!(message, "the ready stage blew up");
        }
        other => panic!("expected a StagePanic, got {other:?}"),
    }
    assert_eq!(StageInfo::current(), None, "no info is left behind a panic");
    let p = pipeline![refuse].build().expect("valid");
    let err = p
        .invoke("r1", Context::new().set("n", 7u32).expect("sets"))
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, Error::Stage { stage, .. } if stage == "refuse"),
        "{err:?}"
    );
    assert!(err.to_string().contains("7 is too many"), "{err}");
}

#[tokio::test]
async fn a_stage_without_await_cannot_time_out_and_runs_durably() {
    let p = pipeline![busy, note]
        .name("ready")
        .store(InMemoryStore::new())
        .resource(Seen::default())
        .build()
        .expect("valid");
    let out = p
        .invoke("r1", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert!(out.get::<bool>("busy").expect("set"));
    let history = p.history("r1").await.expect("a history");
    assert_eq!(history.status, fluxio::RunStatus::Completed, "{history:?}");
    assert!(history.checkpoints >= 2, "{history:?}");
}

mod shadowed {
    //! A macro named like one `#[stage]` knows to be quiet, but that awaits:
    //! the stage is run in place, its future waits, and the run fails with
    //! an error that says so, instead of hanging or dropping the stage
    //! silently.
    use fluxio::{Context, Error, StageResult, pipeline, stage};

    macro_rules! info {
        () => {
            tokio::task::yield_now().await
        };
    }

    #[stage]
    async fn sneaky(ctx: Context) -> StageResult {
        info!();
        Ok(ctx)
    }

    #[tokio::test]
    async fn an_await_hidden_in_a_quiet_macros_name_is_a_clear_error() {
        let p = pipeline![sneaky].build().expect("valid");
        let err = p
            .invoke("r1", Context::new())
            .await
            .expect_err("cannot wait in place");
        assert!(
            matches!(&err, Error::Stage { stage, .. } if stage == "sneaky"),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("found no `.await`"),
            "the error says why: {err}"
        );
    }
}
