//! The store conformance suite of fluxio-core, against a real PostgreSQL
//! (`FLUXIO_POSTGRES_URL`, see `fluxio_test_support::postgres`).
//!
//! Each check gets its own namespace, which is a schema here, so the checks
//! run in parallel; the harness keeps one small pool per namespace (two
//! stores of one namespace share it, like two processes share the tables)
//! and drops the schemas when the check ends, pass or fail.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use fluxio_postgres::{PostgresStore, PostgresStoreBuilder};
use fluxio_test_support as support;
use sqlx::postgres::{PgPool, PgPoolOptions};
use support::sql::{Conformance, Namespaces};

use crate::sql::Types;

/// Schemas, each with a pool of at most 4 connections.
struct Schemas {
    url: String,
    pools: Mutex<HashMap<String, PgPool>>,
}

async fn harness() -> Option<Conformance<Schemas>> {
    let url = support::postgres::server().await?;
    let schemas = Schemas {
        url: url.clone(),
        pools: Mutex::default(),
    };
    Some(Conformance::on_server(
        schemas,
        url,
        support::postgres::drop_schema_later,
    ))
}

impl Schemas {
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
impl Namespaces for Schemas {
    type Types = Types;

    // the pool's own size counts (`from_pool`)
    const MAX_CONNECTIONS: u32 = 4;

    fn builder(&self, ns: &str) -> PostgresStoreBuilder {
        PostgresStore::from_pool(self.pool(ns)).schema(ns)
    }

    async fn write_raw(&self, store: &PostgresStore, ns: &str, run_id: &str, bytes: &[u8]) {
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
    }

    async fn rows(&self, ns: &str) -> (Vec<String>, Vec<(String, bool)>) {
        let pool = self.pool(ns);
        let checkpoints =
            sqlx::query_scalar(&format!("SELECT run_id FROM \"{ns}\".fluxio_checkpoints"))
                .fetch_all(&pool)
                .await
                .expect("checkpoint rows");
        let leases = sqlx::query_as(&format!(
            "SELECT run_id, coalesce(expires_at > now(), false) \
             FROM \"{ns}\".fluxio_checkpoints_leases"
        ))
        .fetch_all(&pool)
        .await
        .expect("lease rows");
        (checkpoints, leases)
    }
}

fluxio_core::store_conformance_tests!(harness);
