//! The console's actions (contract rule 38): what its forms do to runs,
//! and what they refuse (a read-only console, a form from another site, an
//! action without the token), requested through the router (tower
//! `oneshot`) over an in-memory store seeded by real pipelines.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use fluxio::store::{CheckpointStore, InMemoryStore};
use fluxio::{Context, Outcome, Pipeline, RunStatus, StageResult, pipeline, stage};
use fluxio_ui::Console;

mod support;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use support::{Reply, get, send, take};

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Approval {
    approved: bool,
}

#[stage]
async fn pay(ctx: Context) -> StageResult {
    let decision: Approval = ctx.get("decision")?;
    Ok(ctx.set("paid", decision.approved)?)
}

fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{k}={}", utf8_percent_encode(v, NON_ALPHANUMERIC)))
        .collect::<Vec<_>>()
        .join("&")
}

async fn post(app: &Router, uri: &str, fields: &[(&str, &str)], extra: &[(&str, &str)]) -> Reply {
    let mut request =
        Request::post(uri).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    send(
        app,
        request.body(Body::from(form(fields))).expect("a request"),
    )
    .await
}

async fn status(store: &Arc<dyn CheckpointStore>, key: &str) -> RunStatus {
    store
        .load(key)
        .await
        .expect("loads")
        .unwrap_or_else(|| panic!("{key} is stored"))
        .status
}

/// A store with `orders/o-1` completed and `orders/o-2` failed for good.
async fn orders() -> (Arc<dyn CheckpointStore>, Pipeline) {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = support::orders(&store);
    assert!(
        p.invoke("o-1", Context::new())
            .await
            .expect("runs")
            .is_completed()
    );
    let refused = Context::new().set("refuse", true).expect("set");
    p.invoke("o-2", refused).await.expect_err("refused");
    (store, p)
}

#[tokio::test]
async fn rule38_a_read_only_console_shows_no_form_and_refuses_a_posted_one() {
    let (store, _) = orders().await;
    let app = Console::new(Arc::clone(&store)).router();
    let page = get(&app, "/runs/orders/o-2", None).await;
    assert!(
        !page.body.contains("<form method=\"post\""),
        "{}",
        page.body
    );
    let refused = post(
        &app,
        "/runs/orders/o-2",
        &[("action", "retry"), ("csrf", "x")],
        &[],
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(
        refused.body.contains("this console is read-only"),
        "{}",
        refused.body
    );
    assert_eq!(status(&store, "orders/o-2").await, RunStatus::Failed);
}

#[tokio::test]
async fn rule38_retry_from_the_run_page_hands_the_run_back_and_says_so() {
    let (store, p) = orders().await;
    let app = Console::new(Arc::clone(&store)).allow_actions().router();
    let page = get(&app, "/runs/orders/o-2", None).await;
    assert!(page.body.contains("value=\"retry\""), "{}", page.body);
    let done = post(
        &app,
        "/runs/orders/o-2",
        &[("action", "retry"), ("csrf", &page.csrf())],
        &[],
    )
    .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(done.location(), "o-2?done=retried");
    let retried = store
        .load("orders/o-2")
        .await
        .expect("loads")
        .expect("kept");
    assert_eq!((retried.status, retried.attempt), (RunStatus::Running, 0));
    let told = get(&app, "/runs/orders/o-2?done=retried", None).await;
    assert!(told.body.contains("Marked for retry"), "{}", told.body);
    // the stage still refuses: the run fails again, as the retry said it would run it
    p.resume("o-2").await.expect_err("refused again");
    // a completed run cannot be retried: the store's refusal, on a page
    let again = post(
        &app,
        "/runs/orders/o-1",
        &[("action", "retry"), ("csrf", &page.csrf())],
        &[],
    )
    .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert!(again.body.contains("orders/o-1"), "{}", again.body);
}

#[tokio::test]
async fn rule38_a_form_without_this_consoles_csrf_value_or_from_another_site_is_refused() {
    let (store, _) = orders().await;
    let app = Console::new(Arc::clone(&store)).allow_actions().router();
    let csrf = get(&app, "/runs/orders/o-2", None).await.csrf();
    let missing = post(&app, "/runs/orders/o-2", &[("action", "retry")], &[]).await;
    assert_eq!(missing.status, StatusCode::FORBIDDEN);
    assert!(missing.body.contains("csrf"), "{}", missing.body);
    // another console's value (a new secret each console) is not this one's
    let other = Console::new(Arc::clone(&store)).allow_actions().router();
    let foreign = get(&other, "/runs/orders/o-2", None).await.csrf();
    assert_ne!(foreign, csrf);
    let stale = post(
        &app,
        "/runs/orders/o-2",
        &[("action", "retry"), ("csrf", &foreign)],
        &[],
    )
    .await;
    assert_eq!(stale.status, StatusCode::FORBIDDEN);
    let cross = post(
        &app,
        "/runs/orders/o-2",
        &[("action", "retry"), ("csrf", &csrf)],
        &[("sec-fetch-site", "cross-site")],
    )
    .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);
    assert_eq!(status(&store, "orders/o-2").await, RunStatus::Failed);
    let unknown = post(
        &app,
        "/runs/orders/o-2",
        &[("action", "explode"), ("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert!(
        unknown.body.contains("unknown action `explode`"),
        "{}",
        unknown.body
    );
}

#[tokio::test]
async fn rule38_with_a_token_actions_need_a_sign_in_and_no_page_or_header_shows_the_token() {
    const TOKEN: &str = "s3cret-token-for-the-test";
    let (store, _) = orders().await;
    let app = Console::new(Arc::clone(&store))
        .allow_actions()
        .token(TOKEN)
        .expect("a valid token")
        .router();
    // pages stay readable; the forms are replaced by a sign-in link
    let page = get(&app, "/runs/orders/o-2", None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Sign in"), "{}", page.body);
    let login = get(&app, "/login", None).await;
    let csrf = login.csrf();
    let unsigned = post(
        &app,
        "/runs/orders/o-2",
        &[("action", "retry"), ("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(
        unsigned.status,
        StatusCode::UNAUTHORIZED,
        "{}",
        unsigned.body
    );
    let wrong = post(&app, "/login", &[("token", "guess"), ("csrf", &csrf)], &[]).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.headers.get(header::SET_COOKIE).is_none());
    let signed = post(&app, "/login", &[("token", TOKEN), ("csrf", &csrf)], &[]).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
    let cookie = signed
        .headers
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .expect("a cookie")
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().expect("name=value").to_owned();
    let page = get(&app, "/runs/orders/o-2", Some(&pair)).await;
    assert!(page.body.contains("value=\"retry\""), "{}", page.body);
    for reply in [&page, &login, &signed, &wrong, &unsigned] {
        assert!(!reply.body.contains(TOKEN), "{}", reply.body);
        for (name, value) in &reply.headers {
            let value = value.to_str().unwrap_or_default();
            assert!(!value.contains(TOKEN), "{name}: {value}");
        }
    }
    let done = post(
        &app,
        "/runs/orders/o-2",
        &[("action", "retry"), ("csrf", &csrf)],
        &[("cookie", &pair)],
    )
    .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(status(&store, "orders/o-2").await, RunStatus::Running);
    // a script sends the token as a bearer, no form value needed
    let cancelled = post(
        &app,
        "/runs/orders/o-2",
        &[("action", "cancel")],
        &[("authorization", &format!("Bearer {TOKEN}"))],
    )
    .await;
    assert_eq!(
        cancelled.status,
        StatusCode::SEE_OTHER,
        "{}",
        cancelled.body
    );
    assert_eq!(status(&store, "orders/o-2").await, RunStatus::Cancelled);
    let guessed = post(
        &app,
        "/runs/orders/o-1",
        &[("action", "delete"), ("confirm", "yes")],
        &[("authorization", "Bearer guess")],
    )
    .await;
    assert_eq!(guessed.status, StatusCode::FORBIDDEN, "{}", guessed.body);
    assert!(store.load("orders/o-1").await.expect("loads").is_some());
    // an empty token is refused when the console is built
    let empty = Console::new(Arc::clone(&store))
        .token("")
        .expect_err("refused");
    assert!(empty.to_string().contains("token"), "{empty}");
}

#[tokio::test]
async fn rule38_delete_asks_first_then_deletes_the_run_and_its_history() {
    let (store, _) = orders().await;
    let app = Console::new(Arc::clone(&store)).allow_actions().router();
    let csrf = get(&app, "/runs/orders/o-1", None).await.csrf();
    let asked = post(
        &app,
        "/runs/orders/o-1",
        &[("action", "delete"), ("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(asked.status, StatusCode::OK);
    assert!(asked.body.contains("cannot be undone"), "{}", asked.body);
    assert!(
        store.load("orders/o-1").await.expect("loads").is_some(),
        "asked, not deleted"
    );
    let done = post(
        &app,
        "/runs/orders/o-1",
        &[("action", "delete"), ("confirm", "yes"), ("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(done.location(), "../../?done=deleted");
    assert!(store.load("orders/o-1").await.expect("loads").is_none());
    assert!(store.history("orders/o-1").await.expect("reads").is_empty());
    let gone = get(&app, "/runs/orders/o-1", None).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn rule38_purge_lists_what_it_would_delete_and_deletes_only_that() {
    let (store, p) = orders().await;
    let refused = Context::new().set("refuse", true).expect("set");
    p.invoke("o-3", refused).await.expect_err("refused");
    let app = Console::new(Arc::clone(&store)).allow_actions().router();
    let list = get(&app, "/?state=failed", None).await;
    assert!(list.body.contains("purge these runs"), "{}", list.body);
    let asked = get(&app, "/purge?state=failed&pipeline=orders", None).await;
    assert_eq!(asked.status, StatusCode::OK, "{}", asked.body);
    assert!(asked.body.contains("orders/o-2") && asked.body.contains("orders/o-3"));
    assert!(!asked.body.contains("orders/o-1"), "{}", asked.body);
    // a purge takes every filter of the page it came from: here one run
    let one = post(
        &app,
        "/purge?state=failed&prefix=o-3",
        &[("csrf", &asked.csrf()), ("confirm", "yes")],
        &[],
    )
    .await;
    assert!(one.location().contains("count=1"), "{}", one.location());
    assert!(store.load("orders/o-3").await.expect("loads").is_none());
    assert_eq!(status(&store, "orders/o-2").await, RunStatus::Failed);
    p.invoke("o-3", Context::new().set("refuse", true).expect("set"))
        .await
        .expect_err("refused");
    let unconfirmed = post(&app, "/purge?state=failed", &[("csrf", &asked.csrf())], &[]).await;
    assert_eq!(unconfirmed.status, StatusCode::BAD_REQUEST);
    let done = post(
        &app,
        "/purge?state=failed&pipeline=orders",
        &[("csrf", &asked.csrf()), ("confirm", "yes")],
        &[],
    )
    .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert!(
        done.location().contains("done=purged&count=2"),
        "{}",
        done.location()
    );
    assert!(store.load("orders/o-2").await.expect("loads").is_none());
    assert!(store.load("orders/o-3").await.expect("loads").is_none());
    assert_eq!(status(&store, "orders/o-1").await, RunStatus::Completed);
    let stateless = get(&app, "/purge", None).await;
    assert_eq!(stateless.status, StatusCode::BAD_REQUEST);
    assert!(
        stateless.body.contains("needs a state"),
        "{}",
        stateless.body
    );
}

#[tokio::test]
async fn rule38_wake_pause_unpause_signal_and_cancel_a_parked_run_from_its_page() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![
        take,
        sleep!("1h"),
        wait!("approval" as Approval into "decision", deadline = "72h"),
        pay,
    ]
    .name("expenses")
    .store_arc(Arc::clone(&store))
    .build()
    .expect("valid");
    let app = Console::new(Arc::clone(&store)).allow_actions().router();
    let out = p.invoke("e-1", Context::new()).await.expect("sleeps");
    assert!(matches!(out, Outcome::Sleeping { .. }), "{out:?}");
    let page = get(&app, "/runs/expenses/e-1", None).await;
    let csrf = page.csrf();
    assert!(page.body.contains("wake now"), "{}", page.body);
    let act = |action: &'static str| {
        let app = app.clone();
        let csrf = csrf.clone();
        async move {
            post(
                &app,
                "/runs/expenses/e-1",
                &[("action", action), ("csrf", &csrf)],
                &[],
            )
            .await
        }
    };
    assert_eq!(act("wake").await.status, StatusCode::SEE_OTHER);
    let woken = p.resume("e-1").await.expect("resumes");
    assert!(matches!(woken, Outcome::Waiting { .. }), "{woken:?}");
    assert_eq!(act("pause").await.status, StatusCode::SEE_OTHER);
    assert_eq!(status(&store, "expenses/e-1").await, RunStatus::Paused);
    let paused = get(&app, "/runs/expenses/e-1", None).await;
    assert!(paused.body.contains("value=\"unpause\""), "{}", paused.body);
    assert_eq!(act("unpause").await.status, StatusCode::SEE_OTHER);
    assert_eq!(status(&store, "expenses/e-1").await, RunStatus::Waiting);
    // a signal whose payload is not JSON, or names no wait the run has
    let bad = post(
        &app,
        "/runs/expenses/e-1",
        &[
            ("action", "signal"),
            ("csrf", &csrf),
            ("wait", "approval"),
            ("payload", "{approved"),
        ],
        &[],
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("not JSON"), "{}", bad.body);
    let unknown = post(
        &app,
        "/runs/expenses/e-1",
        &[
            ("action", "signal"),
            ("csrf", &csrf),
            ("wait", "refund"),
            ("payload", "{}"),
        ],
        &[],
    )
    .await;
    assert_eq!(unknown.status, StatusCode::CONFLICT, "{}", unknown.body);
    assert!(unknown.body.contains("approval"), "{}", unknown.body);
    let sent = post(
        &app,
        "/runs/expenses/e-1",
        &[
            ("action", "signal"),
            ("csrf", &csrf),
            ("wait", "approval"),
            ("payload", r#"{"approved": true}"#),
        ],
        &[],
    )
    .await;
    assert_eq!(sent.status, StatusCode::SEE_OTHER, "{}", sent.body);
    assert_eq!(sent.location(), "e-1?done=signalled");
    let paid = p.resume("e-1").await.expect("resumes");
    assert!(paid.is_completed(), "{paid:?}");
    assert!(paid.context().get::<bool>("paid").expect("paid"));
    // a second run, cancelled while it sleeps
    let slept = p.invoke("e-2", Context::new()).await.expect("sleeps");
    assert!(matches!(slept, Outcome::Sleeping { .. }), "{slept:?}");
    let cancelled = post(
        &app,
        "/runs/expenses/e-2",
        &[("action", "cancel"), ("csrf", &csrf)],
        &[],
    )
    .await;
    assert_eq!(cancelled.status, StatusCode::SEE_OTHER);
    assert_eq!(status(&store, "expenses/e-2").await, RunStatus::Cancelled);
}
