//! What a checkpoint costs in an SQLite file, and how many durable runs per
//! second a store sustains.
//!
//! `cargo bench -p fluxio-sqlite --bench sqlite -- --warm-up-time 1 --measurement-time 5`
//! (the file is created under cargo's scratch directory, `target/tmp`, and
//! removed at the end; what it measures is mostly that disk's `fsync`).
//!
//! - `sqlite_per_checkpoint/save_fenced`: [`SqliteStore::save_fenced`] of
//!   a checkpoint with a ~1 KB context (encoding included), against
//!   `sqlite_per_checkpoint/raw_upsert`: one `INSERT ... ON CONFLICT DO
//!   UPDATE` of the same, pre-encoded bytes into a plain `(run_id, payload)`
//!   table of the same file, on the same pool. Their ratio is the store's
//!   overhead per checkpoint. To split that overhead: `save` is the same
//!   write without the lease check, `encode` the encoding alone; and
//!   `save_fenced_normal` is `save_fenced` with `synchronous = NORMAL` (no
//!   `fsync` per commit).
//! - `sqlite_throughput/{1,16,64}`: that many concurrent runs (distinct run
//!   ids) of a durable pipeline of 10 stages, each setting one key, on a
//!   1 KB input; criterion reports runs/s. Each run writes 11 checkpoints
//!   (one before each stage and the completed one; the lease taken with the
//!   first and given back with the last when the pipeline calls
//!   `begin_run` / `finish_run`). The store commits the writes that wait
//!   together in one transaction (group commit), so concurrent runs share
//!   commits: runs/s at 16 over runs/s at 1 is what it buys (issue 13's
//!   target: at least 5x).
//!
//! - `sqlite_resume_1mb/journal`: a resume of a crashed 10-stage run whose
//!   context holds 1 MB (a whole checkpoint, then five deltas of one small
//!   key each): `load` plus the resume's first checkpoint, an empty delta,
//!   `save_fenced`. Against `sqlite_resume_1mb/blob_baseline`, what that
//!   cost before the journal: read the run's 1 MB blob and write it back
//!   whole (raw SQL, no decoding or encoding). Target: at most 10 ms.
//! - `sqlite_run_1mb/durable_10_stages`: a whole durable run of 10 stages,
//!   each setting one small key, on a 1 MB context; it prints the bytes of
//!   the steps the run wrote (before the journal: 11 whole checkpoints,
//!   about 11.5 MB).
//!
//! Each group is written once for the SQL stores
//! (`fluxio_test_support::bench::sql`); this file says how to reach the
//! file. The groups carry the `sqlite_` prefix so that their baselines under
//! `target/criterion` are not mixed up with the other stores' benchmarks.

use std::path::Path;

use fluxio_sqlite::{SqliteStore, Synchronous};
use fluxio_test_support::bench::sql::{self as bench, RawTable};
use fluxio_test_support::sql::ten_counts;

/// The baselines: a plain table `raw_checkpoints` of the bench file, on
/// the store's pool.
struct Raw<'a>(&'a SqliteStore);

#[async_trait::async_trait(?Send)]
impl RawTable for Raw<'_> {
    async fn create(&self) {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS raw_checkpoints \
             (run_id TEXT PRIMARY KEY, payload BLOB NOT NULL)",
        )
        .execute(self.0.pool())
        .await
        .expect("raw table");
    }

    async fn upsert(&self, run_id: &str, payload: &[u8]) {
        sqlx::query(
            "INSERT INTO raw_checkpoints (run_id, payload) VALUES (?1, ?2) \
             ON CONFLICT (run_id) DO UPDATE SET payload = excluded.payload",
        )
        .bind(run_id)
        .bind(payload)
        .execute(self.0.pool())
        .await
        .expect("raw upsert");
    }

    async fn read(&self, run_id: &str) -> Vec<u8> {
        sqlx::query_scalar("SELECT payload FROM raw_checkpoints WHERE run_id = ?1")
            .bind(run_id)
            .fetch_one(self.0.pool())
            .await
            .expect("read")
    }

    async fn steps_written(&self, key: &str) -> (i64, i64) {
        sqlx::query_as(
            "SELECT count(*), sum(length(payload)) FROM fluxio_checkpoints_steps \
             WHERE run_id = ?1",
        )
        .bind(key)
        .fetch_one(self.0.pool())
        .await
        .expect("count")
    }
}

fn main() {
    let rt = bench::runtime();
    let file = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fluxio-sqlite-bench-{}.db", std::process::id()));
    let store = rt
        .block_on(SqliteStore::connect(&file))
        .expect("open the bench file");
    let normal = rt
        .block_on(
            SqliteStore::builder(&file)
                .synchronous(Synchronous::Normal)
                .connect(),
        )
        .expect("open the bench file");
    let raw = Raw(&store);

    bench::criterion(|c| {
        let at = "sqlite_per_checkpoint";
        bench::per_checkpoint(c, &rt, at, (&store, &raw), Some(&normal));
        let commits = || store.commits();
        let at = "sqlite_throughput";
        bench::throughput(c, &rt, at, (&store, ten_counts()), Some(&commits));
        bench::resume(c, &rt, "sqlite_resume_1mb", (&store, &raw));
        bench::run_1mb(c, &rt, "sqlite_run_1mb", (&store, &raw), ten_counts());
    });

    drop((store, normal));
    drop(rt);
    fluxio_test_support::sqlite::remove_database(&file);
}
