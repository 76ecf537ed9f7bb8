//! Listing runs on PostgreSQL (contract rule 21), past what the
//! conformance suite checks through the API: key order is byte order in a
//! database whose collation is linguistic; a listing reads the run rows,
//! never a journal; a row it cannot read is a typed error; a schema of
//! version 3 gains the attempt column and lists.

use fluxio_core::Error;
use fluxio_core::store::conformance::{self, Harness};
use fluxio_core::store::{CheckpointStore, RunFilter, RunState};
use fluxio_postgres::PostgresStore;
use fluxio_test_support as support;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

async fn store(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::builder(url)
        .schema(schema)
        .max_connections(2)
        .connect()
        .await
        .expect("connect")
}

async fn exec(store: &PostgresStore, sql: &str) {
    let sql = sql.replace("{s}", &format!("\"{}\"", store.schema()));
    sqlx::raw_sql(&sql)
        .execute(store.pool())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Stores in schemas of one database of their own.
struct OneDatabase(PgPool);

#[async_trait::async_trait]
impl Harness for OneDatabase {
    type Store = PostgresStore;

    async fn store(&self, ns: &str) -> PostgresStore {
        PostgresStore::from_pool(self.0.clone())
            .schema(ns)
            .connect()
            .await
            .expect("a store in the database")
    }
}

/// A database of one test, dropped with the guard, pass or fail.
struct Database {
    url: String,
    name: String,
}

impl Drop for Database {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Drop runs inside the test's runtime, which cannot be blocked on:
        // clean up from a thread with a runtime of its own.
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the cleanup");
            rt.block_on(async {
                use sqlx::Connection as _;
                let mut conn = sqlx::PgConnection::connect(&url)
                    .await
                    .expect("connect to drop");
                // One statement: DROP DATABASE cannot run in a transaction.
                sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                    .execute(&mut conn)
                    .await
                    .expect("drop the database");
            });
        });
        let _ = cleanup.join();
    }
}

/// Rule 21: in a database whose collation is linguistic (ICU `en-US`,
/// where `a` sorts before `B` and punctuation has its own order), keys
/// still list in byte order, as Rust orders strings and every other store
/// lists them: the conformance suite's listing checks, run there.
#[tokio::test]
async fn rule21_keys_list_in_byte_order_under_a_linguistic_collation() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let name = support::namespace("list_icu");
    let created = {
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect");
        sqlx::raw_sql(&format!(
            "CREATE DATABASE \"{name}\" TEMPLATE template0 \
             LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        ))
        .execute(&mut conn)
        .await
    };
    if let Err(e) = created {
        // A server built without ICU (or a role without CREATEDB) cannot
        // host the check: loud locally, a failure under CI.
        assert!(
            std::env::var_os("CI").is_none(),
            "cannot create a database with an ICU collation: {e}"
        );
        support::skip(&format_args!(
            "no database with an ICU collation ({e}): byte order under a linguistic \
             collation is not checked"
        ));
        return;
    }
    let database = Database {
        url: url.clone(),
        name,
    };
    let options: PgConnectOptions = url.parse().expect("a valid URL");
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options.database(&database.name))
        .await
        .expect("connect to the new database");
    let collation: String = sqlx::query_scalar(
        "SELECT daticulocale FROM pg_database WHERE datname = current_database()",
    )
    .fetch_one(&pool)
    .await
    .expect("collation");
    assert_eq!(collation, "en-US");
    let harness = OneDatabase(pool.clone());
    conformance::rule21_keys_list_in_byte_order_and_every_filter_value_is_answered(&harness).await;
    conformance::rule21_runs_are_listed_by_pipeline_state_version_and_time(&harness).await;
    pool.close().await;
    drop(database);
}

/// Rule 21: Postgres lists natively (so the conformance suite's `rule21`
/// checks run in full on it, rather than stopping at `Unsupported`), from
/// the run rows: a run whose every step is unreadable still lists, with its
/// status, step, attempt and error, while loading it fails.
#[tokio::test]
async fn rule21_a_listing_reads_the_run_rows_not_the_journals() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("list_rows");
    let store = store(&url, &schema).await;
    let mut cp = support::checkpoint("r", 2)
        .in_pipeline("orders")
        .failed("card declined");
    cp.attempt = 7;
    store.save(cp.clone()).await.expect("save");
    exec(
        &store,
        "UPDATE {s}.fluxio_checkpoints_steps SET payload = '\\x00'",
    )
    .await;
    assert!(matches!(
        store.load(&cp.key()).await,
        Err(Error::CorruptCheckpoint { .. })
    ));

    let page = store
        .list_runs(&RunFilter::new().pipeline("orders").state(RunState::Failed))
        .await
        .expect("Postgres lists natively");
    assert_eq!(page.runs.len(), 1, "{page:?}");
    let run = &page.runs[0];
    assert_eq!(
        (
            run.key.as_str(),
            run.run_id.as_str(),
            run.step.as_str(),
            run.attempt,
            run.error_message.as_deref(),
            run.state,
            run.created_at_ms
        ),
        (
            "orders/r",
            "r",
            "step-2",
            7,
            Some("card declined"),
            RunState::Failed,
            cp.created_at_ms
        )
    );
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}

/// Rule 21: a row whose status this build does not know (a newer build's,
/// or an operator's edit) is a typed error naming the run, not a guess.
#[tokio::test]
async fn rule21_a_row_with_an_unknown_status_is_a_corrupt_checkpoint_error() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("list_status");
    let store = store(&url, &schema).await;
    let cp = support::checkpoint("r", 1).in_pipeline("orders");
    store.save(cp.clone()).await.expect("save");
    exec(
        &store,
        "UPDATE {s}.fluxio_checkpoints SET status = 'paused'",
    )
    .await;
    match store.list_runs(&RunFilter::new()).await {
        Err(Error::CorruptCheckpoint { run_id, reason, .. }) => {
            assert_eq!(run_id, "orders/r");
            assert!(reason.contains("`paused`"), "{reason}");
        }
        other => panic!("expected CorruptCheckpoint, got {other:?}"),
    }
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}

/// Rule 21: schema version 4 adds the attempt column to a schema of
/// version 3 (its rows read attempt 0 until their run's next write) and the
/// listing's indexes; an older build, which never names the column, still
/// writes rows.
#[tokio::test]
async fn rule21_a_schema_of_version_3_gains_the_attempt_and_lists() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("list_migrate");
    let first = store(&url, &schema).await;
    let mut cp = support::checkpoint("r", 1).in_pipeline("orders");
    cp.attempt = 4;
    first.save(cp.clone()).await.expect("save");
    // Dropping the column drops the indexes on it.
    exec(
        &first,
        "ALTER TABLE {s}.fluxio_checkpoints DROP COLUMN attempt; \
         DROP INDEX {s}.fluxio_checkpoints_run_id_idx; \
         DELETE FROM {s}._fluxio_migrations WHERE version = 4",
    )
    .await;
    drop(first);

    let store = store(&url, &schema).await;
    let attempts = |store: PostgresStore| async move {
        let page = store.list_runs(&RunFilter::new()).await.expect("list");
        page.runs
            .iter()
            .map(|r| (r.key.clone(), r.attempt))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        attempts(store.clone()).await,
        [("orders/r".to_owned(), 0)],
        "0 until the next write"
    );
    store.save(cp.clone()).await.expect("save again");
    assert_eq!(attempts(store.clone()).await, [("orders/r".to_owned(), 4)]);
    exec(
        &store,
        "INSERT INTO {s}.fluxio_checkpoints \
           (run_id, payload, version, ip, step, status, created_at) \
         VALUES ('orders/old', '', 'v', 0, '', 'failed', now())",
    )
    .await;
    let failed = store
        .list_runs(&RunFilter::new().state(RunState::Failed))
        .await
        .expect("list");
    assert_eq!(failed.runs.len(), 1);
    assert_eq!(
        (failed.runs[0].key.as_str(), failed.runs[0].attempt),
        ("orders/old", 0)
    );
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}
