//! The ready-made logging callback (the reference runtime's logging
//! callback): a run's events reach `tracing`, with the run id and stage.

use std::sync::{Arc, Mutex, PoisonError};

use fluxio::callback::Logging;
use fluxio::{Context, InMemoryStore, Route, StageResult, pipeline, stage};
use tracing_subscriber::layer::SubscriberExt as _;

#[stage]
async fn greet(ctx: Context) -> StageResult {
    Ok(ctx.set("greeted", true)?)
}

#[stage]
fn choose(ctx: Context) -> StageResult<Route> {
    let _ = ctx;
    Ok(Route::to("loud"))
}

#[stage]
async fn shout(ctx: Context) -> StageResult {
    let _ = ctx;
    Err("too loud".into())
}

/// Every event's level, message and fields, as one line each.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Lines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != "fluxio::log" {
            return;
        }
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
        let mut fields = Fields(event.metadata().level().to_string());
        event.record(&mut fields);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(fields.0);
    }
}

#[tokio::test]
async fn the_logging_callback_logs_runs_stages_routes_and_failures() {
    let lines = Lines::default();
    let subscriber = tracing_subscriber::registry().with(lines.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let p = pipeline![greet, choose => { "loud" => [shout], "soft" => [greet] }]
        .name("hello")
        .store(InMemoryStore::new())
        .callback(Logging)
        .build()
        .expect("builds");
    let failed = p.invoke("h-1", Context::new()).await;
    assert!(failed.is_err(), "shout fails");
    let lines = lines
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let has = |level: &str, words: &[&str]| {
        lines
            .iter()
            .any(|l| l.starts_with(level) && words.iter().all(|w| l.contains(w)))
    };
    assert!(has("INFO", &["run started", "hello/h-1"]), "{lines:#?}");
    assert!(has("DEBUG", &["stage started", "greet"]), "{lines:#?}");
    assert!(
        has("DEBUG", &["stage ended", "greet", "took"]),
        "{lines:#?}"
    );
    assert!(
        has("INFO", &["route chosen", "choose", "loud"]),
        "{lines:#?}"
    );
    assert!(
        has("WARN", &["stage failed", "shout", "too loud"]),
        "{lines:#?}"
    );
    assert!(
        has("WARN", &["run ended without completing", "hello/h-1"]),
        "{lines:#?}"
    );
}
