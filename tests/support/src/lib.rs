//! What fluxio's tests share, in one place (not published).
//!
//! - [`redis`] and [`postgres`]: each server's URL (`FLUXIO_REDIS_URL`,
//!   `FLUXIO_POSTGRES_URL`, or the local default) and a first connection
//!   that tells a test whether to run: without a server it skips loudly, or
//!   fails when `CI` is set ([`skip_unless_ci`]; [`skip`] for other reasons).
//! - [`sqlite`]: a raw connection to a store's file, as another program has.
//! - [`TempDir`]: a scratch directory removed when dropped.
//! - [`journal`]: a crashed run with a 1 MB context, for the journal benches.
//! - [`bench`](mod@bench): the benches' timed loop and the contexts they measure.
//! - [`child`]: runs one test of the current test binary in a child process.
//! - [`cleanup`]: cleaning up from `Drop`, on a runtime of its own.
//! - [`counted`]: a store that counts the calls made through it.
//! - [`error`]: a store's error read in a test: its source, its own
//!   error, its kind, its chain as text.
//! - [`secrets`]: that no URL shows its password, for every store.
//! - `sql` (feature `sql`, on with `sqlite`, `postgres`, `mysql`): the
//!   checks every SQL store runs, through its `sql::SqlHarness`, and
//!   [`sql_tests!`] to make them tests.
//! - [`namespace`] (a key prefix or schema no other test uses) and
//!   [`checkpoint`] (the checkpoint tests write): the conformance suite's own,
//!   re-exported.
//!
//! The helpers that need a client are behind the features `redis`,
//! `postgres` and `sqlite`. This crate depends on `fluxio-core` only, never
//! on a store backend, so every backend can use it without a cycle.

pub mod bench;
pub mod child;
pub mod cleanup;
pub mod counted;
pub mod error;
pub mod journal;
pub mod mysql;
pub mod postgres;
pub mod redis;
pub mod runs;
pub mod secrets;
#[cfg(feature = "sql")]
pub mod sql;
pub mod sqlite;
mod temp_dir;

pub use fluxio_core::store::conformance::{checkpoint, namespace, skip, skip_unless_ci};
pub use temp_dir::TempDir;

/// Runs `test` with `server`'s URL (`None`: after its loud skip, nothing
/// runs) and a namespace of its own ([`namespace`]`(test_name)`: a schema,
/// a database), then `drop`s the namespace (left to look at when the test
/// fails).
pub async fn in_namespace<T, TFut, D, DFut>(
    server: Option<String>,
    test_name: &str,
    test: T,
    drop: D,
) where
    T: FnOnce(String, String) -> TFut,
    TFut: Future<Output = ()>,
    D: FnOnce(String, String) -> DFut,
    DFut: Future<Output = ()>,
{
    let Some(url) = server else {
        return;
    };
    let ns = namespace(test_name);
    test(url.clone(), ns.clone()).await;
    drop(url, ns).await;
}
