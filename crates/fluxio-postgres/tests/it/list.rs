//! Listing runs on PostgreSQL (contract rule 21), past what the
//! conformance suite checks through the API: key order is byte order in a
//! database whose collation is linguistic; and the SQL stores' shared
//! checks (`fluxio_test_support::sql`, `list.rs` there): a listing reads
//! the run rows, never a journal; a row it cannot read is a typed error; a
//! schema of version 3 gains the attempt column and lists.

use fluxio_core::store::conformance::{self, Harness};
use fluxio_postgres::PostgresStore;
use fluxio_test_support as support;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

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
        support::cleanup::on_own_runtime(move || async move {
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

fluxio_test_support::sql_tests! { crate::sql::Postgres;
    rule21_a_listing_reads_the_run_rows_not_the_journals,
    rule21_a_row_with_an_unknown_status_is_a_corrupt_checkpoint_error,
    rule21_a_schema_of_version_3_gains_the_attempt_and_lists
        = rule21_tables_of_schema_version_3_gain_the_attempt_and_list,
}
