//! The console's pages (contract rule 38), requested through the router
//! (tower `oneshot`) over an in-memory store seeded by real pipelines.

use std::sync::Arc;

use axum::http::{StatusCode, header};
use fluxio::store::{CheckpointStore, InMemoryStore};
use fluxio::{Context, pipeline};
use fluxio_ui::Console;

mod support;
use support::{refuse, take};

/// A store with `orders/o-1` completed, `orders/o-2` failed for good, and
/// a run whose id and context hold HTML.
async fn seeded() -> Arc<dyn CheckpointStore> {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = support::orders(&store);
    let ok = p.invoke("o-1", Context::new()).await.expect("runs");
    assert!(ok.is_completed());
    let refused = Context::new().set("refuse", true).expect("set");
    p.invoke("o-2", refused).await.expect_err("refused");
    let hostile = Context::new()
        .set("note", "<img src=x onerror=alert(1)>")
        .and_then(|c| c.set("big", "x".repeat(1 << 20)))
        .expect("set");
    let ok = p
        .invoke("<script>alert(1)</script>", hostile)
        .await
        .expect("runs");
    assert!(ok.is_completed());
    store
}

async fn get(store: &Arc<dyn CheckpointStore>, uri: &str) -> (StatusCode, String, String) {
    let reply = support::get(&Console::new(Arc::clone(store)).router(), uri, None).await;
    let csp = reply.header(header::CONTENT_SECURITY_POLICY).to_owned();
    (reply.status, reply.body, csp)
}

#[tokio::test]
async fn rule38_the_runs_page_lists_and_filters_runs() {
    let store = seeded().await;
    let (status, body, csp) = get(&store, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(csp.contains("default-src 'none'"), "{csp}");
    for shown in [
        ">o-1<",
        ">o-2<",
        "completed",
        "failed",
        "href=\"runs/orders/o-1\"",
    ] {
        assert!(body.contains(shown), "{shown}: {body}");
    }
    let (status, failed, _) = get(&store, "/?state=failed&pipeline=orders").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        failed.contains(">o-2<") && !failed.contains(">o-1<"),
        "{failed}"
    );
    assert!(
        failed.contains("refused &lt;b&gt;for good&lt;/b&gt;"),
        "the error, escaped: {failed}"
    );
    let (_, prefixed, _) = get(&store, "/?prefix=o-1").await;
    assert!(prefixed.contains(">o-1<") && !prefixed.contains(">o-2<"));
}

#[tokio::test]
async fn rule38_a_run_page_shows_its_steps_and_the_context_at_any_of_them() {
    let store = seeded().await;
    let (status, body, _) = get(&store, "/runs/orders/o-2").await;
    assert_eq!(status, StatusCode::OK);
    for shown in [
        "take",
        "refuse",
        "(for good)",
        "context before step",
        "href=\"../../\"",
    ] {
        assert!(body.contains(shown), "{shown}: {body}");
    }
    let (status, first, _) = get(&store, "/runs/orders/o-2?step=0").await;
    assert_eq!(status, StatusCode::OK);
    assert!(first.contains("context before step 0 (take)"), "{first}");
    assert!(!first.contains(">taken<"), "before `take` ran: {first}");
    let (_, second, _) = get(&store, "/runs/orders/o-2?step=1").await;
    assert!(second.contains(">taken<"), "after `take`: {second}");
    let (_, done, _) = get(&store, "/runs/orders/o-1").await;
    assert!(done.contains("context at the end"), "{done}");
}

#[tokio::test]
async fn rule38_html_in_run_ids_and_values_is_shown_never_run() {
    let store = seeded().await;
    let (_, list, _) = get(&store, "/").await;
    assert!(!list.contains("<script>alert"), "{list}");
    assert!(
        list.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{list}"
    );
    let key = "/runs/orders/%3Cscript%3Ealert(1)%3C%2Fscript%3E";
    let (status, body, _) = get(&store, key).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body.contains("<img src=x"), "{body}");
    assert!(
        body.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{body}"
    );
    // a 1 MB value is cut, not sent whole
    assert!(body.len() < 64 * 1024, "{} bytes", body.len());
}

#[tokio::test]
async fn rule38_bad_requests_and_missing_runs_are_pages_naming_what_was_wrong() {
    let store = seeded().await;
    let (status, body, _) = get(&store, "/?state=exploded").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.contains("unknown state `exploded`; one of: running"),
        "{body}"
    );
    let (status, body, _) = get(&store, "/runs/orders/nobody").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body.contains("no run is stored under `orders/nobody`"),
        "{body}"
    );
    let (status, body, _) = get(&store, "/runs/orders/o-1?step=seven").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("step `seven` is not a step number"), "{body}");
    let (status, _, _) = get(&store, "/runs/orders/o-1?step=999").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// A store with only the four required methods: it cannot list runs.
#[derive(Debug)]
struct FourMethods(InMemoryStore);

#[fluxio::async_trait]
impl CheckpointStore for FourMethods {
    async fn save(&self, checkpoint: fluxio::Checkpoint) -> fluxio::Result<()> {
        self.0.save(checkpoint).await
    }
    async fn load(&self, key: &str) -> fluxio::Result<Option<fluxio::Checkpoint>> {
        self.0.load(key).await
    }
    async fn delete(&self, key: &str) -> fluxio::Result<()> {
        self.0.delete(key).await
    }
    async fn exists(&self, key: &str) -> fluxio::Result<bool> {
        self.0.exists(key).await
    }
}

#[tokio::test]
async fn rule38_a_store_that_cannot_list_answers_an_error_page() {
    let store: Arc<dyn CheckpointStore> = Arc::new(FourMethods(InMemoryStore::new()));
    let (status, body, _) = get(&store, "/").await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    assert!(body.contains("list runs"), "{body}");
}

#[tokio::test]
async fn rule38_a_sleeping_run_shows_when_it_wakes() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![take, sleep!("1h"), refuse]
        .name("nightly")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    let slept = p.invoke("n-1", Context::new()).await.expect("sleeps");
    assert!(!slept.is_completed());
    let (status, body, _) = get(&store, "/runs/nightly/n-1").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("sleeps until"), "{body}");
    let (_, list, _) = get(&store, "/?state=sleeping").await;
    assert!(list.contains(">n-1<"), "{list}");
}

/// `orders/o-9`, parked on its child run of `billing`.
async fn parent_and_child(store: &Arc<dyn CheckpointStore>) -> fluxio::Outcome {
    let billing = pipeline![take]
        .name("billing")
        .store_arc(Arc::clone(store))
        .build()
        .expect("valid");
    let orders = pipeline![child!("billing"), refuse]
        .name("orders")
        .store_arc(Arc::clone(store))
        .child(billing)
        .build()
        .expect("valid");
    orders.invoke("o-9", Context::new()).await.expect("parks")
}

#[tokio::test]
async fn rule38_a_child_run_links_to_its_parent() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let parked = parent_and_child(&store).await;
    assert!(!parked.is_completed());
    let (_, children, _) = get(&store, "/?pipeline=billing").await;
    let child = children
        .split("href=\"runs/")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no child run listed: {children}"))
        .to_owned();
    let (status, body, _) = get(&store, &format!("/runs/{child}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains(">orders/o-9<"), "{body}");
    assert!(body.contains("runs/orders/o-9\""), "{body}");
}

#[tokio::test]
async fn rule38_the_runs_page_filters_by_version_and_time_and_refuses_a_bad_time() {
    let store = seeded().await;
    let version = store
        .load("orders/o-1")
        .await
        .expect("loads")
        .expect("kept")
        .version;
    let (_, same, _) = get(&store, &format!("/?version={version}")).await;
    assert!(same.contains(">o-1<") && same.contains(">o-2<"), "{same}");
    let (_, other, _) = get(&store, "/?version=0000deadbeef").await;
    assert!(other.contains("No run matches"), "{other}");
    let (_, future, _) = get(&store, "/?created_from=2999-01-01T00:00").await;
    assert!(future.contains("No run matches"), "{future}");
    let (_, past, _) = get(&store, "/?created_from=2000-01-01T00:00").await;
    assert!(past.contains(">o-1<"), "{past}");
    let (_, before, _) = get(&store, "/?updated_before=2000-01-01T00:00:00").await;
    assert!(before.contains("No run matches"), "{before}");
    let (status, bad, _) = get(&store, "/?created_from=yesterday").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        bad.contains("created_from `yesterday` is not a UTC time"),
        "{bad}"
    );
}

#[tokio::test]
async fn rule38_a_run_page_diffs_two_steps_and_shows_a_cut_value_whole() {
    let store = seeded().await;
    let (status, diff, _) = get(&store, "/runs/orders/o-1?diff=0&to=2").await;
    assert_eq!(status, StatusCode::OK, "{diff}");
    assert!(diff.contains("diff of step 0 and step 2"), "{diff}");
    for key in [">taken<", ">accepted<"] {
        assert!(diff.contains(key), "{key}: {diff}");
    }
    assert!(diff.contains("<em>absent</em>"), "{diff}");
    let (_, same, _) = get(&store, "/runs/orders/o-1?diff=1&to=1").await;
    assert!(same.contains("no key differs"), "{same}");
    let (status, half, _) = get(&store, "/runs/orders/o-1?diff=1").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(half.contains("a diff needs two steps"), "{half}");
    let (status, _, _) = get(&store, "/runs/orders/o-1?diff=0&to=99").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // the 1 MB value: cut on the page, with a link to it whole
    let key = "/runs/orders/%3Cscript%3Ealert(1)%3C%2Fscript%3E";
    let (_, cut, _) = get(&store, key).await;
    assert!(
        cut.contains("href=\"?key=big\""),
        "{}",
        &cut[..cut.len().min(4000)]
    );
    let (status, whole, _) = get(&store, &format!("{key}?key=big")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(whole.contains("the value of big"), "a heading");
    // a 1 MiB value shown up to a million characters, and said so
    assert!(whole.len() > 1_000_000, "{} bytes", whole.len());
    assert!(whole.contains("cut at 1000000 characters"), "said so");
    let (status, none, _) = get(&store, &format!("{key}?key=nothing")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(none.contains("has no key `nothing`"), "{none}");
    // the timeline: a bar per step
    let (_, run, _) = get(&store, "/runs/orders/o-2").await;
    assert_eq!(run.matches("class=\"bar ").count(), 2, "{run}");
}

#[tokio::test]
async fn rule38_a_parent_lists_its_children_and_a_running_run_reloads_itself() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let parked = parent_and_child(&store).await;
    assert!(!parked.is_completed());
    let (_, parent, _) = get(&store, "/runs/orders/o-9").await;
    assert!(parent.contains(">children<"), "{parent}");
    assert!(parent.contains("runs/billing/orders/o-9"), "{parent}");
    assert!(
        !parent.contains("http-equiv=\"refresh\""),
        "a waiting run does not reload"
    );
    // a running run nobody holds (its worker died): abandoned, and its page reloads
    let abandoned = fluxio::Checkpoint::new("o-10", "v1", 1, "refuse", Context::new().snapshot())
        .in_pipeline("orders");
    store.save(abandoned).await.expect("saved");
    let (_, page, _) = get(&store, "/runs/orders/o-10").await;
    assert!(page.contains(">abandoned: no worker holds it"), "{page}");
    assert!(page.contains("http-equiv=\"refresh\""), "{page}");
}

#[tokio::test]
async fn rule38_mounted_under_a_path_the_console_links_within_it() {
    let store = seeded().await;
    let app = axum::Router::new().nest_service("/ops", Console::new(Arc::clone(&store)).router());
    let send = |uri: &'static str| {
        let app = app.clone();
        async move {
            let reply = support::get(&app, uri, None).await;
            let location = reply.location().to_owned();
            (reply.status, location, reply.body)
        }
    };
    // `/ops` leads to `/ops/`, whose relative links stay under `/ops/`
    let (status, location, _) = send("/ops?state=failed").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location, "ops/?state=failed");
    let (status, _, runs) = send("/ops/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(runs.contains("href=\"runs/orders/o-1\""), "{runs}");
    let (status, _, run) = send("/ops/runs/orders/o-1").await;
    assert_eq!(status, StatusCode::OK);
    assert!(run.contains("href=\"../../\""), "back to /ops/: {run}");
    // a path it does not have, and a key that is not UTF-8: its own pages
    let (status, _, missing) = send("/ops/nowhere/else").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(missing.contains("no page `/nowhere/else`"), "{missing}");
    assert!(missing.contains("href=\"../\""), "{missing}");
    let (status, _, bad) = send("/ops/runs/%FF%FE").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(bad.contains("not percent-encoded UTF-8"), "{bad}");
    let (status, _, bad) = send("/ops/?count=lots").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(bad.contains("count"), "{bad}");
}

#[tokio::test]
async fn rule38_the_pipelines_page_counts_each_pipeline_s_runs_per_state() {
    let store = seeded().await;
    let (status, pipelines, _) = get(&store, "/pipelines").await;
    assert_eq!(status, StatusCode::OK);
    assert!(pipelines.contains(">orders<"), "{pipelines}");
    assert!(
        pipelines.contains("href=\"./?pipeline=orders&amp;state=failed\">1<"),
        "{pipelines}"
    );
    assert!(
        pipelines.contains("href=\"./?pipeline=orders&amp;state=completed\">2<"),
        "{pipelines}"
    );
    assert!(pipelines.contains("<td>3</td>"), "all of them: {pipelines}");
    let unable: Arc<dyn CheckpointStore> = Arc::new(FourMethods(InMemoryStore::new()));
    let (status, _, _) = get(&unable, "/pipelines").await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
}
