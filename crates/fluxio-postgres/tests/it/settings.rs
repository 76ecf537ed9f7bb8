//! Settings: identifier validation, password redaction, timeouts.

use std::error::Error as _;
use std::time::{Duration, Instant};

use fluxio_core::Error;
use fluxio_core::store::CheckpointStore;
use fluxio_core::store::conformance::checkpoint;
use fluxio_postgres::PostgresStore;
use fluxio_test_support as support;
use sqlx::Connection;
use support::error::timed;
use tokio::net::TcpListener;

const SECRET: &str = "s3cr3t-pa55";

/// Display, Debug and every source of `err`, in one string.
fn everything_about(err: &Error) -> String {
    let mut out = format!("{err}\n{err:?}");
    let mut source = err.source();
    while let Some(s) = source {
        out.push_str(&format!("\n{s}\n{s:?}"));
        source = s.source();
    }
    out
}

fn invalid_setting(err: &Error) -> (&'static str, String) {
    support::sql::invalid_setting::<crate::sql::Types>(err)
}

#[tokio::test]
async fn identifiers_are_validated_naming_the_setting_and_the_value() {
    for bad in &support::sql::bad_identifiers(&["Public"]) {
        let bad = bad.as_str();
        for setting in ["schema", "table"] {
            let builder = PostgresStore::builder(support::postgres::url());
            let builder = match setting {
                "schema" => builder.schema(bad),
                _ => builder.table(bad),
            };
            // Validation happens before any I/O: connect fails the same way.
            let err = builder.connect().await.expect_err(bad);
            assert_eq!(invalid_setting(&err), (setting, bad.to_owned()));
            let message = err.to_string();
            assert!(
                message.contains(&format!("invalid {setting} {bad:?}")),
                "{message}"
            );
        }
    }
    // The lease table's name must fit in 63 characters too.
    let err = PostgresStore::builder("postgres://h/db")
        .table("t".repeat(57))
        .connect_lazy()
        .expect_err("57 characters");
    assert_eq!(invalid_setting(&err).0, "table");
    let err = PostgresStore::builder("postgres://h/db")
        .schema("pg_catalog")
        .connect_lazy()
        .expect_err("reserved");
    assert_eq!(invalid_setting(&err).0, "schema");
    for ok in ["public", "_a", "a_1", &"a".repeat(63)] {
        PostgresStore::builder("postgres://h/db")
            .schema(ok)
            .connect_lazy()
            .expect(ok);
    }
}

#[tokio::test]
async fn system_schemas_are_refused_by_name() {
    for reserved in [
        "information_schema",
        "pg_catalog",
        "pg_toast",
        "pg_temp",
        "pg_temp_3",
        "pg_anything",
    ] {
        let err = PostgresStore::builder("postgres://h/db")
            .schema(reserved)
            .connect_lazy()
            .expect_err(reserved);
        assert_eq!(invalid_setting(&err), ("schema", reserved.to_owned()));
        let message = err.to_string();
        assert!(
            message.contains(reserved) && message.contains("reserved"),
            "{message}"
        );
    }
    for ok in ["information", "pgx", "pg", "my_information_schema"] {
        PostgresStore::builder("postgres://h/db")
            .schema(ok)
            .connect_lazy()
            .expect(ok);
    }
}

#[test]
fn connect_lazy_outside_a_runtime_is_an_error_not_a_panic() {
    let err = PostgresStore::builder("postgres://h/db")
        .connect_lazy()
        .expect_err("sqlx's pool needs a tokio runtime");
    assert!(
        matches!(&err, Error::NoRuntime { operation } if operation.contains("connect_lazy")),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_password_never_shows() {
    let url = format!("postgres://postgres:{SECRET}@127.0.0.1:5432/test?password={SECRET}");

    let builder = PostgresStore::builder(url.as_str()).schema("some_schema");
    let shown = format!("{builder:?}");
    assert!(!shown.contains(SECRET) && shown.contains("***"), "{shown}");

    let store = PostgresStore::builder(url.as_str())
        .connect_lazy()
        .expect("lazy");
    let shown = format!("{store:?}");
    assert!(!shown.contains(SECRET) && shown.contains("***"), "{shown}");

    let err = PostgresStore::builder(url.as_str())
        .schema("a;b")
        .connect()
        .await
        .expect_err("invalid schema");
    assert!(!everything_about(&err).contains(SECRET));

    let bad_port = format!("postgres://postgres:{SECRET}@127.0.0.1:notaport/test");
    let err = PostgresStore::connect(&bad_port)
        .await
        .expect_err("invalid URL");
    assert!(matches!(err, Error::Store { .. }));
    assert!(!everything_about(&err).contains(SECRET), "{err:?}");

    let refused = format!("postgres://postgres:{SECRET}@127.0.0.1:1/test");
    let err = PostgresStore::builder(refused)
        .timeout(Duration::from_millis(300))
        .connect()
        .await
        .expect_err("nothing listens on port 1");
    assert!(matches!(err, Error::Store { .. }));
    assert!(!everything_about(&err).contains(SECRET), "{err:?}");

    // The real server (trust auth accepts any password).
    if support::postgres::server().await.is_some() {
        let schema = support::namespace("redact");
        let base = support::postgres::url();
        let with_password = base.replacen(
            "postgres://postgres@",
            &format!("postgres://postgres:{SECRET}@"),
            1,
        );
        if with_password != base {
            let store = PostgresStore::builder(with_password)
                .schema(&schema)
                .connect()
                .await
                .expect("connect with a password");
            let shown = format!("{store:?}");
            assert!(!shown.contains(SECRET), "{shown}");
            support::postgres::drop_schema(&base, &schema).await;
        }
    }
}

/// A TCP server that accepts connections and never answers.
async fn silent_server() -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket); // keep it open, say nothing
        }
    });
    (format!("postgres://postgres:{SECRET}@{addr}/test"), task)
}

/// Checks that `r`, timed, is a store error that came within `timeout`
/// (and a margin), showing no password.
fn assert_store_error_in_time(
    what: &str,
    (r, took): (Result<(), Error>, Duration),
    timeout: Duration,
) {
    let err = r.expect_err(what);
    assert!(
        matches!(
            err,
            Error::Store {
                backend: "postgres",
                ..
            }
        ),
        "{what}: {err:?}"
    );
    assert!(!everything_about(&err).contains(SECRET), "{what}: {err:?}");
    assert!(
        took < timeout + Duration::from_millis(700),
        "{what} took {took:?} with a timeout of {timeout:?}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_with_a_store_error() {
    let (url, server) = silent_server().await;
    let timeout = Duration::from_millis(500);

    let connect = PostgresStore::builder(url.as_str())
        .timeout(timeout)
        .connect();
    assert_store_error_in_time("connect", timed(connect).await, timeout);

    let store = PostgresStore::builder(url.as_str())
        .timeout(timeout)
        .connect_lazy()
        .expect("lazy");
    let cp = checkpoint("r", 0);
    assert_store_error_in_time("load", timed(store.load("r")).await, timeout);
    assert_store_error_in_time("save", timed(store.save(cp)).await, timeout);
    let acquire = store.acquire_lease("r", Duration::from_secs(30));
    assert_store_error_in_time("acquire_lease", timed(acquire).await, timeout);
    let purge = store.purge_expired();
    assert_store_error_in_time("purge_expired", timed(purge).await, timeout);
    server.abort();
}

#[tokio::test]
async fn a_statement_that_blocks_times_out_and_the_store_recovers() {
    support::postgres::in_schema("blocked", |url, schema| async move {
        // the schema's migrations run first, under the default timeout: on a
        // busy machine three of them can take longer than the 500 ms below
        PostgresStore::builder(url.as_str())
            .schema(&schema)
            .connect()
            .await
            .expect("migrate");
        let timeout = Duration::from_millis(500);
        let store = PostgresStore::builder(url.as_str())
            .schema(&schema)
            .timeout(timeout)
            .max_connections(2)
            .connect()
            .await
            .expect("connect");
        let lease = store
            .acquire_lease("r", fluxio_core::store::MIN_LEASE_TTL)
            .await
            .expect("acquire");
        drop(lease);
        tokio::time::sleep(Duration::from_millis(20)).await;

        // Another session locks the lease row and sits on it.
        let mut other = sqlx::PgConnection::connect(&url).await.expect("connect");
        let mut tx = other.begin().await.expect("begin");
        sqlx::query(&format!(
            "SELECT * FROM \"{schema}\".fluxio_checkpoints_leases WHERE run_id = 'r' FOR UPDATE"
        ))
        .execute(&mut *tx)
        .await
        .expect("lock the row");

        let started = Instant::now();
        let r = store
            .acquire_lease("r", Duration::from_secs(30))
            .await
            .map(drop);
        let took = started.elapsed();
        let err = r.expect_err("blocked behind the lock");
        assert!(matches!(err, Error::Store { .. }), "{err:?}");
        assert!(took < timeout + Duration::from_millis(700), "took {took:?}");

        // The client gave up after `timeout`; the server cancels the blocked
        // statement itself when its `statement_timeout` (the same `timeout`)
        // fires. Release the row only after that: released earlier, the
        // abandoned acquire could still commit on the server and hold a lease
        // nobody owns until its ttl ends (safe, but not what this test checks).
        tokio::time::sleep(timeout).await;
        tx.rollback().await.expect("rollback");
        // The server cancelled the statement too (statement_timeout); the pool
        // is usable again.
        let lease = store
            .acquire_lease("r", Duration::from_secs(30))
            .await
            .expect("acquire after the lock is gone");
        store.release_lease(lease).await.expect("release");
        let _ = other.close().await;
    })
    .await;
}

/// The real server's refusals, on URLs whose password is one or a few
/// characters, or a word of the server's message: the server's words come
/// back whole, the role's name included (a user name is not a secret), and
/// the password never shows. (The test server trusts 127.0.0.1, so it
/// accepts any password of a role that exists: its refusals here are of a
/// role or a database that does not exist.)
#[tokio::test]
async fn short_passwords_leave_the_servers_messages_whole() {
    let Some(base) = support::postgres::server().await else {
        return;
    };
    let Some(host) = base
        .strip_prefix("postgres://")
        .and_then(|rest| rest.split_once('@'))
        .map(|(_, host)| host.split_once('/').map_or(host, |(h, _)| h).to_owned())
    else {
        support::skip(&"FLUXIO_POSTGRES_URL is not postgres://user@host/db");
        return;
    };
    let role = "fx_no_such_role";
    let database = "fx_no_such_database";
    for password in ["e", "1", "127", "s", "does", "exist", "role"] {
        let cases = [
            (
                format!("postgres://{role}:{password}@{host}/test"),
                format!("role \"{role}\" does not exist"),
            ),
            (
                format!("postgres://postgres:{password}@{host}/{database}"),
                format!("database \"{database}\" does not exist"),
            ),
        ];
        for (url, says) in cases {
            let err = PostgresStore::builder(url.as_str())
                .timeout(Duration::from_secs(5))
                .connect()
                .await
                .expect_err("the server refuses");
            let shown = everything_about(&err);
            assert!(shown.contains(&says), "password {password:?}: {shown}");
            let redacted = url.replacen(&format!(":{password}@"), ":***@", 1);
            assert!(shown.contains(&redacted), "password {password:?}: {shown}");
            assert!(
                !shown.contains(&format!(":{password}@")),
                "password {password:?}: {shown}"
            );
        }
    }
    // A role given without a password is shown as it is.
    let err = PostgresStore::builder(format!("postgres://{role}@{host}/test"))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect_err("no such role");
    let shown = everything_about(&err);
    assert!(
        shown.contains(&format!("role \"{role}\" does not exist"))
            && shown.contains(&format!("postgres://{role}@{host}/test")),
        "{shown}"
    );
}

/// A timeout longer than the server's `statement_timeout` can hold is
/// refused before anything is sent, naming `timeout`, as SQLite's
/// `busy_timeout` is; the longest one it holds builds.
#[tokio::test]
async fn a_timeout_past_statement_timeout_is_an_invalid_setting() {
    for timeout in [
        Duration::MAX,
        Duration::from_secs(30 * 24 * 60 * 60),
        fluxio_postgres::MAX_TIMEOUT + Duration::from_millis(1),
        Duration::ZERO,
    ] {
        let err = PostgresStore::builder(support::postgres::url())
            .timeout(timeout)
            .connect()
            .await
            .expect_err("out of range");
        assert_eq!(
            invalid_setting(&err),
            ("timeout", format!("{timeout:?}")),
            "{timeout:?}"
        );
        assert!(err.to_string().contains("i32::MAX milliseconds"), "{err}");
    }
    PostgresStore::builder("postgres://h/db")
        .timeout(fluxio_postgres::MAX_TIMEOUT)
        .connect_lazy()
        .expect("the longest statement_timeout");
}
