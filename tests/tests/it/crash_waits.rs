//! The crash harness for runs that wait (contract rules 25-27): real worker
//! processes killed with SIGKILL at random moments while a run sleeps,
//! wakes, waits, takes its signal and finishes, on every persistent store.
//!
//! For each run, a process starts it (`fluxio-waits-worker ... start`): it
//! runs `w1` and parks at a 100 ms sleep. The harness signals the run's
//! wait (`go`) at a random moment: before the run reaches the wait (the
//! mailbox keeps it), or while it waits. Worker processes
//! (`... work`: a `RecoveryWorker` of the pipeline) wake the run, run `w2`,
//! take the signal at the wait, and run `w3` and `w4`. The harness kills
//! the start process and the workers after random delays (a seeded RNG;
//! `FLUXIO_CRASH_SEED` replays a seed) and spawns new ones until the run
//! completes. Every stage attempt is appended to a ledger file outside the
//! store. Then it checks:
//!
//! 1. the final context equals an uninterrupted run's (the signalled route);
//! 2. no stage ran again once a later step's checkpoint was committed: each
//!    time a process is killed or parks the run, the step the store holds
//!    is noted, and no ledger entry written after it is of an earlier stage
//!    (a woken run never repeats `w1`, a signalled one never `w2`);
//! 3. each stage's attempts grow with every re-run and never pass the kills
//!    plus one (waking a run is not an attempt), and each stage ran at most
//!    once per process, and at most once per kill plus one;
//! 4. the wait took the harness's one signal: the mailbox holds it
//!    consumed, and a second, different signal is refused as a conflict.
//!
//! `FLUXIO_CRASH_ITERATIONS` (default 6 per store) sets the number of runs.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fluxio::store::{CheckpointStore, SignalState, run_key};
use fluxio::{Error, Pipeline};
use fluxio_test_support::{namespace, skip_unless_ci};
use fluxio_tests::process::{Rng, Worker};
use fluxio_tests::{StoreKind, WAITS_PIPELINE, WAITS_STEPS, waits_pipeline};

const LEASE_MS: u64 = 250;

/// What a waits worker prints last.
const ENDS: &[&str] = &["ok", "parked", "in_use", "error"];

/// One line of the ledger: the stage, its attempt and the process.
#[derive(Debug, Clone)]
struct Entry {
    stage: String,
    attempt: u32,
    pid: u32,
}

fn read_ledger(path: &Path, run_id: &str) -> Vec<Entry> {
    let key = run_key(WAITS_PIPELINE, run_id);
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

/// The place of a step (a stage or a checkpoint's step name) in the run.
fn place(step: &str) -> usize {
    if step.is_empty() {
        return WAITS_STEPS.len();
    }
    WAITS_STEPS
        .iter()
        .position(|s| *s == step)
        .unwrap_or_else(|| panic!("unknown step {step}"))
}

/// The run and its store, as the harness drives them.
struct Run<'a> {
    kind: StoreKind,
    url: &'a str,
    ns: &'a str,
    run_id: String,
    ledger: std::path::PathBuf,
    store: &'a Arc<dyn CheckpointStore>,
    pipeline: &'a Pipeline,
    rt: &'a tokio::runtime::Runtime,
    ctx: String,
    /// (ledger length, place of the step stored) at each kill or park.
    marks: Vec<(usize, usize)>,
    /// Processes spawned, and how many were killed.
    processes: usize,
    kills: usize,
}

impl Run<'_> {
    fn spawn(&mut self, mode: &str) -> Worker {
        let lease = LEASE_MS.to_string();
        let ledger = self.ledger.to_string_lossy().into_owned();
        let mut worker = Worker::spawn(
            env!("CARGO_BIN_EXE_fluxio-waits-worker"),
            [
                self.kind.name(),
                self.url,
                self.ns,
                &self.run_id,
                mode,
                &lease,
                &ledger,
            ],
        );
        if let Err(e) = worker.ready() {
            panic!("{}: worker failed to start: {e}", self.ctx);
        }
        worker.go();
        self.processes += 1;
        worker
    }

    /// Notes the step the store holds now, against the ledger so far.
    fn mark(&mut self) {
        let key = run_key(WAITS_PIPELINE, &self.run_id);
        let cp = self.rt.block_on(self.store.load(&key)).expect("load");
        let at = cp.map_or(0, |cp| place(&cp.step));
        let len = read_ledger(&self.ledger, &self.run_id).len();
        self.marks.push((len, at));
    }

    /// Runs `mode` until it prints an end, killed after `kill_after` when
    /// given. Returns the line, or `None` when it was killed.
    fn once(&mut self, mode: &str, kill_after: Option<Duration>) -> Option<String> {
        let mut worker = self.spawn(mode);
        let within = kill_after.unwrap_or(Duration::from_secs(90));
        match worker.next_of(ENDS, within) {
            Some(line) => Some(line),
            None if kill_after.is_some() => {
                worker.kill();
                self.kills += 1;
                self.mark();
                None
            }
            None => panic!("{}: `{mode}` printed nothing in 90 s", self.ctx),
        }
    }

    fn signal(&self, value: u64) -> fluxio::Result<fluxio::store::Delivery> {
        self.rt
            .block_on(self.pipeline.signal(&self.run_id, "go", &value))
    }
}

/// Drives one run to its end; returns the final context's JSON.
fn drive(run: &mut Run<'_>, rng: &mut Rng, kill: bool) -> String {
    let started = Instant::now();
    let kill_after =
        |rng: &mut Rng, most: u64| kill.then(|| Duration::from_millis(rng.below(most)));
    // start it: until a start process parks it (or, killed, leaves it
    // stored for the workers)
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{}: stuck starting",
            run.ctx
        );
        let delay = kill_after(rng, 60);
        match run.once("start", delay).as_deref() {
            None => {
                let key = run_key(WAITS_PIPELINE, &run.run_id);
                if run.rt.block_on(run.store.exists(&key)).expect("exists") {
                    break;
                }
            }
            Some(line) if line.starts_with("parked") => {
                run.mark();
                break;
            }
            Some("in_use") => std::thread::sleep(Duration::from_millis(LEASE_MS / 2)),
            Some(other) => panic!("{}: start printed {other:?}", run.ctx),
        }
    }
    // the signal: now, before any worker (the mailbox keeps it until the
    // run reaches its wait), or from another thread while workers run
    let later = match rng.below(2) {
        0 => {
            run.signal(7)
                .unwrap_or_else(|e| panic!("{}: the signal was refused: {e}", run.ctx));
            None
        }
        _ => Some(Duration::from_millis(rng.below(400))),
    };
    let (pipeline, run_id, rt) = (run.pipeline.clone(), run.run_id.clone(), run.rt);
    std::thread::scope(|scope| {
        let signaller = later.map(|delay| {
            scope.spawn(move || {
                std::thread::sleep(delay);
                rt.block_on(pipeline.signal(&run_id, "go", &7u64))
            })
        });
        let out = loop {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{}: the run did not complete",
                run.ctx
            );
            let delay = kill_after(rng, 300);
            match run.once("work", delay).as_deref() {
                None => {}
                Some(line) if line.starts_with("ok ") => {
                    run.mark();
                    break line["ok ".len()..].to_owned();
                }
                Some(other) => panic!("{}: a worker printed {other:?}", run.ctx),
            }
        };
        if let Some(signaller) = signaller {
            let sent = signaller.join().expect("the signaller does not panic");
            assert!(
                sent.is_ok(),
                "{}: the signal was refused: {sent:?}",
                run.ctx
            );
        }
        out
    })
}

/// Checks 2 and 3 on the run's ledger.
fn check_ledger(run: &Run<'_>) {
    let entries = read_ledger(&run.ledger, &run.run_id);
    for (len, at) in &run.marks {
        for e in &entries[(*len).min(entries.len())..] {
            assert!(
                place(&e.stage) >= *at,
                "{}: {} ran again after the store held step {} (rule 2): {entries:?}",
                run.ctx,
                e.stage,
                WAITS_STEPS[(*at).min(WAITS_STEPS.len() - 1)]
            );
        }
    }
    for stage in ["w1", "w2", "w3", "w4"] {
        let attempts: Vec<u32> = entries
            .iter()
            .filter(|e| e.stage == stage)
            .map(|e| e.attempt)
            .collect();
        assert!(
            !attempts.is_empty(),
            "{}: {stage} never ran: {entries:?}",
            run.ctx
        );
        // a process killed after committing a stage's checkpoint but
        // before the stage logged used an attempt the ledger does not show
        assert!(
            attempts[0] >= 1 && attempts.iter().all(|a| *a as usize <= run.kills + 1),
            "{}: the attempts of {stage} are 1 to the kills + 1: {entries:?}",
            run.ctx
        );
        assert!(
            attempts.windows(2).all(|w| w[1] > w[0]),
            "{}: the attempts of {stage} grow: {entries:?}",
            run.ctx
        );
        let pids: Vec<u32> = entries
            .iter()
            .filter(|e| e.stage == stage)
            .map(|e| e.pid)
            .collect();
        let mut unique = pids.clone();
        unique.dedup();
        assert_eq!(
            pids, unique,
            "{}: {stage} ran twice in one process: {entries:?}",
            run.ctx
        );
        assert!(
            attempts.len() <= run.kills + 1,
            "{}: {stage} ran {} times with {} kills",
            run.ctx,
            attempts.len(),
            run.kills
        );
    }
    assert!(
        !entries.iter().any(|e| e.stage == "w3t"),
        "{}: the wait timed out though it was signalled",
        run.ctx
    );
}

/// Check 4: the one signal was taken, and another payload is a conflict.
fn check_signal(run: &Run<'_>) {
    let key = run_key(WAITS_PIPELINE, &run.run_id);
    let mailbox = run.rt.block_on(run.store.signals(&key)).expect("signals");
    assert_eq!(mailbox.len(), 1, "{}: {mailbox:?}", run.ctx);
    assert_eq!(mailbox[0].state, SignalState::Consumed, "{}", run.ctx);
    match run.signal(8) {
        Err(Error::SignalConflict { .. } | Error::RunFinished { .. }) => {}
        other => panic!("{}: a second payload: {other:?}", run.ctx),
    }
}

fn harness(kind: StoreKind) {
    let iterations: u64 = std::env::var("FLUXIO_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
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
        "waits crash harness on {}: seed {seed} (replay with FLUXIO_CRASH_SEED={seed}), {iterations} runs",
        kind.name()
    );
    let ns = namespace(&format!("crashw_{}", kind.name()));
    let url = kind.url();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let store: Arc<dyn CheckpointStore> = match rt.block_on(kind.open(&url, &ns)) {
        Ok(s) => s,
        Err(e) => {
            let _: Option<()> = skip_unless_ci(kind.name(), &e);
            return;
        }
    };
    let pipeline = waits_pipeline()
        .store_arc(Arc::clone(&store))
        .build()
        .expect("the waits pipeline builds");
    let dir = std::env::temp_dir().join(format!(
        "fluxio-crash-waits-{}-{}",
        kind.name(),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut rng = Rng(seed);
    let new_run = |run_id: &str| Run {
        kind,
        url: &url,
        ns: &ns,
        run_id: run_id.to_owned(),
        ledger: dir.join(format!("{run_id}.ledger")),
        store: &store,
        pipeline: &pipeline,
        rt: &rt,
        ctx: format!("seed {seed}, {} run {run_id}", kind.name()),
        marks: Vec::new(),
        processes: 0,
        kills: 0,
    };
    let mut reference = new_run("reference");
    let want = drive(&mut reference, &mut rng, false);
    check_ledger(&reference);
    let (mut kills, mut processes) = (0, 0);
    for i in 0..iterations {
        let mut run = new_run(&format!("crashw-{i}"));
        let out = drive(&mut run, &mut rng, true);
        assert_eq!(
            out, want,
            "{}: the final context equals an uninterrupted run's",
            run.ctx
        );
        check_ledger(&run);
        check_signal(&run);
        kills += run.kills;
        processes += run.processes;
    }
    eprintln!(
        "waits crash harness on {}: {iterations} runs, {processes} processes, {kills} kills, \
         all checks passed (seed {seed})",
        kind.name()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rule27_waits_crash_harness_on_sqlite() {
    harness(StoreKind::Sqlite);
}

#[test]
fn rule27_waits_crash_harness_on_postgres() {
    harness(StoreKind::Postgres);
}

#[test]
fn rule27_waits_crash_harness_on_mysql() {
    harness(StoreKind::MySql);
}

#[test]
fn rule27_waits_crash_harness_on_redis() {
    harness(StoreKind::Redis);
}

#[test]
fn rule27_waits_crash_harness_on_redis_cluster() {
    harness(StoreKind::RedisCluster);
}
