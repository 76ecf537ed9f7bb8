//! The integration tests of fluxio-redis, in one binary (every test binary
//! links redis-rs, tokio and the rest once more).
//!
//! The tests that need the server take it from `FLUXIO_REDIS_URL` (see
//! `fluxio_test_support::redis`), each under a key prefix of its own;
//! without a server they are skipped loudly, or fail when `CI` is set.

mod cluster;
mod conformance;
mod error_kind;
mod journal;
mod keep;
mod list;
mod secrets;
mod store;
mod timeout;
mod tls;
mod trips;
mod waits;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fluxio_core::Error;
use fluxio_redis::{RedisStore, RedisStoreBuilder, RedisStoreError};
use fluxio_test_support as support;
use redis::aio::MultiplexedConnection;

/// A store on the test server under the key prefix `prefix`, with the
/// settings `settings` makes on its builder.
async fn store_in(
    prefix: &str,
    settings: impl FnOnce(RedisStoreBuilder) -> RedisStoreBuilder,
) -> RedisStore {
    settings(RedisStore::builder(support::redis::url()).key_prefix(prefix))
        .connect()
        .await
        .expect("connect")
}

/// What a test on the server starts with: a plain connection to it, a key
/// prefix of its own (see `support::redis::raw_in`) and a store under that
/// prefix with the settings `settings` makes; `None` after a loud skip
/// when the server is unreachable.
async fn open(
    name: &str,
    settings: impl FnOnce(RedisStoreBuilder) -> RedisStoreBuilder,
) -> Option<(MultiplexedConnection, String, RedisStore)> {
    let (raw, prefix) = support::redis::raw_in(name).await?;
    let store = store_in(&prefix, settings).await;
    Some((raw, prefix, store))
}

/// A store connecting to `url` with the command timeout `timeout`, or
/// why it does not.
async fn connect_within(url: &str, timeout: Duration) -> fluxio_core::Result<RedisStore> {
    RedisStore::builder(url)
        .command_timeout(timeout)
        .connect()
        .await
}

/// The source of an `Error::Store` from this crate.
fn redis_source(err: &Error) -> &RedisStoreError {
    match err {
        Error::Store {
            backend: "redis",
            source,
            ..
        } => source
            .downcast_ref::<RedisStoreError>()
            .expect("the source is a RedisStoreError"),
        other => panic!("expected a redis Error::Store, got {other:?}"),
    }
}

/// The time-to-live of `key` in ms: `-1` without one, `-2` when missing.
async fn pttl(raw: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(raw)
        .await
        .expect("PTTL")
}

/// `SET key bytes` on the test server.
async fn set(raw: &mut MultiplexedConnection, key: &str, bytes: &[u8]) {
    redis::cmd("SET")
        .arg(key)
        .arg(bytes)
        .query_async::<()>(raw)
        .await
        .expect("SET");
}

/// `SET key bytes PX ttl` on `conn` (one server's or a cluster's).
async fn set_expiring(
    conn: &mut impl redis::aio::ConnectionLike,
    key: &str,
    bytes: &[u8],
    ttl: Duration,
) {
    redis::cmd("SET")
        .arg(key)
        .arg(bytes)
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .query_async::<()>(conn)
        .await
        .expect("raw SET");
}

/// A port on which a server accepts connections and never writes a byte
/// back (it holds the first 64).
async fn silent_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        for _ in 0..64 {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            held.push(socket);
        }
    });
    port
}

/// Sends `ECHO mark` to the server at `url`: the line at which a reader of
/// its `MONITOR` knows it has seen every command sent before.
async fn echo_mark(url: &str, mark: &str) {
    let mut conn = redis::Client::open(url)
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: String = redis::cmd("ECHO")
        .arg(mark)
        .query_async(&mut conn)
        .await
        .expect("ECHO");
}

/// The lines a `MONITOR` connection reads.
type MonitorLines = tokio::io::Lines<tokio::io::BufReader<tokio::net::TcpStream>>;

/// A `MONITOR` connection to the server at `addr`, its `+OK` read.
async fn monitor(addr: impl tokio::net::ToSocketAddrs) -> MonitorLines {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(b"MONITOR\r\n").await.expect("MONITOR");
    let mut lines = tokio::io::BufReader::new(stream).lines();
    let ok = lines.next_line().await.expect("read").expect("a reply");
    assert_eq!(ok, "+OK");
    lines
}

/// The next line of a `MONITOR` stream, within ten seconds.
async fn monitor_line(lines: &mut MonitorLines) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
        .await
        .expect("MONITOR goes on")
        .expect("read")
        .expect("MONITOR goes on")
}

/// Whether `program version_arg` runs and succeeds.
fn installed(program: &str, version_arg: &str) -> bool {
    Command::new(program)
        .arg(version_arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A `redis-server` of one test's own, on a free loopback port, in a
/// directory of its own: killed, and the directory removed, when dropped.
struct OwnServer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl OwnServer {
    /// Starts `redis-server` in a new directory
    /// `<tmp>/fluxio-redis-<name>-<pid>-<n>`, once `prepare` has put there
    /// what the server needs, on loopback without persistence, its log in
    /// `redis.log`, with the arguments `args(port)`; returns once `port`
    /// takes connections.
    ///
    /// # Panics
    /// When the server does not start within 10 s.
    fn spawn(
        name: &str,
        prepare: impl FnOnce(&Path),
        args: impl FnOnce(&str) -> Vec<String>,
    ) -> OwnServer {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fluxio-redis-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        prepare(&dir);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("redis-server")
            .args(args(&port.to_string()))
            .args(["--bind", "127.0.0.1", "--logfile", "redis.log"])
            .args(["--save", "", "--appendonly", "no", "--dir", "."])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let server = OwnServer { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server ({name}) did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// Starts a plain one for the tests of `name` (a replica of `primary`
    /// when given); `None` after a loud skip when `redis-server` is not
    /// installed (a panic under `CI`).
    fn start(name: &str, primary: Option<u16>) -> Option<OwnServer> {
        if !installed("redis-server", "--version") {
            return support::skip_unless_ci("redis-server (not on PATH)", &"not installed");
        }
        let args = |port: &str| {
            let mut args = vec!["--port".to_owned(), port.to_owned()];
            if let Some(primary) = primary {
                args.extend(["--replicaof", "127.0.0.1", &primary.to_string()].map(str::to_owned));
            }
            args
        };
        Some(OwnServer::spawn(name, |_| {}, args))
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn conn(&self) -> MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("a valid URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }
}

/// `MONITOR` on a server of the test's own: the names of the commands its
/// clients send, told from those run inside scripts (`[0 lua]`), but the
/// `ignored` ones.
struct Monitor {
    lines: MonitorLines,
    url: String,
    ignored: &'static [&'static str],
}

impl Monitor {
    /// What a test that counts a store's round trips starts with: a server
    /// of its own (for the tests of `name`), a store on it under the key
    /// prefix `trips`, and a monitor of the server (but the `ignored`
    /// commands) that has seen nothing yet; `None` after a loud skip, as
    /// [`OwnServer::start`].
    async fn on_own(
        name: &str,
        ignored: &'static [&'static str],
    ) -> Option<(OwnServer, RedisStore, Monitor)> {
        let server = OwnServer::start(name, None)?;
        let store = RedisStore::builder(server.url())
            .key_prefix("trips")
            .connect()
            .await
            .expect("connect");
        let mut monitor = Monitor::start(&server, ignored).await;
        let _ = monitor.take().await;
        Some((server, store, monitor))
    }

    async fn start(server: &OwnServer, ignored: &'static [&'static str]) -> Monitor {
        Monitor {
            lines: monitor(("127.0.0.1", server.port)).await,
            url: server.url(),
            ignored,
        }
    }

    /// The names of the commands clients sent since the last call (or the
    /// start), in order: up to an `ECHO` of a mark.
    async fn take(&mut self) -> Vec<String> {
        let mark = support::namespace("mark");
        echo_mark(&self.url, &mark).await;
        let mut out = Vec::new();
        loop {
            let line = monitor_line(&mut self.lines).await;
            let Some((source, command)) = line.split_once("] ") else {
                continue;
            };
            if source.ends_with(" lua") {
                continue;
            }
            let name = command
                .split('"')
                .nth(1)
                .unwrap_or_default()
                .to_ascii_lowercase();
            if name == "echo" && command.contains(&mark) {
                return out;
            }
            if !self.ignored.contains(&name.as_str()) {
                out.push(name);
            }
        }
    }
}
