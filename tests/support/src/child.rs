//! One test of the current test binary, run again in a child process: for
//! tests of several processes on one SQLite file, and of a process killed
//! mid-run. The child's test is a helper that does nothing unless the
//! environment variables its parent sets are there.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// The name libtest gives test `name` of the module `module_path` (what
/// `module_path!()` says there): the path without the crate's name.
///
/// ```
/// let name = fluxio_test_support::child::test_name("it::schema", "helper");
/// assert_eq!(name, "schema::helper");
/// assert_eq!(fluxio_test_support::child::test_name("open", "helper"), "helper");
/// ```
#[must_use]
pub fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_crate, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}

/// Starts this test binary again, running only the test `name` (see
/// [`test_name`]) with the environment variables `env`. Its output is
/// captured (see [`wait_for`]), so that its test summary does not mix with
/// this one's.
///
/// # Panics
/// When the binary cannot be started.
#[must_use]
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

/// Waits for a child of [`spawn_test_process`]; returns how it exited, and
/// its output.
///
/// # Panics
/// When waiting fails.
#[must_use]
pub fn wait_for(child: Child) -> (ExitStatus, String) {
    let out = child.wait_with_output().expect("wait for the child");
    let text = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

/// Milliseconds since the Unix epoch, by the system clock.
#[must_use]
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Sleeps until [`unix_ms`] reaches `at` (so processes started one after
/// the other act at the same moment).
pub async fn sleep_until_unix_ms(at: u64) {
    let now = unix_ms();
    if at > now {
        tokio::time::sleep(Duration::from_millis(at - now)).await;
    }
}
