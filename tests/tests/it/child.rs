//! docs/CONTRACT.md rule 29, child runs, through the facade: `child!` in
//! `pipeline!`, a worker that serves a parent and its child on the wall
//! clock, what counts in the version, and the misuse a user can make of it.

use std::sync::Arc;
use std::time::Duration;

use fluxio::child::ChildFailure;
use fluxio::recovery::RecoveryWorker;
use fluxio::store::{CheckpointStore, RunFilter};
use fluxio::{
    Context, Error, InMemoryStore, Outcome, Pipeline, RunStatus, StageResult, StartOptions,
    pipeline, stage,
};

#[stage]
async fn reserve(ctx: Context) -> StageResult {
    Ok(ctx.set("reserved", true)?)
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    let amount: u64 = ctx.get("amount")?;
    if amount == 0 {
        return Err("nothing to charge".into());
    }
    Ok(ctx.set("invoice", format!("inv-{amount}"))?)
}

#[stage]
async fn ship(ctx: Context) -> StageResult {
    Ok(ctx.set("shipped", true)?)
}

fn memory() -> Arc<dyn CheckpointStore> {
    Arc::new(InMemoryStore::new())
}

fn billing(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![charge]
        .name("billing")
        .store_arc(store.clone())
        .build()
        .expect("billing builds")
}

fn worker(parent: &Pipeline, child: &Pipeline) -> RecoveryWorker {
    RecoveryWorker::builder()
        .pipeline(parent.clone())
        .pipeline(child.clone())
        .build()
        .expect("a worker")
}

/// Sweeps until `run` of `parent` is no longer waiting (at most 10).
async fn settle(worker: &RecoveryWorker, parent: &Pipeline, run: &str) -> fluxio::Checkpoint {
    for _ in 0..10 {
        let cp = parent.checkpoint(run).await.expect("load").expect("stored");
        if matches!(cp.status, RunStatus::Completed | RunStatus::Failed) {
            return cp;
        }
        worker.run_once().await.expect("a sweep");
    }
    parent.checkpoint(run).await.expect("load").expect("stored")
}

#[tokio::test]
async fn rule29_a_parent_built_with_the_macro_takes_its_childs_result() {
    let store = memory();
    let billing = billing(&store);
    let orders = pipeline![
        reserve,
        child!("billing", input = ["amount"], output = ["invoice"]),
        ship
    ]
    .name("orders")
    .store_arc(store.clone())
    .child(billing.clone())
    .build()
    .expect("orders builds");
    assert!(
        orders.explain().contains("CHILD       child(billing)"),
        "{}",
        orders.explain()
    );
    let input = Context::new().set("amount", 42u64).expect("a u64");
    let parked = orders.invoke("o-1", input).await.expect("parks");
    let Outcome::Waiting { waits, .. } = parked else {
        panic!("the parent waits for its child: {parked:?}");
    };
    let child_key = waits[0].name.strip_prefix("child:").expect("a child wait");
    assert!(child_key.starts_with("billing/orders/o-1#"), "{child_key}");
    let done = settle(&worker(&orders, &billing), &orders, "o-1").await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let out = done.context.to_context();
    assert_eq!(out.get::<String>("invoice").expect("merged"), "inv-42");
    assert!(out.get::<bool>("shipped").expect("went on"));
    // the child's pipeline lists its runs by parent
    let page = store
        .list_runs(&RunFilter::new().children_of("orders/o-1"))
        .await
        .expect("list");
    let keys: Vec<&str> = page.runs.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, [child_key]);
}

#[tokio::test]
async fn rule29_a_childs_failure_goes_into_the_context_or_fails_the_parent() {
    let store = memory();
    let billing = billing(&store);
    let tolerant = pipeline![child!("billing", failure = "billing_error"), ship]
        .name("tolerant")
        .store_arc(store.clone())
        .child(billing.clone())
        .build()
        .expect("builds");
    let zero = Context::new().set("amount", 0u64).expect("a u64");
    let _ = tolerant.invoke("t", zero.clone()).await.expect("parks");
    let done = settle(&worker(&tolerant, &billing), &tolerant, "t").await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let failure: ChildFailure = done
        .context
        .to_context()
        .get("billing_error")
        .expect("kept");
    assert_eq!(failure.state, "failed");
    assert!(
        failure
            .error
            .as_deref()
            .is_some_and(|e| e.contains("nothing to charge"))
    );

    let strict = pipeline![child!("billing"), ship]
        .name("strict")
        .store_arc(store.clone())
        .child(billing.clone())
        .build()
        .expect("builds");
    let _ = strict.invoke("s", zero).await.expect("parks");
    let failed = settle(&worker(&strict, &billing), &strict, "s").await;
    assert_eq!(failed.status, RunStatus::Failed);
    match strict.resume("s").await {
        Ok(Outcome::Waiting { .. }) => {}
        other => panic!("a retried parent retries its child: {other:?}"),
    }
    let again = settle(&worker(&strict, &billing), &strict, "s").await;
    assert_eq!(again.status, RunStatus::Failed, "the child fails again");
    let message = again.error_message.unwrap_or_default();
    assert!(message.contains("billing/strict/s#") && message.contains("nothing to charge"));
}

#[tokio::test]
async fn rule29_what_counts_in_the_version_and_what_does_not() {
    let store = memory();
    let billing = billing(&store);
    let build = |b: fluxio::PipelineBuilder| {
        b.name("orders")
            .store_arc(store.clone())
            .child(billing.clone())
            .build()
            .expect("builds")
            .version()
            .to_owned()
    };
    let plain = build(pipeline![reserve, child!("billing")]);
    let polled = build(pipeline![reserve, child!("billing", poll = "5s")]);
    assert_eq!(plain, polled, "how often a parent looks is not its shape");
    let shapes = [
        build(pipeline![reserve, child!("billing", input = ["amount"])]),
        build(pipeline![reserve, child!("billing", output = ["invoice"])]),
        build(pipeline![reserve, child!("billing", failure = "e")]),
        build(pipeline![reserve, child!("billing", deadline = "1h")]),
        build(pipeline![child!("billing"), reserve]),
        build(pipeline![
            reserve,
            child!("billing", each = "xs", into = "ys")
        ]),
        build(pipeline![
            reserve,
            child!("billing", each = "xs", item = "x", into = "ys")
        ]),
    ];
    for (i, v) in shapes.iter().enumerate() {
        assert_ne!(*v, plain, "shape {i} changes the version");
        assert!(
            !shapes[..i].contains(v),
            "shape {i} is a version of its own"
        );
    }
}

#[tokio::test]
async fn rule29_misuse_is_a_build_error_naming_the_step() {
    let store = memory();
    let billing = billing(&store);
    let err = |b: fluxio::PipelineBuilder| match b.build() {
        Err(Error::Build { message }) => message,
        other => panic!("expected a build error, got {other:?}"),
    };
    let unregistered = err(pipeline![child!("billing")]
        .name("o")
        .store_arc(store.clone()));
    assert!(unregistered.contains("not registered"), "{unregistered}");
    let plain = err(pipeline![child!("billing")].child(billing.clone()));
    assert!(plain.contains("needs a durable pipeline"), "{plain}");
    let in_block = err(pipeline![parallel![reserve, child!("billing")]]
        .name("o")
        .store_arc(store.clone())
        .child(billing.clone()));
    assert!(in_block.contains("inside a parallel block"), "{in_block}");
    let deleting = pipeline![charge]
        .name("billing")
        .store_arc(store.clone())
        .delete_completed(true)
        .build()
        .expect("builds");
    let deletes = err(pipeline![child!("billing")]
        .name("o")
        .store_arc(store.clone())
        .child(deleting));
    assert!(deletes.contains("deletes its completed runs"), "{deletes}");
    let no_store = pipeline![charge].name("billing").build().expect("builds");
    let storeless = err(pipeline![child!("billing")]
        .name("o")
        .store_arc(store.clone())
        .child(no_store));
    assert!(storeless.contains("has no store"), "{storeless}");
    let bad_name = err(pipeline![child!("bill ing")]
        .name("o")
        .store_arc(store.clone()));
    assert!(bad_name.contains("child(bill ing)"), "{bad_name}");
    let fast = err(pipeline![child!("billing", poll = "1ms")]
        .name("o")
        .store_arc(store.clone())
        .child(billing.clone()));
    assert!(fast.contains("shorter than"), "{fast}");
    let twice = err(pipeline![child!("billing", input = ["a", "a"])]
        .name("o")
        .store_arc(store.clone())
        .child(billing.clone()));
    assert!(twice.contains("input key `a` twice"), "{twice}");
    let empty = err(pipeline![child!("billing", output = [""])]
        .name("o")
        .store_arc(store.clone())
        .child(billing.clone()));
    assert!(empty.contains("empty output key"), "{empty}");
    // a wait may not take the name a parent's wait for its child shows
    let reserved = pipeline![wait!("child:x" as bool)]
        .name("o")
        .store_arc(store.clone())
        .build();
    assert!(matches!(reserved, Err(Error::Build { .. })), "{reserved:?}");
}

#[tokio::test]
async fn rule29_bad_input_fails_the_parent_at_the_step_for_good() {
    let store = memory();
    let billing = billing(&store);
    let orders = pipeline![child!("billing", input = ["amount"])]
        .name("orders")
        .store_arc(store.clone())
        .child(billing.clone())
        .build()
        .expect("builds");
    // the input key is missing: the parent fails naming it, no child
    let missing = orders.invoke("m", Context::new()).await;
    assert!(
        matches!(&missing, Err(Error::MissingKey { key, .. }) if key == "amount"),
        "{missing:?}"
    );
    let cp = orders.checkpoint("m").await.expect("load").expect("stored");
    assert_eq!(
        (cp.status, cp.step.as_str()),
        (RunStatus::Failed, "child(billing)")
    );
    assert!(!store.exists("billing/orders/m#0").await.expect("exists"));
    // a parent id too long for its child's key fails the parent, for good
    let long = "x".repeat(500);
    let input = Context::new().set("amount", 1u64).expect("a u64");
    let refused = orders.invoke(&long, input).await;
    assert!(
        matches!(&refused, Err(Error::InvalidRunId { reason, .. }) if reason.contains("child run's key")),
        "{refused:?}"
    );
    let cp = orders
        .checkpoint(&long)
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(cp.status, RunStatus::Failed);
}

#[tokio::test]
async fn rule29_rule30_a_child_gets_the_parents_deadline_and_a_cancel_reaches_it() {
    let store = memory();
    let billing = billing(&store);
    let orders = pipeline![reserve, child!("billing")]
        .name("orders")
        .store_arc(store.clone())
        .child(billing.clone())
        .build()
        .expect("builds");
    let within = StartOptions::new().deadline_in(Duration::from_secs(3600));
    let input = Context::new().set("amount", 5u64).expect("a u64");
    let _ = orders.invoke_with("d", input, within).await.expect("parks");
    let parent = orders.checkpoint("d").await.expect("load").expect("stored");
    let page = store
        .list_runs(&RunFilter::new().children_of("orders/d"))
        .await
        .expect("list");
    assert_eq!(page.runs.len(), 1);
    let child = store
        .load(&page.runs[0].key)
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(
        child.deadline_ms, parent.deadline_ms,
        "the parent's deadline"
    );
    orders.cancel("d").await.expect("cancel");
    let child = store
        .load(&page.runs[0].key)
        .await
        .expect("load")
        .expect("stored");
    assert_eq!(child.status, RunStatus::Cancelled);
}

#[stage]
async fn double(ctx: Context) -> StageResult {
    let n: u64 = ctx.get("n")?;
    Ok(ctx.set("twice", n * 2)?)
}

#[tokio::test]
async fn rule29_a_fan_out_through_the_macro_empty_and_too_long_lists() {
    let store = memory();
    let doubler = pipeline![double]
        .name("doubler")
        .store_arc(store.clone())
        .build()
        .expect("builds");
    let p = pipeline![
        child!(
            "doubler",
            output = ["twice"],
            each = "ns",
            item = "n",
            into = "twice"
        ),
        ship
    ]
    .name("fan")
    .store_arc(store.clone())
    .child(doubler.clone())
    .build()
    .expect("builds");
    let input = Context::new().set("ns", vec![1u64, 2, 3]).expect("a list");
    let _ = p.invoke("three", input).await.expect("parks");
    let done = settle(&worker(&p, &doubler), &p, "three").await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let twice: Vec<std::collections::BTreeMap<String, u64>> =
        done.context.to_context().get("twice").expect("results");
    let got: Vec<u64> = twice.iter().map(|m| m["twice"]).collect();
    assert_eq!(got, [2, 4, 6]);
    // an empty list goes on at once, with no results and no child
    let empty = Context::new().set("ns", Vec::<u64>::new()).expect("a list");
    let out = p.invoke("none", empty).await.expect("runs");
    let Outcome::Completed(out) = out else {
        panic!("an empty fan-out does not wait: {out:?}");
    };
    assert!(
        out.get::<Vec<u64>>("twice")
            .expect("empty results")
            .is_empty()
    );
    // a list past the bound fails the parent at the step, naming the key
    let huge: Vec<u64> = (0..=fluxio::child::MAX_FAN_OUT as u64).collect();
    let refused = p
        .invoke("huge", Context::new().set("ns", huge).expect("a list"))
        .await;
    assert!(
        matches!(&refused, Err(Error::Validation { message, .. }) if message.contains("`ns`")),
        "{refused:?}"
    );
    let listed = store
        .list_runs(&RunFilter::new().pipeline("doubler"))
        .await
        .expect("list");
    assert_eq!(
        listed.runs.len(),
        3,
        "no child of the refused or empty lists"
    );
}
