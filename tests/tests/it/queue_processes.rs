//! Contract rule 31 across processes: four worker processes drain a queue
//! of 500 runs over 20 tenants that allows 3 runs at once and 1 per
//! tenant; one worker is SIGKILLed a third of the way. The ledger's start
//! and end stamps show that at no instant more than 3 ran, never two of
//! one tenant, and every run completed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fluxio::Context;
use fluxio::queue::{Enqueue, Enqueued};
use fluxio::store::{CheckpointStore, RunFilter, RunState};
use fluxio_tests::StoreKind;
use fluxio_tests::process::{Scene, Worker};
use fluxio_tests::queues::{QUEUE_PIPELINE, micros, queue_pipeline};

const RUNS: usize = 500;
const TENANTS: usize = 20;

/// How many runs are completed.
async fn completed(store: &dyn CheckpointStore) -> usize {
    let page = store
        .list_runs(
            &RunFilter::new()
                .pipeline(QUEUE_PIPELINE)
                .state(RunState::Completed)
                .limit(10_000),
        )
        .await
        .expect("list");
    page.runs.len()
}

fn harness(kind: StoreKind) {
    let Some(Scene {
        rt,
        store,
        url,
        ns,
        dir,
        ledger,
    }) = Scene::open(kind, "queue", "queue")
    else {
        return;
    };
    let pipeline = queue_pipeline()
        .store_arc(Arc::clone(&store))
        .build()
        .expect("builds");
    let enqueued = rt.block_on(async {
        for i in 0..RUNS {
            let tenant = format!("t{}", i % TENANTS);
            let input = Context::new().set("tenant", &tenant).expect("a value");
            let done = pipeline
                .enqueue(&format!("m{i}"), input, Enqueue::new().key(tenant))
                .await
                .expect("enqueued");
            assert_eq!(done, Enqueued::Queued);
        }
        std::time::Instant::now()
    });
    let spawn = || {
        let mut w = Worker::spawn(
            env!("CARGO_BIN_EXE_fluxio-waits-worker"),
            [kind.name(), &url, &ns, "-", "queue-work", "1000", &ledger],
        );
        w.ready().expect("a worker starts");
        w.go();
        w.expect(&["working"]);
        w
    };
    let mut workers: Vec<Worker> = (0..4).map(|_| spawn()).collect();
    let killed = workers[0].pid();
    let killed_at = rt.block_on(async {
        for _ in 0..1_200 {
            if completed(store.as_ref()).await >= RUNS / 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        workers[0].kill();
        micros()
    });
    let drained = rt.block_on(async {
        for _ in 0..3_000 {
            if completed(store.as_ref()).await >= RUNS {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    });
    let took = enqueued.elapsed();
    drop(workers);
    assert!(
        drained,
        "{} of {RUNS} runs completed",
        rt.block_on(completed(store.as_ref()))
    );
    // the ledger: (stamp, +1 start / -1 end, tenant); a run the killed
    // worker was in ended when it was killed
    let text = std::fs::read_to_string(&ledger).expect("the ledger");
    let mut open: HashMap<(String, u32), (String, u128)> = HashMap::new();
    let mut events: Vec<(u128, i32, String)> = Vec::new();
    let mut ran: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts.len(), 5, "a ledger line: {line:?}");
        let (run, tenant) = (parts[1].to_owned(), parts[2].to_owned());
        let at: u128 = parts[3].parse().expect("a stamp");
        let pid: u32 = parts[4].parse().expect("a pid");
        match parts[0] {
            "start" => {
                open.insert((run.clone(), pid), (tenant.clone(), at));
                events.push((at, 1, tenant));
            }
            "end" => {
                open.remove(&(run.clone(), pid));
                events.push((at, -1, tenant));
                *ran.entry(run).or_default() += 1;
            }
            other => panic!("a ledger line: {other:?}"),
        }
    }
    for ((run, pid), (tenant, _)) in open {
        assert_eq!(pid, killed, "{run} never ended on a live worker");
        events.push((killed_at, -1, tenant));
    }
    // ends before starts at the same stamp: a slot goes back after its end
    events.sort_by_key(|(at, delta, _)| (*at, *delta));
    let (mut running, mut most) = (0i32, 0i32);
    let mut by_tenant: HashMap<String, i32> = HashMap::new();
    for (at, delta, tenant) in &events {
        running += delta;
        most = most.max(running);
        let of = by_tenant.entry(tenant.clone()).or_default();
        *of += delta;
        assert!(running <= 3, "{running} ran at once at {at}");
        assert!(*of <= 1, "two runs of {tenant} at once at {at}");
    }
    assert_eq!(ran.len(), RUNS, "every run's stage ended");
    let again = ran.values().filter(|n| **n > 1).count();
    eprintln!(
        "queue across processes on {}: {RUNS} runs over {TENANTS} tenants in {took:?}, at most \
         {most} at once, {again} run again",
        kind.name()
    );
    assert_eq!(most, 3, "the queue's 3 slots were used");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rule31_four_worker_processes_keep_a_queues_limits_on_sqlite() {
    harness(StoreKind::Sqlite);
}

#[test]
fn rule31_four_worker_processes_keep_a_queues_limits_on_postgres() {
    harness(StoreKind::Postgres);
}

#[test]
fn rule31_four_worker_processes_keep_a_queues_limits_on_redis() {
    harness(StoreKind::Redis);
}
