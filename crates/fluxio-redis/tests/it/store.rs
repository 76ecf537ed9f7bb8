//! RedisStore against a real Redis: the key layout, expiry, password
//! redaction and the builder's validation.

use std::time::Duration;

use fluxio_core::Context;
use fluxio_core::store::{Checkpoint, CheckpointStore, conformance};
use fluxio_redis::{RedisStore, RedisStoreBuilder};
use fluxio_test_support as support;

use crate::{pttl, redis_source};

/// The tests' checkpoint, with a 100-byte value in its context.
fn checkpoint(run_id: &str, ip: u32) -> Checkpoint {
    let mut cp = conformance::checkpoint(run_id, ip);
    cp.context = Context::new()
        .set("payload", "x".repeat(100))
        .expect("a string serializes")
        .snapshot();
    cp
}

async fn get(raw: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET")
        .arg(key)
        .query_async(raw)
        .await
        .expect("GET")
}

async fn hget(
    raw: &mut redis::aio::MultiplexedConnection,
    key: &str,
    field: &str,
) -> Option<Vec<u8>> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(raw)
        .await
        .expect("HGET")
}

/// The field names of the hash `key`, sorted.
async fn fields(raw: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<String> {
    let mut names: Vec<String> = redis::cmd("HKEYS")
        .arg(key)
        .query_async(raw)
        .await
        .expect("HKEYS");
    names.sort();
    names
}

/// `Display` and `Debug` of `err` and of every error in its source chain.
fn every_rendering(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut next = Some(err);
    while let Some(e) = next {
        out.push_str(&format!("{e}\n{e:?}\n"));
        next = e.source();
    }
    out
}

#[tokio::test]
async fn key_layout_values_and_expiry() {
    let retention = Some(Duration::from_secs(60));
    let settings = |b: RedisStoreBuilder| b.completed_retention(retention);
    let Some((mut raw, prefix, store)) = crate::open("layout", settings).await else {
        return;
    };
    let run = "order:42/ü x";
    let (ck, lk, ek) = (
        format!("{prefix}:{run}"),
        format!("{prefix}.lease:{run}"),
        format!("{prefix}.epoch:{run}"),
    );
    assert_eq!(
        (
            store.checkpoint_key(run),
            store.lease_key(run),
            store.epoch_key(run)
        ),
        (ck.clone(), lk.clone(), ek.clone())
    );

    let (cp, runs, running) = assert_saved_layout(&mut raw, &prefix, &store, run).await;
    let lease = assert_lease_layout(&mut raw, &store, run).await;
    // the nonce of the acquire stays with the lease (no second round trip)
    let nk = store.nonce_key(run);
    let ttl = pttl(&mut raw, &nk).await;
    assert!(ttl > 0 && ttl <= 5_000, "nonce PTTL {ttl}");
    let mut all = vec![ck.clone(), ek.clone(), lk.clone(), nk, runs, running];
    all.sort();
    assert_eq!(support::redis::keys(&mut raw, &prefix).await, all);

    // a fenced save of a delta appends its entry_bytes() under its number
    let mut cp2 = checkpoint(run, 2);
    let before = cp.context.clone();
    cp2.context = Context::from(before.clone())
        .set("n", 2)
        .expect("set")
        .snapshot();
    cp2.seq = 1;
    cp2.change = fluxio_core::store::Change::between(&before, &cp2.context);
    store
        .save_fenced(cp2.clone(), &lease)
        .await
        .expect("save_fenced");
    assert_eq!(
        hget(&mut raw, &ck, "1").await,
        Some(cp2.entry_bytes().expect("encode"))
    );
    assert_eq!(hget(&mut raw, &ck, "last").await, Some(b"1".to_vec()));
    assert_eq!(
        hget(&mut raw, &ck, "0").await,
        Some(cp.entry_bytes().expect("encode")),
        "the base is left as it was"
    );
    assert_eq!(store.load(run).await.expect("load"), Some(cp2));
    assert_eq!(
        pttl(&mut raw, &ek).await,
        -1,
        "the epoch of a run that does not expire does not expire"
    );

    // release drops the lease and keeps the counter; delete drops the
    // checkpoint, and the run leaves the index
    store.release_lease(lease).await.expect("release");
    store.delete(run).await.expect("delete");
    assert_eq!(support::redis::keys(&mut raw, &prefix).await, vec![ek]);
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// A plain save of a running run: `{prefix}:{run_id}` is the journal hash
/// (a field per checkpoint number holding its entry_bytes(), the
/// journal's meta fields and the run's summary) with no expiry, and the
/// run index names it: `.runs` and `.runs.running`, scored 0. Returns the
/// checkpoint saved, and the two index keys.
async fn assert_saved_layout(
    raw: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    store: &RedisStore,
    run: &str,
) -> (Checkpoint, String, String) {
    let ck = store.checkpoint_key(run);
    let cp = checkpoint(run, 1);
    store.save(cp.clone()).await.expect("save");
    assert_eq!(
        hget(raw, &ck, "0").await,
        Some(cp.entry_bytes().expect("encode"))
    );
    assert_eq!(
        fields(raw, &ck).await,
        [
            "0", "attempt", "born", "created", "exp", "first", "fulls", "last", "pipeline",
            "status", "step", "updated", "ver", "version"
        ]
    );
    let (attempt, created, updated) = (
        cp.attempt.to_string(),
        cp.created_at_ms.to_string(),
        cp.updated_at_ms.to_string(),
    );
    for (field, value) in [
        ("first", "0"),
        ("last", "0"),
        ("fulls", "0"),
        ("status", "running"),
        ("step", "step-1"),
        ("attempt", &attempt),
        ("version", cp.version.as_str()),
        ("created", &created),
        ("updated", &updated),
        ("pipeline", ""),
    ] {
        assert_eq!(
            hget(raw, &ck, field).await,
            Some(value.as_bytes().to_vec()),
            "{field}"
        );
    }
    assert_eq!(pttl(raw, &ck).await, -1, "no expiry");
    let (runs, running) = (format!("{prefix}.runs"), format!("{prefix}.runs.running"));
    assert_eq!(store.runs_key(), runs);
    assert_eq!(
        store
            .runs_in_status_key(fluxio_core::RunStatus::Running)
            .expect("indexed"),
        running
    );
    for set in [&runs, &running] {
        let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(set)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(raw)
            .await
            .expect("ZRANGE");
        assert_eq!(members, [(run.to_owned(), 0.0)], "{set}");
    }
    let mut all = vec![ck.clone(), runs.clone(), running.clone()];
    all.sort();
    assert_eq!(support::redis::keys(raw, prefix).await, all);

    (cp, runs, running)
}

/// A lease of a stored run: its token at `.lease:` with the lease's ttl,
/// the counter at `.epoch:` with no expiry (the run has none); the epoch
/// of a run not stored expires.
async fn assert_lease_layout(
    raw: &mut redis::aio::MultiplexedConnection,
    store: &RedisStore,
    run: &str,
) -> fluxio_core::store::Lease {
    let (lk, ek) = (store.lease_key(run), store.epoch_key(run));
    let lease = store
        .acquire_lease(run, Duration::from_secs(5))
        .await
        .expect("acquire");
    let token = lease.token().to_string().into_bytes();
    assert_eq!(get(raw, &lk).await, Some(token.clone()));
    assert_eq!(get(raw, &ek).await, Some(token));
    let ttl = pttl(raw, &lk).await;
    assert!(ttl > 0 && ttl <= 5_000, "lease PTTL {ttl}");
    assert_eq!(
        pttl(raw, &ek).await,
        -1,
        "a new epoch of a run stored with no expiry has none either"
    );
    let other = "not-saved";
    let other_lease = store
        .acquire_lease(other, Duration::from_secs(5))
        .await
        .expect("acquire");
    let ttl = pttl(raw, &store.epoch_key(other)).await;
    assert!(
        ttl > 5_000 && ttl <= 86_400_000,
        "a new epoch of a run not stored: PTTL {ttl}"
    );
    store.release_lease(other_lease).await.expect("release");
    let _: () = redis::cmd("DEL")
        .arg(store.epoch_key(other))
        .query_async(raw)
        .await
        .expect("DEL");
    lease
}

/// Rule 20's retention on Redis: only a completed run expires, after the
/// completed retention; running, failed and cancelled runs (and their
/// epochs) are kept until deleted, however long.
#[tokio::test]
async fn rule20_only_completed_runs_expire_failed_and_cancelled_ones_are_kept() {
    let retention = Some(Duration::from_millis(2_000));
    let settings = |b: RedisStoreBuilder| b.completed_retention(retention);
    let Some((mut raw, prefix, store)) = crate::open("expiry", settings).await else {
        return;
    };
    assert_eq!(
        store.completed_retention(),
        Some(Duration::from_millis(2_000))
    );
    let key = store.checkpoint_key("r");
    let lease = store
        .acquire_lease("r", Duration::from_secs(30))
        .await
        .expect("acquire");
    store.save(checkpoint("r", 1)).await.expect("save");
    assert_eq!(pttl(&mut raw, &key).await, -1, "running: no expiry");
    store
        .save(checkpoint("r", 2).completed())
        .await
        .expect("save");
    let ttl = pttl(&mut raw, &key).await;
    assert!(ttl > 1_500 && ttl <= 2_000, "completed: PTTL {ttl}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    store
        .save_fenced(checkpoint("r", 3).completed(), &lease)
        .await
        .expect("save_fenced");
    assert!(
        pttl(&mut raw, &key).await > 1_500,
        "a completed save_fenced resets the expiry"
    );
    let epoch = pttl(&mut raw, &store.epoch_key("r")).await;
    assert!(epoch >= 2_000, "the epoch outlives the checkpoint: {epoch}");
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    assert!(
        !store.exists("r").await.expect("exists"),
        "a completed run expires after the completed retention"
    );

    // failed and cancelled runs stay, with their epochs, past the retention
    store
        .save(checkpoint("failed", 1).failed("boom"))
        .await
        .expect("save");
    store.save(checkpoint("cancel", 1)).await.expect("save");
    store.cancel("cancel").await.expect("cancel");
    for run in ["failed", "cancel"] {
        assert_eq!(
            pttl(&mut raw, &store.checkpoint_key(run)).await,
            -1,
            "{run}"
        );
    }
    assert_eq!(pttl(&mut raw, &store.cancelled_key("cancel")).await, -1);
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    for run in ["failed", "cancel"] {
        assert!(store.exists(run).await.expect("exists"), "{run} is kept");
    }
    // a run that completes after it failed gets the completed expiry again
    store
        .save(checkpoint("failed", 2).completed())
        .await
        .expect("save");
    assert!(pttl(&mut raw, &store.checkpoint_key("failed")).await > 0);

    // `None` keeps completed runs too
    let forever = crate::store_in(&prefix, |b| b.completed_retention(None)).await;
    forever
        .save(checkpoint("kept", 1).completed())
        .await
        .expect("save");
    assert_eq!(pttl(&mut raw, &forever.checkpoint_key("kept")).await, -1);
    // a delete leaves the epoch with an expiry, not forever
    forever.delete("kept").await.expect("delete");
    support::redis::cleanup(&mut raw, &prefix).await;
}

#[tokio::test]
async fn the_password_never_shows() {
    let Some((mut raw, rest)) = server_without_credentials().await else {
        return;
    };
    let user = format!("fx_redact_{}", std::process::id());
    let password = "hunter2-Very-Secret";
    let with_password = format!("redis://{user}:{password}@{rest}");

    // Debug of the settings
    let builder = RedisStore::builder(&with_password);
    let shown = format!("{builder:?}");
    assert!(!shown.contains(password), "{shown}");
    assert!(shown.contains(&format!("{user}:***@")), "{shown}");

    // a failed connect (the user does not exist yet: AUTH fails)
    let err = builder.clone().connect().await.expect_err("no such user");
    let shown = every_rendering(&err);
    assert!(!shown.contains(password), "{shown}");
    assert!(shown.contains(&format!("{user}:***@")), "{shown}");
    assert_eq!(redis_source(&err).operation(), "connect");

    // a user that may not SET: connect works, save fails on the server
    let user_in_task = user.clone();
    let result = async move {
        let user = user_in_task;
        let store = builder.connect().await.expect("connect as the ACL user");
        let shown = format!("{store:?} {}", store.url());
        assert!(!shown.contains(password), "{shown}");
        assert!(shown.contains(&format!("{user}:***@")), "{shown}");
        let err = store
            .save(checkpoint("r", 1))
            .await
            .expect_err("HSET is denied");
        let source = redis_source(&err);
        assert_eq!(source.operation(), "save");
        assert!(
            source.redis_error().is_some(),
            "the redis error is kept as the source"
        );
        let shown = every_rendering(&err);
        assert!(!shown.contains(password), "{shown}");
        // `save` is a script: the server refuses the `HSET` inside it
        assert!(
            shown.contains("NOPERM")
                || shown.contains("permission")
                || shown.contains("can't run this command"),
            "{shown}"
        );
        assert!(shown.contains(&format!("{user}:***@")), "{shown}");
    };
    let grant = format!(">{password}");
    let rules = [grant.as_str(), "~*", "+@all", "-hset"];
    as_acl_user(&mut raw, &user, &rules, result).await;
}

/// A connection to the test server and its address (`host:port/db`), when
/// its URL carries no credentials of its own (the tests add theirs).
async fn server_without_credentials() -> Option<(redis::aio::MultiplexedConnection, String)> {
    let raw = support::redis::raw().await?;
    let base = support::redis::url();
    let Some(rest) = base.strip_prefix("redis://").filter(|r| !r.contains('@')) else {
        support::skip(&"FLUXIO_REDIS_URL has credentials of its own");
        return None;
    };
    Some((raw, rest.to_owned()))
}

/// Runs `body` while the ACL user `user` exists with `rules` (after `on`),
/// and deletes the user afterwards, even when `body` panics.
async fn as_acl_user(
    raw: &mut redis::aio::MultiplexedConnection,
    user: &str,
    rules: &[&str],
    body: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg("on")
        .arg(rules)
        .query_async(raw)
        .await
        .expect("ACL SETUSER");
    let outcome = tokio::spawn(body).await;
    let _: () = redis::cmd("ACL")
        .arg(&["DELUSER", user])
        .query_async(raw)
        .await
        .expect("ACL DELUSER");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
}

/// AUTH refused by the real server for a user that exists, with wrong
/// passwords of one to three characters and ones that are words of the
/// client's message about it: the message comes back whole, the user's name is shown,
/// and the password never is.
#[tokio::test]
async fn short_wrong_passwords_leave_the_servers_answer_whole() {
    let Some((mut raw, rest)) = server_without_credentials().await else {
        return;
    };
    let user = format!("fx_short_{}", std::process::id());
    let user_in_task = user.clone();
    let result = async move {
        let user = user_in_task;
        for password in ["e", "1", "127", "s", "ab", "Password", "failed", "auth"] {
            let url = format!("redis://{user}:{password}@{rest}");
            let err = RedisStore::connect(&url).await.expect_err("WRONGPASS");
            let shown = every_rendering(&err);
            assert!(
                shown.contains("Password authentication failed - AuthenticationFailed"),
                "password {password:?}: {shown}"
            );
            assert!(
                shown.contains(&format!("redis://{user}:***@{rest}")),
                "password {password:?}: {shown}"
            );
            assert!(
                !shown.contains(&format!(":{password}@")),
                "password {password:?}: {shown}"
            );
        }
    };
    let rules = [">the-right-password", "~*", "+@all"];
    as_acl_user(&mut raw, &user, &rules, result).await;
}

#[tokio::test]
async fn invalid_settings_are_named_before_connecting() {
    // an address where nothing listens: validation comes first
    let url = "redis://127.0.0.1:1";
    let cases = [
        (RedisStore::builder(url).key_prefix(""), "key_prefix"),
        (
            RedisStore::builder(url).completed_retention(Some(Duration::ZERO)),
            "completed_retention",
        ),
        (
            RedisStore::builder(url).completed_retention(Some(Duration::from_micros(10))),
            "completed_retention",
        ),
        (
            RedisStore::builder(url).completed_retention(Some(Duration::MAX)),
            "completed_retention",
        ),
        (
            RedisStore::builder(url).command_timeout(Duration::ZERO),
            "command_timeout",
        ),
    ];
    for (builder, setting) in cases {
        let shown = format!("{builder:?}");
        let err = builder.connect().await.expect_err("invalid");
        let source = redis_source(&err);
        assert_eq!(source.setting_name(), Some(setting), "{shown}");
        let message = err.to_string();
        assert!(message.contains(&format!("`{setting}`")), "{message}");
    }
    let err = RedisStore::connect("http://127.0.0.1:6379")
        .await
        .expect_err("not a redis URL");
    assert_eq!(redis_source(&err).operation(), "connect");
}

#[tokio::test]
async fn unreachable_server_is_a_store_error() {
    let started = std::time::Instant::now();
    let err = RedisStore::builder("redis://127.0.0.1:1")
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect_err("nothing listens on port 1");
    let source = redis_source(&err);
    assert_eq!(source.operation(), "connect");
    assert!(
        !source.kind().is_timeout(),
        "the real error, not a timeout: {err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_command_timeout_past_the_clocks_range_does_not_panic() {
    if support::redis::raw().await.is_none() {
        return;
    }
    let store = RedisStore::builder(support::redis::url())
        .key_prefix(support::namespace("huge_timeout"))
        .command_timeout(Duration::MAX)
        .connect()
        .await
        .expect("connect");
    store.save(checkpoint("r", 1)).await.expect("save");
    assert!(store.exists("r").await.expect("exists"));
    store.delete("r").await.expect("delete");
}
