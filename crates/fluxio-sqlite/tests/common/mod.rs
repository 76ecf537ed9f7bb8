//! Helpers shared by the integration tests: scratch directories, raw
//! connections, checkpoints, child processes.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fluxio_core::store::{Checkpoint, RunStatus};
use sqlx::{Connection, SqliteConnection};

/// A fresh directory under cargo's scratch directory for integration tests,
/// removed (with the database files in it) when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(test: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("fluxio-sqlite")
            .join(fluxio_core::store::conformance::namespace(test));
        std::fs::create_dir_all(&dir).expect("create the test directory");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `<dir>/<name>.db`.
    pub fn db(&self, name: &str) -> PathBuf {
        self.0.join(format!("{name}.db"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A connection of its own to the file at `path`, as another program (or
/// an operator's `sqlite3` shell) would have.
pub async fn raw_connection(path: &Path) -> SqliteConnection {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .busy_timeout(Duration::from_secs(5));
    SqliteConnection::connect_with(&options)
        .await
        .expect("a raw connection")
}

/// A checkpoint of run `run_id` at `ip`, with an empty context.
pub fn checkpoint(run_id: &str, ip: u32, status: RunStatus) -> Checkpoint {
    let mut cp = fluxio_core::store::conformance::checkpoint(run_id, ip);
    cp.status = status;
    cp
}

/// Starts this test binary again, running only the test `name` (a helper
/// that does nothing unless the environment variables in `env` are set).
/// Its output is captured (see [`wait_for`]), so that its test summary does
/// not mix with this one's.
pub fn spawn_test_process(name: &str, env: &[(&str, &str)]) -> Child {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd.spawn().expect("spawn the test binary")
}

/// Waits for a child of [`spawn_test_process`]; returns whether it exited
/// successfully, and its output.
pub fn wait_for(child: Child) -> (std::process::ExitStatus, String) {
    let out = child.wait_with_output().expect("wait for the child");
    let text = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

/// Milliseconds since the Unix epoch, by the system clock.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Sleeps until `unix_ms()` reaches `at` (so processes started one after the
/// other act at the same moment).
pub async fn sleep_until_unix_ms(at: u64) {
    let now = unix_ms();
    if at > now {
        tokio::time::sleep(Duration::from_millis(at - now)).await;
    }
}
