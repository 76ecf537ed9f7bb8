//! What a durable run hands its store (contract rule 18): each checkpoint
//! whole (what every save wrote before format 4) against the journal's
//! entries (the first whole, then only the keys that changed).
//!
//! `cargo bench -p fluxio --bench journal`
//!
//! The run: ten stages, each setting one small key, on a context that
//! holds 1 MB (a `Vec<u8>`) and a dozen small keys. It runs once on an
//! `InMemoryStore`; its journal (11 checkpoints) is then encoded both ways,
//! timed, and the byte totals are printed. `load/*` times reading the run's
//! latest checkpoint back: from one whole checkpoint, and from the entries.

use std::hint::black_box;

use criterion::{Criterion, criterion_main};
use fluxio::store::{Change, Checkpoint, CheckpointStore, InMemoryStore};
use fluxio::{Context, Outcome, StageResult, pipeline, stage};

#[stage]
async fn tick(ctx: Context) -> StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?.set(format!("step-{n}"), "done")?)
}

fn journal() -> Vec<Checkpoint> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let store = std::sync::Arc::new(InMemoryStore::new());
        let p = pipeline![tick, tick, tick, tick, tick, tick, tick, tick, tick, tick]
            .name("bench")
            .store_arc(store.clone())
            .build()
            .expect("valid");
        let input = (0..12).fold(
            Context::new().set("blob", vec![7u8; 1 << 20]).expect("set"),
            |c, i| c.set(format!("key-{i}"), i).expect("set"),
        );
        p.invoke("run", input)
            .await
            .and_then(Outcome::completed)
            .expect("runs");
        store.history("bench/run").await.expect("history")
    })
}

fn whole(cp: &Checkpoint) -> Checkpoint {
    let mut cp = cp.clone();
    cp.change = Change::Full;
    cp
}

fn bytes(c: &mut Criterion) {
    let journal = journal();
    let wholes: Vec<Checkpoint> = journal.iter().map(whole).collect();
    let before: usize = wholes
        .iter()
        .map(|cp| cp.to_bytes().expect("encodes").len())
        .sum();
    let after: usize = journal
        .iter()
        .map(|cp| cp.entry_bytes().expect("encodes").len())
        .sum();
    eprintln!(
        "journal: {} checkpoints; whole checkpoints {before} bytes, journal entries {after} bytes ({:.1}x less)",
        journal.len(),
        before as f64 / after as f64
    );
    let mut g = c.benchmark_group("encode_run");
    g.bench_function("whole_checkpoints", |b| {
        b.iter(|| {
            for cp in &wholes {
                black_box(cp.to_bytes().expect("encodes"));
            }
        });
    });
    g.bench_function("journal_entries", |b| {
        b.iter(|| {
            for cp in &journal {
                black_box(cp.entry_bytes().expect("encodes"));
            }
        });
    });
    g.finish();

    let latest = whole(journal.last().expect("a checkpoint"));
    let one = latest.to_bytes().expect("encodes");
    let entries: Vec<Vec<u8>> = journal
        .iter()
        .map(|cp| cp.entry_bytes().expect("encodes"))
        .collect();
    let mut g = c.benchmark_group("load");
    g.bench_function("one_whole_checkpoint", |b| {
        b.iter(|| black_box(Checkpoint::from_bytes("bench/run", &one).expect("decodes")));
    });
    g.bench_function("base_and_10_deltas", |b| {
        b.iter(|| black_box(Checkpoint::from_entries("bench/run", &entries).expect("decodes")));
    });
    g.finish();
}

mod group {
    #![allow(missing_docs)]
    use super::bytes;
    criterion::criterion_group!(benches, bytes);
}

criterion_main!(group::benches);
