//! Rule 21 on a SQL server: a listing reads one range of an index in key
//! order, as the database's own plan shows, on a table of 20,000 runs (so
//! that the planner weighs real statistics). Written once; a store crate
//! gives its [`Planner`] (how it clones rows, asks for a plan and reads
//! one) in a unit test, where the listing's statement is the store's own.

use fluxio_core::store::{CheckpointStore, RunFilter, RunState};

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
    /// the running runs are abandoned); refreshes the planner's statistics.
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
        let names = p.names(index, &filter);
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
        let page = p.store().list_runs(&filter).await.expect("list");
        assert!(!page.runs.is_empty(), "{filter:?} lists runs");
    }
}
