//! docs/CONTRACT.md section 4: callbacks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fluxio::callback::{Callback, CallbackResult, StepEvent};
use fluxio::{Context, Error, Outcome, RunStatus, StageResult, ctx, pipeline, stage};

/// Records every event as a line.
#[derive(Debug, Default, Clone)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl Recorder {
    fn push(&self, line: String) -> CallbackResult {
        self.0.lock().map_err(|_| "poisoned")?.push(line);
        Ok(())
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().expect("not poisoned").clone()
    }
}

impl Callback for Recorder {
    fn on_pipeline_start(&self, run_id: &str, _version: &str) -> CallbackResult {
        self.push(format!("start {run_id}"))
    }
    fn on_pipeline_end(
        &self,
        run_id: &str,
        _took: Duration,
        error: Option<&Error>,
    ) -> CallbackResult {
        self.push(format!("end {run_id} failed={}", error.is_some()))
    }
    fn on_step_start(&self, step: &StepEvent<'_>) -> CallbackResult {
        self.push(format!(
            "step> {} @{} #{}",
            step.stage, step.ip, step.attempt
        ))
    }
    fn on_step_end(
        &self,
        step: &StepEvent<'_>,
        _took: Duration,
        error: Option<&Error>,
    ) -> CallbackResult {
        let how = error.map_or_else(|| "ok".to_owned(), |e| format!("err: {e}"));
        self.push(format!("step< {} {how}", step.stage))
    }
    fn on_branch(&self, _run_id: &str, branch: &str) -> CallbackResult {
        self.push(format!("branch {branch}"))
    }
    fn on_route(&self, _run_id: &str, router: &str, route: &str) -> CallbackResult {
        self.push(format!("route {router} -> {route}"))
    }
    fn on_error(&self, _run_id: &str, error: &Error) -> CallbackResult {
        self.push(format!("error {error}"))
    }
    fn on_stream_chunk(&self, run_id: &str, stage: &str, chunk: &fluxio::Value) -> CallbackResult {
        self.push(format!("chunk {run_id} {stage} {chunk}"))
    }
    fn on_checkpoint(
        &self,
        _run_id: &str,
        ip: usize,
        status: RunStatus,
        latency: Duration,
    ) -> CallbackResult {
        assert!(latency < Duration::from_secs(10));
        self.push(format!("checkpoint @{ip} {status:?}"))
    }
}

#[stage]
async fn a(ctx: Context) -> StageResult {
    Ok(ctx.set("a", 1)?)
}

#[stage]
async fn b(ctx: Context) -> StageResult {
    Ok(ctx.set("b", 1)?)
}

#[stage]
async fn router(ctx: Context) -> StageResult<fluxio::Route> {
    let to: String = ctx.get("to")?;
    Ok(fluxio::Route::to(to))
}

#[stage]
async fn fails(_ctx: Context) -> StageResult {
    Err("no luck".into())
}

#[stage(timeout = "1s")]
async fn hangs(ctx: Context) -> StageResult {
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(ctx)
}

#[tokio::test]
async fn events_arrive_in_order_for_stages_branches_routes_and_checkpoints() {
    let rec = Recorder::default();
    let p = pipeline![a, parallel![b], router => { "x" => a }]
        .name("test")
        .durable(true)
        .callback(rec.clone())
        .build()
        .expect("valid");
    p.invoke("cb", ctx! { "to" => "x" }.expect("ok"))
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(
        rec.lines(),
        [
            "start test/cb",
            "checkpoint @0 Running",
            "step> a @2 #1",
            "step< a ok",
            "checkpoint @4 Running",
            "branch b",
            "step> b @7 #1",
            "step< b ok",
            "checkpoint @4 Running", // b's record (rule 19)
            "checkpoint @11 Running",
            "step> router @13 #1",
            "step< router ok",
            "route router -> x",
            "checkpoint @16 Running",
            "step> a @18 #1",
            "step< a ok",
            "checkpoint @21 Completed",
            "end test/cb failed=false",
        ],
        "{}",
        p.explain()
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_or_timed_out_stage_still_ends_its_step() {
    for (p, message) in [
        (
            pipeline![a, fails].name("test").durable(true),
            "err: stage `fails` failed: no luck",
        ),
        (
            pipeline![a, hangs].name("test").durable(true),
            "err: stage `hangs` timed out after 1s",
        ),
    ] {
        let rec = Recorder::default();
        let p = p.callback(rec.clone()).build().expect("valid");
        p.invoke("cb-fail", Context::new())
            .await
            .expect_err("fails");
        let lines = rec.lines();
        let tail: Vec<&str> = lines
            .iter()
            .rev()
            .take(4)
            .rev()
            .map(String::as_str)
            .collect();
        assert!(tail[0].ends_with(message), "{lines:?}");
        assert_eq!(tail[1], "checkpoint @4 Failed", "the failure checkpoint");
        assert!(tail[2].starts_with("error stage"), "{lines:?}");
        assert_eq!(tail[3], "end test/cb-fail failed=true");
    }
}

#[derive(Debug)]
struct Panics;

impl Callback for Panics {
    fn on_step_start(&self, _step: &StepEvent<'_>) -> CallbackResult {
        panic!("callback bug")
    }
    fn on_pipeline_end(
        &self,
        _run_id: &str,
        _took: Duration,
        _error: Option<&Error>,
    ) -> CallbackResult {
        Err("cannot write the metrics".into())
    }
}

#[tokio::test]
async fn a_panicking_or_failing_callback_never_fails_the_run_or_replaces_the_error() {
    let rec = Recorder::default();
    let ok = pipeline![a, b]
        .callback(Panics)
        .callback(rec.clone())
        .build()
        .expect("valid");
    let out = ok
        .invoke("cb-panic", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("the run goes on");
    assert_eq!(out.get::<i32>("b").expect("set"), 1);
    assert_eq!(
        rec.lines()
            .iter()
            .filter(|l| l.starts_with("step<"))
            .count(),
        2,
        "later callbacks still run"
    );

    let failing = pipeline![a, fails].callback(Panics).build().expect("valid");
    let err = failing
        .invoke("cb-panic", Context::new())
        .await
        .expect_err("the stage fails");
    assert!(
        matches!(&err, Error::Stage { stage, .. } if stage == "fails"),
        "the stage's error is kept: {err}"
    );
}

// ---- tracing ------------------------------------------------------------------

/// Records the spans opened, with their fields, as `name{field=value,...}`.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?},", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = Fields(String::new());
        attrs.record(&mut fields);
        self.0.lock().expect("not poisoned").push(format!(
            "{}{{{}}}",
            attrs.metadata().name(),
            fields.0
        ));
    }
}

#[test]
fn runs_and_stages_open_spans_with_run_id_stage_attempt_ip_and_version() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let p = pipeline![a, b]
        .name("test")
        .durable(true)
        .build()
        .expect("valid");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    tracing::subscriber::with_default(subscriber, || {
        rt.block_on(p.invoke("traced", Context::new()))
            .and_then(Outcome::completed)
            .expect("runs");
    });
    let version = p.version();
    assert_eq!(
        *spans.0.lock().expect("not poisoned"),
        [
            format!(
                "fluxio.run{{run_id=\"test/traced\",pipeline=test,version={version},resume=false,}}"
            ),
            "fluxio.stage{run_id=\"test/traced\",stage=\"a\",ip=2,attempt=1,}".to_owned(),
            "fluxio.stage{run_id=\"test/traced\",stage=\"b\",ip=6,attempt=1,}".to_owned(),
        ]
    );
}

#[stage]
async fn words(ctx: Context, out: fluxio::Emitter) -> StageResult {
    for w in ["x", "y"] {
        out.emit(w).await?;
    }
    Ok(ctx)
}

#[tokio::test]
async fn stream_chunks_reach_the_callbacks() {
    let rec = Recorder::default();
    let p = pipeline![words]
        .callback(rec.clone())
        .build()
        .expect("valid");
    p.invoke("chunks", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    let chunks: Vec<String> = rec
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("chunk"))
        .collect();
    assert_eq!(
        chunks,
        ["chunk chunks words \"x\"", "chunk chunks words \"y\""]
    );
}
