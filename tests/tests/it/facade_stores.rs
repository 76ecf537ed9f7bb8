//! Every public type of the store crates is reachable from the facade, so a
//! user of `fluxio` (features `redis`, `postgres`, `sqlite`, `mysql`) can name the
//! builders, the error types to downcast to, and the settings enums.

use std::time::Duration;

#[test]
fn store_types_are_named_through_the_facade() {
    // Builders and their settings, without connecting.
    let redis: fluxio::RedisStoreBuilder = fluxio::RedisStore::builder("redis://127.0.0.1:6379")
        .completed_retention(Some(Duration::from_secs(60)))
        .key_prefix("facade");
    assert!(format!("{redis:?}").contains("facade"));
    let postgres: fluxio::PostgresStoreBuilder =
        fluxio::PostgresStore::builder("postgres://127.0.0.1/test").schema("facade");
    assert!(format!("{postgres:?}").contains("facade"));
    let sqlite: fluxio::SqliteStoreBuilder =
        fluxio::SqliteStore::builder("facade.db").synchronous(fluxio::Synchronous::Normal);
    assert!(format!("{sqlite:?}").contains("Normal"));
    let mysql: fluxio::MySqlStoreBuilder =
        fluxio::MySqlStore::builder("mysql://root:pw@127.0.0.1/test").database("facade");
    assert!(format!("{mysql:?}").contains("facade"));
    assert!(!format!("{mysql:?}").contains("pw"), "{mysql:?}");

    // The error types a `fluxio::Error::Store` source is downcast to.
    let err = fluxio::Error::store(
        "postgres",
        fluxio::PostgresStoreError::Timeout {
            operation: "save",
            timeout: Duration::from_secs(1),
        },
    );
    let fluxio::Error::Store {
        source, backend, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(
        source
            .downcast_ref::<fluxio::PostgresStoreError>()
            .is_some()
    );
    assert!(source.downcast_ref::<fluxio::SqliteStoreError>().is_none());
    assert!(source.downcast_ref::<fluxio::RedisStoreError>().is_none());
    // one type for both server stores: the backend tells them apart
    assert!(source.downcast_ref::<fluxio::MySqlStoreError>().is_some());
    assert_eq!(*backend, "postgres");
}

/// The facade keeps what a user needs in `store` and what a store's author
/// needs in `store::backend`; the pipeline's limits are in `limits`.
#[test]
fn backend_helpers_are_apart_and_the_limits_reachable() {
    use fluxio::store::backend::{Begin, MAGIC, check_run_id};

    let _named = Begin::Replace;
    assert_eq!(MAGIC.len(), 4);
    assert!(check_run_id("").is_err());
    assert_eq!(
        fluxio::limits::MAX_RUN_ID_LEN,
        fluxio::store::MAX_RUN_ID_LEN
    );
    let at_limit = "p".repeat(fluxio::limits::MAX_PIPELINE_NAME_LEN);
    assert!(fluxio::pipeline![].name(at_limit.as_str()).build().is_ok());
    let past = format!("{at_limit}p");
    assert!(fluxio::pipeline![].name(past.as_str()).build().is_err());
}
