//! The store conformance suite of fluxio-core, against real SQLite files.
//!
//! Each check gets its own scratch directory and each namespace its own file
//! in it, `<dir>/<ns>.db`: two stores of one namespace are two handles on one
//! file (their own connections), as two processes would have. The directory
//! goes when the check ends, pass or fail.

use fluxio_sqlite::SqliteStore;
use fluxio_test_support as support;
use support::sql::{Conformance, Namespaces};

use crate::sql::Types;

/// A namespace is a file of the check's scratch directory.
struct Files {
    dir: support::TempDir,
}

async fn harness() -> Option<Conformance<Files>> {
    Some(Conformance::new(Files {
        dir: support::TempDir::new("conformance"),
    }))
}

#[async_trait::async_trait]
impl Namespaces for Files {
    type Types = Types;

    const MAX_CONNECTIONS: u32 = 2;

    fn builder(&self, ns: &str) -> fluxio_sqlite::SqliteStoreBuilder {
        SqliteStore::builder(self.dir.db(ns))
    }

    async fn write_raw(&self, _store: &SqliteStore, ns: &str, run_id: &str, bytes: &[u8]) {
        // The bytes go in through a connection of their own, as another
        // program's would.
        let mut conn = support::sqlite::raw_connection(&self.dir.db(ns)).await;
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
    }

    async fn rows(&self, ns: &str) -> (Vec<String>, Vec<(String, bool)>) {
        let mut conn = support::sqlite::raw_connection(&self.dir.db(ns)).await;
        let checkpoints = sqlx::query_scalar("SELECT run_id FROM fluxio_checkpoints")
            .fetch_all(&mut conn)
            .await
            .expect("checkpoint rows");
        // Held: expiring after now, by SQLite's clock (as the store judges).
        let leases = sqlx::query_as(
            "SELECT run_id, coalesce(expires_at > \
               CAST(round(unixepoch('now', 'subsec') * 1000) AS INTEGER), 0) \
             FROM fluxio_checkpoints_leases",
        )
        .fetch_all(&mut conn)
        .await
        .expect("lease rows");
        (checkpoints, leases)
    }
}

fluxio_core::store_conformance_tests!(harness);
