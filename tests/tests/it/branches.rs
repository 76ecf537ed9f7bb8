//! docs/CONTRACT.md rule 19: a parallel branch that finished is recorded
//! with its block's checkpoint, and a resume after a failure or a crash
//! inside the block rebuilds it from the record instead of running it again.
//! The crash harness (crash.rs) checks the same across SIGKILLs on the shared
//! stores; the conformance suite on every store.

use std::sync::Arc;
use std::time::Duration;

use fluxio::store::{CheckpointStore, InMemoryStore};
use fluxio::{Context, Error, Outcome, Pipeline, RunStatus, StageResult, pipeline, stage};

use crate::common::{StageFailed, arm, calls, disarm, input, record};

/// Records the call and fails while armed; `ms` of work first.
async fn work(ctx: Context, stage: &str, key: &str, ms: u64) -> StageResult {
    let test: String = ctx.get("test")?;
    record(&test, format!("call:{stage}"));
    tokio::time::sleep(Duration::from_millis(ms)).await;
    if crate::common::is_armed(&test, stage) {
        return Err(Box::new(StageFailed {
            stage: stage.to_owned(),
        }));
    }
    let ctx = ctx.set(key, stage)?;
    // the quick branch also removes a key, which its record must carry
    Ok(if stage == "quick" {
        ctx.remove("scratch")
    } else {
        ctx
    })
}

#[stage]
async fn quick(ctx: Context) -> StageResult {
    work(ctx, "quick", "quick_done", 0).await
}

#[stage]
async fn slow(ctx: Context) -> StageResult {
    work(ctx, "slow", "slow_done", 150).await
}

#[stage]
async fn slow_same_key(ctx: Context) -> StageResult {
    work(ctx, "slow_same_key", "quick_done", 150).await
}

#[stage]
async fn after(ctx: Context) -> StageResult {
    let test: String = ctx.get("test")?;
    record(&test, "call:after");
    Ok(ctx.set("after", true)?)
}

fn durable(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![parallel![quick, slow], after]
        .name("branches")
        .auto_parallel(false)
        .store_arc(Arc::clone(store))
        .build()
        .expect("valid")
}

fn memory() -> Arc<dyn CheckpointStore> {
    Arc::new(InMemoryStore::new())
}

#[tokio::test]
async fn rule19_a_branch_that_finished_before_a_failure_is_not_run_again() {
    let test = "r19_failure";
    let store = memory();
    let p = durable(&store);
    arm(test, "slow");
    let ctx = input(test).set("scratch", 1).expect("set");
    let err = p.invoke(test, ctx).await.expect_err("slow fails");
    assert!(err.stage_error::<StageFailed>().is_some(), "{err}");
    let cp = p.checkpoint(test).await.expect("load").expect("stored");
    assert_eq!(cp.status, RunStatus::Failed);
    let recorded: Vec<(u32, &str)> = cp
        .branches
        .iter()
        .map(|r| (r.branch, r.name.as_str()))
        .collect();
    assert_eq!(recorded, [(0, "quick")], "the finished branch is recorded");
    let written: Vec<&str> = cp.branches[0].written.iter().map(|(k, _)| k).collect();
    assert_eq!(written, ["quick_done"], "with its writes");
    assert_eq!(cp.branches[0].removed, ["scratch"], "and its removals");

    disarm(test, "slow");
    let out = p
        .resume(test)
        .await
        .and_then(Outcome::completed)
        .expect("resumes");
    assert_eq!(
        (
            calls(test, "quick"),
            calls(test, "slow"),
            calls(test, "after")
        ),
        (1, 2, 1),
        "quick is rebuilt from its record, slow runs again"
    );
    assert_eq!(out.get::<String>("quick_done").expect("merged"), "quick");
    assert_eq!(out.get::<String>("slow_done").expect("merged"), "slow");
    assert!(
        !out.contains_key("scratch"),
        "the recorded removal is merged"
    );
    let done = p.checkpoint(test).await.expect("load").expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    assert!(done.branches.is_empty(), "records live at their block only");
}

#[tokio::test]
async fn rule19_a_branch_that_finished_before_a_crash_is_not_run_again() {
    let test = "r19_crash";
    let store = memory();
    let p = durable(&store);
    let run = tokio::spawn({
        let p = p.clone();
        async move { p.invoke(test, input(test)).await }
    });
    // wait until quick's record is stored while slow still runs, then
    // "crash": the run's future is dropped mid-block
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let cp = p.checkpoint(test).await.expect("load");
        if cp.is_some_and(|cp| cp.branches.len() == 1) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "quick never recorded"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    run.abort();
    let _ = run.await;
    assert_eq!(calls(test, "after"), 0, "the crash came inside the block");
    p.shutdown(Duration::from_secs(5))
        .await
        .expect("lease back");

    let next = durable(&store);
    let out = next
        .resume(test)
        .await
        .and_then(Outcome::completed)
        .expect("resumes");
    assert_eq!(
        (
            calls(test, "quick"),
            calls(test, "slow"),
            calls(test, "after")
        ),
        (1, 2, 1),
        "quick is rebuilt from its record; slow, which had not finished, runs again"
    );
    assert_eq!(out.get::<String>("quick_done").expect("merged"), "quick");
    assert!(out.get::<bool>("after").expect("after"));
}

#[tokio::test]
async fn rule19_a_recorded_branch_merges_with_the_same_conflict_check() {
    let conflict = |p: Pipeline, test: &'static str, fail_first: bool| async move {
        if fail_first {
            arm(test, "slow_same_key");
        }
        let first = p.invoke(test, input(test)).await;
        let err = if fail_first {
            assert!(first.is_err());
            disarm(test, "slow_same_key");
            p.resume(test).await.expect_err("conflict")
        } else {
            first.expect_err("conflict")
        };
        match err {
            Error::MergeConflict { keys, branches } => (keys, branches),
            other => panic!("{test}: expected MergeConflict, got {other}"),
        }
    };
    let build = || {
        pipeline![parallel![quick, slow_same_key]]
            .name("branches")
            .auto_parallel(false)
            .store(InMemoryStore::new())
            .build()
            .expect("valid")
    };
    let uninterrupted = conflict(build(), "r19_conflict_a", false).await;
    let resumed = conflict(build(), "r19_conflict_b", true).await;
    assert_eq!(uninterrupted.0, ["quick_done"]);
    assert_eq!(resumed, uninterrupted, "the same keys and branches");
    assert_eq!(
        calls("r19_conflict_b", "quick"),
        1,
        "recorded, not run again"
    );
}

#[tokio::test]
async fn rule19_a_replay_from_a_step_in_the_block_runs_every_branch_again() {
    let test = "r19_replay";
    let store = memory();
    let p = durable(&store);
    arm(test, "slow");
    p.invoke(test, input(test)).await.expect_err("slow fails");
    disarm(test, "slow");
    // replaying the block on purpose is not a resume: records are not used
    let out = p
        .replay(test, Some("quick"))
        .await
        .and_then(Outcome::completed)
        .expect("replays");
    assert_eq!(
        (calls(test, "quick"), calls(test, "slow")),
        (2, 2),
        "both branches ran again"
    );
    assert_eq!(out.get::<String>("slow_done").expect("merged"), "slow");
}
