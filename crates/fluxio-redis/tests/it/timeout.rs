//! The command timeout: a server that stops answering gives `Error::Store`
//! within the timeout, never a hang, and the store recovers once it answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fluxio_core::Error;
use fluxio_core::store::conformance::checkpoint;
use fluxio_core::store::{CheckpointStore, Lease};
use fluxio_redis::{RedisStore, RedisStoreError};
use fluxio_test_support as support;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TIMEOUT: Duration = Duration::from_millis(300);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(700);

fn assert_timeout<T: std::fmt::Debug>(
    what: &str,
    started: Instant,
    result: fluxio_core::Result<T>,
) {
    let elapsed = started.elapsed();
    match result {
        Err(Error::Store {
            backend: "redis",
            source,
            ..
        }) => {
            let source = source
                .downcast_ref::<RedisStoreError>()
                .expect("a RedisStoreError");
            assert!(
                source.kind().is_timeout(),
                "{what}: not a timeout: {source}"
            );
        }
        other => panic!("{what}: expected a redis Error::Store, got {other:?}"),
    }
    assert!(elapsed < TIMEOUT + SLACK, "{what} took {elapsed:?}");
}

#[tokio::test]
async fn connect_to_a_server_that_never_answers_times_out() {
    let port = crate::silent_server().await;
    let started = Instant::now();
    let result = crate::connect_within(&format!("redis://127.0.0.1:{port}"), TIMEOUT).await;
    assert_timeout("connect", started, result);
}

/// A TCP proxy to the real server that can be told to swallow everything.
struct Proxy {
    port: u16,
    blackhole: Arc<AtomicBool>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let blackhole = Arc::new(AtomicBool::new(false));
        let hole = Arc::clone(&blackhole);
        tokio::spawn(async move {
            for _ in 0..64 {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, Arc::clone(&hole)));
                tokio::spawn(pump(sr, cw, Arc::clone(&hole)));
            }
        });
        Proxy { port, blackhole }
    }

    fn swallow(&self, on: bool) {
        self.blackhole.store(on, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`, dropping what arrives while `hole` is set.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    hole: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !hole.load(Ordering::SeqCst) && to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// host:port of the test server.
fn upstream() -> Option<String> {
    let url = support::redis::url();
    let rest = url.strip_prefix("redis://")?;
    let host = rest.split(['/', '?']).next()?;
    (!host.contains('@')).then(|| host.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_times_out_when_the_server_stops_answering_and_recovers() {
    let Some(mut raw) = support::redis::raw().await else {
        return;
    };
    let Some(upstream) = upstream() else {
        support::skip(&"FLUXIO_REDIS_URL is not a plain redis://host:port URL");
        return;
    };
    let proxy = Proxy::start(upstream).await;
    let prefix = support::namespace("timeout");
    let store = RedisStore::builder(format!("redis://127.0.0.1:{}", proxy.port))
        .key_prefix(&prefix)
        .completed_retention(Some(Duration::from_secs(60)))
        .command_timeout(TIMEOUT)
        .connect()
        .await
        .expect("connect through the proxy");
    let lease = store
        .acquire_lease("r", Duration::from_secs(30))
        .await
        .expect("acquire");
    store
        .save(checkpoint("r", 1))
        .await
        .expect("save while answering");

    proxy.swallow(true);
    let other = Lease::new("r", lease.token());
    let t = Instant::now;
    let s = &store;
    assert_timeout("save", t(), s.save(checkpoint("r", 1)).await);
    assert_timeout("load", t(), s.load("r").await);
    assert_timeout("delete", t(), s.delete("r").await);
    assert_timeout("exists", t(), s.exists("r").await);
    assert_timeout(
        "acquire_lease",
        t(),
        s.acquire_lease("x", Duration::from_secs(1)).await,
    );
    assert_timeout(
        "renew_lease",
        t(),
        s.renew_lease(&lease, Duration::from_secs(30)).await,
    );
    assert_timeout(
        "save_fenced",
        t(),
        s.save_fenced(checkpoint("r", 1), &lease).await,
    );
    assert_timeout("delete_fenced", t(), s.delete_fenced("r", &lease).await);
    assert_timeout("release_lease", t(), s.release_lease(other).await);

    // the server answers again: the store reconnects on its own
    proxy.swallow(false);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.exists("r").await {
            Ok(found) => {
                assert!(found, "the checkpoint saved before the outage is there");
                break;
            }
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet recovered: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("did not recover within 10 s: {e}"),
        }
    }
    store
        .save_fenced(checkpoint("r", 1), &lease)
        .await
        .expect("the lease survived the outage");
    support::redis::cleanup(&mut raw, &prefix).await;
}
