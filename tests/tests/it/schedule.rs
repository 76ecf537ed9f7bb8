//! docs/CONTRACT.md rule 32, schedules, through the facade: daylight
//! saving time in a real zone, bad definitions, and a schedule on the wall
//! clock with a spawned worker.

use std::sync::Arc;
use std::time::Duration;

use fluxio::recovery::RecoveryWorker;
use fluxio::schedule::{CatchUp, Schedule};
use fluxio::store::{CheckpointStore, RunFilter};
use fluxio::{Context, Error, InMemoryStore, StageResult, pipeline, stage};

/// Milliseconds since the Unix epoch of an RFC 3339 time.
fn ms(at: &str) -> u64 {
    let t = humantime::parse_rfc3339(at).expect("an RFC 3339 time");
    u64::try_from(
        t.duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("fits")
}

#[test]
fn rule32_daylight_saving_time_gaps_and_repeats_follow_vixie_cron() {
    let paris = |pattern: &str| Schedule::cron(pattern, "Europe/Paris").expect("valid");
    // spring forward (2027-03-28, 02:00 -> 03:00): a fixed time in the gap
    // runs at the first instant after it, then as usual
    let gap = paris("30 2 * * *")
        .ticks_after(ms("2027-03-27T12:00:00Z"), 2)
        .expect("ticks");
    assert_eq!(
        gap,
        [ms("2027-03-28T01:00:00Z"), ms("2027-03-29T00:30:00Z")]
    );
    // fall back (2027-10-31, 03:00 -> 02:00): a fixed time that occurs
    // twice runs once, at the earlier
    let repeat = paris("30 2 * * *")
        .ticks_after(ms("2027-10-30T12:00:00Z"), 2)
        .expect("ticks");
    assert_eq!(
        repeat,
        [ms("2027-10-31T00:30:00Z"), ms("2027-11-01T01:30:00Z")]
    );
    // an interval pattern runs on both instants of the repeated hour
    let every = paris("0,30 * * * *")
        .ticks_after(ms("2027-10-31T00:10:00Z"), 4)
        .expect("ticks");
    assert_eq!(
        every,
        [
            ms("2027-10-31T00:30:00Z"),
            ms("2027-10-31T01:00:00Z"),
            ms("2027-10-31T01:30:00Z"),
            ms("2027-10-31T02:00:00Z"),
        ]
    );
    // seconds first, six fields
    let fast = Schedule::cron("*/20 * * * * *", "UTC")
        .expect("valid")
        .ticks_after(ms("2027-01-01T00:00:00Z"), 2)
        .expect("ticks");
    assert_eq!(
        fast,
        [ms("2027-01-01T00:00:20Z"), ms("2027-01-01T00:00:40Z")]
    );
}

#[test]
fn rule32_bad_definitions_are_typed_errors_naming_the_setting() {
    let setting = |r: fluxio::Result<Schedule>| match r {
        Err(Error::InvalidSetting { setting, message }) => (setting, message),
        other => panic!("expected InvalidSetting, got {other:?}"),
    };
    for bad in ["", "not cron", "61 * * * *", "* * * *", "0 0 30 2 *"] {
        let (s, m) = setting(Schedule::cron(bad, "UTC"));
        assert_eq!(s, "cron", "{bad:?}: {m}");
    }
    for zone in ["Mars/Olympus", "", "UTC+25"] {
        let (s, m) = setting(Schedule::cron("0 9 * * *", zone));
        assert_eq!(s, "time_zone", "{zone:?}: {m}");
    }
    for d in [Duration::ZERO, Duration::from_millis(999), Duration::MAX] {
        let (s, _) = setting(Schedule::every(d));
        assert_eq!(s, "interval", "{d:?}");
    }
    assert!(Schedule::every(Duration::from_secs(1)).is_ok());
    assert!(Schedule::cron(" 0 9 * * MON-FRI ", " Europe/Paris ").is_ok());
}

#[stage]
async fn tick(ctx: Context) -> StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("ticked", n)?)
}

#[tokio::test]
async fn rule32_a_schedule_on_the_wall_clock_starts_runs_with_its_input() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![tick]
        .name("ticker")
        .store_arc(store.clone())
        .build()
        .expect("builds");
    let every = Schedule::every(Duration::from_secs(1))
        .expect("a second")
        .input(&Context::new().set("n", 7u64).expect("a value"))
        .catch_up(CatchUp::Latest);
    p.schedule("second", every).await.expect("stored");
    let worker = RecoveryWorker::builder()
        .pipeline(p.clone())
        .due_poll(Duration::from_millis(20))
        .build()
        .expect("a worker")
        .spawn()
        .expect("spawned");
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    worker
        .shutdown(Duration::from_secs(5))
        .await
        .expect("stops");
    let runs = store
        .list_runs(&RunFilter::new().pipeline("ticker"))
        .await
        .expect("list");
    assert!((2..=3).contains(&runs.runs.len()), "{:?}", runs.runs);
    for run in &runs.runs {
        assert!(run.run_id.starts_with("second:"), "{}", run.run_id);
        let cp = store.load(&run.key).await.expect("load").expect("stored");
        assert_eq!(
            cp.context.to_context().get::<u64>("ticked").expect("ran"),
            7
        );
    }
    let listed = p.schedules().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].fired, runs.runs.len() as u64);
    assert_eq!(listed[0].every, "every 1s");
}

#[tokio::test]
async fn rule32_a_week_long_pause_of_a_per_second_cron_resumes_to_its_latest_tick() {
    let clock = fluxio::testing::TestClock::new();
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![tick]
        .name("busy")
        .store_arc(store.clone())
        .clock(clock.clock())
        .build()
        .expect("builds");
    let every_second = Schedule::cron("* * * * * *", "UTC").expect("valid");
    p.schedule("s", every_second).await.expect("stored");
    p.pause_schedule("s").await.expect("paused");
    clock
        .advance(Duration::from_secs(7 * 86_400))
        .expect("a week");
    p.resume_schedule("s").await.expect("resumed");
    let worker = RecoveryWorker::builder()
        .pipeline(p.clone())
        .build()
        .expect("a worker");
    worker.run_once().await.expect("a sweep");
    let info = p.schedules().await.expect("list").pop().expect("stored");
    assert_eq!(
        info.fired, 1,
        "the latest of 604,800 missed ticks: {info:?}"
    );
    assert!(
        info.skipped >= 9_999,
        "the missed ticks, counted up to 10,000: {info:?}"
    );
    let latest = info.last_tick_ms.expect("a tick");
    assert!(
        latest + 1_000 > clock.now_ms(),
        "the latest tick, within the last second"
    );
    let runs = store
        .list_runs(&RunFilter::new().pipeline("busy"))
        .await
        .expect("list");
    assert_eq!(runs.runs.len(), 1);
}
