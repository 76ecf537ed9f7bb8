//! docs/CONTRACT.md rule 33, pipelines built from data: a shape read from
//! JSON makes the program and the version `pipeline![...]` makes of the
//! same shape, runs alike, and bad shapes are typed errors naming the place.

use fluxio::shape::{
    MAX_SHAPE_BYTES, MAX_SHAPE_DEPTH, MAX_SHAPE_STEPS, RouteBlock, RouteBody, Shape, StageRegistry,
    Step,
};
use fluxio::{Context, Error, InMemoryStore, Route, StageResult, pipeline, stage};

#[stage]
async fn validate(ctx: Context) -> StageResult {
    let n: u64 = ctx.get("n")?;
    Ok(ctx.set("valid", n > 0)?)
}

#[stage(writes = ["price"])]
async fn price(ctx: Context) -> StageResult {
    Ok(ctx.set("price", 7u64)?)
}

#[stage(writes = ["stock"])]
async fn stock(ctx: Context) -> StageResult {
    Ok(ctx.set("stock", 3u64)?)
}

#[stage]
fn pick(ctx: Context) -> StageResult<Route> {
    let valid: bool = ctx.get("valid")?;
    Ok(Route::to(if valid { "ship" } else { "hold" }))
}

#[stage]
async fn ship(ctx: Context) -> StageResult {
    Ok(ctx.set("shipped", true)?)
}

#[stage]
async fn hold(ctx: Context) -> StageResult {
    Ok(ctx.set("held", true)?)
}

#[stage]
async fn audit(ctx: Context) -> StageResult {
    Ok(ctx)
}

fn registry() -> StageRegistry {
    StageRegistry::new()
        .with::<validate>()
        .with::<price>()
        .with::<stock>()
        .with::<pick>()
        .with::<ship>()
        .with::<hold>()
        .with::<audit>()
}

const ORDERS: &str = r#"{
  "version": 1,
  "name": "orders",
  "steps": [
    { "stage": "validate" },
    { "parallel": [[{ "stage": "price" }], [{ "stage": "stock" }]] },
    { "route": { "router": "pick", "routes": [
        { "name": "ship", "steps": [{ "stage": "ship" }] },
        { "name": "hold", "steps": [{ "stage": "hold" }, { "sleep": "1h" }] }
    ] } },
    { "fire_and_forget": [[{ "stage": "audit" }]] }
  ]
}"#;

#[tokio::test]
async fn rule33_a_shape_from_json_has_the_macros_version_program_and_result() {
    for auto in [true, false] {
        let by_macro = pipeline![
            validate,
            parallel![price, stock],
            pick => { "ship" => [ship], "hold" => [hold, sleep!("1h")] },
            fire_and_forget![audit],
        ]
        .name("orders")
        .auto_parallel(auto)
        .store(InMemoryStore::new())
        .build()
        .expect("builds");
        let shape = Shape::from_json(ORDERS.as_bytes()).expect("a shape");
        let by_data = registry()
            .builder(&shape)
            .expect("a builder")
            .auto_parallel(auto)
            .store(InMemoryStore::new())
            .build()
            .expect("builds");
        assert_eq!(by_data.name(), "orders");
        assert_eq!(
            by_data.version(),
            by_macro.version(),
            "auto_parallel {auto}"
        );
        assert_eq!(by_data.explain(), by_macro.explain());
        let input = Context::new().set("n", 4u64).expect("a value");
        let a = by_macro.invoke("o-1", input.clone()).await.expect("runs");
        let b = by_data.invoke("o-1", input).await.expect("runs");
        assert_eq!(
            a.completed().expect("done").snapshot(),
            b.completed().expect("done").snapshot()
        );
    }
    // another shape, another version; a shape survives a round trip
    let mut shape = Shape::from_json(ORDERS.as_bytes()).expect("a shape");
    let json = serde_json::to_vec(&shape).expect("encodes");
    assert_eq!(Shape::from_json(&json).expect("decodes"), shape);
    let build = |shape: &Shape| {
        registry()
            .builder(shape)
            .expect("a builder")
            .store(InMemoryStore::new())
            .build()
            .expect("builds")
    };
    let first = build(&shape);
    shape.steps.swap(0, 3);
    let swapped = build(&shape);
    assert_ne!(first.version(), swapped.version());
}

fn build_error(shape: &Shape) -> String {
    match registry().builder(shape).map(|b| b.build()) {
        Err(Error::Build { message }) | Ok(Err(Error::Build { message })) => message,
        Err(other) | Ok(Err(other)) => panic!("expected Error::Build, got {other:?}"),
        Ok(Ok(_)) => panic!("{shape:?} built"),
    }
}

#[test]
fn rule33_bad_shapes_are_build_errors_naming_the_place() {
    let stage = Step::stage;
    let cases: Vec<(Shape, &str)> = vec![
        (
            Shape::new(vec![stage("validate"), stage("chrage")]),
            "steps[1]: stage `chrage` is not registered (registered: audit, hold, pick,",
        ),
        (
            Shape::new(vec![stage("pick")]),
            "steps[0]: `pick` is a router",
        ),
        (
            Shape::new(vec![Step::Route(RouteBlock::new(
                "ship",
                vec![RouteBody::new("x", vec![stage("hold")])],
            ))]),
            "steps[0].route.router: `ship` is not a router",
        ),
        (
            Shape::new(vec![Step::Parallel(vec![vec![stage("price")], vec![]])]),
            "steps[0].parallel: a block needs branches",
        ),
        (
            Shape::new(vec![Step::Route(RouteBlock::new(
                "pick",
                vec![
                    RouteBody::new("ship", vec![stage("ship")]),
                    RouteBody::new("ship", vec![stage("hold")]),
                ],
            ))]),
            "steps[0].route.routes[1]: route \"ship\" is named twice",
        ),
        (
            Shape::new(vec![Step::Sleep("soon".into())]),
            "steps[0].sleep: \"soon\" is not a duration",
        ),
        (
            Shape::new(vec![Step::Parallel(vec![
                vec![stage("price")],
                vec![stage("price")],
            ])]),
            "parallel branches both declare a write of `price`",
        ),
    ];
    for (shape, says) in cases {
        let message = build_error(&shape);
        assert!(message.contains(says), "{says}: {message}");
    }
    let mut newer = Shape::new(vec![stage("validate")]);
    newer.version = 2;
    assert!(build_error(&newer).contains("schema version 2"));
}

#[test]
fn rule33_huge_and_deep_shapes_are_refused_with_bounded_work() {
    // 200 levels of nesting, built as data
    let mut steps = vec![Step::stage("audit")];
    for _ in 0..200 {
        steps = vec![Step::Parallel(vec![steps])];
    }
    let deep = build_error(&Shape::new(steps));
    assert!(
        deep.contains(&format!("more than {MAX_SHAPE_DEPTH} levels")),
        "{deep}"
    );
    // and as JSON: the parser's own limit, a typed error
    let json = format!(
        r#"{{"version":1,"steps":[{}{{"stage":"audit"}}{}]}}"#,
        r#"{"parallel":[["#.repeat(200),
        "]]}".repeat(200)
    );
    let err = Shape::from_json(json.as_bytes()).expect_err("too deep");
    assert!(matches!(err, Error::Build { .. }), "{err:?}");
    // more steps than the limit
    let many = Shape::new(vec![Step::stage("audit"); MAX_SHAPE_STEPS + 1]);
    assert!(build_error(&many).contains(&format!("more than {MAX_SHAPE_STEPS} steps")));
    // a 50 MB file is refused before it is parsed
    let huge = vec![b' '; 50 << 20];
    let err = Shape::from_json(&huge).expect_err("too long").to_string();
    assert!(err.contains(&MAX_SHAPE_BYTES.to_string()), "{err}");
    // not UTF-8, and not JSON
    let err = Shape::from_json(b"{\"version\":1,\"steps\":[{\"stage\":\"\xff\"}]}")
        .expect_err("not UTF-8")
        .to_string();
    assert!(err.contains("steps"), "{err}");
    let err = Shape::from_json(b"version = 1")
        .expect_err("TOML")
        .to_string();
    assert!(err.contains("line 1"), "{err}");
}

#[test]
fn rule33_a_stage_registered_twice_under_one_name_is_refused() {
    let other = fluxio::__private::doc_stages(&["audit"]);
    let registry = registry().stage(other.into_iter().next().expect("one"));
    let err = registry
        .builder(&Shape::new(vec![Step::stage("audit")]))
        .expect_err("two stages named audit")
        .to_string();
    assert!(err.contains("stage `audit` is registered twice"), "{err}");
}

#[stage]
async fn bill(ctx: Context) -> StageResult {
    Ok(ctx.set("billed", true)?)
}

fn billing() -> fluxio::Pipeline {
    pipeline![bill]
        .name("billing")
        .store(InMemoryStore::new())
        .build()
        .expect("builds")
}

#[test]
fn rule33_a_child_step_from_data_has_the_macros_version() {
    let by_macro = pipeline![
        validate,
        child!(
            "billing",
            input = ["n"],
            output = ["billed"],
            failure = "billing_error",
            deadline = "1h",
            poll = "5s"
        ),
    ]
    .name("orders")
    .child(billing())
    .store(InMemoryStore::new())
    .build()
    .expect("builds");
    let json = br#"{"version": 1, "name": "orders", "steps": [
        {"stage": "validate"},
        {"child": {"pipeline": "billing", "input": ["n"], "output": ["billed"],
                   "failure": "billing_error", "deadline": "1h", "poll": "5s"}}
    ]}"#;
    let shape = Shape::from_json(json).expect("a shape");
    let by_data = registry()
        .pipeline(billing())
        .builder(&shape)
        .expect("a builder")
        .store(InMemoryStore::new())
        .build()
        .expect("builds");
    assert_eq!(by_data.version(), by_macro.version());
    let missing = registry()
        .builder(&shape)
        .expect_err("billing is not registered")
        .to_string();
    assert!(
        missing.contains("steps[1].child.pipeline: pipeline `billing` is not registered"),
        "{missing}"
    );
}

#[tokio::test]
async fn rule33_a_built_pipeline_is_a_route_body_and_a_parallel_branch() {
    let json = br#"{"version": 1, "name": "orders", "steps": [
        {"stage": "validate"},
        {"parallel": [[{"pipeline": "billing"}], [{"stage": "stock"}]]},
        {"route": {"router": "pick", "routes": [
            {"name": "ship", "steps": [{"pipeline": "billing"}, {"stage": "ship"}]},
            {"name": "hold", "steps": [{"stage": "hold"}]}
        ]}}
    ]}"#;
    let shape = Shape::from_json(json).expect("a shape");
    let orders = registry()
        .pipeline(billing())
        .builder(&shape)
        .expect("a builder")
        .store(InMemoryStore::new())
        .build()
        .expect("builds");
    let input = Context::new().set("n", 1u64).expect("a value");
    let done = orders
        .invoke("o-1", input)
        .await
        .expect("runs")
        .completed()
        .expect("completes");
    assert!(done.get::<bool>("billed").expect("billed"));
    assert!(done.get::<bool>("shipped").expect("shipped"));
    assert_eq!(done.get::<u64>("stock").expect("stock"), 3);
    // the inner pipeline's version counts in the outer's
    let other_billing = pipeline![bill, audit]
        .name("billing")
        .store(InMemoryStore::new())
        .build()
        .expect("builds");
    let changed = registry()
        .pipeline(other_billing)
        .builder(&shape)
        .expect("a builder")
        .store(InMemoryStore::new())
        .build()
        .expect("builds");
    assert_ne!(changed.version(), orders.version());
}
