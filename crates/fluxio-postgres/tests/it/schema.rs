//! Migrations: concurrent first connections, several stores in one schema,
//! the default schema, a changed migration, the operator columns, the
//! pipeline column. What every SQL store shares is checked by
//! `fluxio_test_support::sql` (`schema.rs` there).

use std::time::Duration;

use fluxio_core::store::conformance::checkpoint;
use fluxio_core::store::{CheckpointStore, RunStatus};
use fluxio_postgres::PostgresStore;
use fluxio_test_support as support;
use support::sql::{self, Refusal, SqlHarness as _};

use crate::sql::Postgres;

/// A store on `schema` with `max_connections` 4.
async fn store(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::builder(url)
        .schema(schema)
        .max_connections(4)
        .connect()
        .await
        .expect("connect")
}

/// Eight stores connecting to one fresh schema at once, each with a pool
/// of one connection: the SQL stores' shared check.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_first_connections_to_one_fresh_schema_all_succeed() {
    sql::run::<Postgres, _, _>("race", |h| {
        sql::eight_concurrent_first_opens_all_succeed(h, 1)
    })
    .await;
}

fluxio_test_support::sql_tests! { Postgres;
    two_tables_in_one_schema_are_independent = two_tables_in_one_database_are_independent,
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

/// The SQL stores' shared check (reopening changes nothing, an edited
/// migration refuses the next connect), and `migrate` on a store that was
/// already open refuses it the same way.
#[tokio::test]
async fn an_edited_migration_is_refused() {
    sql::run::<Postgres, _, _>("edited", |h| async move {
        let open_before = sql::open(&*h).await;
        sql::reopening_changes_nothing_and_an_edited_migration_is_refused(&*h).await;
        let err = open_before
            .migrate()
            .await
            .expect_err("an edited migration");
        assert_eq!(
            Postgres::refusal(&err),
            Refusal::MigrationChanged {
                version: 1,
                table: "fluxio_checkpoints".to_owned()
            }
        );
    })
    .await;
}

#[tokio::test]
async fn operator_columns_mirror_the_checkpoint_and_steps_hold_its_entry() {
    support::postgres::in_schema("columns", |url, schema| async move {
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
    })
    .await;
}

/// Postgres draws fencing tokens from the lease table's identity sequence,
/// so a purge drops every released lease row, the one that held the
/// greatest token included. (That the tokens keep growing across purges is
/// the conformance check `purging_dead_leases_keeps_tokens_growing`.)
#[tokio::test]
async fn purge_deletes_every_released_lease_row() {
    support::postgres::in_schema("purge_rows", |url, schema| async move {
        let store = store(&url, &schema).await;
        let ttl = Duration::from_secs(30);
        let _held = support::runs::leases_before_a_purge(&store, ttl).await;
        store.purge_expired().await.expect("purge");
        let leases: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT run_id FROM \"{schema}\".fluxio_checkpoints_leases"
        ))
        .fetch_all(store.pool())
        .await
        .expect("leases");
        assert_eq!(leases, ["held"], "the released lease rows were purged");
    })
    .await;
}

/// Schema version 3: a run's pipeline (its key before the first `/`) is a
/// column PostgreSQL generates from `run_id` (the SQL stores' shared
/// check), and it leads an index `(pipeline, status, updated_at)`, which
/// trimming a pipeline's completed runs searches.
#[tokio::test]
async fn the_pipeline_column_is_generated_from_the_run_id_and_indexed() {
    sql::run::<Postgres, _, _>("pipeline", |h| async move {
        sql::the_pipeline_column_is_generated_from_the_run_id(&*h).await;
        let index: Vec<(String, String)> =
            support::postgres::indexes(h.pool(), h.name(), "fluxio_checkpoints")
                .await
                .into_iter()
                .filter(|(_, def)| def.ends_with("(pipeline, status, updated_at)"))
                .collect();
        assert_eq!(index.len(), 1, "{index:?}");
    })
    .await;
}
