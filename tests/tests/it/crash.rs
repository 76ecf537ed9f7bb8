//! The crash-test harness: real processes killed with SIGKILL at random
//! moments, on every persistent store.
//!
//! For each run, a worker process (`fluxio-crash-worker`) starts the crash
//! pipeline; the harness kills it after a random delay (a seeded RNG; the
//! seed is printed, `FLUXIO_CRASH_SEED` replays it), then resumes with a new
//! process, and repeats until the run completes. Every stage attempt is
//! appended to a ledger file (`O_APPEND`): `run_id stage attempt pid`.
//! Then it checks:
//!
//! 1. the final context equals an uninterrupted run's;
//! 2. no step whose successor's checkpoint was committed ran again;
//! 3. only the step that was running when a process died (or failed) ran
//!    again, once per death, with the next attempt number;
//! 4. a stage error leaves an error checkpoint at that stage, and no run is
//!    left locked: after a kill, a resume wins once the lease lapses;
//! 5. (rule 21) after every kill, stage error and completion, listing the
//!    harness pipeline's runs agrees with `load` of every run started so
//!    far: the same runs, each with the status, step, attempt and version
//!    of its latest checkpoint. A store whose `list_runs` answers
//!    `Unsupported` skips this check, saying so loudly.
//!
//! It runs in each durability mode (rule 24), with that mode's guarantee:
//! Sync as above; Async and Exit may re-run steps back to the last
//! acknowledged checkpoint (Exit: the start, or the failed stage) but never
//! skip one, their attempts are not checked against a count, and Exit may
//! leave nothing stored after a kill. In every mode an acknowledged
//! completion is stored, and an acknowledged stage error left its failed
//! checkpoint.
//!
//! `FLUXIO_CRASH_ITERATIONS` (default 20 per store in Sync, 8 in the other
//! modes) sets the number of runs.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fluxio::store::{CheckpointStore, RunFilter, RunState, RunStatus, run_key};
use fluxio::{Durability, Error};
use fluxio_test_support::{namespace, skip_unless_ci};
use fluxio_tests::process::{OUTCOMES, Rng, Worker};
use fluxio_tests::{CRASH_PIPELINE, CRASH_STEPS_X, StoreKind};

const LEASE_MS: u64 = 250;

#[allow(clippy::too_many_arguments)]
fn spawn(
    kind: StoreKind,
    url: &str,
    ns: &str,
    run_id: &str,
    mode: &str,
    ledger: &Path,
    durability: Durability,
) -> Worker {
    let (lease, ledger) = (LEASE_MS.to_string(), ledger.to_string_lossy());
    Worker::spawn(
        env!("CARGO_BIN_EXE_fluxio-crash-worker"),
        [
            kind.name(),
            url,
            ns,
            run_id,
            mode,
            &lease,
            &ledger,
            durability.as_str(),
        ],
    )
}

#[derive(Debug, Clone)]
struct Entry {
    stage: String,
    attempt: u32,
    pid: u32,
}

fn read_ledger(path: &Path, run_id: &str) -> Vec<Entry> {
    // stages see the run by its key, `crash/<run id>`
    let key = run_key(CRASH_PIPELINE, run_id);
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split(' ').collect();
            (parts.len() == 4 && parts[0] == key).then(|| Entry {
                stage: parts[1].to_owned(),
                attempt: parts[2].parse().unwrap_or(0),
                pid: parts[3].parse().unwrap_or(0),
            })
        })
        .collect()
}

fn step_of(stage: &str) -> usize {
    CRASH_STEPS_X
        .iter()
        .position(|s| s.contains(&stage))
        .unwrap_or_else(|| panic!("unknown stage {stage}"))
}

/// How one process ended.
#[derive(Debug, PartialEq)]
enum End {
    Killed,
    StageError,
    Completed,
}

/// Checks rules 2 and 3 on the ledger of one run: the processes' step ranges
/// are contiguous, each starts where the previous one stopped (the step that
/// was running, or the next one if the previous died right after committing
/// its checkpoint), and attempts count up on every re-run.
fn check_ledger(entries: &[Entry], processes: &[(u32, End)], durability: Durability, ctx: &str) {
    let mut ranges: Vec<(u32, usize, usize)> = Vec::new(); // pid, first step, last step
    for (pid, _) in processes {
        let steps: Vec<usize> = entries
            .iter()
            .filter(|e| e.pid == *pid)
            .map(|e| step_of(&e.stage))
            .collect();
        if let (Some(first), Some(last)) = (steps.first(), steps.iter().max()) {
            for w in steps.windows(2) {
                assert!(
                    w[1] == w[0] || w[1] == w[0] + 1,
                    "{ctx}: pid {pid} skipped or went back: {steps:?}"
                );
            }
            ranges.push((*pid, *first, *last));
        }
    }
    assert_eq!(
        ranges.first().map(|r| r.1),
        Some(0),
        "{ctx}: the run starts at the first step"
    );
    assert_eq!(
        ranges.last().map(|r| r.2),
        Some(CRASH_STEPS_X.len() - 1),
        "{ctx}: the run reaches the last step"
    );
    for w in ranges.windows(2) {
        let ((p, _, last), (q, first, _)) = (w[0], w[1]);
        // Sync: a process starts at the step that was running or the next
        // one; Async and Exit (rule 24) may go back further (to the last
        // acknowledged checkpoint, or the start), but never skip a step
        let sync = durability == Durability::Sync;
        assert!(
            first == last || first == last + 1 || (!sync && first <= last),
            "{ctx}: pid {q} started at step {first}, but pid {p} stopped in step {last}: \
             a step whose successor's checkpoint was committed ran again, or a step was skipped"
        );
    }
    if durability != Durability::Sync {
        // a stage re-run from an older checkpoint counts its attempts from
        // that checkpoint's: only Sync's attempts grow by one per re-run
        return;
    }
    // attempts grow with every re-run: strictly increasing per stage, and
    // never above the number of processes of the run. (A process killed after
    // committing a step's checkpoint but before the stage logged has used an
    // attempt the ledger does not show, so attempts may skip.)
    let mut seen: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for e in entries {
        seen.entry(&e.stage).or_default().push(e.attempt);
    }
    for (stage, attempts) in &seen {
        assert!(
            attempts.first().is_some_and(|a| *a >= 1),
            "{ctx}: attempts of {stage} start at 1 or later: {attempts:?}"
        );
        assert!(
            attempts.windows(2).all(|w| w[1] > w[0]),
            "{ctx}: attempts of {stage} grow: {attempts:?}"
        );
        assert!(
            attempts
                .last()
                .is_some_and(|a| *a as usize <= processes.len()),
            "{ctx}: {stage} reached attempt {attempts:?} in a run of {} processes",
            processes.len()
        );
    }
}

/// The runs the harness started, for the listing check (rule 21).
struct Listing {
    /// Their keys, `crash/<run id>`.
    keys: Vec<String>,
    /// `false` once the store answered `Unsupported`.
    supported: bool,
    /// How many times the listing was checked.
    checks: usize,
}

impl Listing {
    /// Rule 21 after a crash: `list_runs` of the crash pipeline (every
    /// page, two runs a page) names exactly the runs of `self.keys` that
    /// `load` finds, each with its latest checkpoint's status (running for
    /// running and abandoned), step, attempt and version. The loads are
    /// read before and after the listing, and the check is made when both
    /// agree (a write of the killed worker that the server was still
    /// applying is then over).
    fn check(&mut self, store: &Arc<dyn CheckpointStore>, rt: &tokio::runtime::Runtime, ctx: &str) {
        if !self.supported {
            return;
        }
        let loads = || {
            rt.block_on(async {
                let mut stored = BTreeMap::new();
                for key in &self.keys {
                    if let Some(cp) = store.load(key).await.expect("load") {
                        stored.insert(
                            key.clone(),
                            (cp.status, cp.step.clone(), cp.attempt, cp.version.clone()),
                        );
                    }
                }
                stored
            })
        };
        for _ in 0..10 {
            let before = loads();
            let mut filter = RunFilter::new().pipeline(CRASH_PIPELINE).limit(2);
            let mut listed = BTreeMap::new();
            loop {
                let page = match rt.block_on(store.list_runs(&filter)) {
                    Ok(page) => page,
                    Err(Error::Unsupported { store, .. }) => {
                        eprintln!(
                            "!!! crash harness: {store} does not list runs (Unsupported): \
                             the rule 21 listing check is SKIPPED for this store !!!"
                        );
                        self.supported = false;
                        return;
                    }
                    Err(e) => panic!("{ctx}: list_runs: {e}"),
                };
                for run in page.runs {
                    let status = match run.state {
                        RunState::Running | RunState::Abandoned => RunStatus::Running,
                        RunState::Failed => RunStatus::Failed,
                        RunState::Completed => RunStatus::Completed,
                        RunState::Cancelled => RunStatus::Cancelled,
                        RunState::NeedsAttention => RunStatus::NeedsAttention,
                        other => panic!("{ctx}: a state this harness does not know: {other:?}"),
                    };
                    listed.insert(run.key, (status, run.step, run.attempt, run.version));
                }
                match page.next {
                    Some(next) => filter = filter.after(next),
                    None => break,
                }
            }
            if loads() == before {
                assert_eq!(
                    listed, before,
                    "{ctx}: the listing disagrees with the checkpoints after a crash (rule 21)"
                );
                self.checks += 1;
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{ctx}: the runs kept changing after their worker was killed");
    }
}

fn harness(kind: StoreKind, durability: Durability) {
    // Sync is the default and the most checked; the other modes run fewer
    // (`FLUXIO_CRASH_ITERATIONS` sets all)
    let iterations: u64 = std::env::var("FLUXIO_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if durability == Durability::Sync {
            20
        } else {
            8
        });
    let seed: u64 = std::env::var("FLUXIO_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    eprintln!(
        "crash harness on {} ({durability}): seed {seed} (replay with FLUXIO_CRASH_SEED={seed}), {iterations} runs",
        kind.name()
    );
    let ns = namespace(&format!("crash_{}_{durability}", kind.name()));
    let url = kind.url();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let store: Arc<dyn CheckpointStore> = match rt.block_on(kind.open(&url, &ns)) {
        Ok(s) => s,
        Err(e) => {
            let _: Option<()> = skip_unless_ci(kind.name(), &e);
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!(
        "fluxio-crash-{}-{durability}-{}",
        kind.name(),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut rng = Rng(seed);
    let mut listing = Listing {
        keys: Vec::new(),
        supported: true,
        checks: 0,
    };

    // the reference: one uninterrupted run (its first c4 attempt fails, then a resume)
    let reference = run_to_completion(
        kind,
        &url,
        &ns,
        "reference",
        &dir.join("reference.ledger"),
        &store,
        &rt,
        &mut rng,
        false,
        seed,
        &mut listing,
        durability,
    );

    let (mut kills, mut errors, mut kept) = (0usize, 0usize, 0usize);
    for i in 0..iterations {
        let run_id = format!("crash-{i}");
        let ledger = dir.join(format!("{run_id}.ledger"));
        let (out, k, e, b) = run_to_completion(
            kind,
            &url,
            &ns,
            &run_id,
            &ledger,
            &store,
            &rt,
            &mut rng,
            true,
            seed,
            &mut listing,
            durability,
        );
        assert_eq!(
            out, reference.0,
            "seed {seed}, {run_id}: the final context equals an uninterrupted run's"
        );
        kills += k;
        errors += e;
        kept += b;
    }
    eprintln!(
        "crash harness on {} ({durability}): {iterations} runs, {kills} kills, {errors} stage errors, \
         {kept} finished branches found recorded after a kill (none of them ran again), \
         the listing checked against the checkpoints {} times{}, all checks passed (seed {seed})",
        kind.name(),
        listing.checks,
        if listing.supported {
            ""
        } else {
            " (then SKIPPED: the store does not list)"
        }
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `run_id` until it completes, killing workers at random moments when
/// `kill` is set. Returns the final context JSON, the number of kills, of
/// stage errors, and of kills that found a finished branch of the parallel
/// block recorded (rule 19: such a branch must never run again).
#[allow(clippy::too_many_arguments)]
fn run_to_completion(
    kind: StoreKind,
    url: &str,
    ns: &str,
    run_id: &str,
    ledger: &Path,
    store: &Arc<dyn CheckpointStore>,
    rt: &tokio::runtime::Runtime,
    rng: &mut Rng,
    kill: bool,
    seed: u64,
    listing: &mut Listing,
    durability: Durability,
) -> (String, usize, usize, usize) {
    let ctx = format!("seed {seed}, {} ({durability}) run {run_id}", kind.name());
    listing.keys.push(run_key(CRASH_PIPELINE, run_id));
    let mut processes: Vec<(u32, End)> = Vec::new();
    let (mut kills, mut errors) = (0, 0);
    // branch stage -> its ledger entries when its record was seen committed
    let mut recorded: BTreeMap<String, usize> = BTreeMap::new();
    let started = Instant::now();
    let mut mode = "invoke";
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{ctx}: the run did not complete in 120 s: {processes:?}"
        );
        let mut worker = spawn(kind, url, ns, run_id, mode, ledger, durability);
        if let Err(e) = worker.ready() {
            panic!("{ctx}: worker failed to start: {e}");
        }
        worker.go();
        let pid = worker.pid();
        // the pipeline takes ~150 ms; kill somewhere in [0, 150) ms
        let delay = if kill {
            Some(Duration::from_millis(rng.below(150)))
        } else {
            None
        };
        let outcome = match delay {
            Some(d) => worker.next_of(OUTCOMES, d),
            None => worker.next_of(OUTCOMES, Duration::from_secs(60)),
        };
        match outcome {
            None => {
                worker.kill();
                kills += 1;
                processes.push((pid, End::Killed));
                let cp = rt
                    .block_on(store.load(&run_key(CRASH_PIPELINE, run_id)))
                    .expect("load");
                let entries = read_ledger(ledger, run_id);
                mode = match (&cp, durability) {
                    (Some(_), _) => "resume",
                    // rule 24: an Exit run that has not failed stores
                    // nothing while it runs; `invoke` starts it again
                    (None, Durability::Exit) => "invoke",
                    // Sync and Async write the first checkpoint with the
                    // lease, before the first stage
                    (None, _) => {
                        assert!(
                            entries.is_empty(),
                            "{ctx}: stages ran but no checkpoint was stored: {entries:?}"
                        );
                        "resume"
                    }
                };
                for record in cp.iter().flat_map(|cp| &cp.branches) {
                    let ran = entries.iter().filter(|e| e.stage == record.name).count();
                    recorded.entry(record.name.clone()).or_insert(ran);
                }
                listing.check(store, rt, &ctx);
            }
            Some(line) if line.starts_with("ok ") => {
                processes.push((pid, End::Completed));
                // rule 24, every mode: an acknowledged completion is stored
                let cp = rt
                    .block_on(store.load(&run_key(CRASH_PIPELINE, run_id)))
                    .expect("load")
                    .expect("a completed run is stored");
                assert_eq!(
                    cp.status,
                    RunStatus::Completed,
                    "{ctx}: the completion is stored"
                );
                listing.check(store, rt, &ctx);
                let entries = read_ledger(ledger, run_id);
                check_ledger(&entries, &processes, durability, &ctx);
                for (stage, ran) in &recorded {
                    let now = entries.iter().filter(|e| e.stage == *stage).count();
                    assert_eq!(
                        now, *ran,
                        "{ctx}: branch `{stage}` ran again after its record was committed \
                         (rule 19): {processes:?}"
                    );
                }
                return (
                    line["ok ".len()..].to_owned(),
                    kills,
                    errors,
                    recorded.len(),
                );
            }
            Some(line) if line == "in_use" => {
                // the killed owner's lease has not lapsed yet: no run is locked forever
                std::thread::sleep(Duration::from_millis(LEASE_MS / 2));
                mode = "resume";
            }
            Some(line)
                if line.starts_with("error") && line.contains("fails on its first attempt") =>
            {
                errors += 1;
                processes.push((pid, End::StageError));
                let cp = rt
                    .block_on(store.load(&run_key(CRASH_PIPELINE, run_id)))
                    .expect("load")
                    .expect("a failure leaves a checkpoint");
                assert!(
                    cp.is_failed(),
                    "{ctx}: the stage error left an error checkpoint"
                );
                assert_eq!(
                    (cp.step.as_str(), cp.attempt),
                    ("c4", 1),
                    "{ctx}: the error checkpoint points at c4"
                );
                listing.check(store, rt, &ctx);
                mode = "resume";
            }
            Some(line) if line.starts_with("error no checkpoint found") => {
                // killed before its first checkpoint: the run never started
                // (Exit, rule 24: nothing is stored before the run's end);
                // start it again
                assert!(
                    durability == Durability::Exit || read_ledger(ledger, run_id).is_empty(),
                    "{ctx}: stages ran but no checkpoint was stored"
                );
                mode = "invoke";
            }
            Some(other) => panic!("{ctx}: unexpected outcome {other:?}"),
        }
    }
}

#[test]
fn crash_harness_on_redis() {
    harness(StoreKind::Redis, Durability::Sync);
}

/// On a Redis Cluster: three local masters, started once for this test
/// binary; each worker connects with `RedisStore::cluster_builder`.
#[test]
fn crash_harness_on_redis_cluster() {
    harness(StoreKind::RedisCluster, Durability::Sync);
}

/// Async durability on the Redis Cluster: checkpoints written in the
/// background may be lost with the process, never a step skipped.
#[test]
fn rule24_crash_harness_async_on_redis_cluster() {
    harness(StoreKind::RedisCluster, Durability::Async);
}

#[test]
fn crash_harness_on_postgres() {
    harness(StoreKind::Postgres, Durability::Sync);
}

#[test]
fn crash_harness_on_sqlite() {
    harness(StoreKind::Sqlite, Durability::Sync);
}

#[test]
fn rule24_crash_harness_async_on_redis() {
    harness(StoreKind::Redis, Durability::Async);
}

#[test]
fn rule24_crash_harness_async_on_postgres() {
    harness(StoreKind::Postgres, Durability::Async);
}

#[test]
fn rule24_crash_harness_async_on_sqlite() {
    harness(StoreKind::Sqlite, Durability::Async);
}

#[test]
fn rule24_crash_harness_exit_on_redis() {
    harness(StoreKind::Redis, Durability::Exit);
}

#[test]
fn rule24_crash_harness_exit_on_postgres() {
    harness(StoreKind::Postgres, Durability::Exit);
}

#[test]
fn rule24_crash_harness_exit_on_sqlite() {
    harness(StoreKind::Sqlite, Durability::Exit);
}

#[test]
fn crash_harness_on_mysql() {
    harness(StoreKind::MySql, Durability::Sync);
}

#[test]
fn rule24_crash_harness_async_on_mysql() {
    harness(StoreKind::MySql, Durability::Async);
}

#[test]
fn rule24_crash_harness_exit_on_mysql() {
    harness(StoreKind::MySql, Durability::Exit);
}
