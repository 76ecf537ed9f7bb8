//! Runs that wait on Redis (contract rules 25-27), beyond the conformance
//! suite: the due-index and the mailbox kept by every write (on one server
//! and on the cluster, each key in its run's slot), wake times past the
//! range, a 16 MiB signal, the store's clock, the wake-ups (and their end
//! when the subscription's connection drops), and the round trips of a run
//! that sleeps.

use std::time::Duration;

use fluxio::{Context, StageResult, pipeline, stage};
use fluxio_core::recovery::RecoveryWorker;
use fluxio_core::store::conformance::{checkpoint, park, signal, waiting};
use fluxio_core::store::{
    Begin, Checkpoint, CheckpointStore, Decision, Delivery, DueFilter, MAX_SIGNAL_PAYLOAD,
    MAX_UNTIL_MS, Payload, Pending, RunEvent, RunEventKind, RunEvents, RunFilter, RunState, Signal,
    Take,
};
use fluxio_core::{Error, Outcome};
use fluxio_redis::RedisStore;
use fluxio_test_support as support;
use redis::aio::ConnectionLike;

const TTL: Duration = Duration::from_secs(30);

/// Run `id` of pipeline `pipeline` (none: a bare id), asleep until `until`.
fn asleep(pipeline: Option<&str>, id: &str, until: u64) -> Checkpoint {
    let cp = checkpoint(id, 2).parked(Pending::sleep(until));
    match pipeline {
        Some(p) => cp.in_pipeline(p),
        None => cp,
    }
}

/// What `take_signal` of run `key` answers under a lease of its own,
/// given back after.
async fn take_leased(store: &RedisStore, key: &str, take: &Take) -> fluxio_core::Result<Decision> {
    let lease = store.acquire_lease(key, TTL).await.expect("lease");
    let taken = store.take_signal(key, take, &lease).await;
    store.release_lease(lease).await.expect("release");
    taken
}

async fn command<T: redis::FromRedisValue>(raw: &mut impl ConnectionLike, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(raw).await.expect("a command")
}

/// The score of run `run` in pipeline `p`'s due-index, as Redis prints it.
async fn score(store: &RedisStore, raw: &mut impl ConnectionLike, run: &str) -> Option<String> {
    command(raw, &["ZSCORE", &store.due_key("p"), run]).await
}

async fn due(store: &RedisStore, before: u64) -> Vec<(String, u64)> {
    let runs = store
        .due_runs(&DueFilter::new(before).pipeline("p"))
        .await
        .expect("due_runs");
    runs.into_iter().map(|r| (r.key, r.due_ms)).collect()
}

/// The due-index, the summary's `waits` and `until` and the mailbox after
/// each write that changes them, on `store` (whose keys `raw` reads).
async fn the_due_index_and_the_mailbox_follow_every_write(
    store: &RedisStore,
    raw: &mut impl ConnectionLike,
) {
    // a wake time past the range: clamped, exactly, in the score
    park(store, asleep(Some("p"), "nap", u64::MAX)).await;
    let max = MAX_UNTIL_MS.to_string();
    assert_eq!(score(store, raw, "p/nap").await, Some(max.clone()));
    assert_eq!(
        due(store, u64::MAX).await,
        [("p/nap".to_owned(), MAX_UNTIL_MS)]
    );
    assert!(due(store, MAX_UNTIL_MS - 1).await.is_empty());
    let journal = store.checkpoint_key("p/nap");
    let fields: Vec<Option<String>> = command(raw, &["HMGET", &journal, "waits", "until"]).await;
    assert_eq!(fields, [Some(String::new()), Some(max)]);
    let sleeping = store
        .list_runs(&RunFilter::new().state(RunState::Sleeping))
        .await
        .expect("list");
    assert_eq!(sleeping.runs.len(), 1);
    assert_eq!(
        store
            .load("p/nap")
            .await
            .expect("load")
            .and_then(|cp| cp.pending.map(|p| *p)),
        Some(Pending::sleep(u64::MAX)),
        "the checkpoint keeps what it was given"
    );
    // cancelled: out of the due-index, and the pipeline out of `P.due`
    store.cancel("p/nap").await.expect("cancel");
    assert_eq!(score(store, raw, "p/nap").await, None);
    let fields: Vec<Option<String>> = command(raw, &["HMGET", &journal, "waits", "until"]).await;
    assert_eq!(fields, [None, None]);
    let pipelines = store.due_pipelines_key("p");
    let member: u8 = command(raw, &["SISMEMBER", &pipelines, "p"]).await;
    assert_eq!(member, 0);

    // waiting with no deadline: only a signal for one of its names wakes it
    park(store, waiting("w", &["ok", "no"], None)).await;
    assert_eq!(score(store, raw, "p/w").await, None);
    let waits: Option<String> =
        command(raw, &["HGET", &store.checkpoint_key("p/w"), "waits"]).await;
    assert_eq!(waits.as_deref(), Some("ok\nno"));
    store
        .send_signal("p/w", signal("other", true))
        .await
        .expect("kept");
    assert_eq!(score(store, raw, "p/w").await, None);
    store
        .send_signal("p/w", signal("no", true))
        .await
        .expect("sent");
    assert_eq!(score(store, raw, "p/w").await.as_deref(), Some("0"));
    assert_eq!(due(store, 0).await, [("p/w".to_owned(), 0)]);
    let member: u8 = command(raw, &["SISMEMBER", &pipelines, "p"]).await;
    assert_eq!(member, 1);
    // deleted: its mailbox and its due entry go with it
    store.delete("p/w").await.expect("delete");
    let left: u8 = command(raw, &["EXISTS", &store.mailbox_key("p/w")]).await;
    assert_eq!((left, score(store, raw, "p/w").await), (0, None));
    let member: u8 = command(raw, &["SISMEMBER", &pipelines, "p"]).await;
    assert_eq!(member, 0, "the last due run of the pipeline went");

    // a signal sent before the run parks makes it due at once when it does
    store
        .save(checkpoint("early", 1).in_pipeline("p"))
        .await
        .expect("save");
    store
        .send_signal("p/early", signal("ok", true))
        .await
        .expect("sent");
    assert_eq!(
        score(store, raw, "p/early").await,
        None,
        "a running run is not due"
    );
    let mut parked = waiting("early", &["ok"], Some(MAX_UNTIL_MS));
    parked.seq = 1;
    park(store, parked).await;
    assert_eq!(score(store, raw, "p/early").await.as_deref(), Some("0"));
    // a fresh run under the key: none of the old run's signals
    let begun = store
        .begin_run(checkpoint("early", 1).in_pipeline("p"), TTL, Begin::Replace)
        .await
        .expect("begins");
    assert!(store.signals("p/early").await.expect("signals").is_empty());
    assert_eq!(score(store, raw, "p/early").await, None);

    // the mailbox of a completed run expires with it
    store
        .send_signal("p/early", signal("x", true))
        .await
        .expect("sent");
    let mut done = checkpoint("early", 3).in_pipeline("p").completed();
    done.seq = 1;
    store
        .finish_run(done, begun.lease, false)
        .await
        .expect("completes");
    let ttl: i64 = command(raw, &["PTTL", &store.mailbox_key("p/early")]).await;
    assert!(ttl > 0, "the mailbox expires with its run: {ttl}");

    // a plain save writes the checkpoint's mailbox, in order
    let mut copied = checkpoint("copied", 1).in_pipeline("p");
    copied.signals = vec![signal("b", true), Signal::closed("a", 5)];
    store.save(copied.clone()).await.expect("save");
    assert_eq!(
        store.signals("p/copied").await.expect("signals"),
        copied.signals
    );
    copied.signals.clear();
    store.save(copied).await.expect("save");
    assert!(store.signals("p/copied").await.expect("signals").is_empty());
}

/// Every pipeline's due runs, earliest first, when none is named; a held
/// run is left out; the limit holds.
async fn every_pipelines_due_runs(store: &RedisStore) {
    let runs = [
        (Some("p"), "a", 30),
        (Some("q"), "b", 10),
        (None, "bare", 20),
        (Some("payments"), "c", 40),
    ];
    for (pipeline, id, at) in runs {
        park(store, asleep(pipeline, id, 1_800_000_000_000 + at)).await;
    }
    let keys = |runs: Vec<fluxio_core::store::DueRun>| -> Vec<String> {
        runs.into_iter().map(|r| r.key).collect()
    };
    let all = store
        .due_runs(&DueFilter::new(u64::MAX))
        .await
        .expect("due");
    assert_eq!(
        all.iter()
            .map(|r| (r.pipeline.as_str(), r.run_id.as_str()))
            .collect::<Vec<_>>(),
        [("q", "b"), ("", "bare"), ("p", "a"), ("payments", "c")]
    );
    let held = store.acquire_lease("bare", TTL).await.expect("lease");
    let filter = DueFilter::new(u64::MAX).limit(2);
    assert_eq!(
        keys(store.due_runs(&filter).await.expect("due")),
        ["q/b", "p/a"]
    );
    store.release_lease(held).await.expect("release");
    let some = DueFilter::new(u64::MAX)
        .pipeline("payments")
        .pipeline("")
        .pipeline("a/b");
    assert_eq!(
        keys(store.due_runs(&some).await.expect("due")),
        ["bare", "payments/c"]
    );
    let zero = store.due_runs(&DueFilter::new(u64::MAX).limit(0)).await;
    assert!(
        matches!(zero, Err(Error::InvalidSetting { .. })),
        "{zero:?}"
    );
}

/// The wake-ups of `store`: a park, a signal to a waiting run, a
/// completion and a cancel, each told.
async fn wakeups_are_told(store: &RedisStore) {
    let mut events = store.watch().await.expect("watch").expect("wake-ups");
    park(store, asleep(Some("p"), "told", 1_900_000_000_000)).await;
    expect(&mut events, "p/told", RunEventKind::Due).await;
    park(store, waiting("sig", &["ok"], None)).await;
    expect(&mut events, "p/sig", RunEventKind::Due).await;
    store
        .send_signal("p/sig", signal("ok", true))
        .await
        .expect("sent");
    expect(&mut events, "p/sig", RunEventKind::Due).await;
    let lease = store.acquire_lease("p/told", TTL).await.expect("lease");
    let mut done = checkpoint("told", 3).in_pipeline("p").completed();
    done.seq = 1;
    store
        .finish_run(done, lease, false)
        .await
        .expect("completes");
    expect(&mut events, "p/told", RunEventKind::Ended).await;
    store.cancel("p/sig").await.expect("cancel");
    expect(&mut events, "p/sig", RunEventKind::Ended).await;
}

/// The next event of `key` is `kind`, within 5 s. Events of other runs
/// are passed over: on a cluster, `PUBLISH` reaches the subscription's node
/// over the cluster bus, so an event of a write made just before the
/// subscription may still come after it.
async fn expect(events: &mut RunEvents, key: &str, kind: RunEventKind) {
    let told = async {
        loop {
            match events.next().await {
                Some(event) if event.key != key => continue,
                other => return other,
            }
        }
    };
    let event = tokio::time::timeout(Duration::from_secs(5), told)
        .await
        .expect("told within 5 s");
    assert_eq!(event, Some(RunEvent::new(key, kind)));
}

#[tokio::test]
async fn rule27_the_due_index_and_the_mailbox_follow_every_write() {
    let Some((mut raw, prefix, store)) = crate::open("waits_index", |b| b).await else {
        return;
    };
    the_due_index_and_the_mailbox_follow_every_write(&store, &mut raw).await;
    every_pipelines_due_runs(&store).await;
    wakeups_are_told(&store).await;
    support::redis::cleanup(&mut raw, &prefix).await;
}

#[tokio::test]
async fn rule27_cluster_the_due_index_and_the_mailbox_follow_every_write() {
    let Some((cluster, ns, store)) = crate::cluster::open("cluster_waits", None).await else {
        return;
    };
    let client = redis::cluster::ClusterClient::new(cluster.nodes().to_vec()).expect("client");
    let mut raw = client.get_async_connection().await.expect("connect");
    the_due_index_and_the_mailbox_follow_every_write(&store, &mut raw).await;
    every_pipelines_due_runs(&store).await;
    wakeups_are_told(&store).await;
    // every key the scripts named is the one the store names (so in the
    // run's, or the pipeline's, slot)
    let keys = crate::cluster::cluster_keys(cluster, &ns).await;
    for key in &keys {
        if let Some((_, run)) = key.split_once(".signals:") {
            assert_eq!(key, &store.mailbox_key(run));
        } else if let Some((_, pipeline)) = key.split_once(".due:") {
            assert_eq!(key, &store.due_key(pipeline));
        }
    }
    assert!(keys.iter().any(|k| k.contains(".signals:")), "{keys:?}");
    assert!(keys.iter().any(|k| k.contains(".due:")), "{keys:?}");
    crate::cluster::cleanup(cluster, &ns).await;
}

/// A signal of 16 MiB (the most a payload may encode to) is stored, read
/// and taken whole; a larger one is refused before it is sent.
#[tokio::test]
async fn rule26_a_16_mib_signal_is_stored_and_taken_whole() {
    let Some((mut raw, prefix, store)) = crate::open("waits_large", |b| b).await else {
        return;
    };
    let big = "x".repeat(MAX_SIGNAL_PAYLOAD - 64);
    let payload = Payload::new(&big).expect("within the limit");
    assert!(payload.bytes().len() > MAX_SIGNAL_PAYLOAD - 64);
    let sent = Signal::new("doc", payload, "uploader").expect("a name");
    park(&store, waiting("big", &["doc"], None)).await;
    let delivered = store
        .send_signal("p/big", sent.clone())
        .await
        .expect("stored");
    assert_eq!(delivered, Delivery::Delivered);
    let again = store
        .send_signal("p/big", sent.clone())
        .await
        .expect("compared");
    assert_eq!(again, Delivery::Duplicate);
    assert_eq!(
        store.signals("p/big").await.expect("signals"),
        std::slice::from_ref(&sent)
    );
    let lease = store.acquire_lease("p/big", TTL).await.expect("lease");
    let take = Take::new(vec!["doc".to_owned()], false, None);
    let Decision::Signal(taken) = store
        .take_signal("p/big", &take.at(1), &lease)
        .await
        .expect("taken")
    else {
        panic!("the signal decides the wait");
    };
    assert_eq!(
        taken.payload.deserialize::<String>().expect("a string"),
        big
    );
    store.release_lease(lease).await.expect("release");
    let over = Payload::new(&"x".repeat(MAX_SIGNAL_PAYLOAD));
    assert!(matches!(over, Err(Error::ValueTooLarge { .. })), "{over:?}");
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// `take_signal` is fenced as a fenced save is; a run of an earlier build
/// (one string, no summary) is indexed by the first signal sent to it.
#[tokio::test]
async fn rule26_take_signal_is_fenced_and_old_runs_take_signals() {
    let Some((mut raw, prefix, store)) = crate::open("waits_fenced", |b| b).await else {
        return;
    };
    let take = Take::new(vec!["ok".to_owned()], true, None).at(1);
    park(&store, waiting("f", &["ok"], None)).await;
    let stale = store
        .acquire_lease("p/f", Duration::from_millis(50))
        .await
        .expect("lease");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let current = store.acquire_lease("p/f", TTL).await.expect("lease");
    let lost = store.take_signal("p/f", &take, &stale).await;
    assert!(matches!(lost, Err(Error::LeaseLost { .. })), "{lost:?}");
    assert!(
        store.signals("p/f").await.expect("signals").is_empty(),
        "nothing written"
    );
    store.release_lease(current).await.expect("release");
    store.cancel("p/f").await.expect("cancel");
    let cancelled = take_leased(&store, "p/f", &take).await;
    assert!(
        matches!(cancelled, Err(Error::Cancelled { .. })),
        "{cancelled:?}"
    );
    let none = take_leased(&store, "p/none", &take).await;
    assert!(
        matches!(none, Err(Error::CheckpointNotFound { .. })),
        "{none:?}"
    );

    let old = checkpoint("old", 1).in_pipeline("p");
    crate::set(
        &mut raw,
        &store.checkpoint_key("p/old"),
        &old.to_bytes().expect("encodes"),
    )
    .await;
    let sent = store.send_signal("p/old", signal("ok", true)).await;
    assert_eq!(sent.expect("stored"), Delivery::Delivered);
    let listed = store
        .list_runs(&RunFilter::new().pipeline("p"))
        .await
        .expect("list");
    assert!(
        listed.runs.iter().any(|r| r.key == "p/old"),
        "indexed on the way"
    );
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// The store's clock is the server's `TIME`.
#[tokio::test]
async fn rule28_the_clock_is_the_servers() {
    let Some((mut raw, prefix, store)) = crate::open("waits_clock", |b| b).await else {
        return;
    };
    let (secs, _): (u64, u64) = command(&mut raw, &["TIME"]).await;
    let ms = store.clock_ms().await.expect("TIME").expect("a clock");
    assert!(ms.abs_diff(secs * 1000) < 5_000, "{ms} vs {secs} s");
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// When the subscription's connection is killed, the stream ends (the
/// worker polls, and subscribes again).
#[tokio::test]
async fn wakeups_end_when_their_connection_drops() {
    let Some(server) = crate::OwnServer::start("waits", None) else {
        return;
    };
    let store = RedisStore::connect(server.url()).await.expect("connect");
    let mut events = store.watch().await.expect("watch").expect("wake-ups");
    let mut raw = server.conn().await;
    let killed: u64 = command(&mut raw, &["CLIENT", "KILL", "TYPE", "pubsub"]).await;
    assert_eq!(killed, 1);
    let end = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
    assert_eq!(end.expect("ends at once"), None);
    // a new subscription works
    let mut events = store.watch().await.expect("watch").expect("wake-ups");
    park(&store, asleep(Some("p"), "again", 1_900_000_000_000)).await;
    expect(&mut events, "p/again", RunEventKind::Due).await;
}

#[stage]
async fn count_up(ctx: Context) -> StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?)
}

/// The round trips of a run that sleeps, on the default clock (the
/// server's): the run up to its sleep, then the worker's sweep that
/// continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule25_the_round_trips_of_a_run_that_sleeps() {
    let Some((_server, store, mut monitor)) = crate::Monitor::on_own("waits", &[]).await else {
        return;
    };
    let p = pipeline![count_up, sleep!("300ms"), count_up]
        .name("trips")
        .store(store)
        .build()
        .expect("valid");
    let out = p.invoke("nap", Context::new()).await.expect("runs");
    assert!(matches!(out, Outcome::Sleeping { .. }), "{out:?}");
    let parked = monitor.take().await;
    eprintln!("up to the sleep: {} round trips: {parked:?}", parked.len());
    // begin_run, the sleep's checkpoint, the clock, the parking finish_run
    assert_eq!(parked, ["evalsha", "evalsha", "time", "evalsha"]);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let worker = RecoveryWorker::builder()
        .pipeline(p.clone())
        .build()
        .expect("a worker");
    let _ = monitor.take().await;
    let sweep = worker.run_once().await.expect("sweep");
    assert_eq!(sweep.woken, 1);
    let woken = monitor.take().await;
    eprintln!(
        "the worker's sweep that continues it: {} round trips: {woken:?}",
        woken.len()
    );
    let done = p.checkpoint("nap").await.expect("load").expect("stored");
    assert!(
        done.status == fluxio_core::store::RunStatus::Completed,
        "{done:?}"
    );
}
