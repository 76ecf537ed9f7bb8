//! Opening read-only: a store's tables are read and never written, and the
//! schema version decides what can be read.

use fluxio_core::Error;
use fluxio_core::store::{CheckpointStore, RunFilter};

use super::{Options, Refusal, SqlHarness, TABLE, open};

/// A store's tables open read-only: it loads, lists and reads histories,
/// and refuses every write, changing no schema object.
pub async fn read_only_reads_a_store_and_refuses_every_write<H: SqlHarness>(h: &H) {
    let cp = crate::checkpoint("orders/r", 1);
    {
        let store = open(h).await;
        store.save(cp.clone()).await.expect("save");
    }
    let before = h.schema_objects().await;
    let store = h
        .open(&Options::read_only())
        .await
        .expect("a store's tables open read-only");
    assert_eq!(
        store.load("orders/r").await.expect("load"),
        Some(cp.clone())
    );
    assert_eq!(store.history("orders/r").await.expect("history").len(), 1);
    let page = store.list_runs(&RunFilter::new()).await.expect("list");
    assert_eq!(page.runs.len(), 1);
    let err = store
        .save(crate::checkpoint("orders/s", 1))
        .await
        .expect_err("a read-only store does not write");
    assert!(matches!(err, Error::Store { .. }), "{err:?}");
    store.delete("orders/r").await.expect_err("nor delete");
    assert!(store.exists("orders/r").await.expect("exists"));
    drop(store);
    assert_eq!(before, h.schema_objects().await, "the schema changed");
}

/// A read-only open reads tables a newer build migrated further, refuses
/// (naming the migration) tables an older build left, without migrating
/// them, and refuses an edited migration as a writer does.
pub async fn read_only_refuses_an_older_schema_and_reads_a_newer_one<H: SqlHarness>(h: &H) {
    drop(open(h).await);
    let latest = h
        .scalar("SELECT max(version) FROM {s}._fluxio_migrations")
        .await;
    let options = Options::read_only();
    let read_only = || h.open(&options);

    // a newer build added a migration: still read
    h.execute(
        "INSERT INTO {s}._fluxio_migrations \
           (table_name, version, description, checksum, installed_on) \
         SELECT table_name, 9999, 'future', checksum, installed_on \
         FROM {s}._fluxio_migrations WHERE version = 1",
    )
    .await;
    drop(read_only().await.expect("a newer schema is read"));

    // an older build's tables: refused, named
    h.execute(&format!(
        "DELETE FROM {{s}}._fluxio_migrations WHERE version = {latest}"
    ))
    .await;
    let err = read_only().await.expect_err("older");
    assert_eq!(
        H::refusal(&err),
        Refusal::SchemaOutdated {
            version: latest,
            table: TABLE.to_owned()
        }
    );
    assert_eq!(
        h.scalar(&format!(
            "SELECT count(*) FROM {{s}}._fluxio_migrations WHERE version = {latest}"
        ))
        .await,
        0,
        "the read-only open migrated"
    );

    // an edited migration: refused as a writer refuses it
    let garbage = h.blob(&[0]);
    h.execute(&format!(
        "UPDATE {{s}}._fluxio_migrations SET checksum = {garbage} WHERE version = 1"
    ))
    .await;
    let err = read_only().await.expect_err("changed");
    assert_eq!(
        H::refusal(&err),
        Refusal::MigrationChanged {
            version: 1,
            table: TABLE.to_owned()
        }
    );
}
