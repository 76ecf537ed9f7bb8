//! Contract rule 29 under a crash: a parent process SIGKILLed after it
//! stored its child and before it recorded it (its parked checkpoint was
//! never written) is recovered by a worker process, attaches to the same
//! child, and completes with the child's result; the ledger outside the
//! store shows every stage, the child's included, ran once.
//!
//! `fluxio-waits-worker ... family-start` starts the parent on a store that
//! stops the process at the parent's parked write (`child-stored`): the
//! test kills it there. `... family-work` runs a worker of the parent and
//! the child until the parent completes.

use fluxio::RunStatus;
use fluxio::store::{CheckpointStore, RunFilter, run_key};
use fluxio_tests::StoreKind;
use fluxio_tests::family::{FAMILY_CHILD, FAMILY_PARENT};
use fluxio_tests::process::{Scene, Worker};

const LEASE_MS: &str = "300";

fn spawn(kind: StoreKind, url: &str, ns: &str, run_id: &str, mode: &str, ledger: &str) -> Worker {
    let mut worker = Worker::spawn(
        env!("CARGO_BIN_EXE_fluxio-waits-worker"),
        [kind.name(), url, ns, run_id, mode, LEASE_MS, ledger],
    );
    if let Err(e) = worker.ready() {
        panic!("{mode}: the worker failed to start: {e}");
    }
    worker.go();
    worker
}

/// The stages the ledger shows for the runs of `keys`, in order.
fn stages(ledger: &str, keys: &[&str]) -> Vec<String> {
    std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split(' ').collect();
            (parts.len() == 4 && keys.contains(&parts[0])).then(|| parts[1].to_owned())
        })
        .collect()
}

fn harness(kind: StoreKind) {
    let Some(Scene {
        rt,
        store,
        url,
        ns,
        dir,
        ledger,
    }) = Scene::open(kind, "crash-child", "crashc")
    else {
        return;
    };
    let run_id = "parent-1";
    let parent_key = run_key(FAMILY_PARENT, run_id);

    let mut start = spawn(kind, &url, &ns, run_id, "family-start", &ledger);
    start.expect(&["child-stored"]);
    start.kill();
    let (parent, children) = rt.block_on(async {
        let parent = store
            .load(&parent_key)
            .await
            .expect("load")
            .expect("stored");
        let page = store
            .list_runs(&RunFilter::new().children_of(&parent_key))
            .await
            .expect("list");
        (parent, page.runs)
    });
    assert_eq!(
        (parent.status, parent.step.as_str()),
        (RunStatus::Running, "child(famchild)"),
        "killed before the parent recorded its child: {parent:?}"
    );
    assert_eq!(children.len(), 1, "{children:?}");
    let child_key = children[0].key.clone();
    assert!(child_key.starts_with(&format!("{FAMILY_CHILD}/{parent_key}#")));

    let work = spawn(kind, &url, &ns, run_id, "family-work", &ledger);
    let out = work.outcome();
    assert!(out.starts_with("ok "), "the parent completes: {out}");
    let keys = [parent_key.as_str(), child_key.as_str()];
    assert_eq!(
        stages(&ledger, &keys),
        ["f1", "fc", "f2"],
        "each stage ran once, the child's included"
    );
    rt.block_on(async {
        let page = store
            .list_runs(&RunFilter::new().children_of(&parent_key))
            .await
            .expect("list");
        assert_eq!(page.runs.len(), 1, "one child, the same: {page:?}");
        let child = store.load(&child_key).await.expect("load").expect("kept");
        assert_eq!(child.status, RunStatus::Completed);
        assert_eq!(
            store.history(&child_key).await.expect("history")[0].seq,
            0,
            "the child's journal starts with the parent's first write of it"
        );
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rule29_a_parent_killed_before_recording_its_child_attaches_to_it_on_sqlite() {
    harness(StoreKind::Sqlite);
}

#[test]
fn rule29_a_parent_killed_before_recording_its_child_attaches_to_it_on_postgres() {
    harness(StoreKind::Postgres);
}

#[test]
fn rule29_a_parent_killed_before_recording_its_child_attaches_to_it_on_mysql() {
    harness(StoreKind::MySql);
}

#[test]
fn rule29_a_parent_killed_before_recording_its_child_attaches_to_it_on_redis() {
    harness(StoreKind::Redis);
}

#[test]
fn rule29_a_parent_killed_before_recording_its_child_attaches_to_it_on_a_redis_cluster() {
    harness(StoreKind::RedisCluster);
}
