//! Checks that run a line of five short stages (`s1` to `s5`) on the store
//! under test: how much history a run keeps (rule 20), how far a cancelled
//! run goes (rules 14 and 24), and what a value past the limits does
//! (rule 17).
//!
//! Built by hand, as in [`run`](super::run): each stage counts its calls
//! in a [`Line`], a resource of the pipeline, and sets the context's `n`
//! to its number, so the context keeps its size.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::{Harness, namespace, suite_pipeline, suite_stage};
use crate::context::Context;
use crate::durability::{Durability, MAX_ASYNC_FLUSH};
use crate::error::Error;
use crate::pipeline::{Pipeline, PipelineBuilder};
use crate::stage::{CallFn, Output, ResourceReq, Resources, StageFuture};
use crate::store::{Begin, Begun, Checkpoint, CheckpointStore, Lease, RunStatus, run_key};
use crate::value::{MAX_DEPTH, Value};

/// The name of [`line`]: its runs are stored under `line/<run id>`.
const LINE: &str = "line";

/// Call counts of the stages of [`line`], a hold on `s2`, and the
/// refusals `s3` may wait for.
#[derive(Debug, Clone, Default)]
struct Line {
    calls: Arc<[AtomicU32; 5]>,
    hold: Arc<Hold>,
    refused: Arc<Refused>,
}

/// Told by [`Refusing`] when the store refused a fenced save as cancelled;
/// while `armed`, `s3` waits for that before it returns.
#[derive(Debug, Default)]
struct Refused {
    armed: AtomicBool,
    seen: Notify,
}

/// While `armed`, `s2` says it `entered` and waits for `release`.
#[derive(Debug, Default)]
struct Hold {
    armed: AtomicBool,
    entered: Notify,
    release: Notify,
}

impl Line {
    fn calls(&self) -> [u32; 5] {
        [0, 1, 2, 3, 4].map(|i| self.calls[i].load(Ordering::SeqCst))
    }
}

/// Stage `INDEX` (0-based) of [`line`]: counts the call, waits at the hold
/// (`s2`, when armed), sets `n`, and with `deep` also a value nested past
/// [`MAX_DEPTH`] through the unchecked [`Context::set_value`] (`s3`).
/// `s3` first waits, when armed, until the store refused a write as
/// cancelled.
fn step<const INDEX: usize>(ctx: Context, resources: &Resources) -> StageFuture {
    let index = INDEX;
    let line = resources.get::<Line>();
    StageFuture::new(async move {
        let line = line.ok_or("the line is registered")?;
        line.calls[index].fetch_add(1, Ordering::SeqCst);
        if index == 1 && line.hold.armed.load(Ordering::SeqCst) {
            line.hold.entered.notify_one();
            line.hold.release.notified().await;
        }
        if index == 2 && line.refused.armed.load(Ordering::SeqCst) {
            tokio::time::timeout(Duration::from_secs(30), line.refused.seen.notified())
                .await
                .map_err(|_| "no fenced save was refused as cancelled")?;
            // the refusal is told from inside the store's call: the run's
            // writer records it just after that call returns, on another
            // thread, which on a loaded machine may wait for a core; no
            // signal marks that moment, so give it ample time
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let mut ctx = ctx.set("n", index as u64 + 1)?;
        if index == 2 && ctx.get_opt::<bool>("deep").unwrap_or(false) {
            ctx = ctx.set_value("tree", nested(MAX_DEPTH + 172));
        }
        Ok(Output::Context(ctx))
    })
}

/// A value `levels` deep.
fn nested(levels: usize) -> Value {
    (0..levels).fold(Value::Unit, |v, _| Value::Some(Box::new(v)))
}

/// `s1, s2, s3, s4, s5`, counting their calls in `line`.
fn line(line: &Line) -> PipelineBuilder {
    const TAKES_LINE: &[fn() -> ResourceReq] = &[ResourceReq::of::<Line>];
    let calls: [(&'static str, CallFn); 5] = [
        ("s1", step::<0>),
        ("s2", step::<1>),
        ("s3", step::<2>),
        ("s4", step::<3>),
        ("s5", step::<4>),
    ];
    let nodes = calls
        .into_iter()
        .zip(1u8..)
        .map(|((name, call), n)| suite_stage(name, n, TAKES_LINE, call))
        .collect();
    suite_pipeline(
        nodes,
        *b"fluxio/conformance/line/v1\0\0\0\0\0\0",
        LINE,
        line,
    )
}

/// Rule 20: with `history_depth(Some(4))`, a run replayed from its first
/// stage again and again (six checkpoints a replay, a context that keeps
/// its size, so whole checkpoints come every 32nd) keeps between 4 and
/// 4 + 32 checkpoints after every replay: its history is the newest
/// checkpoints without a gap, starting whole.
pub async fn rule20_history_depth_keeps_between_n_and_n_plus_32_checkpoints<H: Harness>(h: &H) {
    const DEPTH: usize = 4;
    let ns = namespace("depth");
    let store = h.store(&ns).await;
    let counts = Line::default();
    let p = line(&counts)
        .history_depth(Some(DEPTH as u32))
        .store(h.store(&ns).await)
        .build()
        .expect("the pipeline builds");
    p.invoke("d", Context::new())
        .await
        .and_then(crate::Outcome::completed)
        .expect("the run completes");
    let key = run_key(LINE, "d");
    let mut kept = Vec::new();
    for replay in 1..=20 {
        p.replay("d", Some("s1"))
            .await
            .and_then(crate::Outcome::completed)
            .unwrap_or_else(|e| panic!("replay {replay} from s1: {e}"));
        let journal = store.history(&key).await.expect("history");
        let seqs: Vec<u32> = journal.iter().map(|cp| cp.seq).collect();
        let last = 6 * replay + 5;
        assert_eq!(seqs.last(), Some(&last), "replay {replay}: {seqs:?}");
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "replay {replay}: the history has no gap: {seqs:?}"
        );
        assert!(
            journal.first().is_some_and(|cp| cp.change.is_full()),
            "replay {replay}: the history starts whole: {seqs:?}"
        );
        kept.push((last, journal.len()));
    }
    assert!(
        kept.iter()
            .all(|&(_, n)| (DEPTH..=DEPTH + crate::store::COMPACT_EVERY as usize).contains(&n)),
        "(last checkpoint, checkpoints kept) after each replay, each between {DEPTH} and {}: \
         {kept:?}",
        DEPTH + crate::store::COMPACT_EVERY as usize
    );
    assert_eq!(counts.calls(), [21; 5], "every replay ran the whole line");
}

/// Builds [`line`] over `store` in `mode` (`Async` writes waiting
/// `flush`), with s2 held, invokes run `id` on a task, cancels it while s2
/// runs once checkpoint `landed` is stored, lets s2 return, and returns
/// what the run returned.
async fn cancel_in_s2<S: CheckpointStore>(
    store: S,
    counts: &Line,
    (mode, flush): (Durability, Duration),
    id: &str,
    landed: u32,
) -> (Pipeline, crate::Result<Context>) {
    let p = line(counts)
        .durability(mode)
        .async_flush(flush)
        .store(store)
        .build()
        .expect("the pipeline builds");
    counts.hold.armed.store(true, Ordering::SeqCst);
    let mut run = tokio::spawn({
        let p = p.clone();
        let id = id.to_owned();
        async move {
            p.invoke(&id, Context::new())
                .await
                .and_then(crate::Outcome::completed)
        }
    });
    tokio::select! {
        () = counts.hold.entered.notified() => {}
        ended = &mut run => panic!("the run ended before s2 started: {ended:?}"),
        () = tokio::time::sleep(Duration::from_secs(30)) => panic!("s2 did not start in 30 s"),
    }
    for _ in 0..3000 {
        let stored = p.checkpoint(id).await.expect("load");
        if stored.is_some_and(|cp| cp.seq >= landed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    p.cancel(id).await.expect("a running run is cancelled");
    counts.hold.release.notify_one();
    let done = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the run ends")
        .expect("no panic");
    (p, done)
}

/// The run `id` of `p` ended cancelled and stored so, at `step`, with its
/// lease given back.
async fn assert_cancelled_at(p: &Pipeline, done: crate::Result<Context>, id: &str, step: &str) {
    let key = run_key(LINE, id);
    match done {
        Err(Error::Cancelled { run_id }) => assert_eq!(run_id, key),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    let stored = p
        .checkpoint(id)
        .await
        .expect("load")
        .expect("the cancelled run is kept");
    assert_eq!(
        (stored.status, stored.step.as_str()),
        (RunStatus::Cancelled, step),
        "nothing the run wrote after the cancel landed"
    );
    let resumed = p.resume(id).await;
    assert!(
        matches!(resumed, Err(Error::Cancelled { .. })),
        "{resumed:?}"
    );
}

/// Rules 14 and 24, `Sync`: a run cancelled while its second stage runs
/// stops before the third (its next checkpoint write is refused), and ends
/// cancelled at the second.
pub async fn rule14_a_cancelled_sync_run_starts_no_further_stage<H: Harness>(h: &H) {
    let ns = namespace("cancelsync");
    let counts = Line::default();
    let sync = (Durability::Sync, Duration::ZERO);
    // an id of its own: a four-method store's in-process leases and marks
    // are keyed by the store's type and the key, across namespaces
    let (p, done) = cancel_in_s2(h.store(&ns).await, &counts, sync, "c-sync", 1).await;
    assert_eq!(counts.calls(), [1, 1, 0, 0, 0], "no stage after s2 started");
    assert_cancelled_at(&p, done, "c-sync", "s2").await;
}

/// Rule 24, `Async`: the owner learns of a cancel only from the store's
/// refusal of one of its writes, and starts no stage once that refusal
/// reached it. With writes held back for `async_flush` (here the longest,
/// an hour, so no background write goes out before the end) a run
/// cancelled while its second stage runs goes on through its short
/// stages, and its last write, the completion, is the one refused: it
/// ends cancelled, and what is stored is the cancel of the last checkpoint
/// that had landed (the first, written with the lease), never its
/// completion.
pub async fn rule24_a_cancelled_async_run_stops_at_its_first_refused_write<H: Harness>(h: &H) {
    let ns = namespace("cancelasync");
    let counts = Line::default();
    let held = (Durability::Async, MAX_ASYNC_FLUSH);
    let (p, done) = cancel_in_s2(h.store(&ns).await, &counts, held, "c-async", 0).await;
    assert_eq!(
        counts.calls(),
        [1; 5],
        "no write was answered before the end: the short stages all ran"
    );
    assert_cancelled_at(&p, done, "c-async", "s1").await;
}

/// Rule 24, `Async`, writes sent at once (`async_flush(ZERO)`): a run
/// cancelled while its second stage runs (its checkpoint stored) sends the
/// checkpoint before `s3` when `s2` returns and starts `s3` without
/// waiting; the store refuses that write, and once the refusal is back
/// (`s3` waits for it) the run starts no further stage: `s4` never runs,
/// and the run ends cancelled at `s2`.
pub async fn rule24_an_async_run_starts_no_stage_once_a_refusal_reached_it<H: Harness>(h: &H) {
    let ns = namespace("cancelflight");
    let counts = Line::default();
    counts.refused.armed.store(true, Ordering::SeqCst);
    let store = Refusing {
        inner: h.store(&ns).await,
        told: Arc::clone(&counts.refused),
    };
    let at_once = (Durability::Async, Duration::ZERO);
    let (p, done) = cancel_in_s2(store, &counts, at_once, "c-flight", 1).await;
    assert_eq!(
        counts.calls(),
        [1, 1, 1, 0, 0],
        "s3 started before the refusal came back; nothing started after it"
    );
    assert_cancelled_at(&p, done, "c-flight", "s2").await;
}

/// A store that tells `told` when `inner` refuses a fenced save as
/// cancelled, and is `inner` otherwise.
#[derive(Debug)]
struct Refusing<S> {
    inner: S,
    told: Arc<Refused>,
}

#[async_trait::async_trait]
impl<S: CheckpointStore> CheckpointStore for Refusing<S> {
    async fn save(&self, checkpoint: Checkpoint) -> crate::Result<()> {
        self.inner.save(checkpoint).await
    }
    async fn load(&self, run_id: &str) -> crate::Result<Option<Checkpoint>> {
        self.inner.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> crate::Result<()> {
        self.inner.delete(run_id).await
    }
    async fn exists(&self, run_id: &str) -> crate::Result<bool> {
        self.inner.exists(run_id).await
    }
    async fn history(&self, run_id: &str) -> crate::Result<Vec<Checkpoint>> {
        self.inner.history(run_id).await
    }
    async fn acquire_lease(&self, run_id: &str, ttl: Duration) -> crate::Result<Lease> {
        self.inner.acquire_lease(run_id, ttl).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> crate::Result<()> {
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: Lease) -> crate::Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> crate::Result<()> {
        let saved = self.inner.save_fenced(checkpoint, lease).await;
        if let Err(Error::Cancelled { .. }) = &saved {
            self.told.seen.notify_one();
        }
        saved
    }
    async fn delete_fenced(&self, run_id: &str, lease: &Lease) -> crate::Result<()> {
        self.inner.delete_fenced(run_id, lease).await
    }
    async fn begin_run(
        &self,
        first: Checkpoint,
        ttl: Duration,
        begin: Begin,
    ) -> crate::Result<Begun> {
        self.inner.begin_run(first, ttl, begin).await
    }
    async fn finish_run(&self, last: Checkpoint, lease: Lease, delete: bool) -> crate::Result<()> {
        self.inner.finish_run(last, lease, delete).await
    }
    async fn cancel(&self, run_id: &str) -> crate::Result<()> {
        self.inner.cancel(run_id).await
    }
    async fn mark(&self, run_id: &str, mark: crate::store::Mark) -> crate::Result<()> {
        self.inner.mark(run_id, mark).await
    }
}

/// Rule 17: a value nested past [`MAX_DEPTH`], put in through the unchecked
/// [`Context::set_value`] by `s3`, fails the run on every store alike: the
/// checkpoint before `s4` is refused with [`Error::ValueTooDeep`] naming
/// the key, `s4` never runs, and the last checkpoint stored stays (the one
/// before `s3`).
pub async fn rule17_a_value_too_deep_is_refused_alike_on_every_store<H: Harness>(h: &H) {
    let ns = namespace("deep");
    let counts = Line::default();
    let p = line(&counts)
        .store(h.store(&ns).await)
        .build()
        .expect("the pipeline builds");
    let input = Context::new().set("deep", true).expect("a bool");
    match p.invoke("t", input).await {
        Err(Error::ValueTooDeep { key, limit }) => {
            assert_eq!((key.as_str(), limit as usize), ("tree", MAX_DEPTH));
        }
        other => panic!("expected ValueTooDeep naming `tree`, got {other:?}"),
    }
    assert_eq!(counts.calls(), [1, 1, 1, 0, 0], "s4 never ran");
    let stored = p
        .checkpoint("t")
        .await
        .expect("load")
        .expect("the run is kept");
    assert_eq!(
        (stored.step.as_str(), stored.status),
        ("s3", RunStatus::Running)
    );
    assert!(stored.context.to_context().get_opt::<u64>("n") == Some(2));
}
