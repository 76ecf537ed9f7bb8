//! Contract rule 26 across real processes, on every persistent store: eight
//! processes signalling one wait at the same instant, a signal racing a
//! cancel, and a signal racing the wait's deadline. Each child is this test
//! binary run again (`fluxio_test_support::child`), acting at one instant of
//! the system clock so that the processes race.

use std::sync::Arc;
use std::time::Duration;

use fluxio::recovery::RecoveryWorker;
use fluxio::store::{CheckpointStore, Delivery, SignalState};
use fluxio::{Context, Error, Outcome, Pipeline, RunStatus, StageResult, pipeline, stage};
use fluxio_test_support::child::{
    sleep_until_unix_ms, spawn_test_process, test_name, unix_ms, wait_for,
};
use fluxio_test_support::{namespace, skip_unless_ci};
use fluxio_tests::StoreKind;

#[stage]
async fn took_go(ctx: Context) -> StageResult {
    Ok(ctx.set("route", "go")?)
}

#[stage]
async fn took_timeout(ctx: Context) -> StageResult {
    Ok(ctx.set("route", "timeout")?)
}

/// `wait(go: u64, deadline at "due") => { go, timeout }`.
fn racing() -> fluxio::PipelineBuilder {
    pipeline![
        wait!("go" as u64, deadline_at = "due") => { "go" => took_go, "timeout" => took_timeout },
    ]
    .name("race")
}

async fn open(kind: StoreKind, url: &str, ns: &str) -> Arc<dyn CheckpointStore> {
    kind.open(url, ns).await.expect("the store opens")
}

/// The child: acts as `FLUXIO_RACE_DO` says at `FLUXIO_RACE_AT` and prints
/// the outcome as `outcome <word>`. Does nothing without the variables.
#[tokio::test]
async fn waits_race_child() {
    let Ok(action) = std::env::var("FLUXIO_RACE_DO") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let kind = StoreKind::parse(&var("FLUXIO_RACE_KIND")).expect("a store kind");
    let store = open(kind, &var("FLUXIO_RACE_URL"), &var("FLUXIO_RACE_NS")).await;
    let pipeline = racing()
        .store_arc(Arc::clone(&store))
        .build()
        .expect("builds");
    let run = var("FLUXIO_RACE_RUN");
    let at: u64 = var("FLUXIO_RACE_AT").parse().expect("an instant");
    sleep_until_unix_ms(at).await;
    let outcome = match action.as_str() {
        "signal" => {
            let value: u64 = var("FLUXIO_RACE_VALUE").parse().expect("a value");
            match pipeline.signal(&run, "go", &value).await {
                Ok(Delivery::Delivered) => "delivered".to_owned(),
                Ok(Delivery::Duplicate) => "duplicate".to_owned(),
                Err(Error::SignalConflict { .. }) => "conflict".to_owned(),
                Err(Error::WaitClosed { .. }) => "closed".to_owned(),
                Err(Error::RunFinished { status, .. }) => format!("finished-{status:?}"),
                Err(e) => format!("error-{e}"),
                Ok(other) => format!("unexpected-{other:?}"),
            }
        }
        "cancel" => match pipeline.cancel(&run).await {
            Ok(()) => "cancelled".to_owned(),
            Err(e) => format!("error-{e}"),
        },
        "wake" => {
            // a worker that continues the run when it is due
            let worker = RecoveryWorker::builder()
                .pipeline(pipeline.clone())
                .build()
                .expect("a worker");
            for _ in 0..200 {
                let _sweep = worker.run_once().await;
                let cp = store.load(&format!("race/{run}")).await.expect("load");
                if cp.is_some_and(|cp| cp.status == RunStatus::Completed) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            "woke".to_owned()
        }
        other => format!("error-unknown action {other}"),
    };
    println!("outcome {outcome}");
}

/// Runs the child `action` on run `run` with `extra` variables, at `at`.
fn child(
    kind: StoreKind,
    (url, ns): (&str, &str),
    run: &str,
    at: u64,
    action: &str,
    extra: &[(&str, &str)],
) -> std::process::Child {
    let at = at.to_string();
    let mut env = vec![
        ("FLUXIO_RACE_DO", action),
        ("FLUXIO_RACE_KIND", kind.name()),
        ("FLUXIO_RACE_URL", url),
        ("FLUXIO_RACE_NS", ns),
        ("FLUXIO_RACE_RUN", run),
        ("FLUXIO_RACE_AT", at.as_str()),
    ];
    env.extend_from_slice(extra);
    spawn_test_process(&test_name(module_path!(), "waits_race_child"), &env)
}

/// What a child printed as its outcome.
fn outcome(child: std::process::Child) -> String {
    let (status, out) = wait_for(child);
    assert!(status.success(), "the child failed: {out}");
    // libtest may print its `test ... ` before the line, on the same line
    out.lines()
        .find_map(|l| l.split_once("outcome ").map(|(_, o)| o.trim().to_owned()))
        .unwrap_or_else(|| panic!("no outcome: {out}"))
}

/// The store of `kind` on a namespace of its own, or `None` (skipped).
fn setup(
    kind: StoreKind,
    rt: &tokio::runtime::Runtime,
    test: &str,
) -> Option<(String, String, Pipeline)> {
    let ns = namespace(&format!("{test}_{}", kind.name()));
    let url = kind.url();
    let store = match rt.block_on(kind.open(&url, &ns)) {
        Ok(store) => store,
        Err(e) => return skip_unless_ci(kind.name(), &e),
    };
    let pipeline = racing().store_arc(store).build().expect("builds");
    Some((url, ns, pipeline))
}

/// A waiting run `run` whose deadline is `due`.
fn waiting(rt: &tokio::runtime::Runtime, p: &Pipeline, run: &str, due: u64) {
    let input = Context::new().set("due", due).expect("an instant");
    let out = rt.block_on(p.invoke(run, input)).expect("runs");
    assert!(matches!(out, Outcome::Waiting { .. }), "{out:?}");
}

fn eight_senders(kind: StoreKind) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let Some((url, ns, p)) = setup(kind, &rt, "race8") else {
        return;
    };
    for same in [true, false] {
        let run = format!("eight-{same}");
        waiting(&rt, &p, &run, u64::MAX);
        let at = unix_ms() + 2_000;
        let values: Vec<String> = (0..8)
            .map(|i| if same { 7 } else { i }.to_string())
            .collect();
        let children: Vec<_> = values
            .iter()
            .map(|v| {
                child(
                    kind,
                    (&url, &ns),
                    &run,
                    at,
                    "signal",
                    &[("FLUXIO_RACE_VALUE", v)],
                )
            })
            .collect();
        let outcomes: Vec<String> = children.into_iter().map(outcome).collect();
        let count = |word: &str| outcomes.iter().filter(|o| *o == word).count();
        let other = if same { "duplicate" } else { "conflict" };
        assert_eq!(
            (count("delivered"), count(other)),
            (1, 7),
            "{}: one signal is stored, the others are {other}s: {outcomes:?}",
            kind.name()
        );
        let mailbox = rt
            .block_on(p.store().expect("durable").signals(&format!("race/{run}")))
            .expect("mailbox");
        assert_eq!(mailbox.len(), 1, "{mailbox:?}");
    }
}

fn signal_and_cancel(kind: StoreKind) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let Some((url, ns, p)) = setup(kind, &rt, "racecancel") else {
        return;
    };
    for round in 0..4 {
        let run = format!("cancel-{round}");
        waiting(&rt, &p, &run, u64::MAX);
        let at = unix_ms() + 1_500;
        let sender = child(
            kind,
            (&url, &ns),
            &run,
            at,
            "signal",
            &[("FLUXIO_RACE_VALUE", "7")],
        );
        let canceller = child(kind, (&url, &ns), &run, at, "cancel", &[]);
        let (sent, cancelled) = (outcome(sender), outcome(canceller));
        assert_eq!(
            cancelled,
            "cancelled",
            "{}: the cancel wins either way",
            kind.name()
        );
        assert!(
            sent == "delivered" || sent == "finished-Cancelled",
            "{}: the signal was stored before the cancel, or refused after it: {sent}",
            kind.name()
        );
        let cp = rt
            .block_on(p.checkpoint(&run))
            .expect("load")
            .expect("stored");
        assert_eq!(cp.status, RunStatus::Cancelled);
        // the cancelled run is never continued, signalled or not
        let resumed = rt.block_on(p.resume(&run));
        assert!(
            matches!(resumed, Err(Error::Cancelled { .. })),
            "{resumed:?}"
        );
        let history = rt.block_on(p.history(&run)).expect("history");
        let signals = history.signals.len();
        assert_eq!(signals, usize::from(sent == "delivered"), "{history}");
    }
}

fn signal_and_deadline(kind: StoreKind) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let Some((url, ns, p)) = setup(kind, &rt, "racedeadline") else {
        return;
    };
    let mut routes = Vec::new();
    // the signal goes at the deadline, then later and later: early rounds
    // mostly go to the signal, late ones to the deadline; each has one winner
    for (round, late) in [0, 20, 60, 150, 400].into_iter().enumerate() {
        let run = format!("deadline-{round}");
        let at = unix_ms() + 2_000;
        waiting(&rt, &p, &run, at);
        let sender = child(
            kind,
            (&url, &ns),
            &run,
            at + late,
            "signal",
            &[("FLUXIO_RACE_VALUE", "7")],
        );
        let waker = child(kind, (&url, &ns), &run, at, "wake", &[]);
        let (sent, woke) = (outcome(sender), outcome(waker));
        assert_eq!(woke, "woke");
        let cp = rt
            .block_on(p.checkpoint(&run))
            .expect("load")
            .expect("stored");
        assert_eq!(cp.status, RunStatus::Completed, "{}: {cp:?}", kind.name());
        let route: String = cp.context.to_context().get("route").expect("a route ran");
        let mailbox = rt
            .block_on(p.store().expect("durable").signals(&format!("race/{run}")))
            .expect("mailbox");
        match route.as_str() {
            // the signal won: it was stored, and the wait took it
            "go" => {
                assert_eq!(sent, "delivered", "{}", kind.name());
                assert_eq!(mailbox[0].state, SignalState::Consumed);
            }
            // the deadline won: the signal was refused, or stored too late
            // to be taken (the run had ended), never taken
            _ => {
                assert!(
                    sent == "closed" || sent.starts_with("finished-"),
                    "{}: the deadline won but the signal was {sent}",
                    kind.name()
                );
                assert!(mailbox.iter().all(|s| s.state != SignalState::Consumed));
            }
        }
        routes.push(route);
    }
    eprintln!("signal racing a deadline on {}: {routes:?}", kind.name());
}

macro_rules! on_every_store {
    ($($name:ident: $check:ident($kind:expr)),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                $check($kind);
            }
        )+
    };
}

on_every_store!(
    rule26_eight_processes_signal_one_wait_on_sqlite: eight_senders(StoreKind::Sqlite),
    rule26_eight_processes_signal_one_wait_on_postgres: eight_senders(StoreKind::Postgres),
    rule26_eight_processes_signal_one_wait_on_mysql: eight_senders(StoreKind::MySql),
    rule26_eight_processes_signal_one_wait_on_redis: eight_senders(StoreKind::Redis),
    rule26_a_signal_racing_a_cancel_on_sqlite: signal_and_cancel(StoreKind::Sqlite),
    rule26_a_signal_racing_a_cancel_on_postgres: signal_and_cancel(StoreKind::Postgres),
    rule26_a_signal_racing_a_cancel_on_mysql: signal_and_cancel(StoreKind::MySql),
    rule26_a_signal_racing_a_cancel_on_redis: signal_and_cancel(StoreKind::Redis),
    rule26_a_signal_racing_the_deadline_on_sqlite: signal_and_deadline(StoreKind::Sqlite),
    rule26_a_signal_racing_the_deadline_on_postgres: signal_and_deadline(StoreKind::Postgres),
    rule26_a_signal_racing_the_deadline_on_mysql: signal_and_deadline(StoreKind::MySql),
    rule26_a_signal_racing_the_deadline_on_redis: signal_and_deadline(StoreKind::Redis),
);
