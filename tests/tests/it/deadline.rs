//! docs/CONTRACT.md rule 30, deadlines: in every durability mode, on the
//! wall clock, through the facade, and the misuse a user can make of them.

use std::time::Duration;

use fluxio::testing::TestClock;
use fluxio::{
    Context, Durability, Error, InMemoryStore, Outcome, RunStatus, StageResult, StartOptions,
    pipeline, stage,
};

#[stage]
async fn dawdle(ctx: Context) -> StageResult {
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(ctx.set("dawdled", true)?)
}

#[stage]
async fn after_dawdle(ctx: Context) -> StageResult {
    Ok(ctx.set("after", true)?)
}

fn is_late(result: &fluxio::Result<Outcome>, step: &str) -> bool {
    matches!(result, Err(Error::DeadlineExceeded { step: s, .. }) if s == step)
}

#[tokio::test]
async fn rule30_every_durability_mode_stops_a_run_at_its_deadline_and_stores_why() {
    for mode in [Durability::Sync, Durability::Async, Durability::Exit] {
        let store = InMemoryStore::new();
        let p = pipeline![dawdle, after_dawdle]
            .name("slowpoke")
            .durability(mode)
            .store(store)
            .build()
            .expect("builds");
        let soon = StartOptions::new().deadline_in(Duration::from_millis(50));
        let ended = p.invoke_with("r", Context::new(), soon).await;
        assert!(is_late(&ended, "after_dawdle"), "{mode:?}: {ended:?}");
        let cp = p.checkpoint("r").await.expect("load").expect("stored");
        assert_eq!(
            (cp.status, cp.step.as_str()),
            (RunStatus::Failed, "after_dawdle"),
            "{mode:?}"
        );
        assert!(cp.deadline_ms.is_some(), "{mode:?}");
        assert!(
            cp.context
                .to_context()
                .get::<bool>("dawdled")
                .expect("kept"),
            "{mode:?}: the context the run stopped with"
        );
    }
}

#[tokio::test]
async fn rule30_a_deadline_needs_a_store_and_extreme_ones_are_read_as_documented() {
    let plain = pipeline![after_dawdle].build().expect("builds");
    let hour = StartOptions::new().deadline_in(Duration::from_secs(3600));
    let refused = plain.invoke_with("r", Context::new(), hour).await;
    assert!(
        matches!(
            refused,
            Err(Error::NotDurable {
                operation: "invoke_with"
            })
        ),
        "{refused:?}"
    );
    // without a deadline the plain pipeline runs as ever
    let done = plain
        .invoke_with("r", Context::new(), StartOptions::new())
        .await;
    assert!(matches!(done, Ok(Outcome::Completed(_))), "{done:?}");

    let clock = TestClock::new();
    let p = pipeline![after_dawdle]
        .name("extreme")
        .clock(clock.clock())
        .store(InMemoryStore::new())
        .build()
        .expect("builds");
    let forever = StartOptions::new().deadline_in(Duration::MAX);
    let done = p.invoke_with("max", Context::new(), forever).await;
    assert!(matches!(done, Ok(Outcome::Completed(_))), "{done:?}");
    let cp = p.checkpoint("max").await.expect("load").expect("stored");
    assert_eq!(cp.deadline_ms, Some(fluxio::store::MAX_UNTIL_MS));
    let zero = StartOptions::new().deadline_in(Duration::ZERO);
    assert!(is_late(
        &p.invoke_with("zero", Context::new(), zero).await,
        "after_dawdle"
    ));
    let epoch = StartOptions::new().deadline_at(std::time::UNIX_EPOCH);
    assert!(is_late(
        &p.invoke_with("epoch", Context::new(), epoch).await,
        "after_dawdle"
    ));
    // a new build of the pipeline resumes the stored run with its deadline
    let rebuilt = pipeline![after_dawdle]
        .name("extreme")
        .clock(clock.clock())
        .store_arc(p.store().expect("durable").clone())
        .build()
        .expect("builds");
    assert!(is_late(&rebuilt.resume("zero").await, "after_dawdle"));
}

/// A caller that drops `invoke_with` mid-stage leaves a run that keeps its
/// deadline: once the lease is back, a resume past the deadline fails the
/// run there, and one of a fresh pipeline value (a redeploy) does too.
#[tokio::test]
async fn rule30_a_dropped_run_keeps_its_deadline() {
    let clock = TestClock::new();
    let store = std::sync::Arc::new(InMemoryStore::new());
    let p = pipeline![dawdle, after_dawdle]
        .name("dropped")
        .clock(clock.clock())
        .lease_ttl(Duration::from_millis(50))
        .store(std::sync::Arc::clone(&store))
        .build()
        .expect("builds");
    let hour = StartOptions::new().deadline_in(Duration::from_secs(3600));
    let run = p.invoke_with("d", Context::new(), hour);
    // dropped while `dawdle` sleeps
    let cut = tokio::time::timeout(Duration::from_millis(50), run).await;
    assert!(cut.is_err(), "the call was cut short");
    p.shutdown(Duration::from_secs(5))
        .await
        .expect("leases back");
    let stored = p.checkpoint("d").await.expect("load").expect("stored");
    assert_eq!(stored.deadline_ms, Some(clock.now_ms() + 3_600_000));
    clock.advance("2h").expect("advance");
    let rebuilt = pipeline![dawdle, after_dawdle]
        .name("dropped")
        .clock(clock.clock())
        .store(store)
        .build()
        .expect("builds");
    assert!(is_late(&rebuilt.resume("d").await, "dawdle"));
    let failed = rebuilt
        .checkpoint("d")
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(failed.status, RunStatus::Failed);
}
