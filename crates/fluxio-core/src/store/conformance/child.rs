//! Checks of child runs (contract rule 29): a parent starts a run of
//! another pipeline with an id derived from its own, waits for it parked,
//! takes its result or its failure, attaches to it when resumed, and
//! cancels it when cancelled.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Harness;
use super::waits::{Calls, count, counted};
use super::{namespace, suite_pipeline};
use crate::child::{Child, ChildFailure};
use crate::context::Context;
use crate::error::Error;
use crate::outcome::Outcome;
use crate::pipeline::{Pipeline, StartOptions};
use crate::stage::{Output, Resources, StageFuture};
use crate::store::{CheckpointStore, DueFilter, RunFilter, RunStatus, cancel_with_children};
use crate::testing::TestClock;

/// The child's stage: counts its call (counter 1), fails its first call
/// when the context says `fail_once`, and sets `invoice`.
fn charge(ctx: Context, resources: &Resources) -> StageFuture {
    let calls = resources.get::<Calls>();
    StageFuture::new(async move {
        let calls = calls.ok_or("counters")?;
        let before = calls.0[1].fetch_add(1, Ordering::SeqCst);
        if before == 0 && ctx.get_opt::<bool>("fail_once") == Some(true) {
            return Err("card declined".into());
        }
        let order: u32 = ctx.get("order")?;
        Ok(Output::Context(ctx.set("invoice", format!("inv-{order}"))?))
    })
}

/// A parent `first, child(bill), third` and its child `bill` (`charge`),
/// in one store, on one test clock, the child step built by `step`.
async fn family<H: Harness>(
    h: &H,
    check: &str,
    step: Child,
) -> (Pipeline, Pipeline, Calls, TestClock) {
    let store: std::sync::Arc<dyn CheckpointStore> =
        std::sync::Arc::new(h.store(&namespace(check)).await);
    let (calls, clock) = (Calls::default(), TestClock::new());
    let child = suite_pipeline(
        vec![super::suite_stage("charge", 7, CHARGE_TAKES, charge)],
        *b"fluxio/conformance/bill/v1\0\0\0\0\0\0",
        "bill",
        &calls,
    )
    .clock(clock.clock())
    .store_arc(std::sync::Arc::clone(&store))
    .build()
    .expect("the child builds");
    let parent = suite_pipeline(
        vec![
            counted("first", 1, count::<0>),
            crate::compile::Node::Child(step),
            counted("third", 3, count::<2>),
        ],
        *b"fluxio/conformance/parent/v1\0\0\0\0",
        "mom",
        &calls,
    )
    .clock(clock.clock())
    .store_arc(store)
    .child(child.clone())
    .build()
    .expect("the parent builds");
    (parent, child, calls, clock)
}

const CHARGE_TAKES: &[fn() -> crate::stage::ResourceReq] =
    &[crate::stage::ResourceReq::of::<Calls>];

/// The order `n` as a parent's input.
fn order(n: u32) -> Context {
    Context::new().set("order", n).expect("a u32")
}

/// The child key of parent run `run` of [`family`]: its child step is at
/// position 1 of the program.
fn child_key(parent: &Pipeline, run: &str) -> String {
    let at = parent
        .program()
        .instrs
        .iter()
        .position(|i| matches!(i, crate::compile::Instr::Child { .. }))
        .expect("a child step");
    format!(
        "bill/{}",
        crate::child::child_run_id(&format!("mom/{run}"), parent.program().position(at))
    )
}

/// Runs `parent`'s and `child`'s due runs until `run` of `parent` ends (a
/// store without a due-index: resumes the child, then the parent, by
/// hand), at most `sweeps` sweeps; returns the parent's latest checkpoint.
async fn settle(parent: &Pipeline, child: &Pipeline, run: &str) -> crate::Checkpoint {
    let key = child_key(parent, run);
    let id = key
        .split_once('/')
        .map(|(_, id)| id.to_owned())
        .expect("a key");
    settle_all(parent, child, run, &[id]).await
}

/// [`settle`], for the children `ids` (resumed by hand on a store without
/// a due-index).
async fn settle_all(
    parent: &Pipeline,
    child: &Pipeline,
    run: &str,
    ids: &[String],
) -> crate::Checkpoint {
    let store = parent.store().expect("durable");
    let indexed = store.due_runs(&DueFilter::new(0)).await.is_ok();
    let both = crate::recovery::RecoveryWorker::builder()
        .pipeline(parent.clone())
        .pipeline(child.clone())
        .build()
        .expect("a worker");
    for _ in 0..6 {
        let latest = parent.checkpoint(run).await.expect("load").expect("stored");
        if matches!(
            latest.status,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        ) {
            return latest;
        }
        if indexed {
            both.run_once().await.expect("a sweep");
        } else {
            for id in ids {
                let _ = child.resume(id).await;
            }
            let _ = parent.resume(run).await;
        }
    }
    parent.checkpoint(run).await.expect("load").expect("stored")
}

/// Rule 29: a parent reaching a child step stores the child (due at once,
/// under `{parent key}#{position}`, with the parent's input keys) and
/// parks waiting for it, holding nothing; a worker runs the child once,
/// its end makes the parent due, and the parent goes on with the child's
/// result; a client's retried start, and a resume while the child runs,
/// attach to the same child.
pub async fn rule29_a_child_runs_once_and_its_result_goes_into_the_parent<H: Harness>(h: &H) {
    let step = Child::of("bill").input(["order"]).output(["invoice"]);
    let (parent, child, calls, _clock) = family(h, "rule29_result", step).await;
    let key = child_key(&parent, "o1");
    match parent.invoke("o1", order(42)).await.expect("runs") {
        Outcome::Waiting { key: k, waits, .. } => {
            assert_eq!(k, "mom/o1");
            let names: Vec<&str> = waits.iter().map(|w| w.name.as_str()).collect();
            assert_eq!(names, [format!("child:{key}")], "it waits for its child");
        }
        other => panic!("expected Waiting, got {other:?}"),
    }
    assert_eq!(calls.get(), [1, 0, 0]);
    let stored = store_of(&parent)
        .load(&key)
        .await
        .expect("load")
        .expect("the child is stored");
    assert_eq!(
        (stored.status, stored.context.len()),
        (RunStatus::Sleeping, 1),
        "due at once, with only its input key: {stored:?}"
    );
    super::assert_lease_free(store_of(&parent), "mom/o1").await;
    // a client's retry and a resume attach to the child; none starts another
    let again = parent.start("o1", order(42)).await.expect("start");
    assert!(matches!(again, Outcome::Waiting { .. }), "{again:?}");
    let _ = parent.resume("o1").await.expect("resume");
    let history = store_of(&parent).history(&key).await.expect("history");
    assert_eq!(history.len(), 2, "the child was stored once: {history:?}");

    let done = settle(&parent, &child, "o1").await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(calls.get(), [1, 1, 1], "each stage ran once");
    let out = crate::Context::from(done.context);
    assert_eq!(
        out.get::<String>("invoice").expect("the child's result"),
        "inv-42"
    );
    let child_done = store_of(&parent)
        .load(&key)
        .await
        .expect("load")
        .expect("kept");
    assert_eq!(child_done.status, RunStatus::Completed);
    // a client's retry after the end gets the same result, and runs nothing
    let retried = parent.start("o1", order(42)).await.expect("start");
    assert!(matches!(retried, Outcome::Completed(_)), "{retried:?}");
    assert_eq!(calls.get(), [1, 1, 1]);
}

/// Rule 29: a child that fails fails its parent at the child step with
/// `ChildFailed` naming both; the parent retried retries the child from
/// where it failed, and then completes. With a failure key the parent goes
/// on with a `ChildFailure` instead.
pub async fn rule29_a_failed_child_fails_the_parent_until_it_is_retried<H: Harness>(h: &H) {
    let (parent, child, calls, _clock) = family(h, "rule29_failed", Child::of("bill")).await;
    let key = child_key(&parent, "o2");
    let input = order(7).set("fail_once", true).expect("a bool");
    let parked = parent.invoke("o2", input).await.expect("parks");
    assert!(matches!(parked, Outcome::Waiting { .. }), "{parked:?}");
    let failed = settle(&parent, &child, "o2").await;
    assert_eq!(failed.status, RunStatus::Failed, "{failed:?}");
    assert_eq!(failed.step, "child(bill)");
    let message = failed.error_message.clone().unwrap_or_default();
    assert!(
        message.contains(&key) && message.contains("card declined"),
        "the parent's error names the child and its error: {message}"
    );
    match parent.resume("o2").await {
        Ok(Outcome::Waiting { .. }) => {}
        other => panic!("a retried parent retries its child and waits: {other:?}"),
    }
    let done = settle(&parent, &child, "o2").await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(
        calls.get(),
        [1, 2, 1],
        "the child's stage ran again, nothing else"
    );
    let out = crate::Context::from(done.context);
    assert_eq!(out.get::<String>("invoice").expect("merged"), "inv-7");

    // with a failure key, the parent goes on
    let step = Child::of("bill").failure_into("billing_error");
    let (parent, child, calls, _clock) = family(h, "rule29_failure_key", step).await;
    let input = order(8).set("fail_once", true).expect("a bool");
    let _ = parent.invoke("o3", input).await.expect("parks");
    let done = settle(&parent, &child, "o3").await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let out = crate::Context::from(done.context);
    let failure: ChildFailure = out.get("billing_error").expect("the failure");
    assert_eq!(
        (failure.run.as_str(), failure.state.as_str()),
        (child_key(&parent, "o3").as_str(), "failed")
    );
    assert!(
        failure
            .error
            .as_deref()
            .is_some_and(|e| e.contains("card declined")),
        "{failure:?}"
    );
    assert_eq!(calls.get(), [1, 1, 1]);
}

/// Rule 29: cancelling a parent that waits for its child cancels the
/// child, through the pipeline and through the store alone (what the CLI
/// does); rule 30: the child gets the earlier of its own deadline and the
/// parent's.
pub async fn rule29_cancelling_a_parent_cancels_its_open_child<H: Harness>(h: &H) {
    let step = Child::of("bill").deadline(Duration::from_secs(600));
    let (parent, _child, calls, clock) = family(h, "rule29_cancel", step).await;
    let hour = StartOptions::new().deadline_in(Duration::from_secs(3600));
    let _ = parent
        .invoke_with("o4", order(1), hour)
        .await
        .expect("parks");
    let key = child_key(&parent, "o4");
    let stored = store_of(&parent)
        .load(&key)
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(
        stored.deadline_ms,
        Some(clock.now_ms() + 600_000),
        "its own ten minutes, earlier than the parent's hour"
    );
    parent.cancel("o4").await.expect("cancel");
    let child_now = store_of(&parent)
        .load(&key)
        .await
        .expect("load")
        .expect("kept");
    assert_eq!(child_now.status, RunStatus::Cancelled, "{child_now:?}");
    assert_eq!(
        child_now.error_message.as_deref(),
        Some("cancelled with its parent `mom/o4`"),
        "its history says why"
    );
    let parent_now = parent.checkpoint("o4").await.expect("load").expect("kept");
    assert_eq!(
        parent_now.error_message, None,
        "the parent was cancelled itself"
    );
    assert!(matches!(
        parent.cancel("o4").await,
        Err(Error::RunFinished { .. })
    ));

    let _ = parent.invoke("o5", order(2)).await.expect("parks");
    let cancelled = cancel_with_children(store_of(&parent).as_ref(), "mom/o5")
        .await
        .expect("cancel");
    assert_eq!(cancelled, [child_key(&parent, "o5")]);
    let child_now = store_of(&parent)
        .load(&child_key(&parent, "o5"))
        .await
        .expect("load")
        .expect("kept");
    assert_eq!(
        child_now.error_message.as_deref(),
        Some("cancelled with its parent `mom/o5`")
    );
    assert_eq!(calls.get(), [2, 0, 0], "no child ran");
}

/// Rule 29 (and 21): a listing by parent finds the runs whose id is the
/// parent's key and `#`, in every pipeline, and nothing else; with a
/// pipeline, only that pipeline's; its pages follow one another.
pub async fn rule29_child_runs_are_listed_by_parent<H: Harness>(h: &H) {
    let ns = namespace("rule29_list");
    let store = h.store(&ns).await;
    if !super::list::lists_runs(&store).await {
        return;
    }
    let parent = format!("mom/{ns}");
    let keys = [
        format!("bill/{parent}#1"),
        format!("kid/{parent}#3"),
        format!("bill/{parent}0#1"),
        format!("bill/{parent}"),
        parent.clone(),
        format!("bill/x{parent}#1"),
    ];
    for key in &keys {
        let (pipeline, id) = key.split_once('/').expect("a key");
        store
            .save(super::checkpoint(id, 1).in_pipeline(pipeline))
            .await
            .expect("save");
    }
    let listed = |filter: RunFilter| {
        let store = &store;
        async move {
            let page = store.list_runs(&filter).await.expect("list");
            (
                page.runs.into_iter().map(|r| r.key).collect::<Vec<_>>(),
                page.next,
            )
        }
    };
    let (all, next) = listed(RunFilter::new().children_of(&parent)).await;
    assert_eq!((all.as_slice(), next), (&keys[..2], None));
    let (bill, _) = listed(RunFilter::new().children_of(&parent).pipeline("bill")).await;
    assert_eq!(bill, [keys[0].clone()]);
    let (first, next) = listed(RunFilter::new().children_of(&parent).limit(1)).await;
    assert_eq!(first, [keys[0].clone()]);
    let next = next.expect("a second page");
    let (second, last) = listed(RunFilter::new().children_of(&parent).limit(1).after(next)).await;
    assert_eq!((second, last), (vec![keys[1].clone()], None));
}

/// Rule 29, a fan-out: one child per item of a list, each with its item,
/// ids `{parent key}#{position}.{i}`; the parent goes on when all have
/// ended, with their results in item order; a failed child fails the
/// parent until it is retried, which retries only that child; cancelling
/// the parent cancels its open children.
pub async fn rule29_a_fan_out_runs_a_child_per_item_and_collects_their_results<H: Harness>(h: &H) {
    use std::collections::BTreeMap;
    let step = Child::of("bill")
        .output(["invoice"])
        .each("orders", "order", "invoices");
    let (parent, child, calls, _clock) = family(h, "rule29_fan", step).await;
    let base = child_key(&parent, "f1");
    let ids: Vec<String> = (0..3)
        .map(|i| format!("{}.{i}", base.split_once('/').expect("a key").1))
        .collect();
    let input = Context::new()
        .set("orders", vec![5u32, 6, 7])
        .and_then(|c| c.set("fail_once", true))
        .expect("values");
    let parked = parent.invoke("f1", input).await.expect("parks");
    let Outcome::Waiting { waits, .. } = &parked else {
        panic!("the parent waits for its children: {parked:?}");
    };
    assert_eq!(waits[0].name, format!("child:{base}.*"));
    for id in &ids {
        let stored = store_of(&parent)
            .load(&format!("bill/{id}"))
            .await
            .expect("load");
        assert!(stored.is_some(), "child {id} stored");
    }
    let failed = settle_all(&parent, &child, "f1", &ids).await;
    assert_eq!(
        failed.status,
        RunStatus::Failed,
        "one child failed: {failed:?}"
    );
    assert!(
        failed
            .error_message
            .as_deref()
            .is_some_and(|m| m.contains("one of 1 failed children of 3")),
        "{failed:?}"
    );
    assert_eq!(calls.get()[1], 3);
    let _ = parent.resume("f1").await.expect("a retry waits again");
    let done = settle_all(&parent, &child, "f1", &ids).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(calls.get(), [1, 4, 1], "only the failed child ran again");
    let out = crate::Context::from(done.context);
    let invoices: Vec<BTreeMap<String, String>> = out.get("invoices").expect("the results");
    let got: Vec<&str> = invoices.iter().map(|m| m["invoice"].as_str()).collect();
    assert_eq!(got, ["inv-5", "inv-6", "inv-7"], "in item order");

    // cancelling a parent cancels every open child of its fan-out
    let input = Context::new().set("orders", vec![1u32, 2]).expect("a list");
    let _ = parent.invoke("f2", input).await.expect("parks");
    parent.cancel("f2").await.expect("cancel");
    let base = child_key(&parent, "f2");
    for i in 0..2 {
        let cp = store_of(&parent)
            .load(&format!("{base}.{i}"))
            .await
            .expect("load");
        let status = cp.expect("stored").status;
        let listing = store_of(&parent).list_runs(&RunFilter::new()).await.is_ok();
        if listing {
            assert_eq!(status, RunStatus::Cancelled, "child {i}");
        }
    }
    // a list that is not one fails the parent at the step, naming the key
    let bad = Context::new().set("orders", "seven").expect("a string");
    let refused = parent.invoke("f3", bad).await;
    assert!(
        matches!(&refused, Err(Error::Validation { message, .. }) if message.contains("`orders`")),
        "{refused:?}"
    );
}

fn store_of(p: &Pipeline) -> &std::sync::Arc<dyn CheckpointStore> {
    p.store().expect("durable")
}
