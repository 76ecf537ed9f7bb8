//! What a checkpoint costs on PostgreSQL, and how many durable runs per
//! second a store sustains.
//!
//! `cargo bench -p fluxio-postgres --bench postgres -- --warm-up-time 1 --measurement-time 5`
//! (against `FLUXIO_POSTGRES_URL`, see `fluxio_test_support::postgres`;
//! skipped with a message when the server is down).
//!
//! - `per_checkpoint/save_fenced`: [`PostgresStore::save_fenced`] of a
//!   checkpoint with a ~1 KB context (encoding included), against
//!   `per_checkpoint/raw_upsert`: one `INSERT ... ON CONFLICT DO UPDATE` of
//!   the same, pre-encoded bytes into a plain `(run_id, payload)` table on the
//!   same pool. Their ratio is the store's overhead per checkpoint (target
//!   at most 1.3). To split that overhead: `save` is the same write without
//!   the lease check, `encode` the encoding alone.
//! - `throughput/{1,16,64}`: that many concurrent runs (distinct run ids) of
//!   a durable pipeline of 10 no-op stages; criterion reports runs/s. Each
//!   run saves 11 checkpoints (one before each stage and the completed one),
//!   the lease taken with the first and given back with the last.
//! - `pg_resume_1mb/journal`: a resume of a crashed 10-stage run whose
//!   context holds 1 MB (a whole checkpoint, then five deltas of one small
//!   key each): `load` plus the resume's first checkpoint, an empty delta,
//!   `save_fenced`. Against `pg_resume_1mb/blob_baseline`, what that cost
//!   before the journal: read the run's 1 MB blob and write it back whole
//!   (raw SQL, no decoding or encoding). Target: at most 10 ms.
//! - `pg_run_1mb/durable_10_stages`: a whole durable run of 10 stages, each
//!   setting one small key, on a 1 MB context; it prints the bytes of the
//!   steps the run wrote (before the journal: 11 whole checkpoints, about
//!   11.5 MB).
//!
//! Each group is written once for the SQL stores
//! (`fluxio_test_support::bench::sql`); this file says how to reach the
//! schema.

mod common;

use fluxio_postgres::PostgresStore;
use fluxio_test_support::bench::sql::{self as bench, RawTable};
use fluxio_test_support::sql::{ten_counts, ten_noops};

/// The baselines: a plain table `raw_checkpoints` in the bench schema, on
/// the store's pool.
struct Raw<'a>(&'a PostgresStore);

impl Raw<'_> {
    fn table(&self) -> String {
        format!("\"{}\".raw_checkpoints", self.0.schema())
    }
}

#[async_trait::async_trait(?Send)]
impl RawTable for Raw<'_> {
    async fn create(&self) {
        sqlx::query(&format!(
            "CREATE TABLE IF NOT EXISTS {} (run_id TEXT PRIMARY KEY, payload BYTEA NOT NULL)",
            self.table()
        ))
        .execute(self.0.pool())
        .await
        .expect("raw table");
    }

    async fn upsert(&self, run_id: &str, payload: &[u8]) {
        sqlx::query(&format!(
            "INSERT INTO {} (run_id, payload) VALUES ($1, $2) \
             ON CONFLICT (run_id) DO UPDATE SET payload = EXCLUDED.payload",
            self.table()
        ))
        .bind(run_id)
        .bind(payload)
        .execute(self.0.pool())
        .await
        .expect("raw upsert");
    }

    async fn read(&self, run_id: &str) -> Vec<u8> {
        sqlx::query_scalar(&format!(
            "SELECT payload FROM {} WHERE run_id = $1",
            self.table()
        ))
        .bind(run_id)
        .fetch_one(self.0.pool())
        .await
        .expect("read")
    }

    async fn steps_written(&self, key: &str) -> (i64, i64) {
        let steps = format!("\"{}\".\"{}_steps\"", self.0.schema(), self.0.table());
        sqlx::query_as(&format!(
            "SELECT count(*), sum(length(payload))::bigint FROM {steps} WHERE run_id = $1"
        ))
        .bind(key)
        .fetch_one(self.0.pool())
        .await
        .expect("count")
    }
}

fn main() {
    let rt = bench::runtime();
    let schema = format!("fx_bench_{}", std::process::id());
    let Some((url, store)) = common::store(&rt, &schema, 16) else {
        return;
    };
    let raw = Raw(&store);

    bench::criterion(|c| {
        bench::per_checkpoint(c, &rt, "per_checkpoint", (&store, &raw), None);
        bench::throughput(c, &rt, "throughput", (&store, ten_noops()), None);
        bench::resume(c, &rt, "pg_resume_1mb", (&store, &raw));
        bench::run_1mb(c, &rt, "pg_run_1mb", (&store, &raw), ten_counts());
    });

    rt.block_on(fluxio_test_support::postgres::drop_schema(&url, &schema));
}
