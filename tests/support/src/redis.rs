//! The Redis server of the tests.

/// The environment variable that names the server.
pub const URL_VAR: &str = "FLUXIO_REDIS_URL";

/// The server when [`URL_VAR`] is not set.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// [`URL_VAR`], or [`DEFAULT_URL`].
#[must_use]
pub fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// A plain redis-rs connection to the server, or `None` after a loud skip
/// when it is unreachable (a panic instead when `CI` is set).
#[cfg(feature = "redis")]
pub async fn raw() -> Option<::redis::aio::MultiplexedConnection> {
    let url = url();
    let conn = async {
        ::redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await
    };
    match conn.await {
        Ok(c) => Some(c),
        Err(e) => crate::skip_unless_ci("redis", &e),
    }
}

/// [`raw`], and a key prefix no other test uses
/// ([`namespace`](crate::namespace)`(name)`): what a test on the server
/// starts with. `None` after a loud skip when the server is unreachable (a
/// panic instead when `CI` is set).
#[cfg(feature = "redis")]
pub async fn raw_in(name: &str) -> Option<(::redis::aio::MultiplexedConnection, String)> {
    let raw = raw().await?;
    Some((raw, crate::namespace(name)))
}

/// Every key that starts with `prefix`, sorted.
///
/// # Panics
/// When a `SCAN` fails.
#[cfg(feature = "redis")]
pub async fn keys(raw: &mut ::redis::aio::MultiplexedConnection, prefix: &str) -> Vec<String> {
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(raw)
            .await
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    keys
}

/// Deletes every key that starts with `prefix`.
///
/// # Panics
/// When a command fails.
#[cfg(feature = "redis")]
pub async fn cleanup(raw: &mut ::redis::aio::MultiplexedConnection, prefix: &str) {
    for key in keys(raw, prefix).await {
        let _: () = ::redis::cmd("DEL")
            .arg(key)
            .query_async(raw)
            .await
            .expect("DEL");
    }
}

/// Deletes the run's summary (the fields the run index lists: status,
/// step, attempt, version, error, times, pipeline) from the journal hash
/// `key` of fluxio-redis: the run as a build before the index wrote it.
///
/// # Panics
/// When the `HDEL` fails.
#[cfg(feature = "redis")]
pub async fn drop_summary(raw: &mut ::redis::aio::MultiplexedConnection, key: &str) {
    let _: () = ::redis::cmd("HDEL")
        .arg(key)
        .arg(&[
            "status", "step", "attempt", "version", "error", "created", "updated", "pipeline",
        ])
        .query_async(raw)
        .await
        .expect("HDEL");
}

/// A local Redis Cluster of three masters (no replicas, no persistence),
/// started by [`cluster`] once per test binary, on free loopback ports.
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<String>,
}

impl Cluster {
    /// The nodes' URLs, `redis://127.0.0.1:<port>`.
    #[must_use]
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The nodes' URLs joined by `,`: how the test workers are given them.
    #[must_use]
    pub fn url(&self) -> String {
        self.nodes.join(",")
    }
}

/// The shared local cluster: started by the first call in this process
/// (about two seconds), then the same one. `None` after a loud skip when
/// `redis-server` or `redis-cli` is missing or the cluster does not form (a
/// panic instead when `CI` is set).
///
/// Three `redis-server` processes (`cluster-enabled yes`, each in its own
/// directory under a scratch directory, `save ""`, `appendonly no`) on
/// loopback ports whose cluster bus ports (+10000) are free too, joined by
/// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`,
/// then awaited until every node reports `cluster_state:ok`. A watchdog
/// shell started with them stops them, and removes the directory, once
/// this process has exited (a static is never dropped).
#[must_use]
pub fn cluster() -> Option<&'static Cluster> {
    static CLUSTER: std::sync::OnceLock<Result<Cluster, String>> = std::sync::OnceLock::new();
    match CLUSTER.get_or_init(start_cluster) {
        Ok(cluster) => Some(cluster),
        Err(e) => crate::skip_unless_ci("a local redis cluster", e),
    }
}

fn start_cluster() -> Result<Cluster, String> {
    use std::process::{Command, Stdio};

    let cluster = ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"];
    let ports = spawn_servers("redis-cluster", 3, |_| {
        cluster.iter().map(|&a| a.to_owned()).collect()
    })?;
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let created = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("redis-cli --cluster create: {e}"))?;
    if !created.status.success() {
        return Err(format!(
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&created.stdout),
            String::from_utf8_lossy(&created.stderr)
        ));
    }
    for &port in &ports {
        wait_for("cluster_state:ok", &|| {
            cli(port, &["cluster", "info"]).is_some_and(|out| out.contains("cluster_state:ok"))
        })?;
    }
    Ok(Cluster {
        nodes: ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect(),
    })
}

/// `redis-cli -p port args...`'s output, `None` when it fails.
fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Polls `ok` every 50 ms, for up to 20 s.
fn wait_for(what: &str, ok: &dyn Fn() -> bool) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ok() {
        if std::time::Instant::now() > deadline {
            return Err(format!("local redis servers: {what} timed out"));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}

/// Starts `n` `redis-server`s on free ports (loopback, no persistence,
/// each in its own directory under `<tmp>/fluxio-tests/<name>-<pid>`, with
/// the extra arguments `extra(port)`), under a watchdog shell that stops
/// them and removes the directory once this process has exited; returns
/// when each answers `PING`, with their ports, in the order `extra` was
/// called.
fn spawn_servers(
    name: &str,
    n: usize,
    extra: impl Fn(u16) -> Vec<String>,
) -> Result<Vec<u16>, String> {
    use std::process::{Command, Stdio};

    // one start at a time in this process: two must not pick the same ports
    static START: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _start = START
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for program in ["redis-server", "redis-cli"] {
        let found = Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Err(format!("`{program}` is not installed"));
        }
    }
    let ports = free_ports(n)?;
    let dir = std::env::temp_dir()
        .join("fluxio-tests")
        .join(format!("{name}-{}", std::process::id()));
    let mut script = String::from("set -u\npids=''\n");
    for &port in &ports {
        let node = dir.join(port.to_string());
        std::fs::create_dir_all(&node).map_err(|e| format!("{}: {e}", node.display()))?;
        script.push_str(&format!(
            "redis-server --port {port} --bind 127.0.0.1 --cluster-config-file nodes.conf \
             --dir '{}' --save '' --appendonly no --daemonize no --logfile server.log {} &\n\
             pids=\"$pids $!\"\n",
            node.display(),
            extra(port).join(" ")
        ));
    }
    // stops the servers once the test process ($1) is gone
    script.push_str(&format!(
        "while kill -0 \"$1\" 2>/dev/null; do sleep 0.5; done\n\
         kill $pids 2>/dev/null\nwait\nrm -rf '{}'\n",
        dir.display()
    ));
    Command::new("sh")
        .arg("-c")
        .arg(&script)
        .arg(format!("fluxio-{name}"))
        .arg(std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server: {e}"))?;
    for &port in &ports {
        wait_for("starting a server", &|| {
            cli(port, &["ping"]).is_some_and(|out| out.starts_with("PONG"))
        })?;
    }
    Ok(ports)
}

/// `n` loopback ports that are free, each with its cluster bus port
/// (+10000) free too.
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    use std::net::TcpListener;

    let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
    // a start that differs between test binaries running at once
    let start = 20_000 + (std::process::id() % 5_000) as u16 * 2;
    let mut ports = Vec::new();
    for port in (start..30_000).chain(20_000..start) {
        if free(port) && free(port + 10_000) {
            ports.push(port);
            if ports.len() == n {
                return Ok(ports);
            }
        }
    }
    Err("no free loopback ports for a local redis cluster".to_owned())
}
