//! The conformance suite's [`Harness`] for every SQL store: what a store's
//! tests say is where a namespace lives (a file, a schema, a database),
//! how bytes are written past the store and how its rows are read; the
//! stores of a namespace, with the settings the suite asks for, and the
//! cleanup are the same for all of them.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use fluxio_core::store::conformance::{Harness, Records};

use super::SqlStore;

/// Drops a namespace (`url`, `ns`) of a server.
pub type DropNamespace =
    for<'a> fn(&'a str, &'a str) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Where a SQL store's conformance checks put their namespaces.
#[async_trait::async_trait]
pub trait Namespaces: Send + Sync + 'static {
    /// The store's types.
    type Types: SqlStore;

    /// The store's default pool for the checks.
    const MAX_CONNECTIONS: u32;

    /// A builder of a store on the namespace `ns`, as the store's defaults
    /// have it.
    fn builder(&self, ns: &str) -> <Self::Types as SqlStore>::Builder;

    /// Writes `bytes` as the one, whole checkpoint of `run_id` in `ns`, past
    /// the store, its tables made by `store` (a store on `ns`).
    async fn write_raw(
        &self,
        store: &<Self::Types as SqlStore>::Store,
        ns: &str,
        run_id: &str,
        bytes: &[u8],
    );

    /// The run ids of the checkpoint rows of `ns`, and of its lease rows
    /// with whether each is held by the database's clock.
    async fn rows(&self, ns: &str) -> (Vec<String>, Vec<(String, bool)>);
}

/// The [`Harness`] of a SQL store, its namespaces as `N` puts them; on a
/// server, drops the namespaces it handed out when dropped, pass or fail.
pub struct Conformance<N: Namespaces> {
    namespaces: N,
    server: Option<(String, DropNamespace)>,
    used: Mutex<BTreeSet<String>>,
}

impl<N: Namespaces> std::fmt::Debug for Conformance<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conformance")
            .field("server", &self.server.as_ref().map(|(url, _)| url))
            .field("used", &self.used)
            .finish_non_exhaustive()
    }
}

impl<N: Namespaces> Conformance<N> {
    /// The harness of `namespaces` that go by themselves (as the files of
    /// a scratch directory do).
    pub fn new(namespaces: N) -> Self {
        Conformance {
            namespaces,
            server: None,
            used: Mutex::default(),
        }
    }

    /// The harness of `namespaces` on the server at `url`, each dropped
    /// with `drop` after the check.
    pub fn on_server(namespaces: N, url: String, drop: DropNamespace) -> Self {
        let mut harness = Conformance::new(namespaces);
        harness.server = Some((url, drop));
        harness
    }

    async fn open(
        &self,
        ns: &str,
        setting: impl FnOnce(<N::Types as SqlStore>::Builder) -> <N::Types as SqlStore>::Builder + Send,
    ) -> <N::Types as SqlStore>::Store {
        self.used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(ns.to_owned());
        let builder = N::Types::max_connections(self.namespaces.builder(ns), N::MAX_CONNECTIONS);
        N::Types::connect(setting(builder))
            .await
            .unwrap_or_else(|e| panic!("a store on the namespace {ns}: {e:?}"))
    }
}

#[async_trait::async_trait]
impl<N: Namespaces> Harness for Conformance<N> {
    type Store = <N::Types as SqlStore>::Store;

    async fn store(&self, ns: &str) -> Self::Store {
        // Every handle opens (and migrates) again: that must be idempotent.
        self.open(ns, |b| b).await
    }

    async fn write_raw(&self, ns: &str, run_id: &str, bytes: &[u8]) -> bool {
        let store = self.store(ns).await;
        self.namespaces.write_raw(&store, ns, run_id, bytes).await;
        true
    }

    async fn records(&self, ns: &str) -> Option<Records> {
        let (checkpoints, leases) = self.namespaces.rows(ns).await;
        Some(Records {
            checkpoints: checkpoints.into_iter().collect(),
            leases: leases.into_iter().collect(),
        })
    }

    async fn store_with_retention(
        &self,
        ns: &str,
        retention: Option<Duration>,
    ) -> Option<Self::Store> {
        Some(
            self.open(ns, |b| N::Types::completed_retention(b, retention))
                .await,
        )
    }

    async fn purge_expired(&self, ns: &str) -> Option<u64> {
        let store = self.store(ns).await;
        Some(N::Types::purge_expired(&store).await.expect("purge"))
    }

    async fn store_keeping_completed(&self, ns: &str, n: usize) -> Option<Self::Store> {
        Some(
            self.open(ns, |b| N::Types::keep_completed(b, Some(n)))
                .await,
        )
    }
}

impl<N: Namespaces> Drop for Conformance<N> {
    fn drop(&mut self) {
        let used = std::mem::take(&mut *self.used.lock().unwrap_or_else(PoisonError::into_inner));
        let Some((url, drop_namespace)) = self.server.take() else {
            return;
        };
        if used.is_empty() {
            return;
        }
        crate::cleanup::on_own_runtime(move || async move {
            for ns in used {
                drop_namespace(&url, &ns).await;
            }
        });
    }
}
