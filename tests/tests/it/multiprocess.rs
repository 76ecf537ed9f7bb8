//! Run ownership across real OS processes, against the real Redis and
//! Postgres servers (`FLUXIO_REDIS_URL`, `FLUXIO_POSTGRES_URL`) and a SQLite
//! file shared by the processes.
//!
//! - 8 processes start the same run id at the same instant: exactly one runs
//!   it, 7 get run-id-in-use; repeated `FLUXIO_MP_ITERATIONS` times (50).
//! - zombie: the owner is frozen with SIGSTOP past its lease, another worker
//!   takes over and finishes; the frozen one, thawed, has its writes refused.
//! - takeover: the owner is killed with SIGKILL mid-run; another worker
//!   resumes after the lease lapses and ends with the context of an
//!   uninterrupted run.
//! - cancel (rule 14): this process cancels a run that a worker process is
//!   executing; the worker stops before its next stage and exits
//!   `cancelled`, and a resume in a third process is refused.
//! - start (rule 11): 8 processes `start` one new run id at once (one runs
//!   it), then 8 more start the completed run (none runs a stage).
//! - idempotency key (rule 12): a stage records its key and is killed with
//!   SIGKILL; the process that resumes the run runs it with the same key.
//!
//! Without a server these tests skip loudly, unless `CI` is set.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fluxio::RunStatus;
use fluxio::store::run_key;
use fluxio_test_support::{namespace, skip_unless_ci};
use fluxio_tests::process::Worker;
use fluxio_tests::{StoreKind, WORKER_PIPELINE, worker_pipeline};

struct Run<'a> {
    kind: StoreKind,
    url: &'a str,
    ns: &'a str,
    ledger: &'a PathBuf,
}

impl Run<'_> {
    fn spawn(&self, run_id: &str, mode: &str, lease_ms: u64, hold: &str) -> Worker {
        let lease = lease_ms.to_string();
        let ledger = self.ledger.to_string_lossy();
        Worker::spawn(
            env!("CARGO_BIN_EXE_fluxio-worker"),
            [
                self.kind.name(),
                self.url,
                self.ns,
                run_id,
                mode,
                &lease,
                &ledger,
                hold,
            ],
        )
    }
}

fn ready(w: &Worker) {
    if let Err(e) = w.ready() {
        panic!("worker {} failed before it was ready: {e}", w.pid());
    }
}

/// The store for checking results, or `None` when the server is down (skip).
fn connect(
    kind: StoreKind,
    ns: &str,
) -> Option<(
    tokio::runtime::Runtime,
    std::sync::Arc<dyn fluxio::CheckpointStore>,
)> {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    match rt.block_on(kind.open(&kind.url(), ns)) {
        Ok(store) => Some((rt, store)),
        Err(e) => skip_unless_ci(kind.name(), &e),
    }
}

fn ledger_lines(path: &PathBuf) -> Vec<(String, u32)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_once(' ')
                .and_then(|(s, p)| Some((s.to_owned(), p.parse().ok()?)))
        })
        .collect()
}

fn pids_of(ledger: &[(String, u32)], stage: &str) -> Vec<u32> {
    ledger
        .iter()
        .filter(|(s, _)| s == stage)
        .map(|(_, p)| *p)
        .collect()
}

fn temp_ledger(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fluxio-mp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{name}.ledger"));
    let _ = std::fs::remove_file(&path);
    path
}

fn exactly_one_of_eight(kind: StoreKind) {
    let ns = namespace(&format!("mp_{}", kind.name()));
    let Some((_rt, _store)) = connect(kind, &ns) else {
        return;
    };
    let iterations: usize = std::env::var("FLUXIO_MP_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let url = kind.url();
    let mut late = 0;
    for i in 0..iterations {
        let ledger = temp_ledger(&format!("{}-race-{i}", kind.name()));
        let run = Run {
            kind,
            url: &url,
            ns: &ns,
            ledger: &ledger,
        };
        let run_id = format!("race-{i}");
        // s1 holds the run for 200 ms: longer than the start of all eight
        let mut workers: Vec<Worker> = (0..8)
            .map(|_| run.spawn(&run_id, "invoke", 10_000, "s1=200"))
            .collect();
        workers.iter().for_each(ready);
        workers.iter_mut().for_each(Worker::go);
        let outcomes: Vec<String> = workers.into_iter().map(Worker::outcome).collect();
        let ok = outcomes.iter().filter(|o| o.starts_with("ok")).count();
        let in_use = outcomes.iter().filter(|o| *o == "in_use").count();
        assert_eq!(ok + in_use, 8, "iteration {i}: {outcomes:?}");
        assert!(ok >= 1 && in_use >= 1, "iteration {i}: {outcomes:?}");
        // One run at a time: every run that ran wrote s1, s2, s3 with no
        // other process's line between them (s1 holds 200 ms, so two runs
        // that overlapped would interleave). A process that reached the
        // store only after the winner had finished (a late start on a
        // loaded machine: SQLite's busy wait can exceed the 200 ms) runs
        // the id again, as `invoke` does for a finished run: allowed, and
        // counted below.
        let lines = ledger_lines(&ledger);
        let blocks: Vec<&[(String, u32)]> = lines.chunks(3).collect();
        assert_eq!(
            blocks.len(),
            ok,
            "iteration {i}: one s1-s2-s3 block a run: {lines:?}"
        );
        for block in &blocks {
            let stages: Vec<&str> = block.iter().map(|(s, _)| s.as_str()).collect();
            assert_eq!(
                stages,
                ["s1", "s2", "s3"],
                "iteration {i}: runs overlapped: {lines:?}"
            );
            assert!(
                block.iter().all(|(_, p)| *p == block[0].1),
                "iteration {i}: two processes inside one run: {lines:?}"
            );
        }
        if ok > 1 {
            late += 1;
        }
    }
    // the race is real in most iterations: a late start is the exception
    assert!(
        late * 2 <= iterations,
        "{late} of {iterations} iterations had a process start after the winner finished"
    );
    eprintln!(
        "{}: {iterations} iterations of 8 processes, one run at a time each ({late} with a late start that ran again)",
        kind.name()
    );
}

fn zombie_is_fenced(kind: StoreKind) {
    let ns = namespace(&format!("zombie_{}", kind.name()));
    let Some((rt, store)) = connect(kind, &ns) else {
        return;
    };
    let url = kind.url();
    let ledger = temp_ledger(&format!("{}-zombie", kind.name()));
    let run = Run {
        kind,
        url: &url,
        ns: &ns,
        ledger: &ledger,
    };

    // the owner: 1 s lease, freezes inside s2
    let mut owner = run.spawn("zombie", "invoke", 1_000, "s2=1500");
    ready(&owner);
    owner.go();
    owner.expect(&["in s2"]);
    owner.signal("-STOP");
    std::thread::sleep(Duration::from_millis(2_500)); // well past the lease

    let mut next = run.spawn("zombie", "resume", 10_000, "-");
    ready(&next);
    next.go();
    let (next_pid, next_outcome) = (next.pid(), next.outcome());
    assert!(
        next_outcome.starts_with("ok"),
        "the new owner finishes: {next_outcome}"
    );

    owner.signal("-CONT");
    let owner_pid = owner.pid();
    assert_eq!(
        owner.outcome(),
        "lease_lost",
        "the thawed owner's write is refused"
    );

    let cp = rt
        .block_on(store.load(&run_key(WORKER_PIPELINE, "zombie")))
        .expect("load")
        .expect("stored");
    assert_eq!(
        cp.status,
        RunStatus::Completed,
        "the final checkpoint is the new owner's"
    );
    let lines = ledger_lines(&ledger);
    assert_eq!(pids_of(&lines, "s1"), [owner_pid]);
    assert_eq!(pids_of(&lines, "s2"), [owner_pid, next_pid]);
    assert_eq!(
        pids_of(&lines, "s3"),
        [next_pid],
        "the zombie never reached s3"
    );
}

fn killed_owner_is_taken_over(kind: StoreKind) {
    let ns = namespace(&format!("takeover_{}", kind.name()));
    let Some((_rt, _store)) = connect(kind, &ns) else {
        return;
    };
    let url = kind.url();
    let ledger = temp_ledger(&format!("{}-takeover", kind.name()));
    let run = Run {
        kind,
        url: &url,
        ns: &ns,
        ledger: &ledger,
    };

    let mut owner = run.spawn("victim", "invoke", 3_000, "s2=60000");
    ready(&owner);
    owner.go();
    owner.expect(&["in s2"]);
    let owner_pid = owner.pid();
    owner.signal("-KILL");
    drop(owner);

    // the dead owner's lease has not lapsed yet
    let mut early = run.spawn("victim", "resume", 3_000, "-");
    ready(&early);
    early.go();
    assert_eq!(early.outcome(), "in_use");

    std::thread::sleep(Duration::from_millis(3_500));
    let mut next = run.spawn("victim", "resume", 3_000, "-");
    ready(&next);
    next.go();
    let next_pid = next.pid();
    let resumed = next.outcome();

    let mut reference = run.spawn("reference", "invoke", 3_000, "-");
    ready(&reference);
    reference.go();
    let uninterrupted = reference.outcome();
    assert!(uninterrupted.starts_with("ok "), "{uninterrupted}");
    assert_eq!(
        resumed, uninterrupted,
        "the resumed run ends with the context of an uninterrupted one"
    );

    let lines: Vec<(String, u32)> = ledger_lines(&ledger)
        .into_iter()
        .filter(|(_, p)| *p == owner_pid || *p == next_pid)
        .collect();
    assert_eq!(
        pids_of(&lines, "s1"),
        [owner_pid],
        "s1 finished before the kill and never ran again"
    );
    assert_eq!(
        pids_of(&lines, "s2"),
        [owner_pid, next_pid],
        "only the stage that was running ran again"
    );
    assert_eq!(pids_of(&lines, "s3"), [next_pid]);
}

/// Rule 11: eight processes `start` one new run id at the same instant:
/// exactly one runs the stages, the others are refused or get its result;
/// then eight more `start` the completed run: all get its result and no
/// stage runs.
fn rule11_eight_starts(kind: StoreKind) {
    let ns = namespace(&format!("mp_start_{}", kind.name()));
    let Some((_rt, _store)) = connect(kind, &ns) else {
        return;
    };
    let iterations: usize = std::env::var("FLUXIO_MP_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(5, |n: usize| n.div_ceil(10));
    let url = kind.url();
    for i in 0..iterations {
        let ledger = temp_ledger(&format!("{}-start-{i}", kind.name()));
        let run = Run {
            kind,
            url: &url,
            ns: &ns,
            ledger: &ledger,
        };
        let run_id = format!("start-{i}");
        let race = |hold: &str| -> Vec<String> {
            let mut workers: Vec<Worker> = (0..8)
                .map(|_| run.spawn(&run_id, "start", 10_000, hold))
                .collect();
            workers.iter().for_each(ready);
            workers.iter_mut().for_each(Worker::go);
            workers.into_iter().map(Worker::outcome).collect()
        };
        // a new run id; s1 holds the run for 200 ms, longer than eight starts
        let first = race("s1=200");
        let lines = ledger_lines(&ledger);
        let s1 = pids_of(&lines, "s1");
        assert_eq!(
            s1.len(),
            1,
            "iteration {i}: one process ran the stages: {lines:?}"
        );
        assert_eq!(pids_of(&lines, "s3"), s1, "iteration {i}: and all of them");
        let done: Vec<&String> = first.iter().filter(|o| o.starts_with("ok")).collect();
        assert!(
            !done.is_empty(),
            "iteration {i}: the winner completed: {first:?}"
        );
        assert!(
            done.iter().all(|o| *o == done[0]),
            "iteration {i}: every process that got a result got the same one: {first:?}"
        );
        assert!(
            first.iter().all(|o| o.starts_with("ok") || o == "in_use"),
            "iteration {i}: the others were refused: {first:?}"
        );
        // the completed run: every start returns its result, nothing runs
        let again = race("-");
        assert!(
            again.iter().all(|o| o == done[0]),
            "iteration {i}: the completed result, eight times: {again:?} vs {done:?}"
        );
        assert_eq!(
            ledger_lines(&ledger),
            lines,
            "iteration {i}: no stage ran for a completed run"
        );
    }
    eprintln!(
        "{}: rule 11, {iterations} runs started by 8 processes at once, twice",
        kind.name()
    );
}

/// Rule 12: a stage records its idempotency key (its side effect), its
/// process is killed with SIGKILL before the next checkpoint, and another
/// process resumes the run: the stage runs again with the same key.
fn rule12_key_survives_sigkill(kind: StoreKind) {
    let ns = namespace(&format!("mp_key_{}", kind.name()));
    let Some((_rt, _store)) = connect(kind, &ns) else {
        return;
    };
    let url = kind.url();
    let ledger = temp_ledger(&format!("{}-key", kind.name()));
    let keys = fluxio_tests::keys_path(&ledger.to_string_lossy());
    let _ = std::fs::remove_file(&keys);
    let run = Run {
        kind,
        url: &url,
        ns: &ns,
        ledger: &ledger,
    };
    let mut owner = run.spawn("charged", "invoke", 1_000, "s2=60000");
    ready(&owner);
    owner.go();
    owner.expect(&["in s2"]); // s2 has recorded its key, and sleeps
    let owner_pid = owner.pid();
    owner.signal("-KILL");
    drop(owner);

    // resume once the dead owner's lease lapses
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (outcome, next_pid) = loop {
        let mut next = run.spawn("charged", "resume", 1_000, "-");
        ready(&next);
        next.go();
        let pid = next.pid();
        let outcome = next.outcome();
        if outcome != "in_use" || std::time::Instant::now() > deadline {
            break (outcome, pid);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(outcome.starts_with("ok "), "{outcome}");

    let lines: Vec<Vec<String>> = std::fs::read_to_string(&keys)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').map(str::to_owned).collect())
        .collect();
    let of = |stage: &str| -> Vec<(String, u32)> {
        lines
            .iter()
            .filter(|l| l.len() == 4 && l[0] == stage)
            .map(|l| (l[1].clone(), l[3].parse().unwrap_or(0)))
            .collect()
    };
    let s2 = of("s2");
    assert_eq!(
        s2.iter().map(|(_, pid)| *pid).collect::<Vec<_>>(),
        [owner_pid, next_pid],
        "s2 ran in the killed process and again in the next: {lines:?}"
    );
    assert_eq!(
        s2[0].0, s2[1].0,
        "one key for both attempts of s2: {lines:?}"
    );
    assert!(s2[0].0.starts_with("worker/charged/"), "{lines:?}");
    let s3 = of("s3");
    assert_eq!(s3.len(), 1, "{lines:?}");
    assert_ne!(s3[0].0, s2[0].0, "another position, another key");
    eprintln!(
        "{}: rule 12, key {} in pid {owner_pid} (killed) and pid {next_pid}",
        kind.name(),
        s2[0].0
    );
}

fn cancelled_from_another_process(kind: StoreKind) {
    let ns = namespace(&format!("cancel_{}", kind.name()));
    let Some((rt, store)) = connect(kind, &ns) else {
        return;
    };
    let url = kind.url();
    let ledger = temp_ledger(&format!("{}-cancel", kind.name()));
    let run = Run {
        kind,
        url: &url,
        ns: &ns,
        ledger: &ledger,
    };
    // the same pipeline as the workers' (and so the same name and keys)
    let pipeline = worker_pipeline()
        .store_arc(Arc::clone(&store))
        .build()
        .expect("the worker pipeline builds");

    // the owner holds s2 for 5 s (the cancel needs milliseconds), with a
    // lease far longer than that
    let mut owner = run.spawn("cancelled", "invoke", 30_000, "s2=5000");
    ready(&owner);
    owner.go();
    owner.expect(&["in s2"]);
    rt.block_on(pipeline.cancel("cancelled"))
        .expect("this process cancels the run the worker is executing");
    let cp = rt
        .block_on(pipeline.checkpoint("cancelled"))
        .expect("load")
        .expect("stored");
    assert_eq!((cp.status, cp.step.as_str()), (RunStatus::Cancelled, "s2"));

    let owner_pid = owner.pid();
    let (outcome, code) = owner.outcome_and_exit();
    assert_eq!(
        (outcome.as_str(), code),
        ("cancelled", Some(12)),
        "the owner stops with the cancelled outcome"
    );
    let lines = ledger_lines(&ledger);
    assert_eq!(pids_of(&lines, "s1"), [owner_pid]);
    assert_eq!(pids_of(&lines, "s2"), [owner_pid], "s2 finished its body");
    assert!(
        pids_of(&lines, "s3").is_empty(),
        "no stage ran after the held one: {lines:?}"
    );
    let after = rt
        .block_on(pipeline.checkpoint("cancelled"))
        .expect("load")
        .expect("stored");
    assert_eq!(after, cp, "the owner wrote nothing after the cancel");

    // the owner gave its lease back: a resume elsewhere is refused at once
    // as cancelled (not in use), and runs nothing
    let mut next = run.spawn("cancelled", "resume", 30_000, "-");
    ready(&next);
    next.go();
    assert_eq!(next.outcome_and_exit(), ("cancelled".to_owned(), Some(12)));
    assert_eq!(ledger_lines(&ledger), lines, "the resume ran no stage");
}

#[test]
fn redis_exactly_one_of_eight_processes_runs_a_run_id() {
    exactly_one_of_eight(StoreKind::Redis);
}

#[test]
fn postgres_exactly_one_of_eight_processes_runs_a_run_id() {
    exactly_one_of_eight(StoreKind::Postgres);
}

#[test]
fn redis_a_frozen_owner_is_fenced_out() {
    zombie_is_fenced(StoreKind::Redis);
}

#[test]
fn postgres_a_frozen_owner_is_fenced_out() {
    zombie_is_fenced(StoreKind::Postgres);
}

#[test]
fn redis_a_killed_owner_is_taken_over_after_the_lease() {
    killed_owner_is_taken_over(StoreKind::Redis);
}

#[test]
fn postgres_a_killed_owner_is_taken_over_after_the_lease() {
    killed_owner_is_taken_over(StoreKind::Postgres);
}

#[test]
fn sqlite_exactly_one_of_eight_processes_runs_a_run_id() {
    exactly_one_of_eight(StoreKind::Sqlite);
}

#[test]
fn sqlite_a_frozen_owner_is_fenced_out() {
    zombie_is_fenced(StoreKind::Sqlite);
}

#[test]
fn sqlite_a_killed_owner_is_taken_over_after_the_lease() {
    killed_owner_is_taken_over(StoreKind::Sqlite);
}

#[test]
fn rule11_redis_eight_processes_start_one_run_once() {
    rule11_eight_starts(StoreKind::Redis);
}

#[test]
fn rule11_postgres_eight_processes_start_one_run_once() {
    rule11_eight_starts(StoreKind::Postgres);
}

#[test]
fn rule11_sqlite_eight_processes_start_one_run_once() {
    rule11_eight_starts(StoreKind::Sqlite);
}

#[test]
fn rule12_redis_a_stage_killed_after_its_side_effect_gets_the_same_key_in_the_next_process() {
    rule12_key_survives_sigkill(StoreKind::Redis);
}

#[test]
fn rule12_postgres_a_stage_killed_after_its_side_effect_gets_the_same_key_in_the_next_process() {
    rule12_key_survives_sigkill(StoreKind::Postgres);
}

#[test]
fn rule12_sqlite_a_stage_killed_after_its_side_effect_gets_the_same_key_in_the_next_process() {
    rule12_key_survives_sigkill(StoreKind::Sqlite);
}

#[test]
fn rule14_sqlite_a_run_cancelled_from_another_process_stops_before_its_next_stage() {
    cancelled_from_another_process(StoreKind::Sqlite);
}

#[test]
fn rule14_postgres_a_run_cancelled_from_another_process_stops_before_its_next_stage() {
    cancelled_from_another_process(StoreKind::Postgres);
}

#[test]
fn rule14_redis_a_run_cancelled_from_another_process_stops_before_its_next_stage() {
    cancelled_from_another_process(StoreKind::Redis);
}

// The same on a Redis Cluster: three local masters, started once for this
// test binary (`fluxio_test_support::redis::cluster`); each worker process
// connects to them with `RedisStore::cluster_builder`.

#[test]
fn redis_cluster_exactly_one_of_eight_processes_runs_a_run_id() {
    exactly_one_of_eight(StoreKind::RedisCluster);
}

#[test]
fn redis_cluster_a_frozen_owner_is_fenced_out() {
    zombie_is_fenced(StoreKind::RedisCluster);
}

#[test]
fn redis_cluster_a_killed_owner_is_taken_over_after_the_lease() {
    killed_owner_is_taken_over(StoreKind::RedisCluster);
}

#[test]
fn rule11_redis_cluster_eight_processes_start_one_run_once() {
    rule11_eight_starts(StoreKind::RedisCluster);
}

#[test]
fn rule14_redis_cluster_a_run_cancelled_from_another_process_stops_before_its_next_stage() {
    cancelled_from_another_process(StoreKind::RedisCluster);
}

#[test]
fn mysql_exactly_one_of_eight_processes_runs_a_run_id() {
    exactly_one_of_eight(StoreKind::MySql);
}

#[test]
fn mysql_a_frozen_owner_is_fenced_out() {
    zombie_is_fenced(StoreKind::MySql);
}

#[test]
fn mysql_a_killed_owner_is_taken_over_after_the_lease() {
    killed_owner_is_taken_over(StoreKind::MySql);
}

#[test]
fn rule11_mysql_eight_processes_start_one_run_once() {
    rule11_eight_starts(StoreKind::MySql);
}

#[test]
fn rule12_mysql_a_stage_killed_after_its_side_effect_gets_the_same_key_in_the_next_process() {
    rule12_key_survives_sigkill(StoreKind::MySql);
}

#[test]
fn rule14_mysql_a_run_cancelled_from_another_process_stops_before_its_next_stage() {
    cancelled_from_another_process(StoreKind::MySql);
}
