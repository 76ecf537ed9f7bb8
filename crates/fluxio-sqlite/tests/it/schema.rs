//! Opening files: concurrent first opens (tasks and processes), several
//! stores in one file, reopening, an edited migration, the operator columns.

use std::path::Path;
use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::{CheckpointStore, RunStatus};
use fluxio_sqlite::{SqliteStore, SqliteStoreError};
use fluxio_test_support as support;

/// Set for the child processes of
/// `four_processes_open_one_fresh_file_at_once`: the file to open.
/// The migrations of this build: the tables and leases (1), the run
/// journal (2), the pipeline column (3), listing (4).
const MIGRATIONS: i64 = 4;

const CHILD_FILE: &str = "FLUXIO_SQLITE_TEST_CHILD_FILE";
/// When the children open it, in milliseconds since the Unix epoch.
const CHILD_START: &str = "FLUXIO_SQLITE_TEST_CHILD_START";

async fn count(file: &Path, sql: &str) -> i64 {
    let mut conn = support::sqlite::raw_connection(file).await;
    sqlx::query_scalar(sql)
        .fetch_one(&mut conn)
        .await
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_first_opens_of_one_fresh_file_all_succeed() {
    for round in 0..3 {
        let dir = support::TempDir::new(&format!("race{round}"));
        let file = dir.db("fresh");
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(8));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (file, barrier) = (file.clone(), barrier.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                SqliteStore::builder(file)
                    .max_connections(2)
                    .connect()
                    .await
            });
        }
        let mut stores = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            stores.push(joined.expect("no panic").expect("every open succeeds"));
        }
        assert_eq!(stores.len(), 8);
        assert_eq!(
            count(&file, "SELECT count(*) FROM _fluxio_migrations").await,
            MIGRATIONS,
            "each migration applied exactly once"
        );
        stores[0]
            .save(support::checkpoint("r", 1))
            .await
            .expect("save");
        assert!(stores[7].exists("r").await.expect("exists"));
    }
}

/// Not a test of its own: the body of each child process of
/// `four_processes_open_one_fresh_file_at_once` (it does nothing when run
/// by the test harness).
#[tokio::test]
async fn helper_child_process_opens_the_shared_file() {
    let (Ok(file), Ok(start)) = (std::env::var(CHILD_FILE), std::env::var(CHILD_START)) else {
        return;
    };
    support::child::sleep_until_unix_ms(start.parse().expect("a start time")).await;
    let store = SqliteStore::builder(&file)
        .max_connections(2)
        .connect()
        .await
        .expect("the child opens the file");
    let run_id = format!("child-{}", std::process::id());
    let lease = store
        .acquire_lease(&run_id, Duration::from_secs(30))
        .await
        .expect("acquire");
    store
        .save_fenced(support::checkpoint(&run_id, 1), &lease)
        .await
        .expect("save");
    store.release_lease(lease).await.expect("release");
}

#[test]
fn four_processes_open_one_fresh_file_at_once() {
    for round in 0..2 {
        let dir = support::TempDir::new(&format!("processes{round}"));
        let file = dir.db("fresh");
        let file_str = file.to_str().expect("a UTF-8 path");
        // Process start-up takes a while: they all open at this moment.
        let start = (support::child::unix_ms() + 500).to_string();
        let children: Vec<_> = (0..4)
            .map(|_| {
                support::child::spawn_test_process(
                    &support::child::test_name(
                        module_path!(),
                        "helper_child_process_opens_the_shared_file",
                    ),
                    &[(CHILD_FILE, file_str), (CHILD_START, &start)],
                )
            })
            .collect();
        for child in children {
            let (status, output) = support::child::wait_for(child);
            assert!(
                status.success(),
                "round {round}: a child failed: {status}\n{output}"
            );
        }
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        rt.block_on(async {
            assert_eq!(
                count(&file, "SELECT count(*) FROM _fluxio_migrations").await,
                MIGRATIONS
            );
            assert_eq!(
                count(&file, "SELECT count(*) FROM fluxio_checkpoints").await,
                4,
                "each child saved its checkpoint"
            );
            assert_eq!(
                count(
                    &file,
                    "SELECT count(DISTINCT token) FROM fluxio_checkpoints_leases"
                )
                .await,
                4,
                "four acquisitions, four tokens"
            );
        });
    }
}

#[tokio::test]
async fn two_tables_in_one_file_are_independent() {
    let dir = support::TempDir::new("two_tables");
    let file = dir.db("shared");
    let a = SqliteStore::builder(&file)
        .table("a")
        .connect()
        .await
        .expect("a");
    let b = SqliteStore::builder(&file)
        .table("b")
        .connect()
        .await
        .expect("b");
    a.save(support::checkpoint("r", 1)).await.expect("save");
    assert!(!b.exists("r").await.expect("exists"));
    let _held = a
        .acquire_lease("r", Duration::from_secs(30))
        .await
        .expect("lease in a");
    b.acquire_lease("r", Duration::from_secs(30))
        .await
        .expect("b's leases are its own");
    let mut conn = support::sqlite::raw_connection(&file).await;
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .fetch_all(&mut conn)
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
}

#[tokio::test]
async fn reopening_changes_nothing_and_an_edited_migration_is_refused() {
    let dir = support::TempDir::new("edited");
    let file = dir.db("x");
    let store = SqliteStore::connect(&file).await.expect("open");
    let cp = support::checkpoint("r", 1);
    store.save(cp.clone()).await.expect("save");
    drop(store);
    let again = SqliteStore::connect(&file).await.expect("reopen");
    assert_eq!(again.load("r").await.expect("load"), Some(cp));
    assert_eq!(
        count(&file, "SELECT count(*) FROM _fluxio_migrations").await,
        MIGRATIONS
    );

    let mut conn = support::sqlite::raw_connection(&file).await;
    sqlx::query("UPDATE _fluxio_migrations SET checksum = x'00'")
        .execute(&mut conn)
        .await
        .expect("tamper");
    match SqliteStore::connect(&file).await {
        Err(Error::Store { source, .. }) => match source.downcast_ref::<SqliteStoreError>() {
            Some(SqliteStoreError::MigrationChanged { version, table, .. }) => {
                assert_eq!((*version, table.as_str()), (1, "fluxio_checkpoints"));
            }
            other => panic!("expected MigrationChanged, got {other:?}"),
        },
        other => panic!("expected a store error, got {other:?}"),
    }
}

#[tokio::test]
async fn operator_columns_mirror_the_checkpoint_and_steps_hold_its_entry() {
    let dir = support::TempDir::new("columns");
    let file = dir.db("x");
    let store = SqliteStore::connect(&file).await.expect("open");
    let mut cp = support::checkpoint("r", 1);
    cp.status = RunStatus::Failed;
    cp.step = "charge".to_owned();
    cp.error_message = Some("boom".to_owned());
    let before = i64::try_from(support::child::unix_ms()).expect("ms") - 1;
    store.save(cp.clone()).await.expect("save");
    let after = i64::try_from(support::child::unix_ms()).expect("ms") + 1;
    let mut conn = support::sqlite::raw_connection(&file).await;
    #[allow(clippy::type_complexity)]
    let row: (
        String,
        i64,
        String,
        String,
        Option<String>,
        i64,
        i64,
        Option<i64>,
        Vec<u8>,
    ) = sqlx::query_as(
        "SELECT version, ip, step, status, error_message, created_at, updated_at, \
                    expires_at, payload \
             FROM fluxio_checkpoints WHERE run_id = 'r'",
    )
    .fetch_one(&mut conn)
    .await
    .expect("row");
    let (version, ip, step, status, message, created, updated, expires, payload) = row;
    assert_eq!(
        (
            version.as_str(),
            ip,
            step.as_str(),
            status.as_str(),
            message.as_deref(),
            created,
            expires
        ),
        (
            "0123456789ab",
            1,
            "charge",
            "failed",
            Some("boom"),
            1_700_000_000_000,
            None
        )
    );
    assert!(
        (before..=after).contains(&updated),
        "updated_at {updated} by SQLite's clock"
    );
    assert!(
        payload.is_empty(),
        "the row's payload is empty since version 2"
    );
    let steps: Vec<(i64, bool, Vec<u8>)> = sqlx::query_as(
        "SELECT seq, whole, payload FROM fluxio_checkpoints_steps WHERE run_id = 'r'",
    )
    .fetch_all(&mut conn)
    .await
    .expect("steps");
    assert_eq!(
        steps,
        [(0, true, cp.entry_bytes().expect("encode"))],
        "the checkpoint is one step, exactly entry_bytes()"
    );
}

#[tokio::test]
async fn opening_a_fresh_file_waits_for_a_foreign_writer_to_finish() {
    // Switching a file to WAL needs it to itself, and SQLite fails the
    // switch at once (no busy timeout) while another connection writes: the
    // store retries until its timeout.
    let dir = support::TempDir::new("foreign");
    let file = dir.db("x");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&file)
        .create_if_missing(true);
    let mut foreign = <sqlx::SqliteConnection as sqlx::Connection>::connect_with(&options)
        .await
        .expect("connect");
    sqlx::raw_sql("BEGIN IMMEDIATE; CREATE TABLE app_data (x INTEGER)")
        .execute(&mut foreign)
        .await
        .expect("a foreign write in rollback-journal mode");
    let finish = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        sqlx::query("COMMIT")
            .execute(&mut foreign)
            .await
            .expect("commit");
        foreign
    });
    let started = std::time::Instant::now();
    let store = SqliteStore::builder(&file)
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("open once the foreign write is done");
    assert!(started.elapsed() >= Duration::from_millis(250));
    let _foreign = finish.await.expect("no panic");
    store.save(support::checkpoint("r", 1)).await.expect("save");
    assert_eq!(
        count(&file, "SELECT count(*) FROM app_data").await,
        0,
        "the application's table is still there"
    );
}

/// Schema version 3: a run's pipeline (its key before the first `/`) is a
/// column SQLite generates from `run_id`, so rows written without naming
/// it, as builds before version 3 write them, have it right too.
#[tokio::test]
async fn the_pipeline_column_is_generated_from_the_run_id() {
    let dir = support::TempDir::new("pipeline");
    let file = dir.db("p");
    drop(SqliteStore::connect(&file).await.expect("open"));
    let mut conn = support::sqlite::raw_connection(&file).await;
    for key in ["orders/r1", "r2", "a/b/c", "/x", "émoji/1"] {
        sqlx::query(
            "INSERT INTO fluxio_checkpoints \
               (run_id, payload, version, ip, step, status, created_at, updated_at) \
             VALUES (?1, X'', 'v', 0, '', 'completed', 0, 0)",
        )
        .bind(key)
        .execute(&mut conn)
        .await
        .expect("a row as an older build writes it");
    }
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT run_id, pipeline FROM fluxio_checkpoints ORDER BY run_id")
            .fetch_all(&mut conn)
            .await
            .expect("rows");
    let rows: Vec<(&str, &str)> = rows.iter().map(|(k, p)| (k.as_str(), p.as_str())).collect();
    assert_eq!(
        rows,
        [
            ("/x", ""),
            ("a/b/c", "a"),
            ("orders/r1", "orders"),
            ("r2", ""),
            ("émoji/1", "émoji")
        ]
    );
}
