//! The store conformance suite of fluxio-core, against a real MySQL or
//! MariaDB (`FLUXIO_MYSQL_URL`).
//!
//! Each namespace is a database here, so the checks run in parallel; every
//! store is built from the URL with a small pool of its own (two stores of
//! one namespace are like two processes on the same tables), and the
//! databases are dropped when the check ends, pass or fail.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use fluxio_core::store::conformance::{Harness, Records};
use fluxio_mysql::{MySqlStore, MySqlStoreBuilder};
use fluxio_test_support as support;

struct MySqlHarness {
    url: String,
    databases: Mutex<BTreeSet<String>>,
}

async fn harness() -> Option<MySqlHarness> {
    let url = support::mysql::server().await?;
    Some(MySqlHarness {
        url,
        databases: Mutex::default(),
    })
}

impl MySqlHarness {
    fn builder(&self, ns: &str) -> MySqlStoreBuilder {
        self.databases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(ns.to_owned());
        MySqlStore::builder(self.url.as_str())
            .database(ns)
            .max_connections(3)
    }

    async fn open(&self, builder: MySqlStoreBuilder) -> MySqlStore {
        builder
            .connect()
            .await
            .expect("a store on the namespace's database")
    }
}

#[async_trait::async_trait]
impl Harness for MySqlHarness {
    type Store = MySqlStore;

    async fn store(&self, ns: &str) -> MySqlStore {
        // Every handle migrates again: that must be idempotent.
        self.open(self.builder(ns)).await
    }

    async fn write_raw(&self, ns: &str, run_id: &str, bytes: &[u8]) -> bool {
        let store = self.store(ns).await;
        // The run's row, and the bytes as its one, whole checkpoint.
        sqlx::query(&format!(
            "INSERT INTO `{ns}`.fluxio_checkpoints \
               (run_id, payload, version, ip, step, status, created_at, updated_at) \
             VALUES (?, '', 'raw', 0, '', 'running', 0, 0) \
             ON DUPLICATE KEY UPDATE expires_at = NULL"
        ))
        .bind(run_id)
        .execute(store.pool())
        .await
        .expect("raw write of the row");
        sqlx::query(&format!(
            "INSERT INTO `{ns}`.fluxio_checkpoints_steps (run_id, seq, whole, payload) \
             VALUES (?, 0, 1, ?) ON DUPLICATE KEY UPDATE payload = VALUES(payload)"
        ))
        .bind(run_id)
        .bind(bytes)
        .execute(store.pool())
        .await
        .expect("raw write of the step");
        true
    }

    async fn records(&self, ns: &str) -> Option<Records> {
        let store = self.store(ns).await;
        let checkpoints: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT CONVERT(run_id USING utf8mb4) FROM `{ns}`.fluxio_checkpoints"
        ))
        .fetch_all(store.pool())
        .await
        .expect("checkpoint rows");
        // Held: expiring after now, by the database's clock.
        let leases: Vec<(String, bool)> = sqlx::query_as(&format!(
            "SELECT CONVERT(run_id USING utf8mb4), \
               COALESCE(expires_at > CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED), 0) \
             FROM `{ns}`.fluxio_checkpoints_leases"
        ))
        .fetch_all(store.pool())
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
    ) -> Option<MySqlStore> {
        Some(
            self.open(self.builder(ns).completed_retention(retention))
                .await,
        )
    }

    async fn purge_expired(&self, ns: &str) -> Option<u64> {
        Some(self.store(ns).await.purge_expired().await.expect("purge"))
    }

    async fn store_keeping_completed(&self, ns: &str, n: usize) -> Option<MySqlStore> {
        Some(self.open(self.builder(ns).keep_completed(Some(n))).await)
    }
}

impl Drop for MySqlHarness {
    fn drop(&mut self) {
        let databases: Vec<String> = std::mem::take(
            &mut *self
                .databases
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
        .into_iter()
        .collect();
        if databases.is_empty() {
            return;
        }
        let url = self.url.clone();
        // Drop runs inside the check's runtime, which cannot be blocked on:
        // clean up from a thread with a runtime of its own.
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the cleanup");
            rt.block_on(async {
                for database in databases {
                    support::mysql::drop_database(&url, &database).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

fluxio_core::store_conformance_tests!(harness);
