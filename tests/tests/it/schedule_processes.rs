//! Contract rule 32 across processes: a schedule ticking every second,
//! fired by four worker processes for 60 s (`FLUXIO_SCHEDULE_SECONDS`), one
//! of them SIGKILLed a third of the way: every tick started exactly one
//! run, none was skipped, and every run ran its stage (twice only for the
//! one run the killed worker may have been in, which recovery re-runs:
//! bodies are at least once).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fluxio::RunStatus;
use fluxio::schedule::{CatchUp, Overlap, Schedule, tick_run_id};
use fluxio::store::{CheckpointStore, RunFilter, RunState};
use fluxio_tests::StoreKind;
use fluxio_tests::family::{TICKS_PIPELINE, ticks_pipeline};
use fluxio_tests::process::{Scene, Worker};

fn harness(kind: StoreKind) {
    let seconds: u64 = std::env::var("FLUXIO_SCHEDULE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let Some(Scene {
        rt,
        store,
        url,
        ns,
        dir,
        ledger,
    }) = Scene::open(kind, "schedule", "sched")
    else {
        return;
    };
    let pipeline = ticks_pipeline()
        .store_arc(Arc::clone(&store))
        .build()
        .expect("builds");
    let every = Schedule::every(Duration::from_secs(1))
        .expect("a second")
        .overlap(Overlap::Allow)
        .catch_up(CatchUp::All(30));
    let info = rt
        .block_on(pipeline.schedule("tick", every))
        .expect("stored");
    let anchor = info.next_ms.expect("a next tick") - 1_000;
    let spawn = || {
        let mut w = Worker::spawn(
            env!("CARGO_BIN_EXE_fluxio-waits-worker"),
            [kind.name(), &url, &ns, "-", "ticks-work", "1000", &ledger],
        );
        w.ready().expect("a worker starts");
        w.go();
        w.expect(&["working"]);
        w
    };
    let mut workers: Vec<Worker> = (0..4).map(|_| spawn()).collect();
    std::thread::sleep(Duration::from_secs(seconds / 3));
    let killed = workers[0].pid();
    workers[0].kill();
    std::thread::sleep(Duration::from_secs(seconds - seconds / 3));
    rt.block_on(pipeline.pause_schedule("tick")).expect("pause");
    // the runs started so far complete on the three workers left
    let runs = rt.block_on(async {
        for _ in 0..300 {
            let page = store
                .list_runs(&RunFilter::new().pipeline(TICKS_PIPELINE).limit(10_000))
                .await
                .expect("list");
            if page.runs.iter().all(|r| r.state == RunState::Completed) {
                return page.runs;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the scheduled runs did not all complete");
    });
    drop(workers);
    let info = rt
        .block_on(pipeline.schedules())
        .expect("list")
        .pop()
        .expect("the schedule");
    let last = info.last_tick_ms.expect("it ticked");
    let ticks = (last - anchor) / 1_000;
    assert!(
        ticks + 3 >= seconds,
        "{ticks} ticks in {seconds} s: {info:?}"
    );
    assert_eq!(info.skipped, 0, "no tick skipped: {info:?}");
    assert_eq!(info.fired, ticks, "one run per tick: {info:?}");
    let want: Vec<String> = (1..=ticks)
        .map(|k| {
            format!(
                "{TICKS_PIPELINE}/{}",
                tick_run_id("tick", anchor + k * 1_000)
            )
        })
        .collect();
    let mut got: Vec<String> = runs.iter().map(|r| r.key.clone()).collect();
    got.sort();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(got, want_sorted, "every tick's run, and no other");
    // the ledger: every run's stage ran; twice only with the killed worker
    let mut lines: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for line in std::fs::read_to_string(&ledger).unwrap_or_default().lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        if parts.len() == 4 {
            let pid = parts[3].parse().unwrap_or(0);
            lines.entry(parts[0].to_owned()).or_default().push(pid);
        }
    }
    for key in &want {
        let pids = lines.get(key).unwrap_or_else(|| panic!("{key} never ran"));
        assert!(
            pids.len() == 1 || pids.contains(&killed),
            "{key} ran {} times: {pids:?}",
            pids.len()
        );
    }
    let again = lines.values().filter(|p| p.len() > 1).count();
    assert!(
        again <= 1,
        "at most the killed worker's run ran twice: {again}"
    );
    let done = rt
        .block_on(store.load(&want[0]))
        .expect("load")
        .expect("stored");
    assert_eq!(done.status, RunStatus::Completed);
    eprintln!(
        "schedule across processes on {}: {ticks} ticks, {} runs, {again} re-run after the kill",
        kind.name(),
        runs.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rule32_four_worker_processes_start_each_tick_once_on_sqlite() {
    harness(StoreKind::Sqlite);
}

#[test]
fn rule32_four_worker_processes_start_each_tick_once_on_postgres() {
    harness(StoreKind::Postgres);
}

#[test]
fn rule32_four_worker_processes_start_each_tick_once_on_redis() {
    harness(StoreKind::Redis);
}
