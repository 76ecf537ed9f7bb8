//! Opening and migrating: concurrent first opens, several stores in one
//! database, reopening, an edited migration, the generated pipeline column.

use std::sync::Arc;
use std::time::Duration;

use fluxio_core::store::CheckpointStore;

use super::{Options, Refusal, SqlHarness, TABLE, open};

/// How many of this build's migrations of [`TABLE`] are applied.
async fn applied<H: SqlHarness>(h: &H) -> i64 {
    h.scalar("SELECT count(*) FROM {s}._fluxio_migrations WHERE table_name = 'fluxio_checkpoints'")
        .await
}

/// Eight stores opening one fresh database at once, each with a pool of
/// `max_connections`: every open succeeds, each migration is applied
/// exactly once, and they all see one set of tables.
pub async fn eight_concurrent_first_opens_all_succeed<H: SqlHarness>(
    h: Arc<H>,
    max_connections: u32,
) {
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (h, barrier) = (h.clone(), barrier.clone());
        tasks.spawn(async move {
            let options = Options {
                max_connections: Some(max_connections),
                ..Options::default()
            };
            barrier.wait().await;
            h.open(&options).await.map_err(|e| format!("{e:?}"))
        });
    }
    let mut stores = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        stores.push(joined.expect("no panic").expect("every open succeeds"));
    }
    assert_eq!(stores.len(), 8);
    assert_eq!(
        applied(&*h).await,
        H::MIGRATIONS,
        "each migration (tables, run journal, pipeline column, listing, waits) applied exactly once"
    );
    stores[0]
        .save(crate::checkpoint("r", 1))
        .await
        .expect("save");
    assert!(stores[7].exists("r").await.expect("exists"));
}

/// Two stores on tables `a` and `b` of one database keep their runs and
/// leases apart, each in tables of its own.
pub async fn two_tables_in_one_database_are_independent<H: SqlHarness>(h: &H) {
    let a = h.open(&Options::table("a")).await.expect("a");
    let b = h.open(&Options::table("b")).await.expect("b");
    a.save(crate::checkpoint("r", 1)).await.expect("save");
    assert!(!b.exists("r").await.expect("exists"));
    let _held = a
        .acquire_lease("r", Duration::from_secs(30))
        .await
        .expect("lease in a");
    b.acquire_lease("r", Duration::from_secs(30))
        .await
        .expect("b's leases are its own");
    assert_eq!(
        h.tables().await,
        [
            "_fluxio_migrations",
            "a",
            "a_leases",
            "a_signals",
            "a_steps",
            "b",
            "b_leases",
            "b_signals",
            "b_steps"
        ]
    );
}

/// Reopening a store's tables changes nothing (no migration runs twice); a
/// migration whose applied checksum differs from this build's is refused,
/// naming it, when the store opens.
pub async fn reopening_changes_nothing_and_an_edited_migration_is_refused<H: SqlHarness>(h: &H) {
    let store = open(h).await;
    let cp = crate::checkpoint("r", 1);
    store.save(cp.clone()).await.expect("save");
    drop(store);
    let again = open(h).await;
    assert_eq!(again.load("r").await.expect("load"), Some(cp));
    assert_eq!(applied(h).await, H::MIGRATIONS);
    drop(again);

    let garbage = h.blob(&[0]);
    h.execute(&format!(
        "UPDATE {{s}}._fluxio_migrations SET checksum = {garbage}"
    ))
    .await;
    let err = h
        .open(&Options::default())
        .await
        .expect_err("an edited migration");
    assert_eq!(
        H::refusal(&err),
        Refusal::MigrationChanged {
            version: 1,
            table: TABLE.to_owned()
        }
    );
}

/// Schema version 3: a run's pipeline (its key before the first `/`) is a
/// column the database generates from `run_id`, so rows written without
/// naming it, as builds before version 3 write them, have it right too.
pub async fn the_pipeline_column_is_generated_from_the_run_id<H: SqlHarness>(h: &H) {
    drop(open(h).await);
    let rows = [
        ("/x", ""),
        ("a/b/c", "a"),
        ("orders/r1", "orders"),
        ("r2", ""),
        ("émoji/1", "émoji"),
    ];
    for (key, _) in rows {
        // a row as an older build writes it
        h.insert_old_row(key, "v", "completed", &[]).await;
    }
    assert_eq!(
        h.scalar("SELECT count(*) FROM {s}.fluxio_checkpoints")
            .await,
        5
    );
    for (key, pipeline) in rows {
        let right = h
            .scalar(&format!(
                "SELECT count(*) FROM {{s}}.fluxio_checkpoints \
                 WHERE run_id = '{key}' AND pipeline = '{pipeline}'"
            ))
            .await;
        assert_eq!(right, 1, "the pipeline of {key:?} is {pipeline:?}");
    }
}
