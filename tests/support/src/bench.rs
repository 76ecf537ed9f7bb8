//! What the benches share: a timed loop and the contexts they measure;
//! [`sql`] (feature `sql`), the SQL stores' criterion groups.

use std::future::Future;
use std::time::{Duration, Instant};

use fluxio_core::Context;

#[cfg(feature = "sql")]
pub mod sql;

/// Runs `f` `iters` times on `rt`, timing the loop only.
pub fn timed<F, Fut>(rt: &tokio::runtime::Runtime, iters: u64, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            f().await;
        }
        start.elapsed()
    })
}

/// Ten keys of 90-byte strings: a context of about 1 KB.
#[must_use]
pub fn context_1kb() -> Context {
    (0..10).fold(Context::new(), |c, i| {
        c.set(format!("key-{i}"), "x".repeat(90))
            .expect("a string serializes")
    })
}

/// A context of `n` keys `key-NN`, values alternating small integers,
/// 12-byte strings and 12-byte byte vectors.
#[must_use]
pub fn keys(n: u64) -> Context {
    (0..n).fold(Context::new(), |c, i| {
        let key = format!("key-{i:02}");
        match i % 3 {
            0 => c.set(key, i),
            1 => c.set(key, format!("value nr {i:03}")),
            _ => c.set(key, vec![i as u8; 12]),
        }
        .expect("serializable")
    })
}
