//! docs/CONTRACT.md rule 35, failures that are final: a stage that returns a
//! `TerminalError` fails its run for good. No `Retry`, recovery worker,
//! repeated `start` or `resume` runs it again; `replay` and `fork` (an
//! operator's explicit choice) do.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fluxio::middleware::Retry;
use fluxio::recovery::{RecoveryPolicy, RecoveryWorker};
use fluxio::store::{CheckpointStore, InMemoryStore, retry_run};
use fluxio::{Context, Error, Pipeline, RunStatus, StageResult, TerminalError, pipeline, stage};

#[derive(Debug, thiserror::Error)]
#[error("card {0} is invalid")]
struct InvalidCard(String);

#[derive(Debug, thiserror::Error)]
#[error("gateway timed out")]
struct GatewayTimeout;

/// Calls of `charge`, by the run's `case` (tests run side by side).
static CALLS: [AtomicU32; 8] = [const { AtomicU32::new(0) }; 8];

fn calls(case: usize) -> u32 {
    CALLS[case].load(Ordering::SeqCst)
}

/// Fails as the input's `how` says, counting its calls: `terminal`, `cause`
/// (a terminal error as the cause of another), `anyhow`, `transient`, or
/// `ok` once `card` is fixed.
#[stage]
async fn charge(ctx: Context) -> StageResult {
    let case: usize = ctx.get("case")?;
    CALLS[case].fetch_add(1, Ordering::SeqCst);
    let card: String = ctx.get("card")?;
    if card == "4242" {
        return Ok(ctx.set("charged", true)?);
    }
    let how: String = ctx.get("how")?;
    match how.as_str() {
        "terminal" => Err(TerminalError::new(InvalidCard(card)).into()),
        "cause" => Err(Box::new(Wrapped(TerminalError::new(InvalidCard(card))))),
        "anyhow" => Err(TerminalError::new(anyhow::anyhow!("card {card} is invalid")).into()),
        _ => Err(Box::new(GatewayTimeout)),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("payment refused")]
struct Wrapped(#[source] TerminalError);

/// A stage returning `anyhow::Result`: a terminal error deep in its chain.
#[stage]
async fn charge_anyhow(ctx: Context) -> anyhow::Result<Context> {
    use anyhow::Context as _;
    let case: usize = ctx.get("case")?;
    CALLS[case].fetch_add(1, Ordering::SeqCst);
    Err(anyhow::Error::new(TerminalError::new(InvalidCard(
        "4000".into(),
    ))))
    .context("charging")
}

#[stage]
async fn prepare(ctx: Context) -> StageResult {
    Ok(ctx.set("prepared", true)?)
}

fn orders(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![prepare, charge]
        .name("orders")
        .store_arc(Arc::clone(store))
        .middleware(Retry::new(5))
        .build()
        .expect("valid")
}

fn input(case: usize, how: &str) -> Context {
    Context::new()
        .set("case", case)
        .and_then(|c| c.set("how", how))
        .and_then(|c| c.set("card", "4000"))
        .expect("set")
}

#[tokio::test]
async fn rule35_a_terminal_error_fails_the_run_for_good() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = orders(&store);
    let err = p
        .invoke("o-1", input(0, "terminal"))
        .await
        .expect_err("fails");
    assert!(err.is_terminal(), "{err}");
    assert_eq!(
        err.to_string(),
        "stage `charge` failed: card 4000 is invalid"
    );
    assert_eq!(
        err.stage_error::<InvalidCard>().map(|c| c.0.as_str()),
        Some("4000"),
        "the stage's own error, through the wrapper"
    );
    assert_eq!(calls(0), 1, "Retry(5) did not call it again");
    let cp = p.checkpoint("o-1").await.expect("load").expect("stored");
    assert_eq!(cp.status, RunStatus::Failed);
    assert!(cp.is_failed_for_good());

    // a client's retry, an explicit resume: neither runs anything
    for again in [
        p.start("o-1", input(0, "terminal")).await,
        p.resume("o-1").await,
    ] {
        match again {
            Err(Error::FailedForGood {
                run_id,
                stage,
                message,
            }) => {
                assert_eq!((run_id.as_str(), stage.as_str()), ("orders/o-1", "charge"));
                assert!(message.contains("card 4000 is invalid"), "{message}");
            }
            other => panic!("expected FailedForGood, got {other:?}"),
        }
    }
    assert_eq!(calls(0), 1);

    // a worker that retries failed runs leaves it alone
    let worker = RecoveryWorker::builder()
        .pipeline(orders(&store))
        .policy(
            RecoveryPolicy::new()
                .retry_failed(true)
                .backoff(Duration::ZERO, Duration::ZERO),
        )
        .build()
        .expect("worker");
    let sweep = worker.run_once().await.expect("sweep");
    assert_eq!(sweep.resumed, 0, "{sweep:?}");
    assert_eq!(calls(0), 1);
    let cp = p.checkpoint("o-1").await.expect("load").expect("stored");
    assert!(cp.is_failed_for_good(), "still failed for good: {cp:?}");
}

#[tokio::test]
async fn rule35_a_transient_error_is_still_retried_and_resumed() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = orders(&store);
    let err = p
        .invoke("o-2", input(1, "transient"))
        .await
        .expect_err("fails");
    assert!(!err.is_terminal());
    assert_eq!(calls(1), 5, "Retry(5) called it five times");
    let cp = p.checkpoint("o-2").await.expect("load").expect("stored");
    assert!(cp.is_failed() && !cp.is_failed_for_good());
    p.start("o-2", input(1, "transient"))
        .await
        .expect_err("fails again");
    assert_eq!(calls(1), 10, "start resumed it");
}

#[tokio::test]
async fn rule35_a_terminal_error_as_a_cause_or_inside_anyhow_is_final_too() {
    for (case, how) in [(2, "cause"), (3, "anyhow")] {
        let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
        let p = orders(&store);
        let err = p.invoke("o-3", input(case, how)).await.expect_err("fails");
        assert!(err.is_terminal(), "{how}: {err}");
        assert_eq!(calls(case), 1, "{how}: not retried");
        let cp = p.checkpoint("o-3").await.expect("load").expect("stored");
        assert!(cp.is_failed_for_good(), "{how}");
    }
}

#[tokio::test]
async fn rule35_an_anyhow_stage_fails_for_good_and_keeps_its_anyhow_error() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![prepare, charge_anyhow]
        .name("orders")
        .store_arc(Arc::clone(&store))
        .middleware(Retry::new(5))
        .build()
        .expect("valid");
    let err = p
        .invoke("o-5", input(5, "anyhow"))
        .await
        .expect_err("fails");
    assert!(err.is_terminal(), "{err}");
    assert_eq!(calls(5), 1, "not retried");
    let any = err
        .stage_error_any::<anyhow::Error>()
        .expect("the anyhow error, whole");
    assert_eq!(any.to_string(), "charging");
    assert!(any.chain().any(|c| c.to_string() == "card 4000 is invalid"));
    assert!(matches!(
        p.start("o-5", Context::new()).await,
        Err(Error::FailedForGood { .. })
    ));
    assert_eq!(calls(5), 1);
}

#[tokio::test]
async fn rule35_a_terminal_error_in_a_parallel_branch_fails_the_run_for_good() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![parallel![prepare, charge]]
        .name("orders")
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    let err = p
        .invoke("o-6", input(6, "terminal"))
        .await
        .expect_err("fails");
    assert!(err.is_terminal(), "{err}");
    let cp = p.checkpoint("o-6").await.expect("load").expect("stored");
    assert!(cp.is_failed_for_good());
    assert!(matches!(
        p.start("o-6", Context::new()).await,
        Err(Error::FailedForGood { .. })
    ));
    assert_eq!(calls(6), 1);
}

#[tokio::test]
async fn rule35_replay_fork_and_an_operators_retry_run_a_final_failure_again() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = orders(&store);
    p.invoke("o-4", input(4, "terminal"))
        .await
        .expect_err("fails");
    // replay from the stage: the operator's choice; it fails for good again
    let err = p
        .replay("o-4", Some("charge"))
        .await
        .expect_err("fails again");
    assert!(err.is_terminal());
    assert_eq!(calls(4), 2);
    // fork into a new run: runs from the step (its context as it was)
    p.fork("o-4", "charge", "o-4b")
        .await
        .expect_err("same card");
    assert_eq!(calls(4), 3);
    // the operator's retry hands it back: it is resumable again
    retry_run(store.as_ref(), "orders/o-4")
        .await
        .expect("retried");
    let cp = p.checkpoint("o-4").await.expect("load").expect("stored");
    assert_eq!(cp.status, RunStatus::Running);
    assert!(!cp.is_failed_for_good());
    p.resume("o-4").await.expect_err("the card is still wrong");
    assert_eq!(calls(4), 4);
}
