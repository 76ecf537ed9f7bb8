//! Group commit (contract rule 24, issue 13): the writes of concurrent runs
//! that wait for the file's write lock share one transaction, each answered
//! only once that transaction committed, and each deciding alone.
//!
//! Each test makes the writes wait: another connection (another process,
//! as far as SQLite can tell) holds the write lock while they queue, so
//! how they group does not depend on the scheduler.

use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::{Begin, Change, Checkpoint, CheckpointStore, Lease};
use fluxio_sqlite::SqliteStore;
use fluxio_test_support as support;
use sqlx::SqliteConnection;

use crate::sql::fresh;

const TTL: Duration = Duration::from_secs(60);

async fn release(mut other: SqliteConnection) {
    sqlx::query("ROLLBACK")
        .execute(&mut other)
        .await
        .expect("release the lock");
}

/// Time for spawned writes to queue behind the held lock.
async fn let_them_queue() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule24_writes_waiting_together_share_one_commit() {
    let (_dir, file, store) = fresh("group_share").await;
    let other = support::sqlite::hold_the_write_lock(&file).await;
    let before = store.commits();
    let writes: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.acquire_lease(&format!("r{i}"), TTL).await })
        })
        .collect();
    let_them_queue().await;
    release(other).await;
    let mut tokens = Vec::new();
    for write in writes {
        let lease = write.await.expect("no panic").expect("acquired");
        tokens.push(lease.token());
    }
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 16, "every lease its own token");
    // The first write may be alone in the transaction that waited for the
    // lock; every write that queued behind it shares the next one.
    let commits = store.commits() - before;
    assert!(
        (1..=2).contains(&commits),
        "{commits} commits for 16 writes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule24_a_write_is_answered_only_once_its_commit_is_done() {
    let (_dir, file, store) = fresh("group_ack").await;
    let lease = store.acquire_lease("r", TTL).await.expect("lease");
    let other = support::sqlite::hold_the_write_lock(&file).await;
    let write = {
        let store = store.clone();
        let lease = Lease::new(lease.run_id(), lease.token());
        tokio::spawn(async move { store.save_fenced(support::checkpoint("r", 1), &lease).await })
    };
    let_them_queue().await;
    assert!(!write.is_finished(), "answered before any commit");
    release(other).await;
    write.await.expect("no panic").expect("saved");
    // Committed: another connection reads it.
    let rows =
        support::sqlite::scalar(&file, "SELECT count(*) FROM fluxio_checkpoints_steps").await;
    assert_eq!(rows, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule24_a_refused_write_fails_only_its_own_caller() {
    let (_dir, file, store) = fresh("group_refused").await;
    let good = store.acquire_lease("good", TTL).await.expect("lease");
    let also = store.acquire_lease("also", TTL).await.expect("lease");
    let gone = store.acquire_lease("gone", TTL).await.expect("lease");
    let stale = Lease::new("gone", gone.token());
    store.release_lease(gone).await.expect("release");
    let orphan = store.acquire_lease("orphan", TTL).await.expect("lease");
    // A delta whose predecessor (checkpoint 0) was never stored.
    let mut delta = support::checkpoint("orphan", 1);
    delta.seq = 1;
    delta.change = Change::none();

    let other = support::sqlite::hold_the_write_lock(&file).await;
    let before = store.commits();
    let save = |cp, lease: &Lease| {
        let store = store.clone();
        let lease = Lease::new(lease.run_id(), lease.token());
        tokio::spawn(async move { store.save_fenced(cp, &lease).await })
    };
    let writes = [
        save(support::checkpoint("good", 1), &good),
        save(support::checkpoint("gone", 1), &stale),
        save(delta, &orphan),
        save(support::checkpoint("also", 2), &also),
    ];
    let_them_queue().await;
    release(other).await;
    let mut answers = Vec::new();
    for write in writes {
        answers.push(write.await.expect("no panic"));
    }
    assert!(answers[0].is_ok(), "{:?}", answers[0]);
    assert!(
        matches!(answers[1], Err(Error::LeaseLost { .. })),
        "{:?}",
        answers[1]
    );
    assert!(
        matches!(answers[2], Err(Error::RunDeleted { .. })),
        "{:?}",
        answers[2]
    );
    assert!(answers[3].is_ok(), "{:?}", answers[3]);
    assert!(store.commits() - before <= 2);
    assert_eq!(
        store.load("good").await.expect("load"),
        Some(support::checkpoint("good", 1))
    );
    assert_eq!(
        store.load("also").await.expect("load"),
        Some(support::checkpoint("also", 2))
    );
    assert_eq!(store.load("gone").await.expect("load"), None);
    assert_eq!(store.load("orphan").await.expect("load"), None);
}

/// A store at `file` whose database refuses (a trigger that aborts the
/// insert) every step of the run stored as `key`, with SQLite's error
/// "no step for bad": a driver error in the middle of a batch.
async fn refusing_steps_of(file: &std::path::Path, key: &str) -> SqliteStore {
    let store = SqliteStore::connect(file).await.expect("open");
    sqlx::query(&format!(
        "CREATE TRIGGER refuse_bad BEFORE INSERT ON fluxio_checkpoints_steps \
         WHEN NEW.run_id = '{key}' BEGIN SELECT RAISE(ABORT, 'no step for bad'); END"
    ))
    .execute(store.pool())
    .await
    .expect("the trigger");
    store
}

/// Another connection takes the write lock of `file`; then the first write
/// (the `opener`'s lease) queues for it alone, in a transaction of its own.
async fn locked_behind_an_opener(
    store: &SqliteStore,
    file: &std::path::Path,
) -> (
    SqliteConnection,
    tokio::task::JoinHandle<fluxio_core::Result<Lease>>,
) {
    let other = support::sqlite::hold_the_write_lock(file).await;
    let opener = {
        let store = store.clone();
        tokio::spawn(async move { store.acquire_lease("opener", TTL).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    (other, opener)
}

/// Lets the queued `writes` wait, gives the write lock `other` holds back,
/// and returns their answers in order, once the `opener` (queued before
/// them) has its lease.
async fn answers_once_released<T>(
    other: SqliteConnection,
    opener: tokio::task::JoinHandle<fluxio_core::Result<Lease>>,
    writes: Vec<tokio::task::JoinHandle<fluxio_core::Result<T>>>,
) -> Vec<fluxio_core::Result<T>> {
    let_them_queue().await;
    release(other).await;
    opener.await.expect("no panic").expect("the opener's lease");
    let mut answers = Vec::new();
    for write in writes {
        answers.push(write.await.expect("no panic"));
    }
    answers
}

/// The answers of the writes of `before`, `bad` and `after`, queued in that
/// order, when `bad`'s statement fails: `bad` gets that error, `before`
/// (in the transaction given up) its transaction's failure.
fn bad_failed_alone<T: std::fmt::Debug>(answers: &[fluxio_core::Result<T>]) {
    let before = answers[0]
        .as_ref()
        .expect_err("its transaction was given up");
    assert!(
        chain(before).contains("the transaction of this write failed")
            && chain(before).contains("no step for bad"),
        "{}",
        chain(before)
    );
    let bad = answers[1].as_ref().expect_err("the trigger aborts it");
    assert!(chain(bad).contains("no step for bad"), "{}", chain(bad));
    assert!(
        !chain(bad).contains("the transaction of this write failed"),
        "{}",
        chain(bad)
    );
}

/// An error and its sources, one line.
fn chain(e: &dyn std::error::Error) -> String {
    support::error::chain(e, ": ")
}

/// Fenced saves queued next to each other run in one command to SQLite's
/// thread. A driver error in the middle of it (here a trigger that aborts
/// the insert of one run's step) fails that save with SQLite's error and
/// gives its transaction up: the save that ran before it fails with
/// `GroupCommit` (SQLite's error as the source) and is not stored; the save
/// queued after it goes into the next transaction and is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule24_a_save_failing_in_a_batch_gives_up_its_transaction_and_no_more() {
    let dir = support::TempDir::new("group_failed");
    let file = dir.db("x");
    let store = refusing_steps_of(&file, "bad").await;
    let mut leases = Vec::new();
    for run in ["before", "bad", "after"] {
        leases.push(store.acquire_lease(run, TTL).await.expect("lease"));
    }

    let (other, opener) = locked_behind_an_opener(&store, &file).await;
    let mut writes = Vec::new();
    for (run, lease) in ["before", "bad", "after"].into_iter().zip(&leases) {
        let store = store.clone();
        let lease = Lease::new(lease.run_id(), lease.token());
        writes.push(tokio::spawn(async move {
            store.save_fenced(support::checkpoint(run, 1), &lease).await
        }));
        // queued in this order
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answers = answers_once_released(other, opener, writes).await;

    bad_failed_alone(&answers);
    assert!(answers[2].is_ok(), "{:?}", answers[2]);
    assert_eq!(store.load("before").await.expect("load"), None);
    assert_eq!(store.load("bad").await.expect("load"), None);
    assert_eq!(
        store.load("after").await.expect("load"),
        Some(support::checkpoint("after", 1))
    );
}

/// Runs that begin together (`begin_run`, `Begin::Replace`) share one
/// command and one commit: each free lease is taken with its own token,
/// greater than every token before (as one acquisition after the other
/// draws them), the stored run is replaced, and a run whose lease another
/// holds is refused (`RunIdInUse`) without writing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule24_runs_beginning_together_share_one_commit_and_draw_distinct_tokens() {
    let (_dir, file, store) = fresh("group_begin").await;
    // a completed run, replaced by the batch
    support::runs::drive(&store, &support::runs::ten_stage_run("orders", "old")).await;
    // a run whose lease another worker holds
    let busy = support::runs::ten_stage_run("orders", "busy");
    let held = store
        .acquire_lease(&busy[0].key(), TTL)
        .await
        .expect("lease");

    let other = support::sqlite::hold_the_write_lock(&file).await;
    let before = store.commits();
    let begin = |cp: Checkpoint| {
        let store = store.clone();
        tokio::spawn(async move { store.begin_run(cp, TTL, Begin::Replace).await })
    };
    let mut firsts: Vec<Checkpoint> = (0..8)
        .map(|i| support::runs::ten_stage_run("orders", &i.to_string()).remove(0))
        .collect();
    firsts.push(support::runs::ten_stage_run("orders", "old").remove(0));
    let writes: Vec<_> = firsts.iter().cloned().map(begin).collect();
    let refused = begin(busy[0].clone());
    let_them_queue().await;
    release(other).await;

    let mut tokens = Vec::new();
    for (write, first) in writes.into_iter().zip(&firsts) {
        let begun = write.await.expect("no panic").expect("begun");
        assert!(begun.started);
        assert_eq!(begun.lease.run_id(), first.key());
        assert!(
            begun.lease.token() > held.token(),
            "{begun:?} after {held:?}"
        );
        tokens.push(begun.lease.token());
        let stored = store.load(&first.key()).await.expect("load");
        assert_eq!(stored.as_ref(), Some(first), "the first checkpoint, alone");
    }
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), firsts.len(), "every lease its own token");
    let refused = refused.await.expect("no panic");
    assert!(
        matches!(refused, Err(Error::RunIdInUse { .. })),
        "{refused:?}"
    );
    let commits = store.commits() - before;
    assert!(
        (1..=2).contains(&commits),
        "{commits} commits for 10 beginnings"
    );
    assert_eq!(store.load(&busy[0].key()).await.expect("load"), None);
    // the refused run's lease is still the other worker's
    store.renew_lease(&held, TTL).await.expect("still held");
}

/// Runs that end together (`finish_run`) share one command and one commit:
/// each last checkpoint is stored and each lease given back, and a run that
/// was cancelled meanwhile is refused (`Cancelled`), its lease given back
/// all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule24_runs_ending_together_share_one_commit_and_give_their_leases_back() {
    let (_dir, file, store) = fresh("group_finish").await;
    let mut runs = Vec::new();
    for i in 0..6 {
        let run = support::runs::ten_stage_run("orders", &i.to_string());
        let lease = support::runs::drive_to_the_last(&store, &run).await;
        runs.push((run, lease));
    }
    let cancelled = runs[5].0[0].key();
    store.cancel(&cancelled).await.expect("cancel");

    let other = support::sqlite::hold_the_write_lock(&file).await;
    let before = store.commits();
    let writes: Vec<_> = runs
        .iter()
        .map(|(run, lease)| {
            let (store, last) = (store.clone(), run[10].clone());
            let lease = Lease::new(lease.run_id(), lease.token());
            tokio::spawn(async move { store.finish_run(last, lease, false).await })
        })
        .collect();
    let_them_queue().await;
    release(other).await;
    let mut answers = Vec::new();
    for write in writes {
        answers.push(write.await.expect("no panic"));
    }
    let commits = store.commits() - before;
    assert!((1..=2).contains(&commits), "{commits} commits for 6 ends");

    for ((run, _), answer) in runs.iter().zip(&answers).take(5) {
        assert!(answer.is_ok(), "{answer:?}");
        let stored = store.load(&run[0].key()).await.expect("load");
        assert_eq!(stored.as_ref(), Some(&run[10]));
    }
    assert!(
        matches!(answers[5], Err(Error::Cancelled { .. })),
        "{:?}",
        answers[5]
    );
    let stored = store.load(&cancelled).await.expect("load").expect("stored");
    assert_eq!(stored.status, fluxio_core::RunStatus::Cancelled);
    // every lease was given back: each run id can be taken again at once
    for (run, _) in &runs {
        store
            .acquire_lease(&run[0].key(), TTL)
            .await
            .expect("the lease was given back");
    }
}

/// Two saves of one run waiting together are not decided together: the
/// second finds the step the first wrote (its predecessor) as if the first
/// had committed before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule24_saves_of_one_run_waiting_together_run_one_after_the_other() {
    let (_dir, file, store) = fresh("group_same_run").await;
    let run = support::runs::ten_stage_run("orders", "1");
    let other_run = support::runs::ten_stage_run("orders", "2");
    let mut leases = Vec::new();
    for r in [&run, &other_run] {
        let begun = store
            .begin_run(r[0].clone(), TTL, Begin::Replace)
            .await
            .expect("begin");
        leases.push(begun.lease);
    }

    let other = support::sqlite::hold_the_write_lock(&file).await;
    let mut writes = Vec::new();
    for (cp, lease) in [
        (&run[1], &leases[0]),
        (&other_run[1], &leases[1]),
        (&run[2], &leases[0]),
    ] {
        let (store, cp) = (store.clone(), cp.clone());
        let lease = Lease::new(lease.run_id(), lease.token());
        writes.push(tokio::spawn(
            async move { store.save_fenced(cp, &lease).await },
        ));
        // queued in this order
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let_them_queue().await;
    release(other).await;
    for write in writes {
        write.await.expect("no panic").expect("saved");
    }
    assert_eq!(
        store.load(&run[0].key()).await.expect("load").as_ref(),
        Some(&run[2])
    );
    assert_eq!(
        store
            .load(&other_run[0].key())
            .await
            .expect("load")
            .as_ref(),
        Some(&other_run[1])
    );
}

/// As for the saves above, when runs begin together: the beginning the
/// driver's error belongs to fails with it, the one before it in the
/// transaction with `GroupCommit` (and holds no lease: the run id can be
/// taken at once), and the one after it begins in the next transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule24_a_beginning_failing_in_a_batch_fails_alone_when_tried_again() {
    let dir = support::TempDir::new("group_begin_failed");
    let file = dir.db("x");
    let store = refusing_steps_of(&file, "orders/bad").await;

    let (other, opener) = locked_behind_an_opener(&store, &file).await;
    let mut writes = Vec::new();
    for run in ["before", "bad", "after"] {
        let store = store.clone();
        let first = support::runs::ten_stage_run("orders", run).remove(0);
        writes.push(tokio::spawn(async move {
            store.begin_run(first, TTL, Begin::Replace).await
        }));
        // queued in this order
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answers = answers_once_released(other, opener, writes).await;

    bad_failed_alone(&answers);
    assert!(
        answers[2].as_ref().is_ok_and(|b| b.started),
        "{:?}",
        answers[2]
    );
    assert_eq!(store.load("orders/before").await.expect("load"), None);
    assert!(store.load("orders/after").await.expect("load").is_some());
    for run in ["orders/before", "orders/bad"] {
        store
            .acquire_lease(run, TTL)
            .await
            .expect("no lease was left behind");
    }
}
