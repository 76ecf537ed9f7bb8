//! The store conformance suite of fluxio-core, against a real PostgreSQL
//! (`FLUXIO_POSTGRES_URL`, see `fluxio_test_support::postgres`).
//!
//! Each check gets its own namespace, which is a schema here, so the checks
//! run in parallel; the harness keeps one small pool per namespace (two
//! stores of one namespace share it, like two processes share the tables)
//! and drops the schemas when the check ends, pass or fail.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use fluxio_core::store::conformance::{Harness, Records};
use fluxio_postgres::PostgresStore;
use fluxio_test_support as support;
use sqlx::postgres::{PgPool, PgPoolOptions};

/// Stores on per-namespace pools of at most 4 connections.
struct PgHarness {
    url: String,
    pools: Mutex<HashMap<String, PgPool>>,
}

async fn harness() -> Option<PgHarness> {
    let url = support::postgres::server().await?;
    Some(PgHarness {
        url,
        pools: Mutex::default(),
    })
}

impl PgHarness {
    fn pool(&self, ns: &str) -> PgPool {
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        pools
            .entry(ns.to_owned())
            .or_insert_with(|| {
                PgPoolOptions::new()
                    .max_connections(4)
                    .connect_lazy(&self.url)
                    .expect("a valid URL")
            })
            .clone()
    }
}

#[async_trait::async_trait]
impl Harness for PgHarness {
    type Store = PostgresStore;

    async fn store(&self, ns: &str) -> PostgresStore {
        // Every handle migrates again: that must be idempotent.
        PostgresStore::from_pool(self.pool(ns))
            .schema(ns)
            .connect()
            .await
            .expect("a store on the namespace's schema")
    }

    async fn write_raw(&self, ns: &str, run_id: &str, bytes: &[u8]) -> bool {
        let store = self.store(ns).await;
        // The run's row, and the bytes as its one, whole checkpoint.
        let sql = format!(
            "WITH run AS (INSERT INTO \"{ns}\".fluxio_checkpoints \
               (run_id, payload, version, ip, step, status, created_at) \
             VALUES ($1, '', 'raw', 0, '', 'running', now()) \
             ON CONFLICT (run_id) DO UPDATE SET expires_at = NULL RETURNING run_id) \
             INSERT INTO \"{ns}\".fluxio_checkpoints_steps (run_id, seq, whole, payload) \
             SELECT run_id, 0, true, $2 FROM run \
             ON CONFLICT (run_id, seq) DO UPDATE SET payload = EXCLUDED.payload"
        );
        sqlx::query(&sql)
            .bind(run_id)
            .bind(bytes)
            .execute(store.pool())
            .await
            .expect("raw write");
        true
    }

    async fn records(&self, ns: &str) -> Option<Records> {
        let pool = self.pool(ns);
        let checkpoints: Vec<String> =
            sqlx::query_scalar(&format!("SELECT run_id FROM \"{ns}\".fluxio_checkpoints"))
                .fetch_all(&pool)
                .await
                .expect("checkpoint rows");
        let leases: Vec<(String, bool)> = sqlx::query_as(&format!(
            "SELECT run_id, coalesce(expires_at > now(), false) \
             FROM \"{ns}\".fluxio_checkpoints_leases"
        ))
        .fetch_all(&pool)
        .await
        .expect("lease rows");
        Some(Records {
            checkpoints: checkpoints.into_iter().collect(),
            leases: leases.into_iter().collect(),
        })
    }

    async fn store_with_retention(
        &self,
        ns: &str,
        retention: Option<Duration>,
    ) -> Option<PostgresStore> {
        let store = PostgresStore::from_pool(self.pool(ns))
            .schema(ns)
            .completed_retention(retention)
            .connect()
            .await
            .expect("a store with a retention");
        Some(store)
    }

    async fn purge_expired(&self, ns: &str) -> Option<u64> {
        Some(self.store(ns).await.purge_expired().await.expect("purge"))
    }

    async fn store_keeping_completed(&self, ns: &str, n: usize) -> Option<PostgresStore> {
        let store = PostgresStore::from_pool(self.pool(ns))
            .schema(ns)
            .keep_completed(Some(n))
            .connect()
            .await
            .expect("a store keeping n completed runs");
        Some(store)
    }
}

impl Drop for PgHarness {
    fn drop(&mut self) {
        let pools: Vec<(String, PgPool)> = self
            .pools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .collect();
        if pools.is_empty() {
            return;
        }
        let url = self.url.clone();
        support::cleanup::on_own_runtime(move || async move {
            for (ns, _pool) in pools {
                support::postgres::drop_schema(&url, &ns).await;
            }
        });
    }
}

fluxio_core::store_conformance_tests!(harness);
