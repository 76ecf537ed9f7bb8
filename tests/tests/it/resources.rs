//! Stage resources: values registered on the builder with `.resource(value)`
//! and taken by stages as `name: Resource<T>` arguments (after the context,
//! and after the `Emitter` of a stream stage).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use fluxio::testing::StageTest;
use fluxio::{
    Context, Emitter, Error, InMemoryStore, Outcome, Resource, StageResult, StreamEvent, Value,
    ctx, pipeline, stage,
};
use futures::StreamExt as _;

/// Stands in for a connection pool.
#[derive(Debug)]
struct Db {
    name: String,
    calls: Arc<AtomicU32>,
}

impl Db {
    fn new(name: &str) -> Self {
        Db {
            name: name.to_owned(),
            calls: Arc::new(AtomicU32::new(0)),
        }
    }
}

/// Stands in for an HTTP client.
#[derive(Debug, Clone)]
struct Http {
    base: String,
}

#[stage]
async fn load(ctx: Context, db: Resource<Db>) -> StageResult {
    db.calls.fetch_add(1, Ordering::SeqCst);
    Ok(ctx.set("db", db.name.clone())?)
}

#[stage]
fn blocking_load(ctx: Context, db: Resource<Db>) -> StageResult {
    db.calls.fetch_add(1, Ordering::SeqCst);
    Ok(ctx.set("blocking_db", db.name.clone())?)
}

#[stage]
async fn pick(_ctx: Context, http: Resource<Http>) -> StageResult<fluxio::Route> {
    Ok(fluxio::Route::to("go").with("base", http.base.clone())?)
}

#[stage]
async fn both(ctx: Context, http: Resource<Http>, db: Resource<Db>) -> StageResult {
    Ok(ctx.set("both", format!("{}@{}", db.name, http.base))?)
}

#[stage]
async fn streamed(ctx: Context, out: Emitter, db: Resource<Db>) -> StageResult {
    out.emit(db.name.clone()).await?;
    Ok(ctx)
}

#[tokio::test]
async fn a_resource_reaches_async_blocking_router_and_stream_stages() {
    let db = Db::new("orders");
    let pipeline = pipeline![
        load,
        blocking_load,
        pick => { "go" => both },
        streamed,
    ]
    .resource(db)
    .resource(Http {
        base: "https://api.example".to_owned(),
    })
    .build()
    .expect("builds");
    let mut events = pipeline.stream("r1", Context::new());
    let mut chunks = Vec::new();
    let mut done = None;
    while let Some(e) = events.next().await {
        match e.expect("runs") {
            StreamEvent::Chunk(c) => chunks.push(c.value),
            StreamEvent::Done(ctx) => done = Some(ctx),
            _ => {}
        }
    }
    let out = done.expect("done");
    assert_eq!(out.get::<String>("db").expect("set"), "orders");
    assert_eq!(out.get::<String>("blocking_db").expect("set"), "orders");
    assert_eq!(
        out.get::<String>("base").expect("set"),
        "https://api.example"
    );
    assert_eq!(
        out.get::<String>("both").expect("set"),
        "orders@https://api.example"
    );
    assert_eq!(chunks, vec![Value::from("orders")]);
}

#[test]
fn a_missing_resource_is_a_build_error_naming_the_stage_and_the_type() {
    let err = pipeline![load, both]
        .resource(Db::new("orders"))
        .build()
        .expect_err("Http is not registered");
    assert!(matches!(err, Error::Build { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("`both`"), "{msg}");
    assert!(msg.contains("resources::Http"), "{msg}");
    assert!(msg.contains(".resource("), "{msg}");
}

#[tokio::test]
async fn one_registered_value_is_shared_by_every_stage_and_run() {
    let db = Db::new("shared");
    let calls = Arc::clone(&db.calls);
    let pipeline = pipeline![load, blocking_load]
        .resource(db)
        .build()
        .expect("builds");
    pipeline
        .invoke("a", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    pipeline
        .invoke("b", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[test]
fn registering_a_type_again_replaces_it_and_other_types_are_distinct() {
    // `Arc<Db>` is another type than `Db`: it does not satisfy `Resource<Db>`
    let err = pipeline![load]
        .resource(Arc::new(Db::new("wrapped")))
        .build()
        .expect_err("Db is missing");
    assert!(err.to_string().contains("resources::Db"), "{err}");
    let ok = pipeline![load]
        .resource(Db::new("old"))
        .resource(Db::new("new"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let out = rt
        .block_on(ok.build().expect("builds").invoke("r", Context::new()))
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(out.get::<String>("db").expect("set"), "new");
}

#[test]
fn resources_are_not_part_of_the_version() {
    let a = pipeline![load, both]
        .resource(Db::new("a"))
        .resource(Http {
            base: "a".to_owned(),
        })
        .build()
        .expect("builds");
    let b = pipeline![load, both]
        .resource(Db::new("b"))
        .resource(Http {
            base: "b".to_owned(),
        })
        .build()
        .expect("builds");
    assert_eq!(a.version(), b.version());
}

static FAIL_ONCE: AtomicU32 = AtomicU32::new(0);

#[stage]
async fn flaky_charge(ctx: Context, db: Resource<Db>) -> StageResult {
    if FAIL_ONCE.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err("card network down".into());
    }
    db.calls.fetch_add(1, Ordering::SeqCst);
    Ok(ctx.set("charged_by", db.name.clone())?)
}

#[tokio::test]
async fn a_durable_run_with_resources_resumes_with_the_resources_of_the_resuming_pipeline() {
    let store: Arc<dyn fluxio::CheckpointStore> = Arc::new(InMemoryStore::new());
    let first = pipeline![load, flaky_charge]
        .name("test")
        .store_arc(Arc::clone(&store))
        .resource(Db::new("first"))
        .build()
        .expect("builds");
    let err = first
        .invoke("order-1", ctx! { "n" => 1 }.expect("ok"))
        .await
        .expect_err("fails once");
    assert_eq!(err.stage(), Some("flaky_charge"));
    let cp = first
        .checkpoint("order-1")
        .await
        .expect("loads")
        .expect("stored");
    assert_eq!(
        cp.context.to_context().get::<String>("db").expect("set"),
        "first"
    );

    // another process: same code, a new pool
    let second = pipeline![load, flaky_charge]
        .name("test")
        .store_arc(store)
        .resource(Db::new("second"))
        .build()
        .expect("builds");
    assert_eq!(first.version(), second.version());
    let out = second
        .resume("order-1")
        .await
        .and_then(Outcome::completed)
        .expect("resumes");
    assert_eq!(out.get::<String>("db").expect("set"), "first");
    assert_eq!(out.get::<String>("charged_by").expect("set"), "second");
    assert_eq!(out.get::<i32>("n").expect("kept"), 1);
}

#[tokio::test]
async fn stage_test_supplies_resources_and_names_a_missing_one() {
    let run = StageTest::of::<both>()
        .resource(Db::new("test-db"))
        .resource(Http {
            base: "mock".to_owned(),
        })
        .run(Context::new())
        .await
        .expect("runs");
    run.assert_wrote(&["both"]);
    assert_eq!(
        run.context.get::<String>("both").expect("set"),
        "test-db@mock"
    );

    let err = StageTest::of::<both>()
        .resource(Db::new("test-db"))
        .run(Context::new())
        .await
        .expect_err("Http is missing");
    let msg = err.to_string();
    assert!(
        msg.contains("`both`") && msg.contains("resources::Http"),
        "{msg}"
    );
    assert!(msg.contains("StageTest::resource"), "{msg}");
}

#[tokio::test]
async fn run_step_passes_resources() {
    let pipeline = pipeline![load]
        .resource(Db::new("step"))
        .build()
        .expect("builds");
    let out = pipeline
        .run_step("load", Context::new())
        .await
        .expect("runs");
    assert_eq!(out.get::<String>("db").expect("set"), "step");
}

#[test]
fn resource_is_a_cheap_clone_with_deref() {
    let r = Resource::new(Http {
        base: "x".to_owned(),
    });
    let c = r.clone();
    assert!(Arc::ptr_eq(r.as_arc(), c.as_arc()));
    assert_eq!(c.base, "x");
}
