//! Opening files: concurrent first opens (tasks and processes), several
//! stores in one file, reopening, an edited migration, the operator columns,
//! the pipeline column. What every SQL store shares is checked by
//! `fluxio_test_support::sql` (`schema.rs` there).

use std::time::Duration;

use fluxio_core::store::{CheckpointStore, RunStatus};
use fluxio_sqlite::SqliteStore;
use fluxio_test_support as support;
use support::sql::{self, MIGRATIONS};

use crate::sql::Sqlite;

/// Set for the child processes of
/// `four_processes_open_one_fresh_file_at_once`: the file to open.
const CHILD_FILE: &str = "FLUXIO_SQLITE_TEST_CHILD_FILE";
/// When the children open it, in milliseconds since the Unix epoch.
const CHILD_START: &str = "FLUXIO_SQLITE_TEST_CHILD_START";

/// Eight stores opening one fresh file at once, three times over: the SQL
/// stores' shared check, each round on a file of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_first_opens_of_one_fresh_file_all_succeed() {
    for round in 0..3 {
        sql::run::<Sqlite, _, _>(&format!("race{round}"), |h| {
            sql::eight_concurrent_first_opens_all_succeed(h, 2)
        })
        .await;
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
                support::sqlite::scalar(&file, "SELECT count(*) FROM _fluxio_migrations").await,
                MIGRATIONS
            );
            assert_eq!(
                support::sqlite::scalar(&file, "SELECT count(*) FROM fluxio_checkpoints").await,
                4,
                "each child saved its checkpoint"
            );
            assert_eq!(
                support::sqlite::scalar(
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

fluxio_test_support::sql_tests! { Sqlite;
    two_tables_in_one_file_are_independent = two_tables_in_one_database_are_independent,
    reopening_changes_nothing_and_an_edited_migration_is_refused,
    the_pipeline_column_is_generated_from_the_run_id,
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
    let mut foreign = support::sqlite::application_connection(&file).await;
    sqlx::raw_sql("BEGIN IMMEDIATE; CREATE TABLE app_data (x INTEGER)")
        .execute(&mut foreign)
        .await
        .expect("a foreign write in rollback-journal mode");
    let finish = support::sqlite::commit_after(foreign, Duration::from_millis(300));
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
        support::sqlite::scalar(&file, "SELECT count(*) FROM app_data").await,
        0,
        "the application's table is still there"
    );
}
