//! Run ids made for the caller (the reference runtime's automatic id):
//! time-ordered, unique, and returned also when the run fails.

use std::sync::atomic::{AtomicBool, Ordering};

use fluxio::{Context, InMemoryStore, Pipeline, StageResult, pipeline, stage};

static DOWN: AtomicBool = AtomicBool::new(true);

#[stage]
async fn flaky(ctx: Context) -> StageResult {
    if DOWN.load(Ordering::SeqCst) {
        return Err("the service is down".into());
    }
    Ok(ctx.set("done", true)?)
}

#[test]
fn new_run_ids_are_uuid_v7_unique_and_in_the_order_made() {
    let ids: Vec<String> = (0..10_000).map(|_| Pipeline::new_run_id()).collect();
    for id in &ids {
        assert_eq!(id.len(), 36, "{id}");
        assert_eq!(&id[14..15], "7", "version 7: {id}");
        assert!(
            id.chars().all(|c| c.is_ascii_hexdigit() || c == '-'),
            "{id}"
        );
    }
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "each id sorts after the one made before it"
    );
}

#[tokio::test]
async fn a_run_started_without_an_id_returns_it_also_when_it_fails() {
    let p = pipeline![flaky]
        .name("auto")
        .store(InMemoryStore::new())
        .build()
        .expect("builds");
    let (id, failed) = p.invoke_new(Context::new()).await;
    assert!(failed.is_err(), "the service is down");
    DOWN.store(false, Ordering::SeqCst);
    let done = p
        .resume(&id)
        .await
        .expect("the returned id resumes it")
        .completed()
        .expect("completes");
    assert!(done.get::<bool>("done").expect("done"));
    let (other, started) = p.start_new(Context::new()).await;
    assert!(started.expect("runs").is_completed());
    assert!(other > id, "made later, sorts later");
}
