//! Checks of listing runs (contract rule 21).

use std::time::Duration;

use super::{Harness, checkpoint, namespace};
use crate::error::Error;
use crate::store::{Checkpoint, CheckpointStore, MAX_LIST_LIMIT, RunCount, RunFilter, RunState};

/// Whether `store` lists runs: `false` when it answers `Unsupported`; when
/// it lists them, its fresh namespace lists none.
pub(super) async fn lists_runs<S: CheckpointStore>(store: &S) -> bool {
    match store.list_runs(&RunFilter::new()).await {
        Err(Error::Unsupported { .. }) => false,
        Err(e) => panic!("list_runs: {e}"),
        Ok(page) => {
            assert!(page.runs.is_empty(), "a fresh namespace: {page:?}");
            true
        }
    }
}

const TTL: Duration = Duration::from_secs(30);

/// Rule 21: a store lists its runs with their states (a running run with
/// no lease held is abandoned), filtered by pipeline, state, version and
/// time, a page at a time; the pages together are the whole list. A store
/// that answers `Unsupported` is not checked here (see
/// [`rule21_a_store_without_listing_says_so`]).
pub async fn rule21_runs_are_listed_by_pipeline_state_version_and_time<H: Harness>(h: &H) {
    let ns = namespace("rule21_list");
    let store = h.store(&ns).await;
    if !lists_runs(&store).await {
        return;
    }
    let at = |pipeline: &str, id: &str, ip: u32| -> Checkpoint {
        let mut cp = checkpoint(&format!("{ns}-{id}"), ip).in_pipeline(pipeline);
        cp.created_at_ms = 1_700_000_000_000 + u64::from(ip);
        cp
    };
    // held: running, its lease held; gone: running, its lease released
    let held = at("p", "held", 1);
    let held_lease = store.acquire_lease(&held.key(), TTL).await.expect("lease");
    store
        .save_fenced(held.clone(), &held_lease)
        .await
        .expect("save");
    let gone = at("p", "gone", 2);
    let lease = store.acquire_lease(&gone.key(), TTL).await.expect("lease");
    store.save_fenced(gone.clone(), &lease).await.expect("save");
    store.release_lease(lease).await.expect("release");
    let failed = at("p", "failed", 3).failed("card declined");
    store.save(failed.clone()).await.expect("save");
    let mut done = at("p", "done", 4).completed();
    done.version = "fedcba987654".into();
    store.save(done.clone()).await.expect("save");
    let other = at("q", "other", 5).completed();
    store.save(other.clone()).await.expect("save");
    let cancelled = at("p", "cancelled", 6);
    store.save(cancelled.clone()).await.expect("save");
    store.cancel(&cancelled.key()).await.expect("cancel");
    let stuck = at("p", "stuck", 7).failed("timeout").needing_attention();
    store.save(stuck.clone()).await.expect("save");

    let list = |filter: RunFilter| {
        let store = &store;
        async move {
            let page = store.list_runs(&filter).await.expect("list");
            page.runs
                .iter()
                .map(|r| (r.key.clone(), r.state))
                .collect::<Vec<_>>()
        }
    };
    let mut all = vec![
        (held.key(), RunState::Running),
        (gone.key(), RunState::Abandoned),
        (failed.key(), RunState::Failed),
        (done.key(), RunState::Completed),
        (other.key(), RunState::Completed),
        (cancelled.key(), RunState::Cancelled),
        (stuck.key(), RunState::NeedsAttention),
    ];
    all.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(list(RunFilter::new()).await, all);
    let one = |key: String, state| vec![(key, state)];
    assert_eq!(
        list(RunFilter::new().state(RunState::Failed)).await,
        one(failed.key(), RunState::Failed)
    );
    assert_eq!(
        list(RunFilter::new().state(RunState::Abandoned)).await,
        one(gone.key(), RunState::Abandoned)
    );
    assert_eq!(
        list(RunFilter::new().pipeline("q")).await,
        one(other.key(), RunState::Completed)
    );
    assert_eq!(
        list(RunFilter::new().version("fedcba987654")).await,
        one(done.key(), RunState::Completed)
    );
    assert_eq!(
        list(RunFilter::new().state(RunState::NeedsAttention)).await,
        one(stuck.key(), RunState::NeedsAttention)
    );
    let mut recent = RunFilter::new().pipeline("p");
    recent.created_after_ms = Some(1_700_000_000_004);
    let mut expected = vec![
        (done.key(), RunState::Completed),
        (cancelled.key(), RunState::Cancelled),
        (stuck.key(), RunState::NeedsAttention),
    ];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(list(recent).await, expected);

    let page = store
        .list_runs(&RunFilter::new().state(RunState::Failed))
        .await
        .expect("list");
    let summary = &page.runs[0];
    assert_eq!(summary.error_message.as_deref(), Some("card declined"));
    assert_eq!(
        (summary.pipeline.as_str(), summary.step.as_str()),
        ("p", "step-3")
    );
    let page = store
        .list_runs(&RunFilter::new().state(RunState::Running))
        .await
        .expect("list");
    assert!(
        page.runs[0].lease_expires_at_ms.is_some(),
        "a held lease shows its expiry"
    );

    // pages of two, chained by their cursors, are the whole list
    let mut paged = Vec::new();
    let mut filter = RunFilter::new().limit(2);
    loop {
        let page = store.list_runs(&filter).await.expect("page");
        assert!(page.runs.len() <= 2);
        paged.extend(page.runs.iter().map(|r| (r.key.clone(), r.state)));
        match page.next {
            Some(next) => filter = filter.after(next),
            None => break,
        }
    }
    assert_eq!(paged, all);
    store.release_lease(held_lease).await.expect("release");
}

/// Rule 21: a store without listing (the four required methods) answers
/// with the typed `Unsupported` error; everything else still works.
pub async fn rule21_a_store_without_listing_says_so<H: Harness>(h: &H) {
    let ns = namespace("rule21_unsupported");
    let store = h.store(&ns).await;
    let key = format!("p/{ns}-run");
    store
        .save(checkpoint(&format!("{ns}-run"), 1).in_pipeline("p"))
        .await
        .expect("save");
    match store.list_runs(&RunFilter::new()).await {
        Err(Error::Unsupported { operation, .. }) => {
            assert_eq!(operation, "list runs");
            assert!(store.exists(&key).await.expect("exists"));
        }
        Ok(page) => assert_eq!(page.runs.len(), 1, "a store that lists, lists it"),
        Err(e) => panic!("expected Unsupported or a list, got {e}"),
    }
}

/// Rule 21: keys list in byte order (as Rust orders strings, whatever a
/// database's collation says), page after page; a pipeline lists exactly
/// its own runs (not those of a pipeline whose name starts like it, nor
/// bare run ids); each summary mirrors its run's latest checkpoint; and
/// filters at the ends of their ranges are answered, not refused. A store
/// that answers `Unsupported` is not checked here.
pub async fn rule21_keys_list_in_byte_order_and_every_filter_value_is_answered<H: Harness>(h: &H) {
    let ns = namespace("rule21_order");
    let store = h.store(&ns).await;
    if !lists_runs(&store).await {
        return;
    }
    let saved = seed_awkward_keys(&store, &ns).await;
    let keys = |runs: &[Checkpoint]| runs.iter().map(Checkpoint::key).collect::<Vec<_>>();
    let list = |filter: RunFilter| listed(&store, filter);

    let page = store.list_runs(&RunFilter::new()).await.expect("list").runs;
    assert_eq!(
        page.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
        keys(&saved),
        "byte order"
    );
    // the fields a summary mirrors, of a summary or a checkpoint
    macro_rules! mirrored {
        ($of:expr) => {
            (
                $of.pipeline.as_str(),
                $of.version.as_str(),
                $of.step.as_str(),
                $of.attempt,
                $of.error_message.as_deref(),
                $of.created_at_ms,
            )
        };
    }
    for (summary, cp) in page.iter().zip(&saved) {
        assert_eq!(mirrored!(summary), mirrored!(cp), "{}", summary.key);
    }

    // one run a page, the cursor through every awkward key
    let mut paged = Vec::new();
    let mut filter = RunFilter::new().limit(1);
    loop {
        let (runs, next) = list(filter.clone()).await;
        assert!(runs.len() <= 1);
        paged.extend(runs);
        match next {
            Some(next) => filter = filter.after(next),
            None => break,
        }
    }
    assert_eq!(paged, keys(&saved), "pages of one");

    let of = |pipeline: &str| {
        keys(
            &saved
                .iter()
                .filter(|cp| cp.pipeline == pipeline)
                .cloned()
                .collect::<Vec<_>>(),
        )
    };
    for pipeline in ["p", "p-2", "p0", "P", ""] {
        assert_eq!(
            list(RunFilter::new().pipeline(pipeline)).await,
            (of(pipeline), None),
            "pipeline {pipeline:?}"
        );
    }
    let failed_p: Vec<String> = saved
        .iter()
        .filter(|cp| cp.pipeline == "p" && cp.is_failed())
        .map(Checkpoint::key)
        .collect();
    assert_eq!(
        list(RunFilter::new().pipeline("p").state(RunState::Failed)).await,
        (failed_p, None)
    );
    for nothing in ["nope", "p/", "p/x", "q"] {
        assert_eq!(
            list(RunFilter::new().pipeline(nothing)).await,
            (vec![], None),
            "pipeline {nothing:?}"
        );
    }

    answers_the_ends_of_every_range(&store, &saved).await;
}

/// Saves runs under awkward keys in `store`, one in two failed, each
/// started a millisecond after the one before; returns them in key order.
async fn seed_awkward_keys<S: CheckpointStore>(store: &S, ns: &str) -> Vec<Checkpoint> {
    // `a/x`: a run id may hold a `/`; `p-2` and `p0` sort just before and
    // just after `p/`; `P` before them all; the bare run has no pipeline.
    let mut saved = Vec::new();
    for (ip, (pipeline, id)) in [
        ("p", "B"),
        ("p", "a"),
        ("p", "é"),
        ("p", "Z"),
        ("p", "a-1"),
        ("p", "a_1"),
        ("p", "a/x"),
        ("p", "~"),
        ("p-2", "x"),
        ("p0", "x"),
        ("P", "x"),
        ("", "bare"),
    ]
    .into_iter()
    .enumerate()
    {
        let ip = u32::try_from(ip).unwrap_or(u32::MAX);
        let mut cp = checkpoint(&format!("{ns}-{id}"), ip).in_pipeline(pipeline);
        cp.created_at_ms += u64::from(ip);
        if ip % 2 == 1 {
            cp = cp.failed(format!("failure {ip}"));
        }
        store.save(cp.clone()).await.expect("save");
        saved.push(cp);
    }
    saved.sort_by_key(Checkpoint::key);
    saved
}

/// The keys `filter` lists from `store`, and its cursor.
async fn listed<S: CheckpointStore>(store: &S, filter: RunFilter) -> (Vec<String>, Option<String>) {
    let page = store.list_runs(&filter).await.expect("list");
    (page.runs.iter().map(|r| r.key.clone()).collect(), page.next)
}

/// The filters at the ends of their ranges are answered (or, for a limit
/// out of range, refused by name) on `store`, which holds `saved`.
async fn answers_the_ends_of_every_range<S: CheckpointStore>(store: &S, saved: &[Checkpoint]) {
    let keys = |runs: &[Checkpoint]| runs.iter().map(Checkpoint::key).collect::<Vec<_>>();
    let list = |filter: RunFilter| listed(store, filter);
    let mut filter = RunFilter::new();
    filter.created_after_ms = Some(u64::MAX);
    assert_eq!(list(filter).await, (vec![], None), "created after the end");
    let mut filter = RunFilter::new();
    filter.created_after_ms = Some(0);
    filter.updated_before_ms = Some(u64::MAX);
    assert_eq!(list(filter).await, (keys(saved), None), "any time");
    let mut filter = RunFilter::new();
    filter.updated_before_ms = Some(0);
    assert_eq!(list(filter).await, (vec![], None), "updated before 1970");
    let first = saved[0].key();
    assert_eq!(
        list(RunFilter::new().limit(1)).await,
        (vec![first.clone()], Some(first)),
        "the smallest page"
    );
    assert_eq!(
        list(RunFilter::new().limit(MAX_LIST_LIMIT)).await,
        (keys(saved), None),
        "the largest page"
    );
    for limit in [0, MAX_LIST_LIMIT + 1, usize::MAX] {
        let mut filter = RunFilter::new();
        filter.limit = limit;
        let refused = store.list_runs(&filter).await;
        assert!(
            matches!(
                &refused,
                Err(Error::InvalidSetting {
                    setting: "limit",
                    ..
                })
            ),
            "limit {limit}: {refused:?}"
        );
    }
    assert_eq!(
        list(RunFilter::new().after("")).await,
        (keys(saved), None),
        "after the empty key"
    );
    assert_eq!(
        list(RunFilter::new().after("\u{10FFFF}")).await,
        (vec![], None),
        "after the last key there can be"
    );
    assert_eq!(
        list(RunFilter::new().version("no such version")).await,
        (vec![], None)
    );
}

/// Rule 21: a store counts its runs per pipeline and state as it lists
/// them: the counts of a filter are the listing's runs of that filter,
/// tallied (a running run without its lease counted as abandoned), sorted
/// by pipeline and state, no zero rows.
pub async fn rule21_counts_agree_with_the_listing<H: Harness>(h: &H) {
    let ns = namespace("rule21_count");
    let store = h.store(&ns).await;
    if !lists_runs(&store).await {
        return;
    }
    let run = |pipeline: &str, id: &str| checkpoint(&format!("{ns}-{id}"), 1).in_pipeline(pipeline);
    for id in ["f1", "f2", "f3"] {
        store.save(run("p", id).failed("no")).await.expect("save");
    }
    store.save(run("p", "d1").completed()).await.expect("save");
    store.save(run("q", "d2").completed()).await.expect("save");
    let held = run("p", "held");
    let held_lease = store.acquire_lease(&held.key(), TTL).await.expect("lease");
    store.save_fenced(held, &held_lease).await.expect("save");
    let gone = run("p", "gone");
    let lease = store.acquire_lease(&gone.key(), TTL).await.expect("lease");
    store.save_fenced(gone, &lease).await.expect("save");
    store.release_lease(lease).await.expect("release");

    let count = |filter: RunFilter| {
        let store = &store;
        async move { store.count_runs(&filter).await.expect("count") }
    };
    assert_eq!(
        count(RunFilter::new()).await,
        vec![
            RunCount::new("p", RunState::Running, 1),
            RunCount::new("p", RunState::Abandoned, 1),
            RunCount::new("p", RunState::Failed, 3),
            RunCount::new("p", RunState::Completed, 1),
            RunCount::new("q", RunState::Completed, 1),
        ]
    );
    assert_eq!(
        count(RunFilter::new().pipeline("q")).await,
        vec![RunCount::new("q", RunState::Completed, 1)]
    );
    assert_eq!(
        count(RunFilter::new().state(RunState::Failed)).await,
        vec![RunCount::new("p", RunState::Failed, 3)]
    );
    // a page's limit and cursor do not bound a count
    assert_eq!(
        count(
            RunFilter::new()
                .pipeline("p")
                .state(RunState::Failed)
                .limit(1)
                .after(format!("p/{ns}-f1"))
        )
        .await,
        vec![RunCount::new("p", RunState::Failed, 3)]
    );
    assert_eq!(
        count(RunFilter::new().id_prefix(format!("{ns}-f"))).await,
        vec![RunCount::new("p", RunState::Failed, 3)]
    );
    assert!(
        count(RunFilter::new().version("000000000000"))
            .await
            .is_empty()
    );
    // the counts are the listing's runs, tallied
    let listed = store
        .list_runs(&RunFilter::new().limit(MAX_LIST_LIMIT))
        .await
        .expect("list");
    let tallied = crate::store::tally(
        listed
            .runs
            .iter()
            .map(|r| RunCount::new(r.pipeline.clone(), r.state, 1)),
    );
    assert_eq!(count(RunFilter::new()).await, tallied);
    store.release_lease(held_lease).await.expect("release");
}
