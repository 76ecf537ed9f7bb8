//! Measures runs that wait (contract rules 25-28) on each store, each figure
//! beside a baseline taken in the same run: the numbers of
//! docs/performance.md, "Runs that wait".
//!
//! ```text
//! cargo run --release -p fluxio-tests --bin fluxio-waits-bench -- <measure> <store> [options]
//! ```
//!
//! `<store>`: `sqlite`, `postgres`, `mysql` (MySQL or MariaDB) or `redis`, on
//! the servers of the tests (`FLUXIO_POSTGRES_URL`, `FLUXIO_MYSQL_URL`,
//! `FLUXIO_REDIS_URL`, or the local defaults); every measure works in a
//! namespace of its own (a schema, a database, a key prefix, a file) and
//! removes it at the end. `<measure>`:
//!
//! - `sizes`: the stored bytes of `--runs` runs (10,000) sleeping at once,
//!   per run, beside those of as many completed runs of the same stages
//!   without the sleep.
//! - `memory`: the resident memory and tokio's alive tasks of a fresh
//!   process with a spawned `RecoveryWorker` (default settings) after ten of
//!   its polls, over a store with 0 and then with `--runs` sleeping runs.
//! - `wake`: `--runs` runs due at the same instant (`sleep!(until = "at")`),
//!   woken by `--workers` (4) worker processes (default settings): runs
//!   woken per second, beside the same processes running as many fresh runs
//!   of the stage after the sleep (8 at once each, a worker's default
//!   concurrency); a ledger outside the store shows each run woken exactly
//!   once.
//! - `latency`: `--signals` runs wait for a signal that this process sends
//!   at `--rate` signals a second (at random intervals: exponential, the
//!   same sequence each time); a worker (another process, or with
//!   `--signaller task` a task of this one) continues them; latency = the
//!   start of the stage after the wait - the signal's send, p50 and p99.
//! - `trips`: the store calls of one woken run, one run woken by a signal
//!   and one fresh run, in one process, one run at a time.
//! - `all`: sizes, memory, wake, latency at 1/s (100 signals) and at 100/s
//!   (2,000 signals).
//!
//! `--due-poll MS` gives the worker processes that `due_poll` instead of
//! the default (250 ms). Each measure prints one summary line starting with
//! `==`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fluxio::recovery::{RecoveryEvent, RecoveryWorker};
use fluxio::store::backend::{Begin, Begun, Decision, RunEvents, Take};
use fluxio::store::{
    Checkpoint, CheckpointStore, Claimed, Delivery, DueFilter, DueRun, Lease, RunFilter, RunPage,
    Signal,
};
use fluxio::{Context, Error, Outcome, Pipeline, PipelineBuilder, StageResult, pipeline, stage};
use fluxio_tests::StoreKind;

type BenchResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

// ---- the pipelines ----------------------------------------------------------

/// Where the stage after a sleep or a wait appends `run_id pid start_us`.
static LEDGER: Mutex<Option<PathBuf>> = Mutex::new(None);

fn set_ledger(path: Option<PathBuf>) {
    *LEDGER.lock().unwrap_or_else(PoisonError::into_inner) = path;
}

fn ledger() -> Option<PathBuf> {
    LEDGER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// The workers' `due_poll` in ms (`--due-poll`); 0 for the default.
static DUE_POLL_MS: AtomicU64 = AtomicU64::new(0);

/// A worker of `pipeline`, with `--due-poll` when it was given.
fn worker_builder(pipeline: Pipeline) -> fluxio::recovery::RecoveryWorkerBuilder {
    let builder = RecoveryWorker::builder().pipeline(pipeline);
    match DUE_POLL_MS.load(Ordering::Relaxed) {
        0 => builder,
        ms => builder.due_poll(Duration::from_millis(ms)),
    }
}

/// The workers' `due_poll`, in words.
fn due_poll_label() -> String {
    match DUE_POLL_MS.load(Ordering::Relaxed) {
        0 => "default due_poll 250 ms".to_owned(),
        ms => format!("due_poll {ms} ms"),
    }
}

/// Microseconds since the Unix epoch, from the system clock.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn now_ms() -> u64 {
    now_us() / 1_000
}

/// Appends `line` with one `write(2)` on a file opened with `O_APPEND`:
/// the lines of concurrent processes never interleave.
fn append(path: &Path, line: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(format!("{line}\n").as_bytes())
}

#[stage]
async fn first(ctx: Context) -> StageResult {
    let n: u64 = ctx.get("n")?;
    Ok(ctx.set("first", n.wrapping_mul(31))?)
}

#[stage]
async fn after(ctx: Context) -> StageResult {
    let started = now_us();
    if let Some(path) = ledger() {
        let info = fluxio::StageInfo::current().ok_or("`after` runs inside a pipeline")?;
        append(
            &path,
            &format!("{} {} {started}", info.run_id, std::process::id()),
        )?;
    }
    Ok(ctx.set("after", started)?)
}

/// The pipelines measured, by name.
fn builder(name: &str) -> BenchResult<PipelineBuilder> {
    Ok(match name {
        // sleeps until the instant in `at`
        "sleeper" => pipeline![first, sleep!(until = "at"), after].name("sleeper"),
        // the same stages, without the sleep
        "straight" => pipeline![first, after].name("straight"),
        // the stage after the sleep, alone: what a woken run runs
        "tail" => pipeline![after].name("tail"),
        // waits for the signal `go` (no deadline)
        "waiter" => pipeline![first, wait!("go" as u64), after].name("waiter"),
        other => return Err(format!("no pipeline {other:?}").into()),
    })
}

fn build(name: &str, store: &Arc<dyn CheckpointStore>) -> BenchResult<Pipeline> {
    Ok(builder(name)?.store_arc(Arc::clone(store)).build()?)
}

fn input(n: u64, at_ms: u64) -> fluxio::Result<Context> {
    Context::new().set("n", n)?.set("at", at_ms)
}

// ---- a store that counts its calls -------------------------------------------

const METHODS: [&str; 22] = [
    "save",
    "load",
    "delete",
    "exists",
    "history",
    "list_runs",
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "save_fenced",
    "delete_fenced",
    "begin_run",
    "finish_run",
    "cancel",
    "send_signal",
    "take_signal",
    "signals",
    "due_runs",
    "clock_ms",
    "watch",
    "claim_due",
    "set_due",
];

/// Calls, errors and time of each method of [`Traced`].
#[derive(Debug, Default)]
struct Calls {
    calls: [AtomicU64; METHODS.len()],
    errors: [AtomicU64; METHODS.len()],
    nanos: [AtomicU64; METHODS.len()],
}

impl Calls {
    fn snapshot(&self) -> Vec<(u64, u64, u64)> {
        (0..METHODS.len())
            .map(|i| {
                (
                    self.calls[i].load(Ordering::Relaxed),
                    self.errors[i].load(Ordering::Relaxed),
                    self.nanos[i].load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// `method=calls/errors/nanoseconds` of every method called, on one
    /// line.
    fn line(&self) -> String {
        let mut parts = Vec::new();
        for (i, (calls, errors, nanos)) in self.snapshot().into_iter().enumerate() {
            if calls > 0 {
                parts.push(format!("{}={calls}/{errors}/{nanos}", METHODS[i]));
            }
        }
        parts.join(" ")
    }
}

/// `inner`, counting what is called through it (calls, errors, time).
#[derive(Debug)]
struct Traced {
    inner: Arc<dyn CheckpointStore>,
    calls: Arc<Calls>,
}

impl Traced {
    fn wrap(inner: Arc<dyn CheckpointStore>) -> (Arc<dyn CheckpointStore>, Arc<Calls>) {
        let calls = Arc::new(Calls::default());
        let store = Arc::new(Traced {
            inner,
            calls: Arc::clone(&calls),
        });
        (store, calls)
    }

    async fn track<T>(
        &self,
        method: usize,
        call: impl Future<Output = fluxio::Result<T>>,
    ) -> fluxio::Result<T> {
        let started = std::time::Instant::now();
        let result = call.await;
        let c = &self.calls;
        c.calls[method].fetch_add(1, Ordering::Relaxed);
        if result.is_err() {
            c.errors[method].fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        c.nanos[method].fetch_add(nanos, Ordering::Relaxed);
        result
    }
}

#[fluxio::async_trait]
impl CheckpointStore for Traced {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
        self.track(0, self.inner.save(checkpoint)).await
    }
    async fn load(&self, key: &str) -> fluxio::Result<Option<Checkpoint>> {
        self.track(1, self.inner.load(key)).await
    }
    async fn delete(&self, key: &str) -> fluxio::Result<()> {
        self.track(2, self.inner.delete(key)).await
    }
    async fn exists(&self, key: &str) -> fluxio::Result<bool> {
        self.track(3, self.inner.exists(key)).await
    }
    async fn history(&self, key: &str) -> fluxio::Result<Vec<Checkpoint>> {
        self.track(4, self.inner.history(key)).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> fluxio::Result<RunPage> {
        self.track(5, self.inner.list_runs(filter)).await
    }
    async fn acquire_lease(&self, key: &str, ttl: Duration) -> fluxio::Result<Lease> {
        self.track(6, self.inner.acquire_lease(key, ttl)).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> fluxio::Result<()> {
        self.track(7, self.inner.renew_lease(lease, ttl)).await
    }
    async fn release_lease(&self, lease: Lease) -> fluxio::Result<()> {
        self.track(8, self.inner.release_lease(lease)).await
    }
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> fluxio::Result<()> {
        self.track(9, self.inner.save_fenced(checkpoint, lease))
            .await
    }
    async fn delete_fenced(&self, key: &str, lease: &Lease) -> fluxio::Result<()> {
        self.track(10, self.inner.delete_fenced(key, lease)).await
    }
    async fn begin_run(
        &self,
        first: Checkpoint,
        ttl: Duration,
        begin: Begin,
    ) -> fluxio::Result<Begun> {
        self.track(11, self.inner.begin_run(first, ttl, begin))
            .await
    }
    async fn finish_run(&self, last: Checkpoint, lease: Lease, delete: bool) -> fluxio::Result<()> {
        self.track(12, self.inner.finish_run(last, lease, delete))
            .await
    }
    async fn cancel(&self, key: &str) -> fluxio::Result<()> {
        self.track(13, self.inner.cancel(key)).await
    }
    async fn send_signal(&self, key: &str, signal: Signal) -> fluxio::Result<Delivery> {
        self.track(14, self.inner.send_signal(key, signal)).await
    }
    async fn take_signal(&self, key: &str, take: &Take, lease: &Lease) -> fluxio::Result<Decision> {
        self.track(15, self.inner.take_signal(key, take, lease))
            .await
    }
    async fn signals(&self, key: &str) -> fluxio::Result<Vec<Signal>> {
        self.track(16, self.inner.signals(key)).await
    }
    async fn due_runs(&self, filter: &DueFilter) -> fluxio::Result<Vec<DueRun>> {
        self.track(17, self.inner.due_runs(filter)).await
    }
    async fn clock_ms(&self) -> fluxio::Result<Option<u64>> {
        self.track(18, self.inner.clock_ms()).await
    }
    async fn watch(&self) -> fluxio::Result<Option<RunEvents>> {
        self.track(19, self.inner.watch()).await
    }
    async fn claim_due(&self, filter: &DueFilter, ttl: Duration) -> fluxio::Result<Vec<Claimed>> {
        self.track(20, self.inner.claim_due(filter, ttl)).await
    }
    async fn set_due(&self, lease: &Lease, due_ms: Option<u64>) -> fluxio::Result<()> {
        self.track(21, self.inner.set_due(lease, due_ms)).await
    }
}

// ---- stores: opening, sizing, removing ----------------------------------------

/// A store kind of this bench, its server's URL, and a namespace of its own.
#[derive(Clone, Debug)]
struct Place {
    kind: StoreKind,
    url: String,
    ns: String,
}

impl Place {
    fn new(kind: StoreKind, what: &str) -> Place {
        Place {
            kind,
            url: kind.url(),
            ns: fluxio_test_support::namespace(&format!("wb_{what}")),
        }
    }

    fn args(&self) -> [String; 3] {
        [
            self.kind.name().to_owned(),
            self.url.clone(),
            self.ns.clone(),
        ]
    }

    async fn open(&self) -> BenchResult<Arc<dyn CheckpointStore>> {
        Ok(self.kind.open(&self.url, &self.ns).await?)
    }

    fn sqlite_file(&self) -> PathBuf {
        Path::new(&self.url).join(format!("{}.db", self.ns))
    }

    /// Removes the namespace: the file, schema, database or keys.
    async fn remove(&self) {
        match self.kind {
            StoreKind::Sqlite => fluxio_test_support::sqlite::remove_database(&self.sqlite_file()),
            StoreKind::Postgres => {
                fluxio_test_support::postgres::drop_schema(&self.url, &self.ns).await;
            }
            StoreKind::MySql => {
                fluxio_test_support::mysql::drop_database(&self.url, &self.ns).await;
            }
            StoreKind::Redis | StoreKind::RedisCluster => {
                if let Some(mut raw) = fluxio_test_support::redis::raw().await {
                    fluxio_test_support::redis::cleanup(&mut raw, &self.ns).await;
                }
            }
        }
    }

    /// The bytes the store keeps in the namespace, and how they were read.
    async fn size(&self) -> BenchResult<Size> {
        match self.kind {
            StoreKind::Sqlite => {
                let file = self.sqlite_file();
                let len = |suffix: &str| {
                    let mut name = file.as_os_str().to_owned();
                    name.push(suffix);
                    std::fs::metadata(name).map_or(0, |m| m.len())
                };
                let (main, wal) = (len(""), len("-wal"));
                // then the WAL written back into the file and emptied
                let mut conn = fluxio_test_support::sqlite::raw_connection(&file).await;
                let busy: i64 = sqlx::query_scalar("PRAGMA wal_checkpoint(TRUNCATE)")
                    .fetch_one(&mut conn)
                    .await?;
                sqlx::Connection::close(conn).await?;
                if busy != 0 {
                    return Err("the WAL checkpoint was blocked".into());
                }
                Ok(Size {
                    bytes: main + wal,
                    settled: Some(len("") + len("-wal")),
                })
            }
            StoreKind::Postgres => {
                use sqlx::Connection as _;
                let mut conn = sqlx::PgConnection::connect(&self.url).await?;
                let total = "SELECT COALESCE(SUM(pg_total_relation_size(\
                     format('%I.%I', schemaname, tablename)::regclass)), 0)::int8 \
                     FROM pg_tables WHERE schemaname = $1";
                let bytes: i64 = sqlx::query_scalar(total)
                    .bind(&self.ns)
                    .fetch_one(&mut conn)
                    .await?;
                let tables: Vec<String> = sqlx::query_scalar(
                    "SELECT tablename::text FROM pg_tables WHERE schemaname = $1",
                )
                .bind(&self.ns)
                .fetch_all(&mut conn)
                .await?;
                for t in &tables {
                    let vacuum = format!("VACUUM FULL \"{}\".\"{t}\"", self.ns);
                    sqlx::Executor::execute(&mut conn, sqlx::raw_sql(&vacuum)).await?;
                }
                let settled: i64 = sqlx::query_scalar(total)
                    .bind(&self.ns)
                    .fetch_one(&mut conn)
                    .await?;
                let _ = conn.close().await;
                Ok(Size {
                    bytes: u64::try_from(bytes)?,
                    settled: Some(u64::try_from(settled)?),
                })
            }
            StoreKind::MySql => {
                use sqlx::Connection as _;
                let mut conn = sqlx::MySqlConnection::connect(&self.url).await?;
                let tables: Vec<String> = sqlx::query_scalar(
                    "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
                     WHERE table_schema = ?",
                )
                .bind(&self.ns)
                .fetch_all(&mut conn)
                .await?;
                for t in &tables {
                    let analyze = format!("ANALYZE TABLE `{}`.`{t}`", self.ns);
                    sqlx::Executor::execute(&mut conn, sqlx::raw_sql(&analyze)).await?;
                }
                let bytes: i64 = sqlx::query_scalar(
                    "SELECT CAST(COALESCE(SUM(data_length + index_length), 0) AS SIGNED) \
                     FROM information_schema.tables WHERE table_schema = ?",
                )
                .bind(&self.ns)
                .fetch_one(&mut conn)
                .await?;
                let _ = conn.close().await;
                Ok(Size {
                    bytes: u64::try_from(bytes)?,
                    settled: None,
                })
            }
            StoreKind::Redis | StoreKind::RedisCluster => {
                let mut raw = fluxio_test_support::redis::raw()
                    .await
                    .ok_or("redis is unreachable")?;
                let keys = fluxio_test_support::redis::keys(&mut raw, &self.ns).await;
                let mut bytes = 0u64;
                for chunk in keys.chunks(500) {
                    let mut pipe = redis::pipe();
                    for key in chunk {
                        pipe.cmd("MEMORY")
                            .arg("USAGE")
                            .arg(key)
                            .arg("SAMPLES")
                            .arg(0);
                    }
                    let used: Vec<Option<u64>> = pipe.query_async(&mut raw).await?;
                    bytes += used.into_iter().flatten().sum::<u64>();
                }
                Ok(Size {
                    bytes,
                    settled: None,
                })
            }
        }
    }
}

/// Redis's `used_memory` (the whole server's).
async fn redis_used_memory() -> BenchResult<u64> {
    let mut raw = fluxio_test_support::redis::raw()
        .await
        .ok_or("redis is unreachable")?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut raw)
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no used_memory in INFO memory".into())
}

/// What [`Place::size`] read: `bytes` as asked (SQLite: file + WAL;
/// Postgres: `pg_total_relation_size` of the schema's tables; MySQL:
/// `data_length + index_length` after `ANALYZE TABLE`; Redis: the sum of
/// `MEMORY USAGE ... SAMPLES 0` of every key of the prefix) and, where
/// there is one, `settled`: SQLite's file after `wal_checkpoint(TRUNCATE)`,
/// Postgres's tables after `VACUUM FULL`.
#[derive(Clone, Copy, Debug)]
struct Size {
    bytes: u64,
    settled: Option<u64>,
}

/// Runs `measure` in the places it creates, then removes them whatever it
/// returned.
async fn in_places<F, Fut>(kind: StoreKind, names: &[&str], measure: F) -> BenchResult
where
    F: FnOnce(Vec<Place>) -> Fut,
    Fut: Future<Output = BenchResult>,
{
    let places: Vec<Place> = names.iter().map(|n| Place::new(kind, n)).collect();
    let result = measure(places.clone()).await;
    for p in &places {
        p.remove().await;
    }
    remove_scratch();
    result
}

// ---- helpers -----------------------------------------------------------------

/// Runs `call(i)` for `i` in `0..n`, `at_once` at a time.
async fn many<F, Fut>(n: u64, at_once: usize, call: F) -> BenchResult
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = BenchResult> + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        if tasks.len() >= at_once {
            if let Some(done) = tasks.join_next().await {
                done??;
            }
        }
        tasks.spawn(call(i));
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// Starts `n` runs `r0`.. of `pipeline` with `input(i)`, 32 at once, and
/// checks each parked (or completed, when `complete`).
async fn start_runs(
    pipeline: &Pipeline,
    n: u64,
    at_ms: u64,
    complete: bool,
) -> BenchResult<Duration> {
    let started = std::time::Instant::now();
    many(n, 32, |i| {
        let p = pipeline.clone();
        async move {
            let out = p.start(&format!("r{i}"), input(i, at_ms)?).await?;
            match (&out, complete) {
                (Outcome::Completed(_), true)
                | (Outcome::Sleeping { .. } | Outcome::Waiting { .. }, false) => Ok(()),
                _ => Err(format!("run r{i}: unexpected {out:?}").into()),
            }
        }
    })
    .await?;
    Ok(started.elapsed())
}

/// VmRSS of this process, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// The lines of `path` (none when it is missing).
fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

fn count_lines(path: &Path) -> usize {
    std::fs::read(path).map_or(0, |b| b.iter().filter(|c| **c == b'\n').count())
}

/// A scratch file path for this run of the bench.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("fluxio-waits-bench");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// A xorshift64* generator: the signals' intervals.
struct Rng(u64);

impl Rng {
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Removes this process's scratch files, and their directory once empty.
fn remove_scratch() {
    let dir = std::env::temp_dir().join("fluxio-waits-bench");
    let mine = format!("{}-", std::process::id());
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&mine) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(&dir);
}

/// The `q`-quantile (0..=1) of sorted `v`, nearest rank.
fn quantile(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---- child processes ---------------------------------------------------------

/// A child process of this binary, its stdout read line by line.
struct Child {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl Child {
    fn spawn(args: &[String]) -> BenchResult<Child> {
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("the child's stdout")?;
        let stdin = child.stdin.take();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Child {
            child,
            stdin,
            lines,
        })
    }

    /// The next line that starts with `prefix` (without it); other lines
    /// are echoed.
    async fn line(&mut self, prefix: &str, within: Duration) -> BenchResult<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.recv())
                .await
                .map_err(|_| format!("no `{prefix}` line from a child within {within:?}"))?
                .ok_or_else(|| format!("a child ended before its `{prefix}` line"))?;
            match line.strip_prefix(prefix) {
                Some(rest) => return Ok(rest.trim().to_owned()),
                None => println!("  child: {line}"),
            }
        }
    }

    /// Tells the child to stop (a line on its stdin).
    fn stop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"stop\n");
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop();
            std::thread::sleep(Duration::from_millis(200));
            if matches!(self.child.try_wait(), Ok(None)) {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

/// Waits for a line on stdin (or its end).
async fn stdin_line() {
    let _ = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    })
    .await;
}

fn place_of(args: &[String]) -> BenchResult<Place> {
    let [kind, url, ns, ..] = args else {
        return Err(format!("a child needs <kind> <url> <ns>: {args:?}").into());
    };
    Ok(Place {
        kind: StoreKind::parse(kind).ok_or("a store kind")?,
        url: url.clone(),
        ns: ns.clone(),
    })
}

/// `_idle <kind> <url> <ns>`: a worker over `sleeper` with default settings;
/// after ten of its polls, prints
/// `idle <rss KiB> <alive tasks> <alive tasks before the worker> <calls>`.
async fn child_idle(args: &[String]) -> BenchResult {
    let place = place_of(args)?;
    let (store, calls) = Traced::wrap(place.open().await?);
    let pipeline = build("sleeper", &store)?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = alive_tasks();
    let worker = RecoveryWorker::builder()
        .pipeline(pipeline)
        .build()?
        .spawn()?;
    // ten polls of the default 250 ms
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    println!(
        "idle {} {} {before} {}",
        rss_kib(),
        alive_tasks(),
        calls.line()
    );
    worker.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

/// `_worker <kind> <url> <ns> <pipeline> <ledger> <done> <due_poll_ms>`: a
/// worker over `pipeline` with default settings (`due_poll` when not 0); the stage `after` writes `ledger`,
/// each `Woken` event appends `key pid time_us completed` to `done`. Prints
/// `ready`, runs until a line on stdin, then prints `calls <calls>`.
async fn child_worker(args: &[String]) -> BenchResult {
    let place = place_of(args)?;
    let [_, _, _, name, ledger, done, due_poll] = args else {
        return Err(format!("_worker: {args:?}").into());
    };
    DUE_POLL_MS.store(due_poll.parse()?, Ordering::Relaxed);
    set_ledger(Some(PathBuf::from(ledger)));
    let (store, calls) = Traced::wrap(place.open().await?);
    let pipeline = build(name, &store)?;
    let done = PathBuf::from(done);
    let worker = worker_builder(pipeline.clone())
        .on_event(move |event| {
            if let RecoveryEvent::Woken {
                key,
                completed,
                error,
            } = event
            {
                let _ = append(
                    &done,
                    &format!("{key} {} {} {completed}", std::process::id(), now_us()),
                );
                if let Some(e) = error {
                    eprintln!("woken run {key} failed: {e}");
                }
            }
        })
        .build()?
        .spawn()?;
    println!("ready");
    stdin_line().await;
    worker.shutdown(Duration::from_secs(10)).await?;
    pipeline.shutdown(Duration::from_secs(5)).await?;
    println!("calls {}", calls.line());
    Ok(())
}

/// `_fresh <kind> <url> <ns> <pipeline> <ledger> <from> <count> <at_us>`:
/// at `at_us` (system clock), runs `count` fresh runs `r<from>`.. of
/// `pipeline`, 8 at once; prints `fresh <end_us>` and `calls <calls>`.
async fn child_fresh(args: &[String]) -> BenchResult {
    let place = place_of(args)?;
    let [_, _, _, name, ledger, from, count, at_us] = args else {
        return Err(format!("_fresh: {args:?}").into());
    };
    let (from, count, at_us): (u64, u64, u64) = (from.parse()?, count.parse()?, at_us.parse()?);
    set_ledger(Some(PathBuf::from(ledger)));
    let (store, calls) = Traced::wrap(place.open().await?);
    let pipeline = build(name, &store)?;
    println!("ready");
    tokio::time::sleep(Duration::from_micros(at_us.saturating_sub(now_us()))).await;
    many(count, 8, |i| {
        let p = pipeline.clone();
        async move {
            let i = from + i;
            p.start(&format!("r{i}"), input(i, 0)?).await?.completed()?;
            Ok(())
        }
    })
    .await?;
    println!("fresh {}", now_us());
    println!("calls {}", calls.line());
    Ok(())
}

// ---- the measures --------------------------------------------------------------

/// Stored bytes per sleeping run, beside a completed run of the same stages.
async fn sizes(kind: StoreKind, runs: u64) -> BenchResult {
    in_places(kind, &["sleeping", "completed"], async |places| {
        let mut per_run = Vec::new();
        for (place, name) in places.iter().zip(["sleeper", "straight"]) {
            let store = place.open().await?;
            let pipeline = build(name, &store)?;
            // read twice: SQLite's first read empties the WAL of the migrations
            place.size().await?;
            let empty = place.size().await?;
            let used_before = match kind {
                StoreKind::Redis => Some(redis_used_memory().await?),
                _ => None,
            };
            // a day ahead: every run sleeps
            let took =
                start_runs(&pipeline, runs, now_ms() + 86_400_000, name != "sleeper").await?;
            let full = place.size().await?;
            let used = match used_before {
                Some(before) => Some(redis_used_memory().await?.saturating_sub(before)),
                None => None,
            };
            pipeline.shutdown(Duration::from_secs(5)).await?;
            println!(
                "  {name}: {} runs in {took:.1?}; {} -> {} bytes (settled {:?} -> {:?}){}",
                thousands(runs),
                thousands(empty.bytes),
                thousands(full.bytes),
                empty.settled,
                full.settled,
                used.map_or(String::new(), |u| format!(
                    "; INFO used_memory grew {} bytes",
                    thousands(u)
                ))
            );
            let per = |a: u64, b: u64| b.saturating_sub(a) as f64 / runs as f64;
            per_run.push((
                per(empty.bytes, full.bytes),
                empty.settled.zip(full.settled).map(|(a, b)| per(a, b)),
                used.map(|u| u as f64 / runs as f64),
            ));
        }
        let (sleeping, completed) = (per_run[0], per_run[1]);
        let how = match kind {
            StoreKind::Sqlite => "file + WAL growth",
            StoreKind::Postgres => "pg_total_relation_size of the schema's tables",
            StoreKind::MySql => "data_length + index_length after ANALYZE TABLE",
            _ => "sum of MEMORY USAGE (SAMPLES 0) of every key of the prefix",
        };
        let settled_how = match kind {
            StoreKind::Sqlite => "; main file after wal_checkpoint(TRUNCATE)",
            StoreKind::Postgres => "; after VACUUM FULL",
            _ => "",
        };
        let settled = match (sleeping.1, completed.1) {
            (Some(s), Some(c)) => format!(
                "{settled_how}: {s:.0} B vs {c:.0} B ({:.2}x)",
                s / c.max(1.0)
            ),
            _ => String::new(),
        };
        let used = match (sleeping.2, completed.2) {
            (Some(s), Some(c)) => format!(
                "; INFO used_memory growth: {s:.0} B vs {c:.0} B ({:.2}x)",
                s / c.max(1.0)
            ),
            _ => String::new(),
        };
        println!(
            "== sizes {}: {} runs sleeping at once: {:.0} B a run | completed run of the same \
             stages without the sleep: {:.0} B a run | {:.2}x ({how}){settled}{used}",
            kind.name(),
            thousands(runs),
            sleeping.0,
            completed.0,
            sleeping.0 / completed.0.max(1.0)
        );
        Ok(())
    })
    .await
}

/// `idle <rss> <tasks> <tasks before> <calls>` of an `_idle` child over `place`.
async fn idle_process(place: &Place) -> BenchResult<(u64, u64, u64, String)> {
    let mut args = vec!["_idle".to_owned()];
    args.extend(place.args());
    let mut child = Child::spawn(&args)?;
    let line = child.line("idle", Duration::from_secs(60)).await?;
    let mut parts = line.splitn(4, ' ');
    let mut next = || parts.next().unwrap_or("").to_owned();
    let (rss, tasks, before, calls) = (next().parse()?, next().parse()?, next().parse()?, next());
    Ok((rss, tasks, before, calls))
}

/// The resident memory and alive tasks of a worker process with 0 and with
/// `runs` sleeping runs.
async fn memory(kind: StoreKind, runs: u64) -> BenchResult {
    in_places(kind, &["memory"], async |places| {
        let place = &places[0];
        let store = place.open().await?;
        let pipeline = build("sleeper", &store)?;
        let empty = idle_process(place).await?;
        let took = start_runs(&pipeline, runs, now_ms() + 86_400_000, false).await?;
        pipeline.shutdown(Duration::from_secs(5)).await?;
        let full = idle_process(place).await?;
        println!(
            "  0 sleeping: rss {} KiB, tasks {} ({} before the worker), store calls in 2.6 s: {}",
            empty.0, empty.1, empty.2, empty.3
        );
        println!(
            "  {} sleeping (started in {took:.1?}): rss {} KiB, tasks {} ({} before the worker), \
             store calls in 2.6 s: {}",
            thousands(runs),
            full.0,
            full.1,
            full.2,
            full.3
        );
        println!(
            "== memory {}: worker process with {} sleeping runs: {:.1} MiB resident, {} alive \
             tasks | with 0: {:.1} MiB, {} alive tasks | {:+} KiB, {:+} tasks (after 10 polls of \
             250 ms each)",
            kind.name(),
            thousands(runs),
            full.0 as f64 / 1024.0,
            full.1,
            empty.0 as f64 / 1024.0,
            empty.1,
            full.0 as i64 - empty.0 as i64,
            full.1 as i64 - empty.1 as i64
        );
        Ok(())
    })
    .await
}

/// Spawns `n` `_worker` children over `place` and waits for each `ready`.
async fn workers(
    place: &Place,
    n: usize,
    pipeline: &str,
    ledger: &Path,
    done: &Path,
) -> BenchResult<Vec<Child>> {
    let mut children = Vec::new();
    for _ in 0..n {
        let mut args = vec!["_worker".to_owned()];
        args.extend(place.args());
        args.extend([
            pipeline.to_owned(),
            ledger.display().to_string(),
            done.display().to_string(),
            DUE_POLL_MS.load(Ordering::Relaxed).to_string(),
        ]);
        children.push(Child::spawn(&args)?);
    }
    for c in &mut children {
        c.line("ready", Duration::from_secs(60)).await?;
    }
    Ok(children)
}

/// Stops `children` and returns their `calls` lines.
async fn stop_all(children: &mut [Child]) -> BenchResult<Vec<String>> {
    for c in children.iter_mut() {
        c.stop();
    }
    let mut calls = Vec::new();
    for c in children.iter_mut() {
        calls.push(c.line("calls", Duration::from_secs(60)).await?);
    }
    Ok(calls)
}

/// Sums `method=calls/errors/nanoseconds` lines: method -> (calls,
/// errors, nanoseconds).
fn sum_calls(lines: &[String]) -> BTreeMap<String, (u64, u64, u64)> {
    let mut sum: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for line in lines {
        for part in line.split_whitespace() {
            let Some((method, counts)) = part.split_once('=') else {
                continue;
            };
            let mut numbers = counts.split('/').map(|n| n.parse::<u64>().unwrap_or(0));
            let e = sum.entry(method.to_owned()).or_default();
            e.0 += numbers.next().unwrap_or(0);
            e.1 += numbers.next().unwrap_or(0);
            e.2 += numbers.next().unwrap_or(0);
        }
    }
    sum
}

/// Each method's calls a run (and failures), and the mean time of a call.
fn per_run(sum: &BTreeMap<String, (u64, u64, u64)>, runs: u64) -> String {
    sum.iter()
        .map(|(m, (c, e, nanos))| {
            let errors = if *e > 0 {
                format!(" ({e} failed)")
            } else {
                String::new()
            };
            let mean_ms = *nanos as f64 / (*c).max(1) as f64 / 1e6;
            format!(
                "{m} {:.2}{errors} ({mean_ms:.2} ms)",
                *c as f64 / runs as f64
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The ledger's check: (lines, distinct runs, runs seen more than once).
fn check_ledger(path: &Path) -> (usize, usize, usize) {
    let mut seen: HashMap<String, u32> = HashMap::new();
    let all = lines(path);
    for l in &all {
        if let Some(run) = l.split_whitespace().next() {
            *seen.entry(run.to_owned()).or_default() += 1;
        }
    }
    let twice = seen.values().filter(|n| **n > 1).count();
    (all.len(), seen.len(), twice)
}

/// Waits until `path` has `n` lines, at most `within`.
async fn until_lines(path: &Path, n: usize, within: Duration) -> BenchResult {
    let deadline = std::time::Instant::now() + within;
    while count_lines(path) < n {
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "{} has {} lines of {n} after {within:?}",
                path.display(),
                count_lines(path)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// `runs` runs due at once, woken by `n` worker processes, beside the same
/// processes running as many fresh runs of the stage after the sleep.
async fn wake(kind: StoreKind, runs: u64, n: usize, due_in: Duration) -> BenchResult {
    in_places(kind, &["fresh", "wake"], async |places| {
        let (fresh_place, wake_place) = (&places[0], &places[1]);
        // the baseline: n processes, runs / n fresh runs each, 8 at once
        let fresh_ledger = scratch("fresh-ledger");
        fresh_place.open().await?; // created before the processes race to
        let at_us = now_us() + 3_000_000;
        let mut children = Vec::new();
        let each = runs / n as u64;
        for i in 0..n as u64 {
            let mut args = vec!["_fresh".to_owned()];
            args.extend(fresh_place.args());
            args.extend([
                "tail".to_owned(),
                fresh_ledger.display().to_string(),
                (i * each).to_string(),
                each.to_string(),
                at_us.to_string(),
            ]);
            children.push(Child::spawn(&args)?);
        }
        for c in &mut children {
            c.line("ready", Duration::from_secs(60)).await?;
        }
        let mut fresh_end = 0u64;
        let mut fresh_calls = Vec::new();
        for c in &mut children {
            let end: u64 = c.line("fresh", Duration::from_secs(900)).await?.parse()?;
            fresh_end = fresh_end.max(end);
            fresh_calls.push(c.line("calls", Duration::from_secs(60)).await?);
        }
        drop(children);
        let fresh_runs = each * n as u64;
        let fresh_secs = fresh_end.saturating_sub(at_us) as f64 / 1e6;
        let fresh_rate = fresh_runs as f64 / fresh_secs;
        let fresh_check = check_ledger(&fresh_ledger);
        println!(
            "  baseline: {} fresh runs of [after] by {n} processes (8 at once each) in {fresh_secs:.2} s: \
             {fresh_rate:.0} runs/s; ledger {fresh_check:?}; store calls a run: {}",
            thousands(fresh_runs),
            per_run(&sum_calls(&fresh_calls), fresh_runs)
        );

        // the runs due at once
        let ledger = scratch("wake-ledger");
        let done = scratch("wake-done");
        let store = wake_place.open().await?;
        let pipeline = build("sleeper", &store)?;
        let due_ms = now_ms() + u64::try_from(due_in.as_millis())?;
        let took = start_runs(&pipeline, runs, due_ms, false).await?;
        pipeline.shutdown(Duration::from_secs(5)).await?;
        let ahead = due_ms.saturating_sub(now_ms());
        println!(
            "  {} runs sleeping until one instant, started in {took:.1?}; due in {ahead} ms",
            thousands(runs)
        );
        if ahead < 2_000 {
            return Err(format!(
                "the runs were started too close to their wake time: give --due-in more than {due_in:?}"
            )
            .into());
        }
        let mut children = workers(wake_place, n, "sleeper", &ledger, &done).await?;
        until_lines(&done, runs as usize, Duration::from_secs(900) + due_in).await?;
        let calls = stop_all(&mut children).await?;
        drop(children);
        let due_us = due_ms * 1_000;
        let done_lines = lines(&done);
        let last = done_lines
            .iter()
            .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let completed = done_lines.iter().filter(|l| l.ends_with(" true")).count();
        let starts: Vec<u64> = lines(&ledger)
            .iter()
            .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
            .collect();
        let first_start = starts.iter().min().copied().unwrap_or(0);
        let by_pid = {
            let mut m: BTreeMap<String, u64> = BTreeMap::new();
            for l in lines(&ledger) {
                if let Some(pid) = l.split_whitespace().nth(1) {
                    *m.entry(pid.to_owned()).or_default() += 1;
                }
            }
            m.values().map(u64::to_string).collect::<Vec<_>>().join("/")
        };
        let (lines_n, distinct, twice) = check_ledger(&ledger);
        let secs = last.saturating_sub(due_us) as f64 / 1e6;
        let rate = runs as f64 / secs;
        println!(
            "  woken: the first `after` started {} ms after the due instant, the last run ended \
             {secs:.2} s after it; {completed} completed; runs by process {by_pid}",
            first_start.saturating_sub(due_us) / 1_000
        );
        println!(
            "  store calls a woken run ({n} worker processes, polls included): {}",
            per_run(&sum_calls(&calls), runs)
        );
        println!(
            "== wake {}: {} runs due at one instant, {n} worker processes ({}): {rate:.0} runs woken/s \
             (due instant -> last run ended: {secs:.2} s) | baseline {fresh_rate:.0} fresh runs/s \
             of the stage after the sleep alone ({n} processes x {}, 8 at once each) | {:.2}x | \
             ledger: {lines_n} executions of the stage after the sleep, {distinct} runs, {twice} \
             run(s) twice",
            kind.name(),
            thousands(runs),
            due_poll_label(),
            thousands(each),
            rate / fresh_rate
        );
        Ok(())
    })
    .await
}

/// Signal-to-next-stage latency at `rate` signals a second, over `signals`
/// waiting runs.
async fn latency(kind: StoreKind, rate: f64, signals: u64, in_process: bool) -> BenchResult {
    in_places(kind, &["latency"], async |places| {
        let place = &places[0];
        let ledger = scratch("latency-ledger");
        let done = scratch("latency-done");
        let store = place.open().await?;
        let pipeline = build("waiter", &store)?;
        start_runs(&pipeline, signals, 0, false).await?;
        // the worker: another process, or a task of this one
        let mut children = Vec::new();
        let mut local = None;
        if in_process {
            set_ledger(Some(ledger.clone()));
            local = Some(worker_builder(pipeline.clone()).build()?.spawn()?);
        } else {
            children = workers(place, 1, "waiter", &ledger, &done).await?;
        }
        // its first sweep over, and its subscription in place
        tokio::time::sleep(Duration::from_secs(1)).await;
        let sent: Arc<Mutex<HashMap<String, (u64, u64)>>> = Arc::default();
        let t0 = tokio::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        // at random (exponential) intervals averaging 1/rate, the same each
        // time: signals at a fixed period would fall in step with the
        // worker's poll, always at the same moment of it
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut at = 0.0f64;
        for i in 0..signals {
            at += -(1.0 - rng.unit()).ln() / rate;
            tokio::time::sleep_until(t0 + Duration::from_secs_f64(at)).await;
            let (p, sent) = (pipeline.clone(), Arc::clone(&sent));
            tasks.spawn(async move {
                let run = format!("r{i}");
                let at = now_us();
                let delivered = p.signal(&run, "go", &1u64).await?;
                let acked = now_us();
                if delivered != Delivery::Delivered {
                    return Err(format!("{run}: {delivered:?}").into());
                }
                sent.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(run, (at, acked));
                BenchResult::Ok(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        let sending = t0.elapsed();
        until_lines(&ledger, signals as usize, Duration::from_secs(120)).await?;
        if let Some(worker) = local {
            worker.shutdown(Duration::from_secs(5)).await?;
            set_ledger(None);
        }
        stop_all(&mut children).await?;
        drop(children);
        let sent = sent.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut lat = Vec::new();
        let mut call = Vec::new();
        let mut seen = HashSet::new();
        for l in lines(&ledger) {
            let mut parts = l.split_whitespace();
            let (Some(run), Some(_pid), Some(start)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let run = run.rsplit('/').next().unwrap_or(run);
            let (Some((at, acked)), Ok(start)) = (sent.get(run), start.parse::<u64>()) else {
                continue;
            };
            if seen.insert(run.to_owned()) {
                lat.push(start.saturating_sub(*at));
                call.push(acked.saturating_sub(*at));
            }
        }
        lat.sort_unstable();
        call.sort_unstable();
        let ms = |us: u64| us as f64 / 1_000.0;
        let who = if in_process {
            "a worker task in the signalling process"
        } else {
            "a worker process"
        };
        println!(
            "  {} signals sent in {sending:.1?}; {} stage starts; signal call p50 {:.1} ms, p99 {:.1} ms; latency max {:.1} ms",
            thousands(signals),
            lat.len(),
            ms(quantile(&call, 0.5)),
            ms(quantile(&call, 0.99)),
            ms(lat.last().copied().unwrap_or(0))
        );
        println!(
            "== latency {} at {rate}/s ({} signals at random intervals, {who}, {}): signal send -> \
             next stage start p50 {:.1} ms, p99 {:.1} ms | the signal call itself: p50 {:.1} ms, \
             p99 {:.1} ms | p50 {:.1}x the call",
            kind.name(),
            thousands(signals),
            due_poll_label(),
            ms(quantile(&lat, 0.5)),
            ms(quantile(&lat, 0.99)),
            ms(quantile(&call, 0.5)),
            ms(quantile(&call, 0.99)),
            quantile(&lat, 0.5) as f64 / quantile(&call, 0.5).max(1) as f64
        );
        Ok(())
    })
    .await
}

/// Store calls of one woken run, one run woken by a signal and one fresh
/// run, one at a time in this process.
async fn trips(kind: StoreKind, runs: u64) -> BenchResult {
    in_places(kind, &["trips"], async |places| {
        let place = &places[0];
        let (store, calls) = Traced::wrap(place.open().await?);
        let measure = async |what: &str, before: Vec<(u64, u64, u64)>| {
            let after = calls.snapshot();
            let mut parts = Vec::new();
            let (mut total, mut total_ns) = (0u64, 0u64);
            for (i, (a, b)) in after.iter().zip(before).enumerate() {
                let (n, ns) = (a.0 - b.0, a.2 - b.2);
                if n > 0 {
                    total += n;
                    total_ns += ns;
                    parts.push(format!(
                        "{} {:.2} ({:.2} ms each)",
                        METHODS[i],
                        n as f64 / runs as f64,
                        ns as f64 / n as f64 / 1e6
                    ));
                }
            }
            println!(
                "  {what}: {:.2} store calls a run, {:.2} ms of store time a run: {}",
                total as f64 / runs as f64,
                total_ns as f64 / runs as f64 / 1e6,
                parts.join(", ")
            );
            total as f64 / runs as f64
        };
        // fresh runs of the stage after the sleep, and of both stages
        let tail = build("tail", &store)?;
        let before = calls.snapshot();
        for i in 0..runs {
            tail.start(&format!("t{i}"), input(i, 0)?)
                .await?
                .completed()?;
        }
        let fresh = measure("fresh run of [after]", before).await;
        let straight = build("straight", &store)?;
        let before = calls.snapshot();
        for i in 0..runs {
            straight
                .start(&format!("s{i}"), input(i, 0)?)
                .await?
                .completed()?;
        }
        measure("fresh run of [first, after]", before).await;
        // runs put to sleep, then woken by one pass of a worker, 1 at a time
        let sleeper = build("sleeper", &store)?;
        let before = calls.snapshot();
        let due = now_ms() + 3_000;
        for i in 0..runs {
            let out = sleeper.start(&format!("z{i}"), input(i, due)?).await?;
            if !matches!(out, Outcome::Sleeping { .. }) {
                return Err(format!("z{i} should sleep: {out:?}").into());
            }
        }
        measure("start of a sleeping run (first, then the sleep)", before).await;
        tokio::time::sleep(Duration::from_millis(due.saturating_sub(now_ms()) + 50)).await;
        let before = calls.snapshot();
        let sweep = one_pass(&sleeper).await?;
        let woken = measure(
            &format!("woken sleeping run ({} woken by one run_once)", sweep.woken),
            before,
        )
        .await;
        // runs waiting, signalled, then woken by one pass
        let waiter = build("waiter", &store)?;
        for i in 0..runs {
            let out = waiter.start(&format!("w{i}"), input(i, 0)?).await?;
            if !matches!(out, Outcome::Waiting { .. }) {
                return Err(format!("w{i} should wait: {out:?}").into());
            }
        }
        let before = calls.snapshot();
        for i in 0..runs {
            waiter.signal(&format!("w{i}"), "go", &1u64).await?;
        }
        measure("signal", before).await;
        let before = calls.snapshot();
        let sweep = one_pass(&waiter).await?;
        let signalled = measure(
            &format!(
                "woken signalled run ({} woken by one run_once)",
                sweep.woken
            ),
            before,
        )
        .await;
        for p in [tail, straight, sleeper, waiter] {
            p.shutdown(Duration::from_secs(5)).await?;
        }
        println!(
            "== trips {}: store calls a woken sleeping run {woken:.2}, a woken signalled run \
             {signalled:.2} | a fresh run of the stage after the sleep {fresh:.2} | {:.2}x \
             (one run at a time, {runs} runs, one worker pass)",
            kind.name(),
            woken / fresh
        );
        Ok(())
    })
    .await
}

/// One pass of a worker of `p` that continues one run at a time.
async fn one_pass(p: &Pipeline) -> BenchResult<fluxio::recovery::Sweep> {
    let worker = RecoveryWorker::builder()
        .pipeline(p.clone())
        .concurrency(1)
        .build()?;
    Ok(worker.run_once().await?)
}

// ---- the command line --------------------------------------------------------

#[derive(Debug)]
struct Options {
    runs: u64,
    workers: usize,
    rate: Option<f64>,
    signals: Option<u64>,
    due_in: Duration,
    in_process: bool,
    due_poll_ms: u64,
}

fn usage() -> String {
    "usage: fluxio-waits-bench <sizes|memory|wake|latency|trips|all> <sqlite|postgres|mysql|redis> \
     [--runs N] [--workers N] [--rate PER_S] [--signals N] [--due-in SECONDS] \
     [--signaller process|task] [--due-poll MS]"
        .to_owned()
}

fn options(args: &[String]) -> BenchResult<Options> {
    let mut o = Options {
        runs: 10_000,
        workers: 4,
        rate: None,
        signals: None,
        due_in: Duration::from_secs(60),
        in_process: false,
        due_poll_ms: 0,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(usage)?;
        match flag.as_str() {
            "--runs" => o.runs = value.parse()?,
            "--workers" => o.workers = value.parse()?,
            "--rate" => o.rate = Some(value.parse()?),
            "--signals" => o.signals = Some(value.parse()?),
            "--due-in" => o.due_in = Duration::from_secs(value.parse()?),
            "--signaller" => o.in_process = value == "task",
            "--due-poll" => o.due_poll_ms = value.parse()?,
            _ => return Err(usage().into()),
        }
    }
    Ok(o)
}

async fn run(args: Vec<String>) -> BenchResult {
    let command = args.get(1).map(String::as_str).unwrap_or("");
    let rest = args.get(2..).unwrap_or_default();
    match command {
        "_idle" => return child_idle(rest).await,
        "_worker" => return child_worker(rest).await,
        "_fresh" => return child_fresh(rest).await,
        _ => {}
    }
    let kind = rest
        .first()
        .and_then(|k| StoreKind::parse(k))
        .filter(|k| *k != StoreKind::RedisCluster)
        .ok_or_else(usage)?;
    let o = options(rest.get(1..).unwrap_or_default())?;
    DUE_POLL_MS.store(o.due_poll_ms, Ordering::Relaxed);
    println!(
        "fluxio-waits-bench {command} {} ({} cores; load average {})",
        kind.name(),
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );
    let result = match command {
        "sizes" => sizes(kind, o.runs).await,
        "memory" => memory(kind, o.runs).await,
        "wake" => wake(kind, o.runs, o.workers, o.due_in).await,
        "latency" => {
            let rate = o.rate.unwrap_or(100.0);
            let signals = o.signals.unwrap_or((rate * 20.0).max(100.0) as u64);
            latency(kind, rate, signals, o.in_process).await
        }
        "trips" => trips(kind, o.signals.unwrap_or(100)).await,
        "all" => {
            sizes(kind, o.runs).await?;
            memory(kind, o.runs).await?;
            wake(kind, o.runs, o.workers, o.due_in).await?;
            latency(kind, 1.0, 100, o.in_process).await?;
            latency(kind, 100.0, 2_000, o.in_process).await
        }
        _ => Err(usage().into()),
    };
    // other processes on the machine move the timings: say how busy it was
    println!("  load average at the end: {}", load_average());
    result
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Err(e) = run(args).await {
        match e.downcast_ref::<Error>() {
            Some(e) => eprintln!("error: {}", e.message_with_causes()),
            None => eprintln!("error: {e}"),
        }
        std::process::exit(1);
    }
}
