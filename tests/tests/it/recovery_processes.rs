//! Contract rule 22 across real OS processes, on the real Redis and
//! Postgres servers and a SQLite file: a worker process dies with SIGKILL
//! holding 200 runs, and four recovery worker processes finish them, each
//! run exactly once (the stages' ledger, a file outside the store, proves
//! it); then again with one of the four killed midway, whose runs the other
//! three finish after its leases lapse.
//!
//! Without a server these tests skip loudly, unless `CI` is set.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use fluxio::store::{RunFilter, RunState};
use fluxio_test_support::{namespace, skip_unless_ci};
use fluxio_tests::process::Worker;
use fluxio_tests::{StoreKind, WORKER_PIPELINE, keys_path};

const RUNS: usize = 200;

fn spawn(kind: StoreKind, url: &str, ns: &str, args: [&str; 5]) -> Worker {
    let [run_id, mode, lease, ledger, hold] = args;
    Worker::spawn(
        env!("CARGO_BIN_EXE_fluxio-worker"),
        [kind.name(), url, ns, run_id, mode, lease, ledger, hold],
    )
}

/// `stage run pid` for each line of the stages' key ledger.
fn attempts(ledger: &Path) -> Vec<(String, String, u32)> {
    std::fs::read_to_string(keys_path(&ledger.to_string_lossy()))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let stage = f.next()?;
            let key = f.next()?; // worker/<run>/<position>
            let _attempt = f.next()?;
            let pid = f.next()?.parse().ok()?;
            let run = key.split('/').nth(1)?;
            Some((stage.to_owned(), run.to_owned(), pid))
        })
        .collect()
}

fn completed(rt: &tokio::runtime::Runtime, store: &dyn fluxio::CheckpointStore) -> usize {
    let filter = RunFilter::new()
        .pipeline(WORKER_PIPELINE)
        .state(RunState::Completed)
        .limit(10_000);
    rt.block_on(store.list_runs(&filter))
        .expect("list")
        .runs
        .len()
}

fn four_workers_recover(kind: StoreKind, kill_one: bool) {
    let ns = namespace(&format!("mp_recover_{}", kind.name()));
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let url = kind.url();
    let store = match rt.block_on(kind.open(&url, &ns)) {
        Ok(store) => store,
        Err(e) => return skip_unless_ci(kind.name(), &e).unwrap_or(()),
    };
    // a directory per test: the tests run in parallel, and each deletes its own at the end
    let dir = std::env::temp_dir().join(format!(
        "fluxio-recover-{}-{}-{kill_one}",
        std::process::id(),
        kind.name()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let ledger = dir.join(format!("{}-{kill_one}.ledger", kind.name()));
    let _ = std::fs::remove_file(&ledger);
    let _ = std::fs::remove_file(keys_path(&ledger.to_string_lossy()));
    let ledger_arg = ledger.to_string_lossy().into_owned();

    // a worker holding 200 runs in s2 dies. Leases of seconds, not one: on
    // a loaded 2-core machine 200 runs' first writes (and the renewals of
    // 200 leases) queue long enough to lose a 1 s lease before s2.
    let spec = format!("r:{RUNS}");
    let mut dead = spawn(
        kind,
        &url,
        &ns,
        [&spec, "abandon", "5000", &ledger_arg, "s2=600000"],
    );
    if let Err(e) = dead.ready() {
        panic!("the abandoning worker failed: {e}");
    }
    dead.go();
    for _ in 0..RUNS {
        dead.expect(&["in s2"]);
    }
    let dead_pid = dead.pid();
    dead.kill();

    let mut workers: Vec<Worker> = (0..4)
        .map(|_| spawn(kind, &url, &ns, ["-", "recover", "10000", &ledger_arg, "-"]))
        .collect();
    for w in &workers {
        if let Err(e) = w.ready() {
            panic!("a recovery worker failed: {e}");
        }
    }
    workers.iter_mut().for_each(Worker::go);

    let deadline = Instant::now() + Duration::from_secs(240);
    let mut killed = None;
    if kill_one {
        // the first worker dies after it finished a few runs, or, when the
        // other three were quicker to claim them, once half the runs are
        // done (it may then hold runs in flight, or none)
        let pid = workers[0].pid();
        while attempts(&ledger)
            .iter()
            .filter(|(s, _, p)| s == "s3" && *p == pid)
            .count()
            < 5
            && completed(&rt, store.as_ref()) < RUNS / 2
        {
            assert!(
                Instant::now() < deadline,
                "worker {pid} finished no run, and half the runs are not done"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        workers[0].kill();
        killed = Some(workers.remove(0).pid());
    }
    while completed(&rt, store.as_ref()) < RUNS {
        assert!(
            Instant::now() < deadline,
            "{} of {RUNS} runs completed in 240 s",
            completed(&rt, store.as_ref())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut recovered_by_survivors = 0;
    for mut w in workers {
        w.send("stop");
        let (line, code) = w.outcome_and_exit();
        assert_eq!(code, Some(0), "{line}");
        let json: serde_json::Value =
            serde_json::from_str(line.trim_start_matches("ok ")).expect("json");
        recovered_by_survivors += json["recovered"].as_u64().expect("a count");
    }

    let lines = attempts(&ledger);
    let mut by_run: HashMap<&str, Vec<(&str, u32)>> = HashMap::new();
    for (stage, run, pid) in &lines {
        by_run.entry(run).or_default().push((stage, *pid));
    }
    assert_eq!(by_run.len(), RUNS, "every run ran");
    let mut finished_by_survivors = 0;
    let mut s3_twice = 0;
    for (run, ran) in &by_run {
        let of = |stage: &str| {
            ran.iter()
                .filter(|(s, _)| *s == stage)
                .map(|(_, p)| *p)
                .collect::<Vec<_>>()
        };
        assert_eq!(of("s1"), [dead_pid], "{run}: s1 ran once, before the crash");
        let s3 = of("s3");
        assert!(
            !s3.contains(&dead_pid),
            "{run}: s3 never ran before the crash"
        );
        let survivors = s3.iter().filter(|p| Some(**p) != killed).count();
        assert!(survivors <= 1, "{run}: s3 ran in {s3:?}");
        finished_by_survivors += survivors;
        match killed {
            None => {
                assert_eq!(s3.len(), 1, "{run}: resumed exactly once: {ran:?}");
                assert_eq!(
                    of("s2").len(),
                    2,
                    "{run}: s2 before the crash and once after"
                );
            }
            Some(k) => {
                assert!(!s3.is_empty(), "{run}: finished");
                if s3.len() == 2 {
                    assert!(
                        s3.contains(&k),
                        "{run}: only a killed worker's run runs again"
                    );
                    s3_twice += 1;
                }
            }
        }
    }
    assert_eq!(
        recovered_by_survivors, finished_by_survivors as u64,
        "each worker's count of the runs it recovered matches the ledger"
    );
    if killed.is_none() {
        assert_eq!(recovered_by_survivors, RUNS as u64);
    }
    assert!(
        s3_twice <= 16,
        "at most the killed worker's 16 in-flight runs ran s3 again"
    );
    eprintln!(
        "{}: rule 22, {RUNS} abandoned runs, 4 workers{}: {} recovered by {}, s3 repeated for {s3_twice}",
        kind.name(),
        if kill_one { " (one killed midway)" } else { "" },
        finished_by_survivors,
        if kill_one {
            "the 3 survivors"
        } else {
            "the 4 workers"
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rule22_redis_four_worker_processes_recover_200_abandoned_runs_once_each() {
    four_workers_recover(StoreKind::Redis, false);
}

#[test]
fn rule22_postgres_four_worker_processes_recover_200_abandoned_runs_once_each() {
    four_workers_recover(StoreKind::Postgres, false);
}

#[test]
fn rule22_sqlite_four_worker_processes_recover_200_abandoned_runs_once_each() {
    four_workers_recover(StoreKind::Sqlite, false);
}

#[test]
fn rule22_redis_a_killed_recovery_workers_runs_are_finished_by_the_others() {
    four_workers_recover(StoreKind::Redis, true);
}

#[test]
fn rule22_postgres_a_killed_recovery_workers_runs_are_finished_by_the_others() {
    four_workers_recover(StoreKind::Postgres, true);
}

#[test]
fn rule22_sqlite_a_killed_recovery_workers_runs_are_finished_by_the_others() {
    four_workers_recover(StoreKind::Sqlite, true);
}

#[test]
fn rule22_mysql_four_worker_processes_recover_200_abandoned_runs_once_each() {
    four_workers_recover(StoreKind::MySql, false);
}

#[test]
fn rule22_mysql_a_killed_recovery_workers_runs_are_finished_by_the_others() {
    four_workers_recover(StoreKind::MySql, true);
}
