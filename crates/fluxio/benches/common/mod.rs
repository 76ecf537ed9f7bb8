//! What the `fluxio` benchmarks share: the contexts they measure.

use fluxio::Context;

/// A context of twelve small values of mixed types (integers, strings and
/// short vectors), keyed `key-00` to `key-11`.
pub(crate) fn twelve_keys() -> Context {
    (0..12u64).fold(Context::new(), |c, i| {
        let key = format!("key-{i:02}");
        match i % 3 {
            0 => c.set(key, i),
            1 => c.set(key, format!("value number {i}")),
            _ => c.set(key, vec![i; 4]),
        }
        .expect("serializable")
    })
}
