//! The cost of context values: `set` and `get` by serde shape, and a
//! checkpoint's encoding.
//!
//! `cargo bench -p fluxio --bench context -- --warm-up-time 1 --measurement-time 3`
//!
//! - `set/string_1mb` and `get/string_1mb`: 1 MiB of text, the baseline.
//! - `set/vec_u8_1mb` and `get/vec_u8_1mb`: the same bytes as a plain
//!   `Vec<u8>` (no `serde_bytes`).
//! - `set/vec_f32_256k` and `get/vec_f32_256k`: 256 Ki `f32`s (1 MiB).
//! - `set/twelve_keys_one`: one small key set on a context of twelve.
//! - `small/{set,get}_{string,vec_u8}_{1,12,60}`: overwriting one existing
//!   key with a small value (a 12-byte string, a 12-byte `Vec<u8>`) on a
//!   context the bench owns (as a stage owns its input: changed in place),
//!   and reading a small value, on contexts of 1, 12 and 60 keys;
//!   `small/set_shared_string_*` and `small/set_new_string_*` set on a
//!   clone (a context shared, as with a checkpoint's snapshot: the set
//!   copies it) an existing and a new key; `small/get_u64_{1,12,60}`
//!   reads a `u64`, which allocates nothing. `small/clone_{1,12,60}` is
//!   the baseline of the group: an O(1) clone and its drop.
//! - `snapshot/{12,60,10k}`: taking a snapshot (O(1): all three close).
//! - `checkpoint/to_bytes_1mb` and `checkpoint/from_bytes_1mb`: a checkpoint
//!   whose context holds 1 MiB (a `Vec<u8>`, a string and small keys).

mod common;

use std::hint::black_box;
use std::mem::take;

use common::twelve_keys;
use criterion::{Criterion, criterion_main};
use fluxio::Context;
use fluxio::store::Checkpoint;
use fluxio_test_support::bench::keys;

const MIB: usize = 1024 * 1024;

fn bytes() -> Vec<u8> {
    (0..MIB).map(|i| (i % 251) as u8).collect()
}

fn text() -> String {
    "abcdefghijklmnopqrstuvwxyz0123456789"
        .chars()
        .cycle()
        .take(MIB)
        .collect()
}

fn floats() -> Vec<f32> {
    (0..MIB / 4).map(|i| i as f32 * 0.25).collect()
}

fn set(c: &mut Criterion) {
    let mut g = c.benchmark_group("set");
    let empty = Context::new();
    let (b, t, f) = (bytes(), text(), floats());
    g.bench_function("string_1mb", |bench| {
        bench.iter(|| black_box(empty.clone().set("v", black_box(&t)).expect("set")));
    });
    g.bench_function("vec_u8_1mb", |bench| {
        bench.iter(|| black_box(empty.clone().set("v", black_box(&b)).expect("set")));
    });
    g.bench_function("vec_f32_256k", |bench| {
        bench.iter(|| black_box(empty.clone().set("v", black_box(&f)).expect("set")));
    });
    let mut twelve = twelve_keys();
    g.bench_function("twelve_keys_one", |bench| {
        bench.iter(|| {
            twelve = take(&mut twelve)
                .set("key-05", black_box(7u64))
                .expect("set");
        });
    });
    g.finish();
}

fn small(c: &mut Criterion) {
    let mut g = c.benchmark_group("small");
    let s = String::from("a small text");
    let v = vec![7u8; 12];
    for n in [1u64, 12, 60] {
        let ctx = keys(n)
            .set("target", "initial")
            .and_then(|c| c.set("bytes", vec![1u8; 12]))
            .and_then(|c| c.set("count", 42u64))
            .expect("set");
        g.bench_function(format!("clone_{n}"), |b| {
            b.iter(|| black_box(black_box(&ctx).clone()));
        });
        // a context the code owns, as a stage owns its input: changed in
        // place (the first set copies it from `ctx`, the rest do not)
        let mut owned = ctx.clone();
        g.bench_function(format!("set_string_{n}"), |b| {
            b.iter(|| owned = take(&mut owned).set("target", black_box(&s)).expect("set"));
        });
        g.bench_function(format!("set_vec_u8_{n}"), |b| {
            b.iter(|| owned = take(&mut owned).set("target", black_box(&v)).expect("set"));
        });
        // a context shared with a clone (or a checkpoint's snapshot): the
        // set copies it, and the clone stays as it was
        g.bench_function(format!("set_shared_string_{n}"), |b| {
            b.iter(|| black_box(ctx.clone().set("target", black_box(&s)).expect("set")));
        });
        g.bench_function(format!("set_new_string_{n}"), |b| {
            b.iter(|| black_box(ctx.clone().set("new-key", black_box(&s)).expect("set")));
        });
        g.bench_function(format!("get_string_{n}"), |b| {
            b.iter(|| black_box(ctx.get::<String>(black_box("target")).expect("get")));
        });
        g.bench_function(format!("get_vec_u8_{n}"), |b| {
            b.iter(|| black_box(ctx.get::<Vec<u8>>(black_box("bytes")).expect("get")));
        });
        // a value read without allocating: what the lookup and decode cost
        g.bench_function(format!("get_u64_{n}"), |b| {
            b.iter(|| black_box(ctx.get::<u64>(black_box("count")).expect("get")));
        });
    }
    g.finish();
}

fn snapshot(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot");
    for (name, n) in [("12", 12u64), ("60", 60), ("10k", 10_000)] {
        let ctx = keys(n);
        g.bench_function(name, |b| b.iter(|| black_box(black_box(&ctx).snapshot())));
    }
    g.finish();
}

fn get(c: &mut Criterion) {
    let mut g = c.benchmark_group("get");
    let ctx = Context::new()
        .set("t", text())
        .and_then(|c| c.set("b", bytes()))
        .and_then(|c| c.set("f", floats()))
        .expect("set");
    g.bench_function("string_1mb", |bench| {
        bench.iter(|| black_box(ctx.get::<String>("t").expect("get")));
    });
    g.bench_function("vec_u8_1mb", |bench| {
        bench.iter(|| black_box(ctx.get::<Vec<u8>>("b").expect("get")));
    });
    g.bench_function("vec_f32_256k", |bench| {
        bench.iter(|| black_box(ctx.get::<Vec<f32>>("f").expect("get")));
    });
    g.finish();
}

fn checkpoint(c: &mut Criterion) {
    let mut g = c.benchmark_group("checkpoint");
    let ctx = twelve_keys()
        .set("blob", {
            let mut b = bytes();
            b.truncate(MIB / 2);
            b
        })
        .and_then(|c| c.set("text", text()[..MIB / 2].to_owned()))
        .expect("set");
    let cp = Checkpoint::new("run-1", "0123456789ab", 3, "stage", ctx.snapshot());
    let encoded = cp.to_bytes().expect("encodes");
    g.bench_function("to_bytes_1mb", |bench| {
        bench.iter(|| black_box(cp.to_bytes().expect("encodes")));
    });
    g.bench_function("from_bytes_1mb", |bench| {
        bench.iter(|| black_box(Checkpoint::from_bytes("run-1", &encoded).expect("decodes")));
    });
    g.finish();
}

mod group {
    #![allow(missing_docs)]
    use super::{checkpoint, get, set, small, snapshot};
    criterion::criterion_group!(benches, set, get, small, snapshot, checkpoint);
}

criterion_main!(group::benches);
