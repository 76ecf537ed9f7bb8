//! Rules 21 and 27 on a SQL server: a listing reads one range of an index
//! in key order, and so do the due runs, as the database's own plan shows,
//! on a table of 20,000 runs (so that the planner weighs real statistics).
//! Written once; a store crate gives its [`Planner`] (how it clones rows,
//! asks for a plan and reads one) in a unit test, where the statements are
//! the store's own.

use std::time::Duration;

use fluxio_core::store::{CheckpointStore, DueFilter, Pending, RunFilter, RunState};

/// The index a listing should read the checkpoint table by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Index {
    /// The run's key (the primary key or its unique index).
    Key,
    /// `(status, run_id)`.
    State,
    /// `(pipeline, status, run_id)`.
    PipelineState,
}

/// A store's side of [`rule21_listing_reads_one_index_range_in_key_order`].
#[async_trait::async_trait]
pub trait Planner: Sized + Send + Sync {
    /// The store.
    type Store: CheckpointStore;

    /// A store of the test's own, in namespace `ns` on the server at `url`.
    async fn open(url: String, ns: String) -> Self;
    /// The store.
    fn store(&self) -> &Self::Store;
    /// Clones the row of run `orders/seed` under 20,000 new keys: 10,000
    /// runs of `orders` (`orders/000001`...), one in ten failed, and 10,000
    /// of `other`, one in two failed; gives every run a released lease (so
    /// the running runs are abandoned), the seed's due time kept; refreshes the
    /// planner's statistics.
    async fn clone_seed(&self);
    /// The plan of the store's listing statement for `filter`, a line per
    /// row the database gives.
    async fn plan(&self, filter: &RunFilter) -> Vec<String>;
    /// Whether `line` of a plan reads the checkpoint table: then, the
    /// index it goes through in key order (`None` for any other read).
    fn table_read<'a>(&self, line: &'a str) -> Option<Option<&'a str>>;
    /// Whether `line` finds the lease by its key.
    fn lease_by_key(&self, line: &str) -> bool;
    /// Whether `line` sorts, or scans a table in full.
    fn sorts_or_scans(&self, line: &str) -> bool;
    /// The names of `index`, any of which a listing with `filter` may
    /// read (a planner may walk the keys from a cursor on instead).
    fn names(&self, index: Index, filter: &RunFilter) -> Vec<String>;
    /// The plan of the store's due runs' statement for `filter`, as
    /// [`plan`](Self::plan) gives a listing's.
    async fn due_plan(&self, filter: &DueFilter) -> Vec<String>;
    /// The plan of a claim's statement for `filter` (`leased`: the runs
    /// with a lease row, locked; else those without one).
    async fn claim_plan(&self, filter: &DueFilter, leased: bool) -> Vec<String>;
    /// The name of the index on `(due_at, run_id)`.
    fn due_index(&self) -> String;
}

/// Rule 21: on a table of 20,000 runs, each filter the indexes cover
/// reads one index range in key order, and the lease by its key; each
/// lists runs.
pub async fn rule21_listing_reads_one_index_range_in_key_order<P: Planner>(
    url: String,
    ns: String,
) {
    let p = P::open(url, ns).await;
    let seed = crate::checkpoint("seed", 3).in_pipeline("orders");
    p.store().save(seed).await.expect("save the seed");
    p.clone_seed().await;
    let failed = RunFilter::new().state(RunState::Failed);
    let cases = [
        (failed.clone().pipeline("orders"), Index::PipelineState),
        (
            failed.clone().pipeline("orders").after("orders/000500"),
            Index::PipelineState,
        ),
        (failed.clone(), Index::State),
        (
            RunFilter::new()
                .state(RunState::Abandoned)
                .after("orders/9"),
            Index::State,
        ),
        (RunFilter::new().pipeline("orders"), Index::Key),
        (RunFilter::new(), Index::Key),
    ];
    for (filter, index) in cases {
        let plan = p.plan(&filter).await;
        assert_one_range(&p, &plan, &p.names(index, &filter), &filter);
        let page = p.store().list_runs(&filter).await.expect("list");
        assert!(!page.runs.is_empty(), "{filter:?} lists runs");
    }
}

/// Checks that `plan` (of a statement with `filter`) reads the checkpoint
/// table once, by one of `names` in its order, and each lease by its key:
/// no sort, no full scan.
fn assert_one_range<P: Planner>(
    p: &P,
    plan: &[String],
    names: &[String],
    filter: &dyn std::fmt::Debug,
) {
    let shown = plan.join("\n");
    let reads: Vec<Option<&str>> = plan.iter().filter_map(|l| p.table_read(l)).collect();
    match &*reads {
        [Some(name)] => assert!(
            names.iter().any(|n| n == name),
            "{filter:?} reads {name}, not one of {names:?}:\n{shown}"
        ),
        other => {
            panic!("{filter:?}: one read of the table by {names:?}, not {other:?}:\n{shown}")
        }
    }
    assert!(
        plan.iter().any(|l| p.lease_by_key(l)),
        "{filter:?} finds the lease by its key:\n{shown}"
    );
    assert!(
        !plan.iter().any(|l| p.sorts_or_scans(l)),
        "{filter:?}: no sort, no full scan:\n{shown}"
    );
}

/// Rule 27: on a table of 20,000 runs that sleep, due at one instant
/// (the seed cloned), and 200 more parked through the store, due one after
/// the other, the due runs, of every pipeline or of some, read one range
/// of the `(due_at, run_id)` index in its order and each candidate's lease
/// by its key: no sort, no full scan.
pub async fn rule27_due_runs_read_one_range_of_the_due_index<P: Planner>(url: String, ns: String) {
    let p = P::open(url, ns).await;
    let seed = crate::checkpoint("seed", 3)
        .in_pipeline("orders")
        .parked(Pending::sleep(1_000));
    p.store().save(seed).await.expect("save the seed");
    let ttl = Duration::from_secs(30);
    for i in 0..200_u64 {
        let asleep = crate::checkpoint(&format!("due-{i:03}"), 2)
            .in_pipeline("orders")
            .parked(Pending::sleep(1_000 + i * 10));
        let lease = p
            .store()
            .acquire_lease(&asleep.key(), ttl)
            .await
            .expect("acquire");
        p.store()
            .finish_run(asleep, lease, false)
            .await
            .expect("park");
    }
    p.clone_seed().await;
    let cases = [
        DueFilter::new(u64::MAX),
        DueFilter::new(1_990).pipeline("orders"),
        DueFilter::new(1_990)
            .pipeline("orders")
            .pipeline("other")
            .limit(10),
    ];
    let index = [p.due_index()];
    for filter in cases {
        let plan = p.due_plan(&filter).await;
        assert_one_range(&p, &plan, &index, &filter);
        for leased in [true, false] {
            let plan = p.claim_plan(&filter, leased).await;
            assert_one_range(&p, &plan, &index, &(&filter, leased));
        }
        let due = p.store().due_runs(&filter).await.expect("due runs");
        assert_eq!(due.len(), filter.limit, "{filter:?}");
        assert!(
            due.windows(2)
                .all(|w| (w[0].due_ms, &w[0].key) < (w[1].due_ms, &w[1].key)),
            "earliest first, then in key order"
        );
    }
}

/// The tests of this module in a server store's crate: rule 21's and rule
/// 27's checks, each with the store's [`Planner`] `$planner`, in a
/// namespace of its own that `$in_namespace` makes and drops
/// ([`in_schema`](crate::postgres::in_schema),
/// [`in_database`](crate::mysql::in_database)).
///
/// ```ignore
/// fluxio_test_support::sql_plan_tests!(Plan, support::postgres::in_schema);
/// ```
#[macro_export]
macro_rules! sql_plan_tests {
    ($planner:ty, $in_namespace:path) => {
        /// Rule 21: each filter the indexes cover reads one index range in
        /// key order (the shared check).
        #[tokio::test]
        async fn rule21_listing_reads_one_index_range_in_key_order() {
            let check =
                $crate::sql::plan::rule21_listing_reads_one_index_range_in_key_order::<$planner>;
            $in_namespace("list_plan", check).await;
        }

        /// Rule 27: the due runs read one range of the `(due_at, run_id)`
        /// index (the shared check).
        #[tokio::test]
        async fn rule27_due_runs_read_one_range_of_the_due_index() {
            let check =
                $crate::sql::plan::rule27_due_runs_read_one_range_of_the_due_index::<$planner>;
            $in_namespace("due_plan", check).await;
        }
    };
}
