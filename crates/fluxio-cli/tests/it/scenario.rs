//! Every command against one store of each kind, seeded through real
//! pipelines: list, show, diff, cancel, retry, delete, purge, their exit
//! codes and their JSON.

use std::time::Duration;

use fluxio::Outcome;
use fluxio_test_support::namespace;
use serde_json::json;

use crate::common::{Target, input, orders, with_password};

/// The runs every scenario starts with:
/// - `orders/ok-1`: completed;
/// - `orders/bad-1` and `orders/bad-2`: failed at `charge` ("card declined");
/// - `orders/big-1`: completed, with a 300 KB value;
/// - `billing/ok-2`: completed, another pipeline.
async fn seed(target: &Target) {
    let p = orders(&target.store, "orders");
    p.invoke("ok-1", input(false))
        .await
        .and_then(Outcome::completed)
        .expect("ok-1 completes");
    for bad in ["bad-1", "bad-2"] {
        let err = p.invoke(bad, input(true)).await.expect_err("declined");
        assert!(err.to_string().contains("card declined"), "{err}");
    }
    let big = input(false).set("blob", "x".repeat(300_000)).expect("blob");
    p.invoke("big-1", big)
        .await
        .and_then(Outcome::completed)
        .expect("big-1 completes");
    let billing = orders(&target.store, "billing");
    billing
        .invoke("ok-2", input(false))
        .await
        .and_then(Outcome::completed)
        .expect("ok-2 completes");
}

/// The keys of a `list --json` document.
fn keys(list: &serde_json::Value) -> Vec<&str> {
    list["runs"]
        .as_array()
        .expect("an array of runs")
        .iter()
        .filter_map(|r| r["key"].as_str())
        .collect()
}

/// The scenario on `target`; `secret`, when the
/// URL holds a password, must appear in no output.
async fn scenario(target: &Target, secret: Option<&str>) {
    seed(target).await;
    list(target, secret);
    show(target, secret);
    diff(target, secret);
    cancel_and_retry(target, secret);
    delete(target, secret).await;
    purge(target, secret);
}

/// `runs list`: everything in key order, filters, pages and their cursor.
fn list(target: &Target, secret: Option<&str>) {
    let run = |args: &[&str]| target.run(args, secret);
    // list: everything, in key order, as JSON
    let all = run(&["runs", "list", "--all", "--json"]).code(0).json();
    assert_eq!(
        keys(&all),
        [
            "billing/ok-2",
            "orders/bad-1",
            "orders/bad-2",
            "orders/big-1",
            "orders/ok-1"
        ]
    );
    assert_eq!(all["runs"][1]["state"], json!("Failed"), "{all}");
    assert_eq!(all["runs"][1]["step"], json!("charge"), "{all}");
    assert_eq!(all["next"], json!(null), "{all}");
    // filtered, as a table
    let failed = run(&["runs", "list", "--pipeline", "orders", "--status", "failed"]).code(0);
    assert!(failed.stdout.starts_with("RUN"), "{}", failed.all());
    assert!(failed.stdout.contains("orders/bad-1") && failed.stdout.contains("orders/bad-2"));
    assert!(failed.stdout.contains("card declined"), "{}", failed.all());
    assert!(!failed.stdout.contains("ok-1"), "{}", failed.all());
    let since = run(&["runs", "list", "--since", "1h", "--json"])
        .code(0)
        .json();
    assert_eq!(since["runs"].as_array().map(Vec::len), Some(5));
    let future = run(&["runs", "list", "--since", "2999-01-01T00:00:00Z"]).code(0);
    assert_eq!(future.stdout, "no runs\n");
    // a page, and the cursor of the next one
    let page = run(&["runs", "list", "--limit", "2"]).code(0);
    assert_eq!(page.stdout.lines().count(), 3, "{}", page.all());
    assert!(page.stderr.contains("--after"), "{}", page.all());
    // as JSON, the cursor is in the document, and leads to the rest
    let page = run(&["runs", "list", "--limit", "2", "--json"])
        .code(0)
        .json();
    assert_eq!(keys(&page), ["billing/ok-2", "orders/bad-1"], "{page}");
    let next = page["next"].as_str().expect("a cursor").to_owned();
    let rest = run(&["runs", "list", "--after", &next, "--limit", "10", "--json"])
        .code(0)
        .json();
    assert_eq!(
        keys(&rest),
        ["orders/bad-2", "orders/big-1", "orders/ok-1"],
        "{rest}"
    );
    assert_eq!(rest["next"], json!(null), "{rest}");
}

/// `runs show`: a run's status, step, attempt, error, context and
/// history; a huge value cut; a missing run.
fn show(target: &Target, secret: Option<&str>) {
    let run = |args: &[&str]| target.run(args, secret);
    // as JSON, then as text: status, step, attempt, error, context, history
    let shown = run(&["runs", "show", "orders/bad-1", "--json"])
        .code(0)
        .json();
    assert_eq!(shown["status"], json!("Failed"));
    assert_eq!(shown["state"], json!("Failed"), "{shown}");
    assert_eq!(shown["lease_expires_at_ms"], json!(null), "{shown}");

    assert_eq!(shown["step"], json!("charge"));
    assert_eq!(shown["attempt"], json!(1));
    assert_eq!(shown["context"]["total"], json!(10));
    assert_eq!(
        shown["context"]["customer"],
        json!({"name": "Ada", "vip": true})
    );
    assert_eq!(shown["history"]["steps"].as_array().map(Vec::len), Some(2));
    assert!(
        shown["error_message"]
            .as_str()
            .is_some_and(|e| e.contains("card declined")),
        "{shown}"
    );
    let shown = run(&["runs", "show", "orders/bad-1"]).code(0);
    shown.shows(&[
        "status",
        "failed",
        "charge (attempt 1)",
        "card declined",
        "customer",
        "\"Ada\"",
        "items",
        "[\"book\", \"pen\"]",
        "total",
        "history",
        "step  stage",
    ]);
    // a huge value is cut, with its size
    let big = run(&["runs", "show", "orders/big-1"]).code(0);
    assert!(big.stdout.contains("bytes)"), "{}", big.all());
    assert!(
        big.stdout.lines().all(|l| l.len() < 1_000),
        "a line is too long"
    );
    let big = run(&["runs", "show", "orders/big-1", "--json"])
        .code(0)
        .json();
    assert!(big["context"]["blob"]["$truncated"]["bytes"].as_u64() > Some(300_000));
    // a missing run
    let missing = run(&["runs", "show", "orders/nope"]).code(1);
    assert!(missing.stderr.contains("orders/nope"), "{}", missing.all());
    assert_eq!(missing.stderr.lines().count(), 1, "{}", missing.all());
}

/// `runs diff`: two runs, two points of one run; bad keys and steps.
fn diff(target: &Target, secret: Option<&str>) {
    let run = |args: &[&str]| target.run(args, secret);
    // diff: two runs, and two points of one run
    let d = run(&["runs", "diff", "orders/ok-1", "orders/bad-1"]).code(0);
    assert!(
        d.stdout.contains("charged") && d.stdout.contains("<absent>"),
        "{}",
        d.all()
    );
    let d = run(&["runs", "diff", "orders/ok-1", "orders/bad-1", "--json"])
        .code(0)
        .json();
    let charged = d["entries"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["key"] == json!("charged")))
        .cloned()
        .expect("charged differs");
    assert_eq!(charged, json!({"key": "charged", "a": 10}));
    let d = run(&[
        "runs",
        "diff",
        "orders/ok-1@0",
        "orders/ok-1@charge",
        "--json",
    ])
    .code(0)
    .json();
    assert_eq!(d["entries"], json!([{"key": "total", "b": 10}]));
    let same = run(&["runs", "diff", "orders/ok-1", "orders/ok-1"]).code(0);
    assert!(same.stdout.starts_with("no differences"), "{}", same.all());
    // a malformed key is bad input (2), wherever it is caught
    let bad = run(&["runs", "diff", "orders/ok-1", "a\u{1}b"]).code(2);
    assert!(bad.stderr.contains("control characters"), "{}", bad.all());
    run(&["runs", "show", ""]).code(2);
    let nostep = run(&["runs", "diff", "orders/ok-1@refund", "orders/ok-1"]).code(1);
    assert!(nostep.stderr.contains("refund"), "{}", nostep.all());
}

/// `runs cancel` once; `runs retry` of a failed run, not of a completed one.
fn cancel_and_retry(target: &Target, secret: Option<&str>) {
    let run = |args: &[&str]| target.run(args, secret);
    // cancel, once
    run(&["runs", "cancel", "orders/bad-2"]).code(0);
    let cancelled = run(&["runs", "show", "orders/bad-2", "--json"])
        .code(0)
        .json();
    assert_eq!(cancelled["status"], json!("Cancelled"));
    let again = run(&["runs", "cancel", "orders/bad-2"]).code(1);
    assert!(again.stderr.contains("orders/bad-2"), "{}", again.all());
    run(&["runs", "cancel", "orders/nope"]).code(1);

    // retry: a failed run goes back to the workers; a completed one cannot
    run(&["runs", "retry", "orders/bad-1"]).code(0);
    let retried = run(&["runs", "show", "orders/bad-1", "--json"])
        .code(0)
        .json();
    assert_eq!(retried["status"], json!("Running"), "{retried}");
    assert_eq!(retried["state"], json!("Abandoned"), "{retried}");

    run(&["runs", "retry", "orders/ok-1"]).code(1);
}

/// `runs delete`: asks, respects a worker's lease unless forced.
async fn delete(target: &Target, secret: Option<&str>) {
    let run = |args: &[&str]| target.run(args, secret);
    // delete: asks (no terminal: refused), takes the lease, --force
    let asked = run(&["runs", "delete", "orders/ok-1"]).code(2);
    assert!(asked.stderr.contains("--yes"), "{}", asked.all());
    run(&["runs", "show", "orders/ok-1"]).code(0);
    let lease = target
        .store
        .acquire_lease("billing/ok-2", Duration::from_secs(60))
        .await
        .expect("a worker's lease");
    let busy = run(&["runs", "delete", "billing/ok-2", "--yes"]).code(1);
    assert!(busy.stderr.contains("lease"), "{}", busy.all());
    run(&["runs", "show", "billing/ok-2"]).code(0);
    run(&["runs", "delete", "billing/ok-2", "--yes", "--force"]).code(0);
    run(&["runs", "show", "billing/ok-2"]).code(1);
    drop(lease);
    let gone = run(&["runs", "delete", "orders/ok-1", "--yes", "--json"])
        .code(0)
        .json();
    assert_eq!(gone, json!({"run": "orders/ok-1", "deleted": true}));
    run(&["runs", "show", "orders/ok-1"]).code(1);
    run(&["runs", "delete", "orders/ok-1", "--yes"]).code(1);
}

/// `runs purge`: nothing that old, a dry run, no terminal, then for real.
fn purge(target: &Target, secret: Option<&str>) {
    let run = |args: &[&str]| target.run(args, secret);
    // purge: nothing that old; a dry run; no terminal; then for real
    let purge_completed = |older_than: &str, flags: &[&str]| {
        let mut args = vec!["runs", "purge", "--status", "completed", "--older-than"];
        args.push(older_than);
        args.extend_from_slice(flags);
        run(&args)
    };
    let none = purge_completed("7d", &["--yes"]);
    assert_eq!(none.code(0).stdout, "no runs to purge\n");
    let dry = purge_completed("0s", &["--dry-run"]).code(0);
    assert!(dry.stdout.contains("orders/big-1"), "{}", dry.all());
    run(&["runs", "show", "orders/big-1"]).code(0);
    let asked = purge_completed("0s", &[]).code(2);
    assert!(asked.stderr.contains("delete 1 runs?"), "{}", asked.all());
    run(&["runs", "show", "orders/big-1"]).code(0);
    let purged = purge_completed("0s", &["--yes", "--json"]).code(0).json();
    assert_eq!(purged["deleted"], json!(["orders/big-1"]));
    run(&["runs", "show", "orders/big-1"]).code(1);
    let left = run(&["runs", "list", "--all", "--json"]).code(0).json();
    assert_eq!(keys(&left), ["orders/bad-1", "orders/bad-2"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn rule23_every_command_on_sqlite() {
    let target = crate::common::sqlite("rule23_sqlite").await;
    scenario(&target, None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rule23_every_command_on_redis() {
    let prefix = namespace("rule23_redis");
    let Some(target) = crate::common::redis(&prefix).await else {
        return;
    };
    scenario(&target, None).await;
    if let Some(mut raw) = fluxio_test_support::redis::raw().await {
        fluxio_test_support::redis::cleanup(&mut raw, &prefix).await;
    }
}

/// With a password in the URL (the test server trusts local connections,
/// so it is accepted and ignored): no output shows it.
#[tokio::test(flavor = "multi_thread")]
async fn rule23_every_command_on_postgres_and_its_password_is_never_printed() {
    let Some(url) = fluxio_test_support::postgres::server().await else {
        return;
    };
    let schema = namespace("rule23_pg");
    let url = with_password(&url, "hunter2-rule23");
    let target = crate::common::postgres(&url, &schema).await;
    scenario(&target, Some("hunter2-rule23")).await;
    fluxio_test_support::postgres::drop_schema(&url, &schema).await;
}

/// Every command on MySQL (or MariaDB), the database given as `--schema`.
#[tokio::test(flavor = "multi_thread")]
async fn rule23_every_command_on_mysql() {
    let Some(url) = fluxio_test_support::mysql::server().await else {
        return;
    };
    let database = namespace("rule23_my");
    let target = crate::common::mysql(&url, &database).await;
    scenario(&target, None).await;
    fluxio_test_support::mysql::drop_database(&url, &database).await;
}
