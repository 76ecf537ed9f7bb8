//! Runs that wait (contract rules 25-28) in the Postgres store, past the
//! conformance suite: the due time in the run's row, the mailbox going
//! with its run, a 16 MiB payload, a schema of version 4, the wake-ups
//! (`LISTEN`/`NOTIFY`, across processes, ending when the listener's
//! connection drops) and the server's clock. The shared checks are
//! `fluxio_test_support::sql`'s, on the harness of `it/sql.rs`.

#[path = "it/sql.rs"]
mod sql;

use std::time::Duration;

use fluxio_core::store::{CheckpointStore, Pending, RunEventKind};
use fluxio_postgres::PostgresStore;
use fluxio_test_support as support;

use sql::Postgres;

/// Takes a schema back to version 4: the mailbox, the due column (its
/// index with it), and the bookkeeping row of version 5.
const BEFORE_WAITS: &str = "DROP TABLE {s}.fluxio_checkpoints_signals; \
     ALTER TABLE {s}.fluxio_checkpoints DROP COLUMN due_at; \
     DELETE FROM {s}._fluxio_migrations WHERE version = 5";

fluxio_test_support::sql_waits_tests! { Postgres, sql::Types;
    before_waits = BEFORE_WAITS,
    builder = |h| PostgresStore::builder(support::postgres::url()).schema(h.name()),
}

/// Rule 27: a run parked through one store (one process) is told to the
/// watchers of another on the same tables, when the parking commits; and
/// not to those of other tables.
#[tokio::test]
async fn rule27_a_park_in_one_process_is_told_to_the_watchers_of_another() {
    support::postgres::in_schema("notify", |url, schema| async move {
        let store = |table: &str| {
            PostgresStore::builder(url.clone())
                .schema(schema.clone())
                .table(table)
                .connect()
        };
        let (watcher, writer) = (store("t").await.expect("a"), store("t").await.expect("b"));
        let other = store("other").await.expect("other");
        assert_eq!(watcher.channel(), writer.channel());
        assert_ne!(watcher.channel(), other.channel());
        let mut events = watcher
            .watch()
            .await
            .expect("watch")
            .expect("Postgres tells");
        let mut others = other.watch().await.expect("watch").expect("Postgres tells");
        let asleep = support::checkpoint("nap", 2)
            .in_pipeline("p")
            .parked(Pending::sleep(5));
        let lease = writer
            .acquire_lease("p/nap", Duration::from_secs(30))
            .await
            .expect("acquire");
        writer.finish_run(asleep, lease, false).await.expect("park");
        let told = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("told within 10 s")
            .expect("an event");
        assert_eq!((told.key.as_str(), told.kind), ("p/nap", RunEventKind::Due));
        let quiet = tokio::time::timeout(Duration::from_millis(300), others.next()).await;
        assert!(
            quiet.is_err(),
            "another table's watchers hear nothing: {quiet:?}"
        );
    })
    .await;
}

/// Rule 27: when the listener's connection drops (an administrator's
/// `pg_terminate_backend`, a restart), the events end, and the worker
/// goes on polling; a new subscription listens again.
#[tokio::test]
async fn the_events_end_when_the_listeners_connection_drops() {
    support::postgres::in_schema("listener_drop", |url, schema| async move {
        let store = PostgresStore::builder(url)
            .schema(schema)
            .connect()
            .await
            .expect("open");
        let mut events = store.watch().await.expect("watch").expect("Postgres tells");
        let terminated: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()",
        )
        .bind(store.channel())
        .fetch_all(store.pool())
        .await
        .expect("terminate");
        assert_eq!(terminated, [true], "the listener's one connection");
        let ended = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("within 10 s");
        assert!(ended.is_none(), "{ended:?}");
        let mut again = store.watch().await.expect("watch").expect("Postgres tells");
        store
            .save(support::checkpoint("r", 1).in_pipeline("p").completed())
            .await
            .expect("save");
        let told = tokio::time::timeout(Duration::from_secs(10), again.next())
            .await
            .expect("told within 10 s")
            .expect("an event");
        assert_eq!((told.key.as_str(), told.kind), ("p/r", RunEventKind::Ended));
    })
    .await;
}
