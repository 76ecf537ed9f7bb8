//! Contract rule 24: a durable run starts and ends in one transaction each
//! (`begin_run`, `finish_run`), so a 10-stage run commits 11 times, counted
//! as the harness counts the store's commits ([`SqlHarness::commits`]).

use fluxio_core::Outcome;
use fluxio_core::store::{CheckpointStore, RunStatus};

use super::{SqlHarness, open, ten_counts};
use crate::runs;

/// The one-transaction overrides answer as the trait's defaults do.
pub async fn rule24_begin_and_finish_run_answer_as_the_defaults<H: SqlHarness>(h: &H) {
    let store = open(h).await;
    runs::check_begin_and_finish(&store, "orders").await;
}

/// A 10-stage run driven as a durable pipeline drives it: 11 commits, one
/// per checkpoint (the lease taken with the first, given back with the
/// last), where acquire, delete, 11 saves and release made 14.
pub async fn rule24_a_ten_stage_run_commits_eleven_times<H: SqlHarness>(h: &H) {
    let store = open(h).await;
    h.count_commits(&store).await;
    let run = runs::ten_stage_run("orders", "1");
    let before = h.commits(&store).await;
    runs::drive(&store, &run).await;
    assert_eq!(h.commits(&store).await - before, 11);
    let stored = store
        .load(&run[0].key())
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(stored.status, RunStatus::Completed);
}

/// The same through a durable pipeline of 10 stages, each setting one key:
/// `invoke` begins the run with `begin_run` and ends it with `finish_run`,
/// so it commits 11 times (issue 13: at most 11).
pub async fn rule24_a_ten_stage_durable_invoke_commits_eleven_times<H: SqlHarness>(h: &H) {
    let store = open(h).await;
    h.count_commits(&store).await;
    let p = ten_counts()
        .name("orders")
        .store(store.clone())
        .build()
        .expect("valid");
    let before = h.commits(&store).await;
    let out = p
        .invoke("1", fluxio_core::Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("the run completes");
    let commits = h.commits(&store).await - before;
    assert_eq!(out.get::<u64>("n").expect("n"), 10);
    // one per checkpoint: 10 before the stages, and the completed one
    assert_eq!(commits, 11);
}
