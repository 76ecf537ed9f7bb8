//! `fluxio runs list --status waiting`, `show`, `signal` and `wake` on runs
//! that sleep and wait (contract rules 23, 25, 26), on SQLite and Redis.

use std::sync::Arc;

use fluxio::store::CheckpointStore;
use fluxio::{Context, Outcome, Pipeline, RunStatus, StageResult, pipeline, stage};

use crate::common::{Target, redis, sqlite};

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Approval {
    approved: bool,
    by: String,
}

#[stage]
async fn submit(ctx: Context) -> StageResult {
    Ok(ctx.set("submitted", true)?)
}

#[stage]
async fn pay(ctx: Context) -> StageResult {
    let decision: Approval = ctx.get("decision")?;
    Ok(ctx.set("paid", decision.approved)?)
}

/// `submit, sleep(1h), wait(approval as Approval -> decision, 72h), pay`.
fn expenses(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![
        submit,
        sleep!("1h"),
        wait!("approval" as Approval into "decision", deadline = "72h"),
        pay,
    ]
    .name("expenses")
    .store_arc(Arc::clone(store))
    .build()
    .expect("a valid pipeline")
}

async fn waiting_run(t: &Target) -> Pipeline {
    let p = expenses(&t.store);
    let out = p.invoke("e-1", Context::new()).await.expect("runs");
    assert!(matches!(out, Outcome::Sleeping { .. }), "{out:?}");
    // the operator ends the sleep: the run reaches its wait
    t.run(&["runs", "wake", "expenses/e-1"], None)
        .code(0)
        .shows(&["is due now", "sleep(3600000ms)"]);
    let woken = p.resume("e-1").await.expect("resumes");
    assert!(matches!(woken, Outcome::Waiting { .. }), "{woken:?}");
    p
}

async fn scenario(t: &Target) {
    let p = waiting_run(t).await;
    t.run(&["runs", "list", "--status", "waiting"], None)
        .code(0)
        .shows(&["expenses/e-1", "waiting"]);
    t.run(&["runs", "show", "expenses/e-1"], None)
        .code(0)
        .shows(&["waits for", "approval (", "Approval)", "deadline"]);
    let shown = t
        .run(&["runs", "show", "expenses/e-1", "--json"], None)
        .code(0)
        .json();
    assert_eq!(shown["pending"]["waits"][0]["name"], "approval");

    // bad input: each a typed failure that names what was wrong, nothing stored
    let bad_json = t.run(
        &["runs", "signal", "expenses/e-1", "approval", "{nope"],
        None,
    );
    assert!(bad_json.code(2).stderr.contains("not JSON"));
    let unknown = t.run(&["runs", "signal", "expenses/e-1", "approve", "{}"], None);
    let unknown = unknown.code(1);
    assert!(
        unknown.stderr.contains("no wait named `approve`"),
        "{}",
        unknown.all()
    );
    let no_payload = t.run(&["runs", "signal", "expenses/e-1", "approval"], None);
    assert!(no_payload.code(2).stderr.contains("--file"));
    let no_run = t.run(
        &["runs", "signal", "expenses/nobody", "approval", "{}"],
        None,
    );
    assert!(no_run.code(1).stderr.contains("expenses/nobody"));
    assert!(
        t.store
            .signals("expenses/e-1")
            .await
            .expect("mailbox")
            .is_empty()
    );

    // a payload of the wrong shape is stored (the CLI has no types) and
    // refused by the run when it takes it: the wait stays open
    t.run(
        &[
            "runs",
            "signal",
            "expenses/e-1",
            "approval",
            r#"{"approved": "yes"}"#,
        ],
        None,
    )
    .code(0)
    .shows(&["signal approval stored"]);
    let refused = p.resume("e-1").await.expect("resumes");
    assert!(matches!(refused, Outcome::Waiting { .. }), "{refused:?}");
    let cp = p.checkpoint("e-1").await.expect("load").expect("stored");
    assert!(cp.error_message.unwrap_or_default().contains("refused"));

    let good = r#"{"approved": true, "by": "ops"}"#;
    t.run(
        &[
            "runs",
            "signal",
            "expenses/e-1",
            "approval",
            good,
            "--sender",
            "ops team",
        ],
        None,
    )
    .code(0);
    t.run(&["runs", "signal", "expenses/e-1", "approval", good], None)
        .code(0)
        .shows(&["had this signal already"]);
    let done = p
        .resume("e-1")
        .await
        .expect("resumes")
        .completed()
        .expect("done");
    assert!(done.get::<bool>("paid").expect("paid"));
    t.run(&["runs", "show", "expenses/e-1"], None)
        .code(0)
        .shows(&["signal approval: consumed from \"ops team\""]);
    let late = t.run(&["runs", "signal", "expenses/e-1", "approval", "{}"], None);
    let late = late.code(1);
    assert!(late.stderr.contains("already completed"), "{}", late.all());
    let wake_done = t.run(&["runs", "wake", "expenses/e-1"], None);
    let wake_done = wake_done.code(1);
    assert!(
        wake_done.stderr.contains("not sleeping or waiting"),
        "{}",
        wake_done.all()
    );
    assert_eq!(
        p.checkpoint("e-1").await.expect("load").map(|cp| cp.status),
        Some(RunStatus::Completed)
    );
}

#[tokio::test]
async fn rule26_signal_show_and_wake_on_sqlite() {
    scenario(&sqlite("cli_waits").await).await;
}

#[tokio::test]
async fn rule26_signal_show_and_wake_on_redis() {
    let prefix = fluxio_test_support::namespace("cli_waits");
    let Some(t) = redis(&prefix).await else {
        return;
    };
    scenario(&t).await;
}

#[tokio::test]
async fn rule26_a_payload_from_a_file_or_stdin_and_a_huge_one() {
    let t = sqlite("cli_wait_file").await;
    let _p = waiting_run(&t).await;
    let dir = fluxio_test_support::TempDir::new("cli_wait_payload");
    let missing = dir.path().join("missing.json");
    let gone = t.run(
        &[
            "runs",
            "signal",
            "expenses/e-1",
            "approval",
            "--file",
            missing.to_str().expect("utf-8"),
        ],
        None,
    );
    assert!(gone.code(2).stderr.contains("cannot read the payload file"));
    let huge = dir.path().join("huge.json");
    let blob = format!("{{\"by\": \"{}\"}}", "x".repeat(20 << 20));
    std::fs::write(&huge, blob).expect("write");
    let too_big = t.run(
        &[
            "runs",
            "signal",
            "expenses/e-1",
            "approval",
            "--file",
            huge.to_str().expect("utf-8"),
        ],
        None,
    );
    let too_big = too_big.code(1);
    assert!(
        too_big.stderr.contains("signal payload"),
        "{}",
        too_big.all()
    );
    let ok = dir.path().join("ok.json");
    std::fs::write(&ok, r#"{"approved": false, "by": "file"}"#).expect("write");
    t.run(
        &[
            "runs",
            "signal",
            "expenses/e-1",
            "approval",
            "--file",
            ok.to_str().expect("utf-8"),
        ],
        None,
    )
    .code(0);
    let mailbox = t.store.signals("expenses/e-1").await.expect("mailbox");
    assert_eq!(mailbox.len(), 1);
    assert_eq!(mailbox[0].sender, "fluxio CLI");
}

/// Rule 30 seen by an operator: `show` gives a run's deadline, in its rows
/// and its JSON, and the error of a run stopped by it.
#[tokio::test]
async fn rule30_show_gives_the_runs_deadline_and_why_it_stopped() {
    let t = sqlite("cli_deadline").await;
    let p = expenses(&t.store);
    let day = fluxio::StartOptions::new().deadline_in(std::time::Duration::from_secs(86_400));
    let out = p.invoke_with("d-1", Context::new(), day).await;
    assert!(matches!(out, Ok(Outcome::Sleeping { .. })), "{out:?}");
    let stored = p.checkpoint("d-1").await.expect("load").expect("stored");
    let deadline = stored.deadline_ms.expect("a deadline");
    t.run(&["runs", "show", "expenses/d-1"], None)
        .code(0)
        .shows(&["run deadline", "sleeps until"]);
    let shown = t
        .run(&["runs", "show", "expenses/d-1", "--json"], None)
        .code(0)
        .json();
    assert_eq!(shown["deadline_ms"], deadline);

    let past = fluxio::StartOptions::new().deadline_at_ms(1);
    let late = p.invoke_with("d-2", Context::new(), past).await;
    assert!(
        matches!(late, Err(fluxio::Error::DeadlineExceeded { ref step, .. }) if step == "submit"),
        "{late:?}"
    );
    t.run(&["runs", "show", "expenses/d-2"], None)
        .code(0)
        .shows(&["failed", "its deadline", "before step `submit`"]);
}

/// Rule 30 from the command line: `pause` a waiting run (it lists as
/// paused, a signal is kept), `unpause` it (it waits again), on a store the
/// CLI did not create; bad input is a typed failure naming the run.
async fn pause_scenario(t: &Target) {
    let p = waiting_run(t).await;
    t.run(&["runs", "pause", "expenses/e-1"], None)
        .code(0)
        .shows(&["paused run expenses/e-1"]);
    t.run(&["runs", "list", "--status", "paused"], None)
        .code(0)
        .shows(&["expenses/e-1", "paused"]);
    t.run(&["runs", "show", "expenses/e-1"], None)
        .code(0)
        .shows(&["paused"]);
    let good = r#"{"approved": true, "by": "ops"}"#;
    t.run(&["runs", "signal", "expenses/e-1", "approval", good], None)
        .code(0);
    let refused = p.resume("e-1").await;
    assert!(
        matches!(refused, Err(fluxio::Error::Paused { .. })),
        "{refused:?}"
    );
    t.run(&["runs", "unpause", "expenses/e-1"], None)
        .code(0)
        .shows(&["unpaused run expenses/e-1", "waits again"]);
    let again = t.run(&["runs", "unpause", "expenses/e-1"], None);
    let again = again.code(1);
    assert!(
        again.stderr.contains("expenses/e-1") && again.stderr.contains("not paused"),
        "{}",
        again.all()
    );
    let missing = t.run(&["runs", "pause", "expenses/nobody"], None);
    assert!(missing.code(1).stderr.contains("expenses/nobody"));
    let done = p.resume("e-1").await.expect("resumes");
    assert!(done.is_completed(), "it took the signal kept while paused");
}

#[tokio::test]
async fn rule30_pause_and_unpause_on_sqlite() {
    pause_scenario(&sqlite("cli_pause").await).await;
}

#[tokio::test]
async fn rule30_pause_and_unpause_on_redis() {
    let prefix = fluxio_test_support::namespace("cli_pause");
    let Some(t) = redis(&prefix).await else {
        return;
    };
    pause_scenario(&t).await;
}

/// Lets [`gated`] go on.
static GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

#[stage]
async fn gated(ctx: Context) -> StageResult {
    GATE.acquire().await.expect("open").forget();
    Ok(ctx.set("gated", true)?)
}

#[stage]
async fn after_gate(ctx: Context) -> StageResult {
    Ok(ctx.set("after", true)?)
}

/// Rule 30 across processes: `fluxio runs pause` in its own process
/// stops a run that this process is running, before its next stage; the
/// run comes back with `Error::Paused`, the stage after it never ran, and
/// after `unpause` it goes on from the step it was paused at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule30_the_cli_pauses_a_run_another_process_is_running() {
    let t = sqlite("cli_pause_owner").await;
    let p = pipeline![gated, after_gate]
        .name("held")
        .store_arc(Arc::clone(&t.store))
        .build()
        .expect("a valid pipeline");
    let running = tokio::spawn({
        let p = p.clone();
        async move { p.invoke("r", Context::new()).await }
    });
    // until its first checkpoint is stored, and its stage waits at the gate
    let started = std::time::Instant::now();
    while p.checkpoint("r").await.expect("load").is_none() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "it never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    t.run(&["runs", "pause", "held/r"], None)
        .code(0)
        .shows(&["paused run held/r"]);
    GATE.add_permits(1);
    let stopped = running.await.expect("no panic");
    assert!(
        matches!(stopped, Err(fluxio::Error::Paused { ref run_id }) if run_id == "held/r"),
        "{stopped:?}"
    );
    let cp = p.checkpoint("r").await.expect("load").expect("stored");
    assert_eq!((cp.status, cp.step.as_str()), (RunStatus::Paused, "gated"));
    assert!(
        !cp.context.to_context().contains_key("after"),
        "after_gate never ran"
    );
    t.run(&["runs", "unpause", "held/r"], None)
        .code(0)
        .shows(&["is due"]);
    GATE.add_permits(1);
    let done = p
        .resume("r")
        .await
        .expect("resumes")
        .completed()
        .expect("done");
    assert!(done.get::<bool>("after").expect("after_gate ran"));
}

#[stage]
async fn invoice(ctx: Context) -> StageResult {
    Ok(ctx.set("invoice", "inv-1")?)
}

/// Rule 29 from the command line, on a store the CLI did not create:
/// `runs show` of a parent says which child it waits for, and of the child
/// names its parent; `runs list --parent` lists the children of every
/// pipeline; `runs cancel` of the parent cancels its open child and says so.
async fn child_scenario(t: &Target) {
    let billing = pipeline![invoice]
        .name("billing")
        .store_arc(Arc::clone(&t.store))
        .build()
        .expect("builds");
    let orders = pipeline![submit, child!("billing")]
        .name("orders")
        .store_arc(Arc::clone(&t.store))
        .child(billing)
        .build()
        .expect("builds");
    let out = orders.invoke("o-1", Context::new()).await.expect("parks");
    assert!(matches!(out, Outcome::Waiting { .. }), "{out:?}");
    let shown = t
        .run(&["runs", "show", "orders/o-1", "--json"], None)
        .code(0)
        .json();
    let child = shown["child"]
        .as_str()
        .expect("the child it waits for")
        .to_owned();
    let child = child.as_str();
    assert!(child.starts_with("billing/orders/o-1#"), "{child}");
    t.run(&["runs", "show", "orders/o-1"], None)
        .code(0)
        .shows(&[
            "waiting",
            &format!("child run {child}"),
            "or when the child ends",
        ]);
    t.run(&["runs", "show", child], None)
        .code(0)
        .shows(&["parent", "orders/o-1", "sleeping"]);
    let listed = t
        .run(&["runs", "list", "--parent", "orders/o-1", "--json"], None)
        .code(0)
        .json();
    let keys: Vec<&str> = listed["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["key"].as_str())
        .collect();
    assert_eq!(keys, [child]);
    t.run(&["runs", "list", "--parent", "orders/nobody"], None)
        .code(0)
        .shows(&["no runs"]);
    t.run(&["runs", "cancel", "orders/o-1"], None)
        .code(0)
        .shows(&[
            "cancelled run orders/o-1",
            &format!("cancelled its child run {child}"),
        ]);
    let stored = t.store.load(child).await.expect("load").expect("kept");
    assert_eq!(stored.status, RunStatus::Cancelled);
    t.run(&["runs", "show", child], None)
        .code(0)
        .shows(&["cancelled", "cancelled with its parent `orders/o-1`"]);
}

#[tokio::test]
async fn rule29_children_listed_shown_and_cancelled_on_sqlite() {
    child_scenario(&sqlite("cli_child").await).await;
}

#[tokio::test]
async fn rule29_children_listed_shown_and_cancelled_on_redis() {
    let prefix = fluxio_test_support::namespace("cli_child");
    let Some(t) = redis(&prefix).await else {
        return;
    };
    child_scenario(&t).await;
}

/// Rule 32 from the command line, on a store the CLI did not create:
/// `schedules list | show | pause | resume | delete`; bad names are usage
/// errors, a run id that is not a schedule a failure naming it.
async fn schedules_scenario(t: &Target) {
    let p = expenses(&t.store);
    let nightly = fluxio::schedule::Schedule::cron("0 3 * * *", "Europe/Paris").expect("valid");
    p.schedule("nightly", nightly).await.expect("stored");
    let hourly =
        fluxio::schedule::Schedule::every(std::time::Duration::from_secs(3600)).expect("an hour");
    p.schedule("hourly", hourly).await.expect("stored");
    t.run(&["schedules", "list"], None).code(0).shows(&[
        "expenses/nightly",
        "cron \"0 3 * * *\" in Europe/Paris",
        "expenses/hourly",
        "every 1h",
        "active",
    ]);
    let listed = t.run(&["schedules", "list", "--json"], None).code(0).json();
    assert_eq!(listed["schedules"].as_array().expect("a list").len(), 2);
    t.run(&["schedules", "list", "--pipeline", "nobody"], None)
        .code(0)
        .shows(&["no schedules"]);
    t.run(&["schedules", "show", "expenses/nightly"], None)
        .code(0)
        .shows(&["next tick", "Skip", "Latest", "runs started"]);
    t.run(&["schedules", "pause", "expenses/nightly"], None)
        .code(0)
        .shows(&["paused"]);
    assert!(
        p.schedules()
            .await
            .expect("list")
            .iter()
            .any(|s| s.name == "nightly" && s.paused)
    );
    t.run(&["schedules", "resume", "expenses/nightly"], None)
        .code(0)
        .shows(&["resumed"]);
    t.run(&["schedules", "delete", "expenses/hourly", "--yes"], None)
        .code(0)
        .shows(&["deleted"]);
    assert_eq!(p.schedules().await.expect("list").len(), 1);
    let missing = t
        .run(&["schedules", "show", "expenses/nobody"], None)
        .code(1);
    assert!(
        missing.stderr.contains("~expenses/nobody"),
        "{}",
        missing.all()
    );
    let bad = t.run(&["schedules", "pause", "nightly"], None).code(2);
    assert!(bad.stderr.contains("pipeline/name"), "{}", bad.all());
}

#[tokio::test]
async fn rule32_schedules_listed_shown_paused_and_deleted_on_sqlite() {
    schedules_scenario(&sqlite("cli_schedules").await).await;
}

#[tokio::test]
async fn rule32_schedules_listed_shown_paused_and_deleted_on_redis() {
    let prefix = fluxio_test_support::namespace("cli_schedules");
    let Some(t) = redis(&prefix).await else {
        return;
    };
    schedules_scenario(&t).await;
}

/// Rule 31 from the command line, on a store the CLI did not create:
/// `queues` counts each queue's unfinished runs by key: queued, running,
/// waiting (started, then parked).
async fn queues_scenario(t: &Target) {
    let p = pipeline![submit, sleep!("1h"), pay]
        .name("expenses")
        .store_arc(Arc::clone(&t.store))
        .queue(fluxio::queue::Queue::new("approvals").per_key(1))
        .build()
        .expect("a valid pipeline");
    t.run(&["queues"], None)
        .code(0)
        .shows(&["no queued, running or waiting run of a queue"]);
    for (id, key) in [("e-1", "t1"), ("e-2", "t1"), ("e-3", "t2")] {
        let options = fluxio::queue::Enqueue::new().key(key);
        p.enqueue(id, Context::new(), options)
            .await
            .expect("enqueued");
    }
    // e-1 starts (by hand here) and parks in its sleep
    let out = p.resume("e-1").await.expect("resumes");
    assert!(matches!(out, Outcome::Sleeping { .. }), "{out:?}");
    t.run(&["queues"], None).code(0).shows(&[
        "QUEUE",
        "approvals",
        "t1",
        "t2",
        "QUEUED",
        "WAITING",
    ]);
    let counted = t.run(&["queues", "--json"], None).code(0).json();
    let rows = counted["queues"].as_array().expect("a list");
    let row = |key: &str| {
        rows.iter()
            .find(|r| r["key"] == key)
            .unwrap_or_else(|| panic!("a row for {key}: {counted}"))
    };
    assert_eq!(
        (&row("t1")["queued"], &row("t1")["waiting"]),
        (&1.into(), &1.into())
    );
    assert_eq!(
        (&row("t2")["queued"], &row("t2")["running"]),
        (&1.into(), &0.into())
    );
    assert_eq!(counted["read"], 3);
    t.run(&["runs", "show", "expenses/e-2"], None)
        .code(0)
        .shows(&["queue", "approvals, key t1, priority 0, queued"]);
    t.run(&["queues", "--pipeline", "nobody"], None)
        .code(0)
        .shows(&["no queued"]);
    let bad = t.run(&["queues", "--most", "0"], None).code(2);
    assert!(bad.stderr.contains("--most"), "{}", bad.all());
}

#[tokio::test]
async fn rule31_queues_counted_by_key_on_sqlite() {
    queues_scenario(&sqlite("cli_queues").await).await;
}

#[tokio::test]
async fn rule31_queues_counted_by_key_on_redis() {
    let prefix = fluxio_test_support::namespace("cli_queues");
    let Some(t) = redis(&prefix).await else {
        return;
    };
    queues_scenario(&t).await;
}
