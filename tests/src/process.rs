//! A worker process driven line by line over its stdin and stdout, for the
//! multi-process tests and the crash harness.

use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// The outcome lines a worker prints when it stops.
pub const OUTCOMES: &[&str] = &["ok", "in_use", "lease_lost", "cancelled", "error"];

/// A running worker process. Killed (SIGKILL) and reaped when dropped.
#[derive(Debug)]
pub struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Worker {
    /// Starts `program` with `args`; its stdout is read line by line on a thread.
    ///
    /// # Panics
    /// When the program cannot be started.
    pub fn spawn<I, S>(program: &str, args: I) -> Worker
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stdin = child.stdin.take();
        Worker {
            child,
            stdin,
            lines,
        }
    }

    /// The process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line starting with one of `prefixes` within `within`,
    /// skipping other lines; `None` on timeout or when the process closed stdout.
    #[must_use]
    pub fn next_of(&self, prefixes: &[&str], within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if prefixes.iter().any(|p| line.starts_with(p)) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Like [`next_of`](Self::next_of) with a 60 s limit; returns the line.
    ///
    /// # Panics
    /// When no such line comes.
    pub fn expect(&self, prefixes: &[&str]) -> String {
        self.next_of(prefixes, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("worker {} printed none of {prefixes:?} in 60 s", self.pid()))
    }

    /// Waits for `ready`.
    ///
    /// # Errors
    /// The worker's `error ...` line, or a timeout.
    pub fn ready(&self) -> Result<(), String> {
        match self.next_of(&["ready", "error"], Duration::from_secs(60)) {
            Some(line) if line == "ready" => Ok(()),
            Some(line) => Err(line),
            None => Err(format!("worker {} never printed `ready`", self.pid())),
        }
    }

    /// Tells a ready worker to start.
    pub fn go(&mut self) {
        self.send("go");
    }

    /// Writes `line` and a newline to the worker's stdin (a worker in `drop`
    /// mode drops its run when it reads one).
    pub fn send(&mut self, line: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = stdin.write_all(format!("{line}\n").as_bytes());
            let _ = stdin.flush();
        }
    }

    /// Waits for the outcome line and the process's exit.
    #[must_use]
    pub fn outcome(self) -> String {
        self.outcome_and_exit().0
    }

    /// Waits for the outcome line and the process's exit; returns the line
    /// and the exit code (`None` when killed by a signal or not reaped).
    #[must_use]
    pub fn outcome_and_exit(mut self) -> (String, Option<i32>) {
        let line = self.expect(OUTCOMES);
        let code = self.child.wait().ok().and_then(|s| s.code());
        (line, code)
    }

    /// Sends `sig` (e.g. `-STOP`, `-CONT`, `-KILL`) with kill(1).
    ///
    /// # Panics
    /// When kill fails.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "kill {sig} {}",
            self.pid()
        );
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where a cross-process test starts from: a runtime, the store of one
/// kind in a namespace of its own, and a scratch folder for its ledger.
#[derive(Debug)]
pub struct Scene {
    /// The runtime the test drives the store from.
    pub rt: tokio::runtime::Runtime,
    /// The store, in the test's namespace.
    pub store: std::sync::Arc<dyn fluxio::CheckpointStore>,
    /// The store's URL, for the worker processes.
    pub url: String,
    /// The namespace, for the worker processes.
    pub ns: String,
    /// The scratch folder (`fluxio-{what}-{kind}-{pid}` in the temp dir).
    pub dir: std::path::PathBuf,
    /// `ledger` in the scratch folder.
    pub ledger: String,
}

impl Scene {
    /// The scene of test `what` on `kind`, in the namespace `{ns}_{kind}`;
    /// `None` when the store's server is not there (a loud skip, or a
    /// failure under `CI`: `fluxio_test_support::skip_unless_ci`).
    ///
    /// # Panics
    /// When the runtime or the scratch folder cannot be made.
    #[must_use]
    pub fn open(kind: crate::StoreKind, what: &str, ns: &str) -> Option<Scene> {
        let ns = fluxio_test_support::namespace(&format!("{ns}_{}", kind.name()));
        let url = kind.url();
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        let store = match rt.block_on(kind.open(&url, &ns)) {
            Ok(store) => store,
            Err(e) => return fluxio_test_support::skip_unless_ci(kind.name(), &e),
        };
        let dir = std::env::temp_dir().join(format!(
            "fluxio-{what}-{}-{}",
            kind.name(),
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        let ledger = dir.join("ledger").to_string_lossy().into_owned();
        Some(Scene {
            rt,
            store,
            url,
            ns,
            dir,
            ledger,
        })
    }
}

/// xorshift64*: the crash harnesses' seeded random delays
/// (`FLUXIO_CRASH_SEED` replays one).
#[derive(Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
