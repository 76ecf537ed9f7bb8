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

/// The next line of a `MONITOR` stream, within ten seconds.
async fn monitor_line(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::net::TcpStream>>,
) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
        .await
        .expect("MONITOR goes on")
        .expect("read")
        .expect("MONITOR goes on")
}
