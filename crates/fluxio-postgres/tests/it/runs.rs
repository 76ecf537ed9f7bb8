//! Contract rule 24: a durable run starts and ends in one transaction each
//! (`begin_run`, `finish_run`), so a 10-stage run commits 11 times.
//!
//! Commits are counted by the server: in the test's own schema, a
//! statement trigger on each of the store's tables records the id of every
//! transaction that writes to them (`pg_current_xact_id()`, once per
//! transaction) in a table of its own. A transaction that rolls back takes
//! its record with it, so the records are the write transactions that
//! committed: what makes the server flush its log. Other tests write to
//! other schemas, so the count is this test's alone.

use fluxio::{Context, StageResult, pipeline, stage};
use fluxio_postgres::PostgresStore;
use fluxio_test_support as support;
use support::runs;

async fn store(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::builder(url)
        .schema(schema)
        .max_connections(2)
        .connect()
        .await
        .expect("connect")
}

/// Records the write transactions on the store's tables from now on.
async fn count_commits(store: &PostgresStore) {
    let s = format!("\"{}\"", store.schema());
    let t = store.table();
    let mut sql = format!(
        "CREATE TABLE {s}._commits (xid xid8 PRIMARY KEY);
         CREATE FUNCTION {s}._count_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO {s}._commits VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
           RETURN NULL;
         END $$;"
    );
    for table in [t.to_owned(), format!("{t}_leases"), format!("{t}_steps")] {
        sql.push_str(&format!(
            "CREATE TRIGGER _count_commit AFTER INSERT OR UPDATE OR DELETE ON {s}.\"{table}\"
             FOR EACH STATEMENT EXECUTE FUNCTION {s}._count_commit();"
        ));
    }
    sqlx::raw_sql(&sql)
        .execute(store.pool())
        .await
        .expect("the commit counter");
}

async fn commits(store: &PostgresStore) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{}\"._commits",
        store.schema()
    ))
    .fetch_one(store.pool())
    .await
    .expect("count")
}

/// The one-transaction overrides answer as the trait's defaults do.
#[tokio::test]
async fn rule24_begin_and_finish_run_answer_as_the_defaults() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("runs_semantics");
    let store = store(&url, &schema).await;
    runs::check_begin_and_finish(&store, "orders").await;
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}

/// A 10-stage run driven as a durable pipeline drives it: 11 commits, one
/// per checkpoint (the lease taken with the first, given back with the
/// last), where acquire, delete, 11 saves and release made 14.
#[tokio::test]
async fn rule24_a_ten_stage_run_commits_eleven_times() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("runs_commits");
    let store = store(&url, &schema).await;
    count_commits(&store).await;
    let run = runs::ten_stage_run("orders", "1");
    runs::drive(&store, &run).await;
    assert_eq!(commits(&store).await, 11);
    drop(store);
    support::postgres::drop_schema(&url, &schema).await;
}

#[stage]
async fn stamp(ctx: Context) -> StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?)
}

/// The same through a durable pipeline of 10 stages, each setting one key:
/// `invoke` begins the run with `begin_run` and ends it with `finish_run`,
/// so it commits 11 times (issue 13: at most 11).
#[tokio::test]
async fn rule24_a_ten_stage_durable_invoke_commits_eleven_times() {
    let Some(url) = support::postgres::server().await else {
        return;
    };
    let schema = support::namespace("runs_invoke");
    let store = store(&url, &schema).await;
    count_commits(&store).await;
    let p = pipeline![
        stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp
    ]
    .name("orders")
    .store(store.clone())
    .build()
    .expect("valid");
    let out = p
        .invoke("1", Context::new())
        .await
        .expect("the run completes");
    assert_eq!(out.get::<u64>("n").expect("n"), 10);
    let commits = commits(&store).await;
    // one per checkpoint: 10 before the stages, and the completed one
    assert_eq!(commits, 11);
    drop((p, store));
    support::postgres::drop_schema(&url, &schema).await;
}
