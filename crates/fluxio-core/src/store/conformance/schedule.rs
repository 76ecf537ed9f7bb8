//! Checks of schedules (contract rule 32): a stored schedule starts one
//! run per tick across workers, on a test clock, and its overlap and
//! catch-up policies, pause, resume and delete hold on every store.

use std::time::Duration;

use super::Harness;
use super::waits::{built, indexed, napping, worker};
use crate::error::Error;
use crate::pipeline::Pipeline;
use crate::recovery::RecoveryWorker;
use crate::schedule::{CatchUp, Overlap, Schedule, tick_run_id};
use crate::store::RunStatus;

const MINUTE: Duration = Duration::from_secs(60);

/// Three sweeps of every worker, each sweep run by all of them at once.
async fn sweeps(workers: &[RecoveryWorker]) {
    for _ in 0..3 {
        let all = workers.iter().map(RecoveryWorker::run_once);
        for swept in futures::future::join_all(all).await {
            swept.expect("a sweep");
        }
    }
}

/// How many runs of `p` schedule `name` started, as it says.
async fn fired(p: &Pipeline, name: &str) -> u64 {
    p.schedules()
        .await
        .expect("schedules")
        .into_iter()
        .find(|s| s.name == name)
        .map_or(0, |s| s.fired)
}

/// Rule 32: a schedule stored once (and again, unchanged, as a service
/// does at every start) starts one run per tick, with an id derived from
/// the tick, however many workers sweep at once; paused, it starts
/// nothing; resumed, it runs the latest missed tick; deleted, nothing.
pub async fn rule32_a_schedule_starts_one_run_per_tick_across_workers<H: Harness>(h: &H) {
    let (p, calls, clock) = built(h, "rule32_ticks", napping).await;
    if !indexed(&p).await {
        return;
    }
    let every = Schedule::every(MINUTE)
        .expect("a minute")
        .overlap(Overlap::Allow);
    let start = clock.now_ms();
    let info = p.schedule("m", every.clone()).await.expect("stored");
    assert_eq!((info.next_ms, info.fired), (Some(start + 60_000), 0));
    assert_eq!(p.schedule("m", every.clone()).await.expect("again"), info);
    let workers = [worker(&p), worker(&p), worker(&p)];
    sweeps(&workers).await;
    assert_eq!(calls.get()[0], 0, "nothing is due before the first tick");
    clock.advance(MINUTE).expect("advance");
    sweeps(&workers).await;
    assert_eq!(
        calls.get()[0],
        1,
        "one run for the tick, across three workers"
    );
    let first = tick_run_id("m", start + 60_000);
    let run = p
        .checkpoint(&first)
        .await
        .expect("load")
        .expect("the tick's run");
    assert_eq!(run.status, RunStatus::Sleeping, "it ran its first stage");
    clock.advance(MINUTE).expect("advance");
    sweeps(&workers).await;
    assert_eq!(
        calls.get()[0],
        2,
        "overlap allowed: the second tick ran too"
    );
    assert_eq!(fired(&p, "m").await, 2);

    p.pause_schedule("m").await.expect("pause");
    assert!(p.schedules().await.expect("list")[0].paused);
    clock.advance(MINUTE * 3).expect("advance");
    sweeps(&workers).await;
    assert_eq!(calls.get()[0], 2, "a paused schedule starts nothing");
    p.resume_schedule("m").await.expect("resume");
    sweeps(&workers).await;
    assert_eq!(
        calls.get()[0],
        3,
        "resumed: the latest missed tick runs, once"
    );
    let latest = tick_run_id("m", start + 5 * 60_000);
    assert!(
        p.checkpoint(&latest).await.expect("load").is_some(),
        "{latest}"
    );

    p.delete_schedule("m").await.expect("delete");
    assert!(p.schedules().await.expect("list").is_empty());
    clock.advance(MINUTE).expect("advance");
    sweeps(&workers).await;
    assert_eq!(calls.get()[0], 3, "a deleted schedule starts nothing");
    assert!(matches!(
        p.delete_schedule("m").await,
        Err(Error::CheckpointNotFound { .. })
    ));
}

/// Rule 32: overlap (skip, queue one) while the previous run sleeps, and
/// catch-up (none, all of the last n) after a pause; bad definitions are
/// typed errors naming the setting.
pub async fn rule32_overlap_and_catch_up_policies<H: Harness>(h: &H) {
    let (p, calls, clock) = built(h, "rule32_policies", napping).await;
    if !indexed(&p).await {
        return;
    }
    let every = || Schedule::every(MINUTE).expect("a minute");
    let workers = [worker(&p), worker(&p)];
    // skip: the first run sleeps for an hour, so the next ticks are skipped
    p.schedule("skip", every()).await.expect("stored");
    clock.advance(MINUTE).expect("advance");
    sweeps(&workers).await;
    clock.advance(MINUTE).expect("advance");
    sweeps(&workers).await;
    let skip = p.schedules().await.expect("list");
    let skip = skip.iter().find(|s| s.name == "skip").expect("listed");
    assert_eq!((skip.fired, skip.skipped), (1, 1), "{skip:?}");
    p.delete_schedule("skip").await.expect("delete");

    // queue one: kept while the run sleeps, started once it has ended
    p.schedule("queue", every().overlap(Overlap::QueueOne))
        .await
        .expect("stored");
    let at = clock.now_ms();
    clock.advance(MINUTE).expect("advance");
    sweeps(&workers).await;
    clock.advance(MINUTE).expect("advance");
    sweeps(&workers).await;
    assert_eq!(fired(&p, "queue").await, 1, "the second tick is kept");
    p.cancel(&tick_run_id("queue", at + 60_000))
        .await
        .expect("cancel");
    clock.advance(Duration::from_secs(1)).expect("advance");
    sweeps(&workers).await;
    assert_eq!(
        fired(&p, "queue").await,
        2,
        "the kept tick ran once the first ended"
    );
    p.delete_schedule("queue").await.expect("delete");

    // catch-up: all of the last 2, and none
    let before = calls.get()[0];
    let allowed = every().overlap(Overlap::Allow);
    p.schedule("all", allowed.clone().catch_up(CatchUp::All(2)))
        .await
        .expect("stored");
    p.schedule("none", allowed.catch_up(CatchUp::None))
        .await
        .expect("stored");
    p.pause_schedule("all").await.expect("pause");
    p.pause_schedule("none").await.expect("pause");
    clock.advance(MINUTE * 5).expect("advance");
    p.resume_schedule("all").await.expect("resume");
    p.resume_schedule("none").await.expect("resume");
    sweeps(&workers).await;
    assert_eq!(fired(&p, "all").await, 2, "the last two missed ticks");
    assert_eq!(fired(&p, "none").await, 0, "no missed tick");
    clock.advance(MINUTE).expect("advance");
    sweeps(&workers).await;
    assert_eq!(fired(&p, "none").await, 1, "the next tick on time runs");
    assert_eq!(calls.get()[0] - before, 4);

    // bad definitions
    let all0 = p.schedule("x", every().catch_up(CatchUp::All(0))).await;
    assert!(
        matches!(
            all0,
            Err(Error::InvalidSetting {
                setting: "catch_up",
                ..
            })
        ),
        "{all0:?}"
    );
    let slash = p.schedule("a/b", every()).await;
    assert!(
        matches!(slash, Err(Error::InvalidRunId { .. })),
        "{slash:?}"
    );
}
