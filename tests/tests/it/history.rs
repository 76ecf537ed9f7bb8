//! docs/CONTRACT.md rules 18 and 20 through a pipeline, on every store: a
//! run's history lists its steps; a replay from a step starts from the
//! context the run had before it; a fork starts a new run there and leaves
//! the original untouched; a diff compares any two points; a run with a
//! 1 MB context writes about 1 MB in all, not 1 MB per checkpoint.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use fluxio::store::{Checkpoint, CheckpointStore, InMemoryStore, Lease};
use fluxio::{
    Context, Error, Outcome, Pipeline, RunStatus, StageResult, StepStatus, pipeline, stage,
};
use fluxio_core::store::conformance::{namespace, skip_unless_ci};
use fluxio_tests::StoreKind;

use crate::common::{arm, disarm, input, step};

#[stage]
async fn load(ctx: Context) -> StageResult {
    step(ctx.set("total", 10u64)?, "load")
}

/// Doubles `total`, and says what it saw.
#[stage]
async fn enrich(ctx: Context) -> StageResult {
    let total: u64 = ctx.get("total")?;
    step(
        ctx.set("seen_by_enrich", total)?.set("total", total * 2)?,
        "enrich",
    )
}

#[stage]
async fn charge(ctx: Context) -> StageResult {
    let total: u64 = ctx.get("total")?;
    step(ctx.set("charged", total)?, "charge")
}

#[stage]
async fn ship(ctx: Context) -> StageResult {
    let total: u64 = ctx.get("total")?;
    step(
        ctx.set("total", total + 1)?.remove("seen_by_enrich"),
        "ship",
    )
}

/// A store with only the four required methods: the journal lives in one
/// blob per run.
#[derive(Debug, Default)]
struct Blobs(Mutex<HashMap<String, Vec<u8>>>);

#[async_trait::async_trait]
impl CheckpointStore for Blobs {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
        let bytes = checkpoint.to_bytes()?;
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(checkpoint.key(), bytes);
        Ok(())
    }
    async fn load(&self, run_id: &str) -> fluxio::Result<Option<Checkpoint>> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(run_id)
            .map(|b| Checkpoint::from_bytes(run_id, b))
            .transpose()
    }
    async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.remove(run_id);
        Ok(())
    }
    async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(map.contains_key(run_id))
    }
}

enum Kind {
    Memory,
    Blobs,
    Shared(StoreKind),
}

async fn open(kind: Kind, test: &str) -> Option<Arc<dyn CheckpointStore>> {
    match kind {
        Kind::Memory => Some(Arc::new(InMemoryStore::new())),
        Kind::Blobs => Some(Arc::new(Blobs::default())),
        Kind::Shared(kind) => match kind.open(&kind.url(), &namespace(test)).await {
            Ok(store) => Some(store),
            Err(e) => skip_unless_ci(kind.name(), &e),
        },
    }
}

fn checkout(store: &Arc<dyn CheckpointStore>) -> Pipeline {
    pipeline![load, enrich, charge, ship]
        .name("orders")
        .store_arc(Arc::clone(store))
        .build()
        .expect("valid")
}

fn total(ctx: &Context) -> u64 {
    ctx.get("total").expect("total")
}

async fn time_travel(kind: Kind, test: &str) {
    let Some(store) = open(kind, test).await else {
        return;
    };
    let p = checkout(&store);
    let run = test;

    // a failure at charge, then a resume: five steps
    arm(test, "charge");
    p.invoke(run, input(test)).await.expect_err("armed");
    disarm(test, "charge");
    let done = p
        .resume(run)
        .await
        .and_then(Outcome::completed)
        .expect("completes");
    assert_eq!(total(&done), 21);
    let history = p.history(run).await.expect("history");
    let rows: Vec<_> = history
        .steps
        .iter()
        .map(|s| (s.stage.as_str(), s.attempt, s.status))
        .collect();
    assert_eq!(
        rows,
        [
            ("load", 1, StepStatus::Completed),
            ("enrich", 1, StepStatus::Completed),
            ("charge", 1, StepStatus::Failed),
            ("charge", 2, StepStatus::Completed),
            ("ship", 1, StepStatus::Completed),
        ],
        "{history}"
    );
    assert_eq!(history.status, RunStatus::Completed);
    assert_eq!(
        history.steps[1].written,
        ["path", "seen_by_enrich", "total"]
    );
    assert_eq!(history.steps[4].removed, ["seen_by_enrich"]);
    assert!(
        history.steps[2]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("charge")),
        "{history}"
    );
    let table = history.to_string();
    assert!(
        table.contains("failed") && table.contains("completed"),
        "{table}"
    );

    // a diff between two points of the run: what enrich and charge changed
    let diff = p
        .diff(&format!("{run}@enrich"), &format!("{run}@ship"))
        .await
        .expect("diff");
    let keys: Vec<&str> = diff.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["charged", "path", "seen_by_enrich", "total"]);
    let number = history.steps[3].number;
    let at_charge = p
        .context_at(&format!("{run}@{number}"))
        .await
        .expect("a point by number");
    assert_eq!(total(&at_charge), 20);
    assert!(matches!(
        p.diff(&format!("{run}@9999"), run).await,
        Err(Error::StepNotInHistory { .. })
    ));

    // a replay from enrich starts from the context before enrich (total 10),
    // not from the latest (21): the result is the same as the first pass
    let replayed = p
        .replay(run, Some("enrich"))
        .await
        .and_then(Outcome::completed)
        .expect("replay");
    assert_eq!(total(&replayed), 21, "enrich saw total = 10 again");
    assert_eq!(replayed.get::<u64>("charged").expect("charged"), 20);
    let again = p.history(run).await.expect("history");
    assert_eq!(
        again.steps.len(),
        8,
        "the replay's three steps are kept too\n{again}"
    );
    assert_eq!(
        again.steps[..5],
        history.steps[..],
        "earlier steps unchanged"
    );

    // a fork from charge runs a new run from the context before charge and
    // leaves the original alone
    let before_fork = store
        .history(&format!("orders/{run}"))
        .await
        .expect("history");
    let fork_id = format!("{run}-fork");
    let forked = p
        .fork(run, "charge", &fork_id)
        .await
        .and_then(Outcome::completed)
        .expect("fork");
    assert_eq!(total(&forked), 21);
    let forked_history = p.history(&fork_id).await.expect("history");
    let stages: Vec<&str> = forked_history
        .steps
        .iter()
        .map(|s| s.stage.as_str())
        .collect();
    assert_eq!(stages, ["charge", "ship"]);
    let after_fork = store
        .history(&format!("orders/{run}"))
        .await
        .expect("history");
    assert_eq!(after_fork, before_fork, "the original is untouched");
    assert!(matches!(
        p.fork(run, "charge", &fork_id).await,
        Err(Error::InvalidRunId { .. })
    ));
    assert!(matches!(
        p.fork(run, "charge", run).await,
        Err(Error::InvalidRunId { .. })
    ));
    assert!(matches!(
        p.fork(run, "nope", "other").await,
        Err(Error::UnknownStep { .. })
    ));
    assert!(matches!(
        p.history("never-ran").await,
        Err(Error::CheckpointNotFound { .. })
    ));
}

#[tokio::test]
async fn rule20_history_replay_fork_and_diff_memory() {
    time_travel(Kind::Memory, "r20_tt_memory").await;
}

#[tokio::test]
async fn rule20_history_replay_fork_and_diff_four_method_store() {
    time_travel(Kind::Blobs, "r20_tt_blobs").await;
}

#[tokio::test]
async fn rule20_history_replay_fork_and_diff_sqlite() {
    time_travel(Kind::Shared(StoreKind::Sqlite), "r20_tt_sqlite").await;
}

#[tokio::test]
async fn rule20_history_replay_fork_and_diff_redis() {
    time_travel(Kind::Shared(StoreKind::Redis), "r20_tt_redis").await;
}

#[tokio::test]
async fn rule20_history_replay_fork_and_diff_postgres() {
    time_travel(Kind::Shared(StoreKind::Postgres), "r20_tt_postgres").await;
}

#[tokio::test]
async fn rule20_history_replay_fork_and_diff_mysql() {
    time_travel(Kind::Shared(StoreKind::MySql), "r20_tt_mysql").await;
}

/// Counts the bytes a store would write for each checkpoint: the entry
/// ([`Checkpoint::entry_bytes`]) that stores keeping the journal write,
/// and the whole checkpoint every save wrote before deltas.
#[derive(Debug, Default)]
struct Counting {
    inner: InMemoryStore,
    entry: Mutex<(u64, u64)>,
}

#[async_trait::async_trait]
impl CheckpointStore for Counting {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
        self.inner.save(checkpoint).await
    }
    async fn load(&self, run_id: &str) -> fluxio::Result<Option<Checkpoint>> {
        self.inner.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
        self.inner.delete(run_id).await
    }
    async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
        self.inner.exists(run_id).await
    }
    async fn history(&self, run_id: &str) -> fluxio::Result<Vec<Checkpoint>> {
        self.inner.history(run_id).await
    }
    async fn acquire_lease(&self, run_id: &str, ttl: std::time::Duration) -> fluxio::Result<Lease> {
        self.inner.acquire_lease(run_id, ttl).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: std::time::Duration) -> fluxio::Result<()> {
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: Lease) -> fluxio::Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> fluxio::Result<()> {
        let delta = checkpoint.entry_bytes()?.len() as u64;
        let mut whole = checkpoint.clone();
        whole.change = fluxio::store::Change::Full;
        let whole = whole.entry_bytes()?.len() as u64;
        {
            let mut counts = self.entry.lock().unwrap_or_else(PoisonError::into_inner);
            counts.0 += delta;
            counts.1 += whole;
        }
        self.inner.save_fenced(checkpoint, lease).await
    }
}

#[stage]
async fn tick(ctx: Context) -> StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?)
}

/// Rule 18: a 10-stage run whose context holds 1 MB, each stage setting one
/// small key, writes about 1 MB in all (the first checkpoint whole, then
/// deltas), where whole checkpoints wrote 11 MB; its history still holds
/// every checkpoint with its whole context.
#[tokio::test]
async fn rule18_a_run_with_a_1_mb_context_writes_about_1_mb_in_all() {
    let store = Arc::new(Counting::default());
    let p = pipeline![tick, tick, tick, tick, tick, tick, tick, tick, tick, tick]
        .name("big")
        .store_arc(store.clone())
        .build()
        .expect("valid");
    let input = Context::new().set("blob", vec![7u8; 1 << 20]).expect("set");
    let out = p
        .invoke("r18", input)
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(out.get::<u64>("n").expect("n"), 10);
    let (delta, whole) = *store.entry.lock().unwrap_or_else(PoisonError::into_inner);
    assert!(delta < 1_500_000, "{delta} bytes written with deltas");
    assert!(whole > 11_000_000, "{whole} bytes as whole checkpoints");
    let journal = store.history("big/r18").await.expect("history");
    assert_eq!(journal.len(), 11);
    assert!(journal.iter().all(|cp| cp.context.get("blob").is_some()));
    assert_eq!(
        journal
            .iter()
            .map(|cp| cp.change.is_full())
            .collect::<Vec<_>>(),
        [
            true, false, false, false, false, false, false, false, false, false, false
        ]
    );
}

#[stage]
async fn grow(ctx: Context) -> StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx
        .set("n", n + 1)?
        .set(format!("page-{n}"), "x".repeat(1500))?)
}

/// Rule 20: `history_depth(Some(2))` keeps the last few checkpoints, cut
/// at a whole one; a replay from a step that was cut is
/// `StepNotInHistory`, and the run still loads and replays from a kept one.
#[tokio::test]
async fn rule20_history_depth_bounds_the_checkpoints_a_run_keeps() {
    let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
    let p = pipeline![grow, grow, grow, grow, grow, grow, grow, grow, grow, grow]
        .name("deep")
        .history_depth(Some(2))
        .store_arc(Arc::clone(&store))
        .build()
        .expect("valid");
    let out = p
        .invoke("r20", Context::new())
        .await
        .and_then(Outcome::completed)
        .expect("runs");
    assert_eq!(out.get::<u64>("n").expect("n"), 10);
    let journal = store.history("deep/r20").await.expect("history");
    let seqs: Vec<u32> = journal.iter().map(|cp| cp.seq).collect();
    assert!(
        journal.len() < 11,
        "some checkpoints were dropped: {seqs:?}"
    );
    assert!(journal.len() >= 3, "at least the depth is kept: {seqs:?}");
    assert!(
        journal[0].change.is_full(),
        "the kept history starts whole: {seqs:?}"
    );
    assert_eq!(seqs.last(), Some(&10));
    let history = p.history("r20").await.expect("history");
    let first = history.steps.first().map(|s| s.number).expect("a step");
    assert!(first > 0, "{history}");
    assert!(matches!(
        p.replay("r20", Some("0")).await,
        Err(Error::StepNotInHistory { step, .. }) if step == "0"
    ));
    let again = p
        .replay("r20", Some(&first.to_string()))
        .await
        .and_then(Outcome::completed)
        .expect("a kept step replays");
    assert_eq!(again.get::<u64>("n").expect("n"), 10);
}
