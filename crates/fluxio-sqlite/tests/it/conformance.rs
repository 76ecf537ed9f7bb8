//! The store conformance suite of fluxio-core, against real SQLite files.
//!
//! Each check gets its own scratch directory and each namespace its own file
//! in it, `<dir>/<ns>.db`: two stores of one namespace are two handles on one
//! file (their own connections), as two processes would have. The directory
//! goes when the check ends, pass or fail.

use std::path::PathBuf;
use std::time::Duration;

use fluxio_core::store::conformance::{Harness, Records};
use fluxio_sqlite::SqliteStore;
use fluxio_test_support as support;

struct SqliteHarness {
    dir: support::TempDir,
}

async fn harness() -> Option<SqliteHarness> {
    Some(SqliteHarness {
        dir: support::TempDir::new("conformance"),
    })
}

impl SqliteHarness {
    fn file(&self, ns: &str) -> PathBuf {
        self.dir.db(ns)
    }
}

#[async_trait::async_trait]
impl Harness for SqliteHarness {
    type Store = SqliteStore;

    async fn store(&self, ns: &str) -> SqliteStore {
        // Every handle opens (and migrates) again: that must be idempotent.
        SqliteStore::builder(self.file(ns))
            .max_connections(2)
            .connect()
            .await
            .expect("a store on the namespace's file")
    }

    async fn write_raw(&self, ns: &str, run_id: &str, bytes: &[u8]) -> bool {
        // The tables exist once a store has opened the file; the bytes go in
        // through a connection of their own, as another program's would.
        drop(self.store(ns).await);
        let mut conn = support::sqlite::raw_connection(&self.file(ns)).await;
        // The run's row, and the bytes as its one, whole checkpoint.
        sqlx::query(
            "INSERT INTO fluxio_checkpoints \
               (run_id, payload, version, ip, step, status, created_at, updated_at) \
             VALUES (?1, X'', 'raw', 0, '', 'running', 0, 0) \
             ON CONFLICT (run_id) DO UPDATE SET expires_at = NULL",
        )
        .bind(run_id)
        .execute(&mut conn)
        .await
        .expect("raw write of the row");
        sqlx::query(
            "INSERT INTO fluxio_checkpoints_steps (run_id, seq, whole, payload) \
             VALUES (?1, 0, 1, ?2) \
             ON CONFLICT (run_id, seq) DO UPDATE SET payload = excluded.payload",
        )
        .bind(run_id)
        .bind(bytes)
        .execute(&mut conn)
        .await
        .expect("raw write of the step");
        true
    }

    async fn records(&self, ns: &str) -> Option<Records> {
        let mut conn = support::sqlite::raw_connection(&self.file(ns)).await;
        let checkpoints: Vec<String> = sqlx::query_scalar("SELECT run_id FROM fluxio_checkpoints")
            .fetch_all(&mut conn)
            .await
            .expect("checkpoint rows");
        // Held: expiring after now, by SQLite's clock (as the store judges).
        let leases: Vec<(String, bool)> = sqlx::query_as(
            "SELECT run_id, coalesce(expires_at > \
               CAST(round(unixepoch('now', 'subsec') * 1000) AS INTEGER), 0) \
             FROM fluxio_checkpoints_leases",
        )
        .fetch_all(&mut conn)
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
    ) -> Option<SqliteStore> {
        let store = SqliteStore::builder(self.file(ns))
            .max_connections(2)
            .completed_retention(retention)
            .connect()
            .await
            .expect("a store with a retention");
        Some(store)
    }

    async fn purge_expired(&self, ns: &str) -> Option<u64> {
        Some(self.store(ns).await.purge_expired().await.expect("purge"))
    }

    async fn store_keeping_completed(&self, ns: &str, n: usize) -> Option<SqliteStore> {
        let store = SqliteStore::builder(self.file(ns))
            .max_connections(2)
            .keep_completed(Some(n))
            .connect()
            .await
            .expect("a store keeping n completed runs");
        Some(store)
    }
}

fluxio_core::store_conformance_tests!(harness);
