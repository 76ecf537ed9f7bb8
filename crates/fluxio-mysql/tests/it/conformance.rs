//! The store conformance suite of fluxio-core, against a real MySQL or
//! MariaDB (`FLUXIO_MYSQL_URL`).
//!
//! Each namespace is a database here, so the checks run in parallel; every
//! store is built from the URL with a small pool of its own (two stores of
//! one namespace are like two processes on the same tables), and the
//! databases are dropped when the check ends, pass or fail.

use fluxio_mysql::{MySqlStore, MySqlStoreBuilder};
use fluxio_test_support as support;
use support::sql::{Conformance, Namespaces};

use crate::sql::Types;

/// Databases of the server at `url`.
struct Databases {
    url: String,
}

async fn harness() -> Option<Conformance<Databases>> {
    let url = support::mysql::server().await?;
    let databases = Databases { url: url.clone() };
    Some(Conformance::on_server(
        databases,
        url,
        support::mysql::drop_database_later,
    ))
}

#[async_trait::async_trait]
impl Namespaces for Databases {
    type Types = Types;

    const MAX_CONNECTIONS: u32 = 3;

    fn builder(&self, ns: &str) -> MySqlStoreBuilder {
        MySqlStore::builder(self.url.as_str()).database(ns)
    }

    async fn write_raw(&self, store: &MySqlStore, ns: &str, run_id: &str, bytes: &[u8]) {
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
    }

    async fn rows(&self, ns: &str) -> (Vec<String>, Vec<(String, bool)>) {
        let store = self
            .builder(ns)
            .max_connections(Self::MAX_CONNECTIONS)
            .connect()
            .await
            .expect("a store on the namespace's database");
        let checkpoints = sqlx::query_scalar(&format!(
            "SELECT CONVERT(run_id USING utf8mb4) FROM `{ns}`.fluxio_checkpoints"
        ))
        .fetch_all(store.pool())
        .await
        .expect("checkpoint rows");
        // Held: expiring after now, by the database's clock.
        let leases = sqlx::query_as(&format!(
            "SELECT CONVERT(run_id USING utf8mb4), \
               COALESCE(expires_at > CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED), 0) \
             FROM `{ns}`.fluxio_checkpoints_leases"
        ))
        .fetch_all(store.pool())
        .await
        .expect("lease rows");
        (checkpoints, leases)
    }
}

fluxio_core::store_conformance_tests!(harness);
