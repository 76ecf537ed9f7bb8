//! The cost of a cache key: hashing a whole context.
//!
//! `cargo bench -p fluxio --bench cache_key`
//!
//! - `cache_key/context_12_keys`: twelve small values of mixed types.
//! - `cache_key/context_1mb_string`: one key holding a 1 MB string, so the
//!   time is the hash's throughput.

mod common;

use std::hint::black_box;

use common::twelve_keys;
use criterion::{Criterion, criterion_main};
use fluxio::Context;
use fluxio::middleware::CacheKey;

fn one_mb_string() -> Context {
    Context::new()
        .set("blob", "x".repeat(1024 * 1024))
        .expect("a string serializes")
}

fn cache_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("cache_key");
    for (name, ctx) in [
        ("context_12_keys", twelve_keys()),
        ("context_1mb_string", one_mb_string()),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                black_box(
                    CacheKey::from_parts("enrich", black_box(&[7; 32]), black_box(&ctx))
                        .expect("encodable"),
                )
            });
        });
    }
    g.finish();
}

mod group {
    #![allow(missing_docs)]
    use super::cache_key;
    criterion::criterion_group!(benches, cache_key);
}

criterion_main!(group::benches);
