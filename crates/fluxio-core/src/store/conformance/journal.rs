//! Checks of a run's journal (contract rules 18 and 20): deltas are stored
//! and loaded whole, a delta needs its predecessor, a checkpoint sent again
//! replaces the later ones, history is kept until the run is deleted and is
//! cut only at a whole checkpoint.

use std::time::Duration;

use super::{Harness, checkpoint, namespace};
use crate::context::Context;
use crate::error::Error;
use crate::store::{Change, Checkpoint, CheckpointStore, Lease, RunStatus};

const TTL: Duration = Duration::from_secs(30);

/// Checkpoint `seq` of run `run` of pipeline `p`, at `ip = 10 * seq`, with
/// `ctx`, written against `before` (`None`: whole).
fn entry(run: &str, seq: u32, ctx: &Context, before: Option<&Context>) -> Checkpoint {
    let mut cp = checkpoint(run, seq * 10).in_pipeline("p");
    cp.seq = seq;
    cp.context = ctx.snapshot();
    cp.change = before.map_or(Change::Full, |b| {
        Change::between(&b.snapshot(), &cp.context)
    });
    cp
}

fn set<T: serde::Serialize>(ctx: &Context, key: &str, value: T) -> Context {
    ctx.clone()
        .set(key, value)
        .unwrap_or_else(|e| panic!("set {key}: {e}"))
}

async fn history<S: CheckpointStore>(store: &S, key: &str) -> Vec<Checkpoint> {
    store
        .history(key)
        .await
        .unwrap_or_else(|e| panic!("history of {key}: {e}"))
}

async fn save<S: CheckpointStore>(store: &S, cp: Checkpoint, lease: &Lease) {
    let what = format!("fenced save of checkpoint {} of {}", cp.seq, cp.key());
    store
        .save_fenced(cp, lease)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// A store over the check's own namespace, the run `{ns}-run` of pipeline
/// `p` (its key `p/{ns}-run`) and a lease on it.
async fn leased_run<H: Harness>(h: &H, check: &str) -> (H::Store, String, String, String, Lease) {
    let ns = namespace(check);
    let store = h.store(&ns).await;
    let run = format!("{ns}-run");
    let key = format!("p/{run}");
    let lease = store.acquire_lease(&key, TTL).await.expect("lease");
    (store, ns, run, key, lease)
}

/// Asserts that a fenced save of checkpoint `seq` was refused with
/// `RunDeleted`: its predecessor is not stored.
fn assert_run_deleted(saved: crate::Result<()>, seq: u32) {
    assert!(
        matches!(saved, Err(Error::RunDeleted { seq: s, .. }) if s == seq),
        "checkpoint {seq}: {saved:?}"
    );
}

fn seqs(journal: &[Checkpoint]) -> Vec<u32> {
    journal.iter().map(|cp| cp.seq).collect()
}

/// Rule 18: a run written as one whole checkpoint and deltas (a key set, a
/// key changed, a key removed, a failure with nothing changed) loads with
/// its whole context, and its history holds each checkpoint's context.
pub async fn rule18_deltas_are_stored_and_loaded_whole<H: Harness>(h: &H) {
    let (store, ns, run, key, lease) = leased_run(h, "rule18_deltas").await;
    let c0 = set(&set(&Context::new(), "big", vec![7u8; 200_000]), "n", 0);
    let c0 = set(&c0, "gone", "soon");
    let c1 = set(&c0, "n", 1);
    let c2 = set(&c1, "new", "ünïcode 🦀").remove("gone");
    let contexts = [c0.clone(), c1.clone(), c2.clone(), c2.clone()];
    save(&store, entry(&run, 0, &c0, None), &lease).await;
    save(&store, entry(&run, 1, &c1, Some(&c0)), &lease).await;
    save(&store, entry(&run, 2, &c2, Some(&c1)), &lease).await;
    let mut failed = entry(&run, 3, &c2, Some(&c2)).failed("card declined");
    failed.attempt = 2;
    save(&store, failed.clone(), &lease).await;

    let latest = store.load(&key).await.expect("load").expect("stored");
    assert_eq!(
        latest.context,
        c2.snapshot(),
        "the whole context comes back"
    );
    assert_eq!(
        (latest.seq, latest.ip, latest.status),
        (3, 30, RunStatus::Failed)
    );
    assert_eq!(latest.error_message.as_deref(), Some("card declined"));
    assert_eq!(latest.attempt, 2);
    let all = history(&store, &key).await;
    assert_eq!(seqs(&all), [0, 1, 2, 3]);
    for (cp, ctx) in all.iter().zip(&contexts) {
        assert_eq!(cp.context, ctx.snapshot(), "checkpoint {}", cp.seq);
        assert_eq!(cp.ip, cp.seq * 10);
        assert!(cp.earlier.is_empty(), "history entries carry no history");
    }
    assert_eq!(
        all[2].change,
        Change::Delta {
            written: vec!["new".into()],
            removed: vec!["gone".into()]
        }
    );
    // another handle (another process) reads the same
    let other = h.store(&ns).await;
    assert_eq!(history(&other, &key).await, all);
    assert!(history(&store, &format!("p/{ns}-none")).await.is_empty());
    store.release_lease(lease).await.expect("release");
}

/// Rule 18: a delta whose predecessor is not stored (the run was deleted
/// while it ran, or nothing was ever stored) is refused, and nothing is
/// written.
pub async fn rule18_a_delta_without_its_predecessor_is_refused<H: Harness>(h: &H) {
    let (store, _, run, key, lease) = leased_run(h, "rule18_gap").await;
    let c0 = set(&Context::new(), "n", 0);
    let c1 = set(&c0, "n", 1);
    let refused = store
        .save_fenced(entry(&run, 1, &c1, Some(&c0)), &lease)
        .await;
    assert!(
        matches!(&refused, Err(Error::RunDeleted { run_id, seq: 1 }) if run_id == &key),
        "{refused:?}"
    );
    assert!(
        store.load(&key).await.expect("load").is_none(),
        "nothing written"
    );
    save(&store, entry(&run, 0, &c0, None), &lease).await;
    save(&store, entry(&run, 1, &c1, Some(&c0)), &lease).await;
    let c3 = set(&c1, "n", 3);
    let gap = store.save_fenced(entry(&run, 3, &c3, Some(&c1)), &lease);
    assert_run_deleted(gap.await, 3);
    assert_eq!(seqs(&history(&store, &key).await), [0, 1], "left as it was");
    store.delete_fenced(&key, &lease).await.expect("delete");
    let after_delete = store.save_fenced(entry(&run, 2, &c3, Some(&c1)), &lease);
    assert_run_deleted(after_delete.await, 2);
    assert!(
        !store.exists(&key).await.expect("exists"),
        "a deleted run stays deleted"
    );
    store.release_lease(lease).await.expect("release");
}

/// Rule 18: a checkpoint sent again (its first write's answer was lost)
/// replaces the one stored under its number and any after it; a fresh run
/// (a whole checkpoint 0) replaces the whole journal.
pub async fn rule18_a_checkpoint_sent_again_replaces_the_later_ones<H: Harness>(h: &H) {
    let (store, _, run, key, lease) = leased_run(h, "rule18_again").await;
    let c0 = set(&Context::new(), "n", 0);
    let c1 = set(&c0, "n", 1);
    let c2 = set(&c1, "n", 2);
    save(&store, entry(&run, 0, &c0, None), &lease).await;
    save(&store, entry(&run, 1, &c1, Some(&c0)), &lease).await;
    save(&store, entry(&run, 2, &c2, Some(&c1)), &lease).await;
    let other = set(&c0, "n", 100);
    save(&store, entry(&run, 1, &other, Some(&c0)), &lease).await;
    let all = history(&store, &key).await;
    assert_eq!(seqs(&all), [0, 1]);
    assert_eq!(all[1].context, other.snapshot());
    let fresh = set(&Context::new(), "fresh", true);
    save(&store, entry(&run, 0, &fresh, None), &lease).await;
    let all = history(&store, &key).await;
    assert_eq!(seqs(&all), [0]);
    assert_eq!(all[0].context, fresh.snapshot());
    store.release_lease(lease).await.expect("release");
}

/// Rule 20: the history is cut only at a whole checkpoint, at or before
/// the `keep_from` a whole checkpoint asks for; deleting the run deletes
/// all of it.
pub async fn rule20_history_is_cut_at_a_whole_checkpoint_and_deleted_with_the_run<H: Harness>(
    h: &H,
) {
    let (store, _, run, key, lease) = leased_run(h, "rule20_cut").await;
    let mut ctx = set(&Context::new(), "n", 0);
    save(&store, entry(&run, 0, &ctx, None), &lease).await;
    for seq in 1..=8u32 {
        let next = set(&ctx, "n", seq);
        let whole = seq == 4 || seq == 7;
        let mut cp = entry(&run, seq, &next, (!whole).then_some(&ctx));
        cp.keep_from = match seq {
            4 => 2, // the last whole checkpoint at or before 2 is 0: nothing goes
            7 => 5, // ... at or before 5 is 4: 0 to 3 go
            _ => 0,
        };
        save(&store, cp, &lease).await;
        let expected: Vec<u32> = if seq < 7 {
            (0..=seq).collect()
        } else {
            (4..=seq).collect()
        };
        assert_eq!(seqs(&history(&store, &key).await), expected, "after {seq}");
        ctx = next;
    }
    let latest = store.load(&key).await.expect("load").expect("stored");
    assert_eq!(
        (latest.seq, latest.context.get("n").as_deref()),
        (8, Some(&crate::Value::U64(8)))
    );
    let all = history(&store, &key).await;
    assert_eq!(all[0].change, Change::Full, "the kept history starts whole");
    assert_eq!(
        all[0].context.get("n").as_deref(),
        Some(&crate::Value::U64(4))
    );
    store.delete_fenced(&key, &lease).await.expect("delete");
    assert!(history(&store, &key).await.is_empty(), "deleted whole");
    assert!(store.load(&key).await.expect("load").is_none());
    store.release_lease(lease).await.expect("release");
}

/// Rule 20: a plain `save` stores the run as the checkpoint carries it,
/// earlier checkpoints included, replacing what was stored; a cancel is
/// the run's next checkpoint, with its context unchanged.
pub async fn rule20_a_plain_save_stores_the_journal_it_carries<H: Harness>(h: &H) {
    let ns = namespace("rule20_plain");
    let store = h.store(&ns).await;
    let run = format!("{ns}-run");
    let key = format!("p/{run}");
    let c0 = set(&Context::new(), "n", 0);
    let c1 = set(&c0, "m", "x");
    let mut cp = entry(&run, 1, &c1, Some(&c0));
    cp.earlier = vec![entry(&run, 0, &c0, None)];
    store.save(cp).await.expect("save");
    let all = history(&store, &key).await;
    assert_eq!(seqs(&all), [0, 1]);
    assert_eq!(all[1].context, c1.snapshot());
    store.cancel(&key).await.expect("cancel");
    let all = history(&store, &key).await;
    assert_eq!(seqs(&all), [0, 1, 2]);
    assert_eq!(all[2].status, RunStatus::Cancelled);
    assert_eq!(all[2].context, c1.snapshot(), "a cancel changes no key");
    store.save(entry(&run, 0, &c0, None)).await.expect("save");
    assert_eq!(seqs(&history(&store, &key).await), [0], "replaced");
}

/// Rule 20, keep the last N: a store keeping 2 completed runs per pipeline
/// deletes the oldest completed runs of a pipeline (whole) when another
/// completes; failed and running runs, and other pipelines' runs, stay.
/// Applies to a store with the setting ([`Harness::store_keeping_completed`]).
pub async fn rule20_keep_completed_keeps_the_newest_completed_runs_of_each_pipeline<H: Harness>(
    h: &H,
) {
    let ns = namespace("rule20_keep");
    let Some(store) = h.store_keeping_completed(&ns, 2).await else {
        return;
    };
    let ctx = set(&Context::new(), "n", 1);
    let run = |pipeline: &str, id: &str, end: Option<RunStatus>| {
        let (store, ctx) = (&store, &ctx);
        let key = format!("{pipeline}/{ns}-{id}");
        let id = format!("{ns}-{id}");
        let pipeline = pipeline.to_owned();
        async move {
            let lease = store.acquire_lease(&key, TTL).await.expect("lease");
            let mut first = entry(&id, 0, ctx, None);
            first.pipeline.clone_from(&pipeline);
            save(store, first, &lease).await;
            if let Some(status) = end {
                let mut last = entry(&id, 1, ctx, Some(ctx));
                last.pipeline = pipeline;
                last.status = status;
                if status == RunStatus::Failed {
                    last.error_message = Some("boom".into());
                }
                save(store, last, &lease).await;
            }
            store.release_lease(lease).await.expect("release");
            key
        }
    };
    let q1 = run("q", "q1", Some(RunStatus::Completed)).await;
    let failed = run("p", "failed", Some(RunStatus::Failed)).await;
    let running = run("p", "running", None).await;
    let mut done = Vec::new();
    for i in 0..4 {
        done.push(run("p", &format!("c{i}"), Some(RunStatus::Completed)).await);
        // completion times that differ on any store clock
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for (key, kept) in [
        (&done[0], false),
        (&done[1], false),
        (&done[2], true),
        (&done[3], true),
        (&failed, true),
        (&running, true),
        (&q1, true),
    ] {
        assert_eq!(store.exists(key).await.expect("exists"), kept, "{key}");
        assert_eq!(
            !history(&store, key).await.is_empty(),
            kept,
            "{key}'s journal"
        );
    }
}
