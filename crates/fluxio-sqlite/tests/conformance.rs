//! The store conformance suite of fluxio-core, against real SQLite files.
//!
//! Each check gets its own scratch directory and each namespace its own file
//! in it, `<dir>/<ns>.db`: two stores of one namespace are two handles on one
//! file (their own connections), as two processes would have. The directory
//! goes when the check ends, pass or fail.

mod common;

use std::path::PathBuf;

use fluxio_core::store::conformance::Harness;
use fluxio_sqlite::SqliteStore;

struct SqliteHarness {
    dir: common::TempDir,
}

async fn harness() -> Option<SqliteHarness> {
    Some(SqliteHarness {
        dir: common::TempDir::new("conformance"),
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
        let mut conn = common::raw_connection(&self.file(ns)).await;
        sqlx::query(
            "INSERT INTO fluxio_checkpoints \
               (run_id, payload, version, ip, step, status, created_at, updated_at) \
             VALUES (?1, ?2, 'raw', 0, '', 'running', 0, 0) \
             ON CONFLICT (run_id) DO UPDATE SET payload = excluded.payload, expires_at = NULL",
        )
        .bind(run_id)
        .bind(bytes)
        .execute(&mut conn)
        .await
        .expect("raw write");
        true
    }
}

fluxio_core::store_conformance_tests!(harness);
