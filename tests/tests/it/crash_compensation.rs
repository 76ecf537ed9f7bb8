//! The crash harness for compensation (contract rule 35): real worker
//! processes killed with SIGKILL at random moments while a saga runs, fails
//! for good and undoes its stages, on every persistent store.
//!
//! The saga (`fluxio-saga-worker`) runs `s1`, `s2`, `s3` (compensated by
//! `u1`, `u2`, `u3`) and `refuse`, which returns a `TerminalError`. A
//! process starts the run; the harness kills it after a random delay (a
//! seeded RNG; `FLUXIO_CRASH_SEED` replays a seed) and spawns processes
//! that resume it, killing them too, until one reports the run failed for
//! good. Each body appends its start and end, with its idempotency key, to
//! a ledger file outside the store; after each kill the harness appends
//! which compensator the store says runs next. Then it checks:
//!
//! 1. the run is failed for good with its compensation done: `u3`, `u2`,
//!    `u1`, in that order;
//! 2. each compensator's body ran to its end at least once;
//! 3. no compensator started again once the store recorded it completed
//!    (no stage is compensated twice after its compensator completed);
//! 4. every run of a compensator had the same idempotency key, its own
//!    (`.../compensate`), and each ran at most once per kill plus one.
//!
//! `FLUXIO_CRASH_ITERATIONS` (default 4 per store) sets the number of runs.

use std::path::Path;
use std::time::{Duration, Instant};

use fluxio::store::run_key;
use fluxio_tests::StoreKind;
use fluxio_tests::process::{Rng, Scene, Worker};

const LEASE_MS: u64 = 250;

/// The compensators, in the order they run.
const UNDO: [&str; 3] = ["u3", "u2", "u1"];

fn append(ledger: &Path, line: &str) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(ledger)
        .expect("the ledger opens");
    f.write_all(format!("{line}\n").as_bytes())
        .expect("the ledger is written");
}

/// Drives the run `run_id` until a process reports it failed for good;
/// returns how many processes were killed.
fn drive(scene: &Scene, kind: StoreKind, run_id: &str, ledger: &Path, rng: &mut Rng) -> usize {
    let key = run_key("sagas", run_id);
    let lease = LEASE_MS.to_string();
    let ledger_arg = ledger.to_string_lossy().into_owned();
    let started = Instant::now();
    let mut kills = 0;
    let mut mode = "start";
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{run_id}: stuck after {kills} kills"
        );
        let mut worker = Worker::spawn(
            env!("CARGO_BIN_EXE_fluxio-saga-worker"),
            [
                kind.name(),
                &scene.url,
                &scene.ns,
                run_id,
                mode,
                &lease,
                &ledger_arg,
            ],
        );
        if let Err(e) = worker.ready() {
            panic!("{run_id}: a worker did not start: {e}");
        }
        worker.go();
        // at most a dozen kills, so that every run ends
        let kill_after = (kills < 12).then(|| Duration::from_millis(rng.below(90)));
        let within = kill_after.unwrap_or(Duration::from_secs(60));
        match worker
            .next_of(&["ok", "in_use", "error"], within)
            .as_deref()
        {
            Some("ok") => return kills,
            Some("in_use") => std::thread::sleep(Duration::from_millis(LEASE_MS / 2)),
            Some(other) => panic!("{run_id}: a worker printed {other:?}"),
            None if kill_after.is_some() => {
                worker.kill();
                kills += 1;
                // what the store says completed, against the ledger so far
                let cp = scene.rt.block_on(scene.store.load(&key)).expect("load");
                if let Some(c) = cp.and_then(|cp| cp.compensation) {
                    append(ledger, &format!("# next {}", c.next));
                }
                // its lease runs out before the next process resumes it
                std::thread::sleep(Duration::from_millis(LEASE_MS + 20));
            }
            None => panic!("{run_id}: a worker printed nothing in 60 s"),
        }
        let stored = scene.rt.block_on(scene.store.exists(&key)).expect("exists");
        mode = if stored { "resume" } else { "start" };
    }
}

/// The checks 2-4 of the module docs over the ledger of a run killed
/// `kills` times; returns how many compensator bodies a kill cut short.
fn check_ledger(run_id: &str, ledger: &Path, kills: usize) -> usize {
    let text = std::fs::read_to_string(ledger).expect("the ledger");
    let mut recorded_done = 0usize;
    let mut keys: [Option<String>; 3] = [None, None, None];
    let mut starts = [0usize; 3];
    let mut ends = [0usize; 3];
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("# next ") {
            recorded_done = recorded_done.max(n.parse().expect("a count"));
            continue;
        }
        let parts: Vec<&str> = line.split(' ').collect();
        let [name, what, key, _pid] = parts[..] else {
            panic!("{run_id}: a malformed ledger line {line:?}");
        };
        let Some(i) = UNDO.iter().position(|u| *u == name) else {
            continue;
        };
        assert!(
            key.ends_with("/compensate"),
            "{run_id}: {name} ran with the key {key}"
        );
        match &keys[i] {
            Some(k) => assert_eq!(k, key, "{run_id}: {name} ran with two keys"),
            None => keys[i] = Some(key.to_owned()),
        }
        if what == "start" {
            assert!(
                i >= recorded_done,
                "{run_id}: {name} started again after the store recorded it completed:\n{text}"
            );
            starts[i] += 1;
        } else {
            ends[i] += 1;
        }
    }
    for (i, name) in UNDO.iter().enumerate() {
        assert!(
            ends[i] >= 1,
            "{run_id}: {name} never ran to its end:\n{text}"
        );
        assert!(
            starts[i] <= kills + 1,
            "{run_id}: {name} started {} times with {kills} kills:\n{text}",
            starts[i]
        );
    }
    let distinct: std::collections::BTreeSet<_> = keys.iter().flatten().collect();
    assert_eq!(distinct.len(), 3, "{run_id}: each compensator its own key");
    starts.iter().sum::<usize>() - ends.iter().sum::<usize>().min(starts.iter().sum())
}

fn harness(kind: StoreKind) {
    let Some(scene) = Scene::open(kind, "saga", "crash_saga") else {
        return;
    };
    let seed = std::env::var("FLUXIO_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64)
                | 1
        });
    let iterations: usize = std::env::var("FLUXIO_CRASH_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    println!(
        "compensation crash harness on {}: FLUXIO_CRASH_SEED={seed}",
        kind.name()
    );
    let mut rng = Rng(seed);
    let (mut total_kills, mut cut_short) = (0, 0);
    for i in 0..iterations {
        let run_id = format!("saga-{i}");
        let ledger = scene.dir.join(format!("ledger-{i}"));
        let _ = std::fs::remove_file(&ledger);
        let kills = drive(&scene, kind, &run_id, &ledger, &mut rng);
        total_kills += kills;
        let key = run_key("sagas", &run_id);
        let cp = scene
            .rt
            .block_on(scene.store.load(&key))
            .expect("load")
            .expect("stored");
        assert!(cp.is_failed_for_good(), "{run_id} (seed {seed}): {cp:?}");
        let comp = cp.compensation.expect("compensated");
        assert!(comp.is_done(), "{run_id} (seed {seed}): {comp:?}");
        let names: Vec<&str> = comp.steps.iter().map(|s| s.compensator.as_str()).collect();
        assert_eq!(names, UNDO, "{run_id} (seed {seed})");
        cut_short += check_ledger(&format!("{run_id} (seed {seed})"), &ledger, kills);
    }
    println!(
        "{iterations} sagas on {}, {total_kills} processes killed ({cut_short} inside a compensator): \
         every compensator ran to its end, none again after it was recorded",
        kind.name()
    );
    let _ = std::fs::remove_dir_all(&scene.dir);
}

#[test]
fn rule35_compensation_crash_harness_on_sqlite() {
    harness(StoreKind::Sqlite);
}

#[test]
fn rule35_compensation_crash_harness_on_postgres() {
    harness(StoreKind::Postgres);
}

#[test]
fn rule35_compensation_crash_harness_on_mysql() {
    harness(StoreKind::MySql);
}

#[test]
fn rule35_compensation_crash_harness_on_redis() {
    harness(StoreKind::Redis);
}
