//! The run journal in PostgreSQL (contract rules 18 and 20): the SQL
//! stores' shared checks (`fluxio_test_support::sql`, `journal.rs` there)
//! in a schema of each test's own. A run an earlier build wrote (one blob
//! per run, schema version 1) is migrated and resumes; a delta writes only
//! the keys that changed; a load reads from the last whole checkpoint on
//! and nothing before it. And what only PostgreSQL does: trimming
//! completed runs under an advisory lock.

use fluxio_core::store::{CheckpointStore, RunStatus};
use fluxio_postgres::PostgresStore;
use fluxio_test_support as support;

fluxio_test_support::sql_tests! { crate::sql::Postgres;
    rule18_a_row_of_an_earlier_build_is_migrated_and_resumes,
    rule18_a_durable_run_writes_its_context_once_then_only_changed_keys,
    rule20_a_load_reads_only_from_the_last_whole_checkpoint,
}

/// `keep_completed`: runs of one pipeline completing at once, on their own
/// connections, trim one after the other (the advisory lock), so exactly
/// the newest `n` completed runs are left, not `n` plus the ones that
/// committed concurrently; the other pipeline's run is not touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_completions_leave_exactly_the_newest_n() {
    support::postgres::in_schema("keep_race", |url, schema| async move {
        let store = PostgresStore::builder(&url)
            .schema(&schema)
            .max_connections(8)
            .keep_completed(Some(2))
            .connect()
            .await
            .expect("connect");
        let completed = |pipeline: &str, id: &str| {
            let mut cp = fluxio_core::store::conformance::checkpoint(id, 1);
            cp.pipeline = pipeline.to_owned();
            cp.status = RunStatus::Completed;
            cp
        };
        store.save(completed("other", "o")).await.expect("save");
        for round in 0..3 {
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..8 {
                let (store, cp) = (store.clone(), completed("p", &format!("r{round}-{i}")));
                tasks.spawn(async move { store.save(cp).await });
            }
            while let Some(done) = tasks.join_next().await {
                done.expect("no panic").expect("save");
            }
            let (kept, steps): (i64, i64) = sqlx::query_as(&format!(
                "SELECT (SELECT count(*) FROM \"{schema}\".fluxio_checkpoints \
                   WHERE pipeline = 'p'), \
                 (SELECT count(*) FROM \"{schema}\".fluxio_checkpoints_steps \
                   WHERE run_id LIKE 'p/%')"
            ))
            .fetch_one(store.pool())
            .await
            .expect("count");
            assert_eq!(kept, 2, "round {round}");
            assert_eq!(steps, 2, "the trimmed runs' journals went with them");
        }
        assert!(store.exists("other/o").await.expect("exists"));
    })
    .await;
}
