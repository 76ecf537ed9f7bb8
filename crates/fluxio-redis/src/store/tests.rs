//! Unit tests of the store's key functions and script arguments (the store against a
//! server is tested in `tests/it`).

use std::io;
use std::sync::atomic::AtomicBool;

use fluxio_test_support::{self as support, checkpoint, namespace};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// A TCP proxy to the Redis server that, once armed, forwards the next
/// command but cuts the connection when its reply comes: a call applied
/// by the server whose reply is lost.
struct LoseNextReply {
    addr: std::net::SocketAddr,
    armed: Arc<AtomicBool>,
}

impl LoseNextReply {
    /// To `upstream`, `host:port`.
    async fn start(upstream: &str) -> io::Result<Self> {
        let upstream = upstream.to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let armed = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&armed);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                let flag = Arc::clone(&flag);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match server_read.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if flag.swap(false, Ordering::SeqCst) {
                            // drops the client's side: it reads EOF
                            return;
                        }
                        if client_write.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Ok(LoseNextReply { addr, armed })
    }

    fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    fn fired(&self) -> bool {
        !self.armed.load(Ordering::SeqCst)
    }
}

async fn get(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET")
}

/// A raw connection, a proxy that can lose the next reply, and a store
/// under `prefix` connected through it; `None` after a loud skip.
async fn through_a_proxy(
    check: &str,
) -> Option<(
    redis::aio::MultiplexedConnection,
    LoseNextReply,
    String,
    RedisStore,
)> {
    let raw = support::redis::raw().await?;
    let url = support::redis::url();
    // The proxy forwards plain TCP: no TLS, password or database number.
    let plain = url
        .strip_prefix("redis://")
        .map(|a| a.trim_end_matches('/'))
        .filter(|a| !a.contains(['@', '/', '?']));
    let Some(upstream) = plain else {
        support::skip(&format_args!("{url} is not a plain redis://host:port"));
        return None;
    };
    let proxy = LoseNextReply::start(upstream).await.expect("a proxy");
    let prefix = namespace(check);
    let store = RedisStore::builder(proxy.url())
        .key_prefix(&prefix)
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connects through the proxy");
    Some((raw, proxy, prefix, store))
}

/// `acquire_lease` whose first attempt took the lease but lost its reply
/// with the connection: the repeat returns that lease (not `RunIdInUse`),
/// and so do fenced writes whose reply was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_reply_was_lost_is_repeated_exactly() {
    let Some((mut raw, proxy, prefix, store)) = through_a_proxy("lost_reply").await else {
        return;
    };
    let run = "r";

    proxy.arm();
    let lease = store
        .acquire_lease(run, Duration::from_secs(30))
        .await
        .expect("the repeat returns the lease its first attempt took");
    assert!(proxy.fired(), "the first reply was cut");
    let token = lease.token().to_string();
    assert_eq!(
        get(&mut raw, &store.lease_key(run)).await,
        Some(token.clone())
    );
    assert_eq!(
        get(&mut raw, &store.epoch_key(run)).await,
        Some(token),
        "one token drawn: the repeat took no second lease"
    );
    assert!(
        get(&mut raw, &store.nonce_key(run)).await.is_some(),
        "the nonce stays with the lease"
    );
    assert!(matches!(
        store.acquire_lease(run, Duration::from_secs(30)).await,
        Err(Error::RunIdInUse { .. })
    ));

    let cp = checkpoint(run, 1);
    proxy.arm();
    store
        .save_fenced(cp.clone(), &lease)
        .await
        .expect("a fenced save whose reply was lost is repeated");
    assert!(proxy.fired());
    assert_eq!(store.load(run).await.expect("load"), Some(cp));

    proxy.arm();
    store
        .delete_fenced(run, &lease)
        .await
        .expect("a fenced delete whose reply was lost is repeated");
    proxy.arm();
    store.release_lease(lease).await.expect("release");
    assert!(!store.exists(run).await.expect("exists"));

    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    keys.sort();
    assert_eq!(keys, vec![store.epoch_key(run)]);
    let _: () = redis::cmd("DEL")
        .arg(keys)
        .query_async(&mut raw)
        .await
        .expect("DEL");
}

/// `begin_run` and `finish_run` whose first attempt was applied but
/// whose reply was lost with the connection: the repeat returns what
/// the first attempt did (`started`, and the same token; `Ok`, not
/// `LeaseLost`), writing nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule24_begin_and_finish_whose_reply_was_lost_are_repeated_exactly() {
    let Some((mut raw, proxy, prefix, store)) = through_a_proxy("lost_begin").await else {
        return;
    };
    let run = "r";
    for begin in [Begin::IfAbsent, Begin::Replace] {
        proxy.arm();
        let begun = store
            .begin_run(checkpoint(run, 1), Duration::from_secs(30), begin)
            .await
            .expect("the repeat returns what the first attempt did");
        assert!(proxy.fired(), "the first reply was cut");
        assert!(begun.started, "{begin:?}: written by the first attempt");
        assert_eq!(
            get(&mut raw, &store.epoch_key(run)).await,
            Some(begun.lease.token().to_string()),
            "one token drawn per call"
        );
        let mut done = checkpoint(run, 2);
        done.seq = 1;
        done.status = RunStatus::Completed;
        proxy.arm();
        store
            .finish_run(done.clone(), begun.lease, false)
            .await
            .expect("the repeat finds the first attempt's result");
        assert!(proxy.fired());
        assert_eq!(store.load(run).await.expect("load"), Some(done));
        assert_eq!(get(&mut raw, &store.lease_key(run)).await, None);
    }
    // a stored run kept: the repeat says not started, as the first did
    proxy.arm();
    let kept = store
        .begin_run(checkpoint(run, 1), Duration::from_secs(30), Begin::IfAbsent)
        .await
        .expect("repeated");
    assert!(proxy.fired());
    assert!(!kept.started);
    store.release_lease(kept.lease).await.expect("release");
    assert_eq!(get(&mut raw, &store.nonce_key(run)).await, None);
    support::redis::cleanup(&mut raw, &prefix).await;
}

/// The cancel's script appends only to the journal the cancel read
/// (its `born:ver`), a run deleted and written again in between is not
/// that journal, and a repeat of it (its first attempt applied, its
/// reply lost) finds its own write and answers done, not "changed".
#[tokio::test]
async fn rule14_the_cancel_script_is_a_compare_and_set_that_a_repeat_finds_done() {
    let Some((mut raw, prefix)) = support::redis::raw_in("cancel_script").await else {
        return;
    };
    let store = RedisStore::builder(support::redis::url())
        .key_prefix(&prefix)
        .connect()
        .await
        .expect("connect");
    let run = "r";
    let running = checkpoint(run, 1);
    store.save(running.clone()).await.expect("save");
    let version = |store: &RedisStore| {
        let store = store.clone();
        async move {
            store
                .read(run, false)
                .await
                .expect("read")
                .expect("stored")
                .version
        }
    };
    let stale = version(&store).await;
    // the same run written again: same `ver`, another `born`
    store.delete(run).await.expect("delete");
    store.save(running.clone()).await.expect("save");
    let read = version(&store).await;
    assert_ne!(stale, read, "a rewritten run is another journal");
    let cancelled =
        fluxio_core::store::cancelled_checkpoint(run, Some(running.clone())).expect("cancel");
    let new = cancelled.entry_bytes().expect("encode");
    let cas = |version: &[u8]| {
        let mut script = scripts::MARK_SCRIPT.prepare_invoke();
        script
            .key(store.checkpoint_key(run))
            .key(store.cancelled_key(run))
            .key(store.epoch_key(run))
            .arg(version)
            .arg(cancelled.seq)
            .arg(&new)
            .arg(&prefix)
            .arg(run);
        summary_args(&mut script, &cancelled).expect("a known status");
        script.arg("1");
        script
    };
    let refused: u8 = cas(&stale).invoke_async(&mut raw).await.expect("script");
    assert_eq!(refused, 0, "the journal is not the one read");
    assert_eq!(store.load(run).await.expect("load"), Some(running));
    for attempt in ["first", "repeated"] {
        let done: u8 = cas(&read).invoke_async(&mut raw).await.expect("script");
        assert_eq!(done, 1, "{attempt} attempt");
    }
    let stored = store.load(run).await.expect("load").expect("stored");
    assert!(stored.is_cancelled());
    assert_eq!(stored.seq, 1, "the cancel is the run's next checkpoint");
    let mark = get(&mut raw, &store.cancelled_key(run)).await;
    assert_eq!(mark.as_deref(), Some("1"));
    store.delete(run).await.expect("delete");
    let left: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    assert!(left.is_empty(), "a delete takes the mark too: {left:?}");
}

/// The buckets are part of the cluster's key layout: every build must
/// compute the same (FNV-1a of the pipeline, values computed apart).
#[test]
fn cluster_buckets_are_stable() {
    for (pipeline, bucket) in [("", 5), ("a", 12), ("payments", 6), ("p0", 13), ("p3", 4)] {
        assert_eq!(cluster_bucket(pipeline), bucket, "{pipeline:?}");
    }
    assert_eq!(pipeline_of("p/r/1"), "p");
    assert_eq!(pipeline_of("bare"), "");
}

#[test]
fn nonces_differ() {
    let n: std::collections::HashSet<String> = (0..10_000).map(|_| nonce()).collect();
    assert_eq!(n.len(), 10_000);
    assert!(n.iter().all(|s| s.len() == 32));
}
