//! Migrations: concurrent first connections, several stores in one schema,
//! the default schema, a changed migration.

use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::conformance::checkpoint;
use fluxio_core::store::{CheckpointStore, RunStatus};
use fluxio_postgres::{PostgresStore, PostgresStoreError};
use fluxio_test_support as support;

/// A store on `schema` with `max_connections` 4.
async fn store(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::builder(url)
        .schema(schema)
        .max_connections(4)
        .connect()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_first_connections_to_one_fresh_schema_all_succeed() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("race");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (url, schema) = (url.clone(), schema.clone());
        tasks.spawn(async move {
            PostgresStore::builder(url)
                .schema(schema)
                .max_connections(1)
                .connect()
                .await
        });
    }
    let mut stores = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        stores.push(joined.expect("no panic").expect("every connect succeeds"));
    }
    assert_eq!(stores.len(), 8);
    let applied: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{schema}\"._fluxio_migrations WHERE table_name = 'fluxio_checkpoints'"
    ))
    .fetch_one(stores[0].pool())
    .await
    .expect("bookkeeping");
    assert_eq!(
        applied, 4,
        "each migration (tables, run journal, pipeline column, listing) applied exactly once"
    );
    stores[0].save(checkpoint("r", 1)).await.expect("save");
    assert!(stores[7].exists("r").await.expect("exists"));
    drop(stores);
    support::postgres::drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn two_tables_in_one_schema_are_independent() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("two_tables");
    let a = PostgresStore::builder(url.as_str())
        .schema(&schema)
        .table("a")
        .max_connections(2)
        .connect()
        .await
        .expect("a");
    let b = PostgresStore::builder(url.as_str())
        .schema(&schema)
        .table("b")
        .max_connections(2)
        .connect()
        .await
        .expect("b");
    a.save(checkpoint("r", 1)).await.expect("save");
    assert!(!b.exists("r").await.expect("exists"));
    let _held = a
        .acquire_lease("r", Duration::from_secs(30))
        .await
        .expect("lease in a");
    b.acquire_lease("r", Duration::from_secs(30))
        .await
        .expect("b's leases are its own");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = $1 ORDER BY tablename",
    )
    .bind(&schema)
    .fetch_all(a.pool())
    .await
    .expect("tables");
    assert_eq!(
        tables,
        [
            "_fluxio_migrations",
            "a",
            "a_leases",
            "a_steps",
            "b",
            "b_leases",
            "b_steps"
        ]
    );
    drop((a, b));
    support::postgres::drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn connect_with_the_defaults_uses_public_fluxio_checkpoints() {
    // Leaves `public.fluxio_checkpoints` (and its lease and bookkeeping
    // tables) in the test database: the default location is what is tested.
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let store = PostgresStore::connect(&url).await.expect("connect");
    assert_eq!(
        (store.schema(), store.table()),
        ("public", "fluxio_checkpoints")
    );
    let run_id = format!("defaults-{}", std::process::id());
    store.save(checkpoint(&run_id, 1)).await.expect("save");
    assert_eq!(
        store.load(&run_id).await.expect("load"),
        Some(checkpoint(&run_id, 1))
    );
    store.delete(&run_id).await.expect("delete");
    store
        .migrate()
        .await
        .expect("migrating again changes nothing");
}

#[tokio::test]
async fn an_edited_migration_is_refused() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("edited");
    let store = store(&url, &schema).await;
    sqlx::query(&format!(
        "UPDATE \"{schema}\"._fluxio_migrations SET checksum = '\\x00'"
    ))
    .execute(store.pool())
    .await
    .expect("tamper");
    match store.migrate().await {
        Err(Error::Store { source, .. }) => match source.downcast_ref::<PostgresStoreError>() {
            Some(PostgresStoreError::MigrationChanged { version, table, .. }) => {
                assert_eq!((*version, table.as_str()), (1, "fluxio_checkpoints"));
            }
            other => panic!("expected MigrationChanged, got {other:?}"),
        },
        other => panic!("expected a store error, got {other:?}"),
    }
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn operator_columns_mirror_the_checkpoint_and_steps_hold_its_entry() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("columns");
    let store = store(&url, &schema).await;
    let mut cp = checkpoint("r", 1);
    cp.status = RunStatus::Failed;
    cp.error_message = Some("boom".to_owned());
    store.save(cp.clone()).await.expect("save");
    let row: (
        String,
        i64,
        String,
        String,
        Option<String>,
        bool,
        bool,
        Vec<u8>,
    ) = sqlx::query_as(&format!(
        "SELECT version, ip, step, status, error_message, \
                    created_at = to_timestamp(1700000000), expires_at IS NULL, payload \
             FROM \"{schema}\".fluxio_checkpoints WHERE run_id = 'r'"
    ))
    .fetch_one(store.pool())
    .await
    .expect("row");
    assert_eq!(
        row,
        (
            "0123456789ab".to_owned(),
            1,
            "step-1".to_owned(),
            "failed".to_owned(),
            Some("boom".to_owned()),
            true,
            true,
            Vec::new(),
        ),
        "the row's payload is empty since version 2"
    );
    let steps: Vec<(i64, bool, Vec<u8>)> = sqlx::query_as(&format!(
        "SELECT seq, whole, payload FROM \"{schema}\".fluxio_checkpoints_steps WHERE run_id = 'r'"
    ))
    .fetch_all(store.pool())
    .await
    .expect("steps");
    assert_eq!(
        steps,
        [(0, true, cp.entry_bytes().expect("encode"))],
        "the checkpoint is one step, exactly entry_bytes()"
    );
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}

/// Postgres draws fencing tokens from the lease table's identity sequence,
/// so a purge drops every released lease row, the one that held the
/// greatest token included. (That the tokens keep growing across purges is
/// the conformance check `purging_dead_leases_keeps_tokens_growing`.)
#[tokio::test]
async fn purge_deletes_every_released_lease_row() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("purge_rows");
    let store = store(&url, &schema).await;
    let ttl = Duration::from_secs(30);
    let first = store.acquire_lease("r", ttl).await.expect("acquire");
    store.release_lease(first).await.expect("release");
    let _held = store.acquire_lease("held", ttl).await.expect("acquire");
    let last = store.acquire_lease("last", ttl).await.expect("acquire");
    store.release_lease(last).await.expect("release");
    store.purge_expired().await.expect("purge");
    let leases: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT run_id FROM \"{schema}\".fluxio_checkpoints_leases"
    ))
    .fetch_all(store.pool())
    .await
    .expect("leases");
    assert_eq!(leases, ["held"], "the released lease rows were purged");
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}

/// Schema version 3: a run's pipeline (its key before the first `/`) is a
/// column PostgreSQL generates from `run_id`, so rows written without
/// naming it, as builds before version 3 write them, have it right too;
/// and it leads an index `(pipeline, status, updated_at)`, which trimming
/// a pipeline's completed runs searches.
#[tokio::test]
async fn the_pipeline_column_is_generated_from_the_run_id_and_indexed() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("pipeline");
    let store = store(&url, &schema).await;
    for key in ["orders/r1", "r2", "a/b/c", "/x"] {
        sqlx::query(&format!(
            "INSERT INTO \"{schema}\".fluxio_checkpoints \
               (run_id, payload, version, ip, step, status, created_at) \
             VALUES ($1, '', 'v', 0, '', 'completed', now())"
        ))
        .bind(key)
        .execute(store.pool())
        .await
        .expect("a row as an older build writes it");
    }
    let rows: Vec<(String, String)> = sqlx::query_as(&format!(
        "SELECT run_id, pipeline FROM \"{schema}\".fluxio_checkpoints ORDER BY run_id COLLATE \"C\""
    ))
    .fetch_all(store.pool())
    .await
    .expect("rows");
    let rows: Vec<(&str, &str)> = rows.iter().map(|(k, p)| (k.as_str(), p.as_str())).collect();
    assert_eq!(
        rows,
        [
            ("/x", ""),
            ("a/b/c", "a"),
            ("orders/r1", "orders"),
            ("r2", "")
        ]
    );
    let index: Vec<(String, String)> =
        support::postgres::indexes(store.pool(), &schema, "fluxio_checkpoints")
            .await
            .into_iter()
            .filter(|(_, def)| def.ends_with("(pipeline, status, updated_at)"))
            .collect();
    assert_eq!(index.len(), 1, "{index:?}");
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}
