//! The conformance suite every checkpoint store passes (feature `test-util`).
//!
//! Each check is a plain `async fn` over a [`Harness`] and panics when the
//! store misbehaves. [`store_conformance_tests!`](crate::store_conformance_tests)
//! turns all of them into one `#[test]` each, run twice: through the
//! concrete store type and through `Arc<dyn CheckpointStore>`.
//!
//! ```
//! use fluxio_core::store::InMemoryStore;
//! use fluxio_core::store::conformance::SharedMemory;
//!
//! async fn harness() -> Option<SharedMemory> {
//!     Some(SharedMemory::default())
//! }
//!
//! fluxio_core::store_conformance_tests!(harness);
//! # fn main() {}
//! ```
//!
//! The cancel checks (contract rule 14, `rule14_*`) also pass on a store
//! with only the four required methods, through the default `cancel`; the
//! lease checks need a store that keeps expiring leases itself.
//!
//! Checks that involve leases use real time (time-to-lives of a few hundred
//! milliseconds), because shared stores expire leases on their own clocks.
//!
//! Beyond the store's own methods, a few checks look further when the
//! harness lets them: at the raw bytes ([`Harness::write_raw`]), at the
//! records behind the API ([`Harness::records`]), and at the retention of
//! completed runs ([`Harness::store_with_retention`],
//! [`Harness::purge_expired`]). Each hook has a default that says "not
//! this store", and the checks (or the parts of them) that need it then do
//! not apply.

mod input;

pub use input::corrupt_payload_is_a_typed_error;
pub use input::lease_ttl_out_of_range_is_invalid_setting;
pub use input::malformed_run_ids_are_invalid_run_id;
pub use input::urls_with_password;

mod lease;

pub use lease::lease_is_exclusive_under_concurrent_acquires;

pub use lease::renewal_keeps_the_lease;

pub use lease::expired_lease_is_taken_over_with_a_greater_token;

pub use lease::stale_token_is_fenced;

pub use lease::stale_writes_never_land_after_a_takeover;

pub use lease::expired_lease_refuses_writes;

pub use lease::release_frees_at_once_and_only_its_own_lease;

pub use lease::fenced_writes_with_the_current_lease;

mod begin;

mod cancel;

mod child;

mod deadline;

mod pause;

mod deleted;

mod journal;

mod line;

mod list;

mod recover;

mod retention;

mod run;

mod queue;

mod schedule;

mod terminal;

mod waits;

pub use waits::{
    park, rule25_a_sleep_parks_the_run_until_a_worker_wakes_it_once,
    rule25_a_sleeping_run_is_stored_with_its_wake_time_and_due_from_it,
    rule26_a_signal_is_stored_once_and_another_payload_conflicts,
    rule26_a_wait_is_decided_once_by_a_signal_or_its_deadline,
    rule26_a_waiting_run_continues_with_its_signal_or_its_timeout,
    rule26_racing_signals_and_deadlines_have_one_winner, rule27_a_claim_takes_each_due_run_once,
    rule27_a_run_whose_claimant_died_is_woken_by_the_next_worker,
    rule27_a_waiting_run_is_due_when_signalled_or_past_its_deadline,
    rule27_busy_workers_wake_every_due_run_once_and_none_fails,
    rule27_racing_workers_continue_each_due_run_once, rule28_a_test_clock_fires_a_recovery_backoff,
    signal, waiting,
};

pub use child::{
    rule29_a_child_runs_once_and_its_result_goes_into_the_parent,
    rule29_a_failed_child_fails_the_parent_until_it_is_retried,
    rule29_a_fan_out_runs_a_child_per_item_and_collects_their_results,
    rule29_cancelling_a_parent_cancels_its_open_child, rule29_child_runs_are_listed_by_parent,
};

pub use terminal::{
    rule35_a_compensation_is_stored_and_told_by_the_history,
    rule35_a_run_failed_for_good_is_stored_so_and_not_run_again,
};

pub use queue::{
    rule31_a_queue_slot_is_a_lease_no_listing_shows,
    rule31_workers_start_queued_runs_within_the_limits,
};

pub use schedule::{
    rule32_a_schedule_starts_one_run_per_tick_across_workers, rule32_overlap_and_catch_up_policies,
};

pub use pause::{
    rule30_a_pause_racing_fenced_saves_wins_until_unpaused,
    rule30_a_pause_stops_the_owner_before_its_next_stage,
    rule30_a_paused_wait_or_sleep_goes_back_to_it_when_unpaused,
    rule30_a_recovery_policy_can_pause_what_it_gives_up,
};

pub use deadline::{
    rule30_a_deadline_on_the_stores_clock_stops_a_slow_run,
    rule30_a_run_past_its_deadline_stops_before_its_next_stage,
    rule30_a_sleep_past_the_deadline_wakes_the_run_to_fail_at_it,
    rule30_a_wait_is_left_at_the_runs_deadline_not_its_timeout,
};

pub use begin::{
    rule24_begin_run_if_absent_leaves_a_stored_run_alone,
    rule24_begin_run_replaces_a_stored_run_under_a_new_lease,
    rule24_concurrent_begins_of_one_run_begin_once,
    rule24_finish_run_writes_the_last_checkpoint_and_frees_the_lease,
};

pub use cancel::{
    rule14_a_cancel_racing_fenced_saves_wins_for_good, rule14_a_failed_run_can_be_cancelled,
    rule14_a_plain_save_replaces_a_cancel, rule14_a_run_whose_owner_is_gone_can_be_cancelled,
    rule14_cancel_does_not_touch_another_key,
    rule14_cancel_marks_a_running_run_and_fences_its_owner,
    rule14_cancel_of_a_completed_run_is_run_finished,
    rule14_cancel_of_an_unknown_run_is_checkpoint_not_found,
    rule14_cancel_twice_is_run_finished_cancelled, rule14_delete_clears_a_cancel,
};

pub use deleted::rule18_a_run_deleted_while_it_runs_stops_with_run_deleted;

pub use journal::{
    rule18_a_checkpoint_sent_again_replaces_the_later_ones,
    rule18_a_delta_without_its_predecessor_is_refused, rule18_deltas_are_stored_and_loaded_whole,
    rule20_a_plain_save_stores_the_journal_it_carries,
    rule20_history_is_cut_at_a_whole_checkpoint_and_deleted_with_the_run,
    rule20_keep_completed_keeps_the_newest_completed_runs_of_each_pipeline,
};

pub use line::{
    rule14_a_cancelled_sync_run_starts_no_further_stage,
    rule17_a_value_too_deep_is_refused_alike_on_every_store,
    rule20_history_depth_keeps_between_n_and_n_plus_32_checkpoints,
    rule24_a_cancelled_async_run_stops_at_its_first_refused_write,
    rule24_an_async_run_starts_no_stage_once_a_refusal_reached_it,
};

pub use list::{
    rule21_a_store_without_listing_says_so, rule21_counts_agree_with_the_listing,
    rule21_keys_list_in_byte_order_and_every_filter_value_is_answered,
    rule21_runs_are_listed_by_pipeline_state_version_and_time,
};

pub use recover::{
    rule22_retry_hands_a_failed_run_back_to_the_workers,
    rule27_a_recovery_time_is_kept_in_the_due_index,
};

pub use retention::{
    completed_runs_expire_and_are_purged_failed_and_running_ones_stay,
    purging_dead_leases_keeps_tokens_growing,
};

pub use run::{
    a_failed_run_resumes_from_the_failed_stage_on_another_store,
    rule19_a_finished_branch_is_kept_by_the_store_and_not_run_again,
};

use std::collections::{BTreeMap, BTreeSet, HashMap};

use std::future::Future;

use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::{Arc, Mutex, PoisonError};

use std::time::Duration;

use super::{Checkpoint, CheckpointStore, InMemoryStore, Lease, RunStatus};

use crate::context::Context;

use crate::error::Error;

/// Makes stores for the checks.
#[async_trait::async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The store under test.
    type Store: CheckpointStore;

    /// A store over namespace `ns` (a key prefix, a schema, ...). Two calls
    /// with the same `ns` must give two handles on the same data, as two
    /// processes would have; different namespaces never see each other's
    /// data. `ns` is made of `[a-z0-9_]`, at most 40 characters.
    async fn store(&self, ns: &str) -> Self::Store;

    /// Stores `bytes` as the raw payload of `run_id` in `ns`, bypassing the
    /// encoder, and returns `true`; or returns `false` for a store that keeps
    /// values rather than bytes (the corrupt-payload check then does not apply).
    async fn write_raw(&self, ns: &str, run_id: &str, bytes: &[u8]) -> bool {
        let _ = (ns, run_id, bytes);
        false
    }

    /// What the store keeps in `ns`, read past its API (its rows or keys):
    /// hidden and released records included. `None` (the default) when the
    /// harness cannot tell; the checks then skip their assertions on records.
    async fn records(&self, ns: &str) -> Option<Records> {
        let _ = ns;
        None
    }

    /// For a store that hides completed runs after a retention (contract
    /// rule 7: SQLite and Postgres): a store over `ns` with the retention
    /// `retention` (`None`: completed runs are kept). `None` (the default)
    /// for a store without one; the retention checks then do not apply.
    async fn store_with_retention(
        &self,
        ns: &str,
        retention: Option<Duration>,
    ) -> Option<Self::Store> {
        let _ = (ns, retention);
        None
    }

    /// For a store that purges what has expired (`purge_expired`): purges
    /// `ns` and returns how many checkpoints went. `None` (the default) for
    /// a store without a purge; the purge checks then do not apply.
    async fn purge_expired(&self, ns: &str) -> Option<u64> {
        let _ = ns;
        None
    }

    /// For a store that keeps only the newest completed runs of each
    /// pipeline (contract rule 20's keep-the-last-N): a store over `ns`
    /// keeping `n`. `None` (the default) for a store without the setting;
    /// the check then does not apply.
    async fn store_keeping_completed(&self, ns: &str, n: usize) -> Option<Self::Store> {
        let _ = (ns, n);
        None
    }
}

/// What a store keeps in one namespace, as [`Harness::records`] reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    /// The run id of every stored checkpoint, hidden ones (a completed run
    /// past its retention, not yet purged) included.
    pub checkpoints: BTreeSet<String>,
    /// The run id of every lease record, released and expired ones included,
    /// and whether that lease is held (neither released nor expired).
    pub leases: BTreeMap<String, bool>,
}

/// Wraps a harness so its stores are used as `Arc<dyn CheckpointStore>`.
#[derive(Debug)]
pub struct DynHarness<H>(pub H);

#[async_trait::async_trait]
impl<H: Harness> Harness for DynHarness<H> {
    type Store = Arc<dyn CheckpointStore>;

    async fn store(&self, ns: &str) -> Self::Store {
        Arc::new(self.0.store(ns).await)
    }

    async fn write_raw(&self, ns: &str, run_id: &str, bytes: &[u8]) -> bool {
        self.0.write_raw(ns, run_id, bytes).await
    }

    async fn records(&self, ns: &str) -> Option<Records> {
        self.0.records(ns).await
    }

    async fn store_with_retention(
        &self,
        ns: &str,
        retention: Option<Duration>,
    ) -> Option<Self::Store> {
        let store = self.0.store_with_retention(ns, retention).await?;
        Some(Arc::new(store))
    }

    async fn purge_expired(&self, ns: &str) -> Option<u64> {
        self.0.purge_expired(ns).await
    }

    async fn store_keeping_completed(&self, ns: &str, n: usize) -> Option<Self::Store> {
        let store = self.0.store_keeping_completed(ns, n).await?;
        Some(Arc::new(store))
    }
}

/// The harness of [`InMemoryStore`]: one shared store per namespace.
#[derive(Debug, Default)]
pub struct SharedMemory(Mutex<HashMap<String, Arc<InMemoryStore>>>);

#[async_trait::async_trait]
impl Harness for SharedMemory {
    type Store = Arc<InMemoryStore>;

    async fn store(&self, ns: &str) -> Self::Store {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(ns.to_owned()).or_default())
    }

    async fn store_keeping_completed(&self, ns: &str, n: usize) -> Option<Self::Store> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let store = map
            .entry(format!("{ns}#keep{n}"))
            .or_insert_with(|| Arc::new(InMemoryStore::new().keep_completed(n)));
        Some(Arc::clone(store))
    }
}

/// Runs `f` on a multi-threaded tokio runtime (what the generated tests use).
///
/// # Panics
/// When the runtime cannot be built.
pub fn block_on<F: Future>(f: F) -> F::Output {
    #[allow(clippy::expect_used)]
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime for the conformance checks");
    rt.block_on(f)
}

/// For harness constructors: when the server is unreachable, fail if the `CI`
/// environment variable is set, otherwise print a loud `SKIPPED` line (see
/// [`skip`]) and return `None`.
///
/// # Panics
/// When `CI` is set.
pub fn skip_unless_ci<T>(server: &str, error: &dyn std::fmt::Display) -> Option<T> {
    if std::env::var_os("CI").is_some() {
        panic!(
            "{server} is unreachable and CI is set, so the tests fail instead of skipping: {error}"
        );
    }
    skip(&format_args!(
        "{server} is unreachable ({error}); start it to run these tests"
    ));
    None
}

/// Prints `SKIPPED: <reason>` to the process's standard error, past the
/// test harness's capture of `eprintln!` (which shows a passing test's
/// output only with `--nocapture`): a skipped test must be seen.
pub fn skip(reason: &dyn std::fmt::Display) {
    use std::io::Write as _;
    // One write, so that lines of tests running in parallel do not mix.
    let line = format!("SKIPPED: {reason}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// A unique namespace for one check: `fx_<check>_<pid>_<n>`.
#[must_use]
pub fn namespace(check: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let check: String = check
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(16)
        .collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "fx_{check}_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The checkpoint the checks write, and fluxio's own tests too: run `run_id`
/// at `ip`, step `step-{ip}`, version `0123456789ab`, status `Running`, an
/// empty context, a fixed start time, and a write time and attempt that vary
/// with `ip` (so a store that drops a field fails a round trip). Set fields
/// to change it:
///
/// ```
/// use fluxio_core::store::conformance::checkpoint;
/// use fluxio_core::{Context, RunStatus};
///
/// let mut cp = checkpoint("order-7", 2);
/// cp.status = RunStatus::Failed;
/// cp.context = Context::new().set("total", 42u64)?.snapshot();
/// assert_eq!((cp.step.as_str(), cp.attempt), ("step-2", 3));
/// # Ok::<(), fluxio_core::Error>(())
/// ```
#[must_use]
pub fn checkpoint(run_id: &str, ip: u32) -> Checkpoint {
    let mut cp = Checkpoint::new(
        run_id,
        "0123456789ab",
        ip,
        format!("step-{ip}"),
        Context::new().snapshot(),
    );
    cp.created_at_ms = 1_700_000_000_000;
    cp.updated_at_ms = 1_700_000_000_000 + u64::from(ip);
    cp.attempt = ip % 3 + 1;
    cp
}

/// Two handles on the namespace `ns`: two processes sharing the store.
async fn two_handles<H: Harness>(h: &H, ns: &str) -> (H::Store, H::Store) {
    (h.store(ns).await, h.store(ns).await)
}

/// Takes the lease of `key` for `ttl`, which must be free.
async fn acquire<S: CheckpointStore>(store: &S, key: &str, ttl: Duration) -> Lease {
    store
        .acquire_lease(key, ttl)
        .await
        .unwrap_or_else(|e| panic!("acquire {key}: {e}"))
}

/// Asserts that the lease of `key` is free: takes it, and gives it back.
async fn assert_lease_free<S: CheckpointStore>(store: &S, key: &str) {
    let lease = acquire(store, key, Duration::from_secs(30)).await;
    store.release_lease(lease).await.expect("release");
}

/// Runs `task` `n` times at once, each on one of four handles on `ns` in
/// turn and let go together (a barrier), and returns what each returned,
/// in order.
async fn race<H, F, T>(
    h: &H,
    ns: &str,
    n: usize,
    task: impl Fn(usize, Arc<H::Store>) -> F,
) -> Vec<T>
where
    H: Harness,
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(Arc::new(h.store(ns).await));
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (barrier, run) = (Arc::clone(&barrier), task(i, Arc::clone(&stores[i % 4])));
            tokio::spawn(async move {
                barrier.wait().await;
                run.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(n);
    for t in tasks {
        results.push(t.await.expect("no panic"));
    }
    results
}

/// Saves `cp` as its run's owner does: takes the lease of its key for `ttl`
/// and saves it fenced under the lease, which stays held.
async fn save_owned<S: CheckpointStore>(store: &S, cp: Checkpoint, ttl: Duration) -> Lease {
    let key = cp.key();
    let lease = acquire(store, &key, ttl).await;
    store
        .save_fenced(cp, &lease)
        .await
        .unwrap_or_else(|e| panic!("fenced save of {key}: {e}"));
    lease
}

/// [`save_owned`], then the lease given back: a run whose owner stopped.
async fn save_released<S: CheckpointStore>(store: &S, cp: Checkpoint, ttl: Duration) {
    let lease = save_owned(store, cp, ttl).await;
    store.release_lease(lease).await.expect("release");
}

/// Asserts that `store` cannot take the lease of `key` (for `ttl`): another
/// owner holds it.
async fn assert_lease_held<S: CheckpointStore>(store: &S, key: &str, ttl: Duration, what: &str) {
    assert!(
        matches!(
            store.acquire_lease(key, ttl).await,
            Err(Error::RunIdInUse { .. })
        ),
        "{what}"
    );
}

/// A pipeline of the suite: `nodes`, built as `digest`, named `name`, with
/// `resource` registered and a lease of 5 seconds.
fn suite_pipeline<R: Clone + Send + Sync + 'static>(
    nodes: Vec<crate::compile::Node>,
    digest: [u8; 32],
    name: &str,
    resource: &R,
) -> crate::pipeline::PipelineBuilder {
    crate::pipeline::PipelineBuilder::new(nodes, digest, digest)
        .name(name)
        .resource(resource.clone())
        .lease_ttl(Duration::from_secs(5))
}

/// The stage `name` of a suite pipeline: async, taking the resources
/// `takes`, with a code hash of `n`s.
fn suite_stage(
    name: &'static str,
    n: u8,
    takes: &'static [fn() -> crate::stage::ResourceReq],
    call: crate::stage::CallFn,
) -> crate::compile::Node {
    let meta = crate::stage::StageMeta {
        resources: takes,
        ..crate::__private::stage_meta(name, [n; 32])
    };
    crate::compile::Node::Stage(crate::stage::Stage::new(meta, call))
}

/// [`checkpoint`] with the context `ctx`.
fn checkpoint_with(run_id: &str, ip: u32, ctx: &Context) -> Checkpoint {
    let mut cp = checkpoint(run_id, ip);
    cp.context = ctx.snapshot();
    cp
}

#[allow(clippy::expect_used)]
fn every_value_type() -> Context {
    let nested: BTreeMap<String, BTreeMap<u32, Vec<String>>> = [(
        "outer".to_owned(),
        [(7u32, vec!["ü".to_owned(), String::new()])]
            .into_iter()
            .collect(),
    )]
    .into_iter()
    .collect();
    Context::new()
        .set("u64_max", u64::MAX)
        .and_then(|c| c.set("i64_min", i64::MIN))
        .and_then(|c| c.set("i128_min", i128::MIN))
        .and_then(|c| c.set("nan", f64::NAN))
        .and_then(|c| c.set("inf", f64::INFINITY))
        .and_then(|c| c.set("neg_inf", f64::NEG_INFINITY))
        .and_then(|c| c.set("neg_zero", -0.0f64))
        .and_then(|c| c.set("f64", 0.1 + 0.2))
        .map(|c| c.set_value("bytes", crate::Value::Bytes(vec![0, 1, 255, 0])))
        .and_then(|c| c.set("nested", nested))
        .and_then(|c| c.set("ключ 🔑 :/ space", "значение"))
        .and_then(|c| c.set("none", Option::<u8>::None))
        .expect("every test value serializes")
}

const RUN_IDS: &[&str] = &[
    "plain",
    "with:colon",
    "with/slash",
    "with space",
    "ユニコード 🦀",
    "a:b/c d:",
];

/// Every value type and awkward run ids survive save and load unchanged.
pub async fn round_trip_of_every_value_type<H: Harness>(h: &H) {
    let store = h.store(&namespace("roundtrip")).await;
    let ctx = every_value_type();
    for run_id in RUN_IDS {
        let cp = checkpoint_with(run_id, 3, &ctx);
        store.save(cp.clone()).await.expect("save");
        let back = store.load(run_id).await.expect("load").expect("saved");
        assert_eq!(back, cp, "round trip of run `{run_id}`");
        let f: f64 = back
            .context
            .to_context()
            .get("nan")
            .expect("nan reads back");
        assert!(f.is_nan());
        let z: f64 = back
            .context
            .to_context()
            .get("neg_zero")
            .expect("reads back");
        assert!(z.is_sign_negative(), "-0.0 keeps its sign");
    }
}

/// A second save replaces the first.
pub async fn save_overwrites<H: Harness>(h: &H) {
    let store = h.store(&namespace("overwrite")).await;
    store.save(checkpoint("r", 1)).await.expect("save");
    let mut second = checkpoint("r", 2);
    second.status = RunStatus::Failed;
    second.error_message = Some("boom".to_owned());
    store.save(second.clone()).await.expect("save");
    assert_eq!(store.load("r").await.expect("load"), Some(second));
}

/// Loading an id that was never saved is `None`, not an error.
pub async fn load_of_a_missing_id_is_none<H: Harness>(h: &H) {
    let store = h.store(&namespace("missing")).await;
    assert!(store.load("never-saved").await.expect("load").is_none());
    assert!(!store.exists("never-saved").await.expect("exists"));
}

/// Deleting twice, or deleting what was never saved, is fine.
pub async fn delete_is_idempotent<H: Harness>(h: &H) {
    let store = h.store(&namespace("delete")).await;
    store
        .delete("never-saved")
        .await
        .expect("delete of a missing id");
    store.save(checkpoint("r", 1)).await.expect("save");
    store.delete("r").await.expect("delete");
    store.delete("r").await.expect("second delete");
    assert!(store.load("r").await.expect("load").is_none());
}

/// `exists` follows save and delete.
pub async fn exists_follows_save_and_delete<H: Harness>(h: &H) {
    let store = h.store(&namespace("exists")).await;
    assert!(!store.exists("r").await.expect("exists"));
    store.save(checkpoint("r", 1)).await.expect("save");
    assert!(store.exists("r").await.expect("exists"));
    store.delete("r").await.expect("delete");
    assert!(!store.exists("r").await.expect("exists"));
}

/// Two namespaces (key prefixes, schemas) never see each other's data or leases.
pub async fn namespaces_are_isolated<H: Harness>(h: &H) {
    let (a, b) = (
        h.store(&namespace("iso_a")).await,
        h.store(&namespace("iso_b")).await,
    );
    a.save(checkpoint("shared-id", 1)).await.expect("save");
    assert!(b.load("shared-id").await.expect("load").is_none());
    assert!(!b.exists("shared-id").await.expect("exists"));
    b.delete("shared-id").await.expect("delete");
    assert!(
        a.exists("shared-id").await.expect("exists"),
        "b's delete did not touch a"
    );
    let _held = a
        .acquire_lease("shared-id", Duration::from_secs(30))
        .await
        .expect("acquire in a");
    b.acquire_lease("shared-id", Duration::from_secs(30))
        .await
        .expect("b's lease is independent");
}

/// Rule 10: runs of two pipelines that share a run id are kept apart. The
/// store keys checkpoints by [`Checkpoint::key`] (`pipeline/run_id`), so
/// neither pipeline loads, overwrites, deletes or leases the other's run.
pub async fn rule10_pipelines_sharing_a_run_id_are_kept_apart<H: Harness>(h: &H) {
    let store = h.store(&namespace("named")).await;
    let ctx = |who: &str| Context::new().set_value("who", crate::Value::String(who.to_owned()));
    let mut orders = checkpoint("42", 1).in_pipeline("orders");
    orders.context = ctx("orders").snapshot();
    let mut emails = checkpoint("42", 5).in_pipeline("emails");
    emails.context = ctx("emails").snapshot();
    let (k_orders, k_emails) = (orders.key(), emails.key());
    assert_eq!(
        (k_orders.as_str(), k_emails.as_str()),
        ("orders/42", "emails/42")
    );
    store.save(orders.clone()).await.expect("save orders");
    store.save(emails.clone()).await.expect("save emails");
    for (key, want) in [(&k_orders, &orders), (&k_emails, &emails)] {
        let got = store.load(key).await.expect("load").expect("stored");
        assert_eq!(&got, want, "{key}");
    }
    assert!(
        store.load("42").await.expect("load").is_none(),
        "the bare run id is another (unnamed) run"
    );
    store.delete(&k_emails).await.expect("delete emails");
    assert!(
        store.exists(&k_orders).await.expect("exists"),
        "orders kept"
    );
    let held = acquire(&store, &k_orders, Duration::from_secs(30)).await;
    // emails/42 is not leased by orders/42: it takes and saves under its own
    let _other = save_owned(&store, emails.clone(), Duration::from_secs(30)).await;
    assert!(
        matches!(
            store.save_fenced(emails, &held).await,
            Err(Error::LeaseLost { .. })
        ),
        "orders/42's lease does not fence emails/42"
    );
}

/// A 10 MB context round-trips.
pub async fn ten_megabyte_context<H: Harness>(h: &H) {
    let store = h.store(&namespace("large")).await;
    let blob: Vec<u8> = (0..10 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let ctx = Context::new().set_value("blob", crate::Value::Bytes(blob));
    let cp = checkpoint_with("large", 1, &ctx);
    store.save(cp.clone()).await.expect("save 10 MB");
    assert_eq!(store.load("large").await.expect("load"), Some(cp));
}

/// 100 concurrent saves to distinct ids all land.
pub async fn hundred_concurrent_saves<H: Harness>(h: &H) {
    let store = Arc::new(h.store(&namespace("concurrent")).await);
    let saves = (0..100u32).map(|i| {
        let store = Arc::clone(&store);
        async move {
            let ctx = Context::new().set("i", i).expect("serializes");
            store
                .save(checkpoint_with(&format!("run-{i}"), i, &ctx))
                .await
        }
    });
    for r in futures::future::join_all(saves).await {
        r.expect("concurrent save");
    }
    for i in 0..100u32 {
        let cp = store
            .load(&format!("run-{i}"))
            .await
            .expect("load")
            .expect("saved");
        assert_eq!(
            (cp.ip, cp.context.to_context().get::<u32>("i").expect("i")),
            (i, i)
        );
    }
}

/// Generates one `#[test]` per conformance check, for the concrete store and
/// through `Arc<dyn CheckpointStore>`.
///
/// `$make` is an `async fn() -> Option<impl Harness>`; `None` skips (see
/// [`skip_unless_ci`](crate::store::conformance::skip_unless_ci)).
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:path) => {
        mod conformance_concrete {
            #[allow(unused_imports)]
            use super::*;
            $crate::__store_conformance_each!($make, |h| h);
        }
        mod conformance_dyn {
            #[allow(unused_imports)]
            use super::*;
            $crate::__store_conformance_each!($make, $crate::store::conformance::DynHarness);
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __store_conformance_each {
    ($make:path, $wrap:expr) => {
        $crate::__store_conformance_each!(@each $make, $wrap,
            round_trip_of_every_value_type,
            save_overwrites,
            load_of_a_missing_id_is_none,
            delete_is_idempotent,
            exists_follows_save_and_delete,
            namespaces_are_isolated,
            ten_megabyte_context,
            hundred_concurrent_saves,
            lease_is_exclusive_under_concurrent_acquires,
            renewal_keeps_the_lease,
            expired_lease_is_taken_over_with_a_greater_token,
            stale_token_is_fenced,
            stale_writes_never_land_after_a_takeover,
            expired_lease_refuses_writes,
            release_frees_at_once_and_only_its_own_lease,
            fenced_writes_with_the_current_lease,
            corrupt_payload_is_a_typed_error,
            lease_ttl_out_of_range_is_invalid_setting,
            malformed_run_ids_are_invalid_run_id,
            rule10_pipelines_sharing_a_run_id_are_kept_apart,
            a_failed_run_resumes_from_the_failed_stage_on_another_store,
            rule19_a_finished_branch_is_kept_by_the_store_and_not_run_again,
            completed_runs_expire_and_are_purged_failed_and_running_ones_stay,
            purging_dead_leases_keeps_tokens_growing,
            rule14_cancel_of_an_unknown_run_is_checkpoint_not_found,
            rule14_cancel_marks_a_running_run_and_fences_its_owner,
            rule14_cancel_of_a_completed_run_is_run_finished,
            rule14_cancel_twice_is_run_finished_cancelled,
            rule14_a_failed_run_can_be_cancelled,
            rule14_a_run_whose_owner_is_gone_can_be_cancelled,
            rule14_delete_clears_a_cancel,
            rule14_a_plain_save_replaces_a_cancel,
            rule14_cancel_does_not_touch_another_key,
            rule14_a_cancel_racing_fenced_saves_wins_for_good,
            rule18_deltas_are_stored_and_loaded_whole,
            rule18_a_delta_without_its_predecessor_is_refused,
            rule18_a_run_deleted_while_it_runs_stops_with_run_deleted,
            rule18_a_checkpoint_sent_again_replaces_the_later_ones,
            rule20_history_is_cut_at_a_whole_checkpoint_and_deleted_with_the_run,
            rule20_a_plain_save_stores_the_journal_it_carries,
            rule20_keep_completed_keeps_the_newest_completed_runs_of_each_pipeline,
            rule21_runs_are_listed_by_pipeline_state_version_and_time,
            rule21_a_store_without_listing_says_so,
            rule21_keys_list_in_byte_order_and_every_filter_value_is_answered,
            rule21_counts_agree_with_the_listing,
            rule22_retry_hands_a_failed_run_back_to_the_workers,
            rule24_begin_run_replaces_a_stored_run_under_a_new_lease,
            rule24_begin_run_if_absent_leaves_a_stored_run_alone,
            rule24_concurrent_begins_of_one_run_begin_once,
            rule24_finish_run_writes_the_last_checkpoint_and_frees_the_lease,
            rule20_history_depth_keeps_between_n_and_n_plus_32_checkpoints,
            rule14_a_cancelled_sync_run_starts_no_further_stage,
            rule24_a_cancelled_async_run_stops_at_its_first_refused_write,
            rule24_an_async_run_starts_no_stage_once_a_refusal_reached_it,
            rule17_a_value_too_deep_is_refused_alike_on_every_store,
            rule25_a_sleeping_run_is_stored_with_its_wake_time_and_due_from_it,
            rule25_a_sleep_parks_the_run_until_a_worker_wakes_it_once,
            rule26_a_signal_is_stored_once_and_another_payload_conflicts,
            rule26_a_wait_is_decided_once_by_a_signal_or_its_deadline,
            rule26_racing_signals_and_deadlines_have_one_winner,
            rule26_a_waiting_run_continues_with_its_signal_or_its_timeout,
            rule27_a_waiting_run_is_due_when_signalled_or_past_its_deadline,
            rule27_racing_workers_continue_each_due_run_once,
            rule27_a_claim_takes_each_due_run_once,
            rule27_a_run_whose_claimant_died_is_woken_by_the_next_worker,
            rule27_busy_workers_wake_every_due_run_once_and_none_fails,
            rule27_a_recovery_time_is_kept_in_the_due_index,
            rule28_a_test_clock_fires_a_recovery_backoff,
            rule29_a_child_runs_once_and_its_result_goes_into_the_parent,
            rule29_a_failed_child_fails_the_parent_until_it_is_retried,
            rule29_cancelling_a_parent_cancels_its_open_child,
            rule29_child_runs_are_listed_by_parent,
            rule29_a_fan_out_runs_a_child_per_item_and_collects_their_results,
            rule31_a_queue_slot_is_a_lease_no_listing_shows,
            rule31_workers_start_queued_runs_within_the_limits,
            rule32_a_schedule_starts_one_run_per_tick_across_workers,
            rule32_overlap_and_catch_up_policies,
            rule30_a_run_past_its_deadline_stops_before_its_next_stage,
            rule30_a_sleep_past_the_deadline_wakes_the_run_to_fail_at_it,
            rule30_a_wait_is_left_at_the_runs_deadline_not_its_timeout,
            rule30_a_deadline_on_the_stores_clock_stops_a_slow_run,
            rule30_a_pause_stops_the_owner_before_its_next_stage,
            rule30_a_paused_wait_or_sleep_goes_back_to_it_when_unpaused,
            rule30_a_recovery_policy_can_pause_what_it_gives_up,
            rule30_a_pause_racing_fenced_saves_wins_until_unpaused,
            rule35_a_run_failed_for_good_is_stored_so_and_not_run_again,
            rule35_a_compensation_is_stored_and_told_by_the_history,
        );
    };
    (@each $make:path, $wrap:expr, $($check:ident),+ $(,)?) => {
        $(
            #[test]
            fn $check() {
                $crate::store::conformance::block_on(async {
                    let Some(harness) = $make().await else { return };
                    #[allow(clippy::redundant_closure_call)]
                    let harness = ($wrap)(harness);
                    $crate::store::conformance::$check(&harness).await;
                });
            }
        )+
    };
}
