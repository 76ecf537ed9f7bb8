//! Store faults against real servers: every run either finishes once the
//! store is back or fails with a typed store error and resumes cleanly later;
//! no acknowledged checkpoint is lost; nothing hangs.
//!
//! - Redis restarted mid-run (SIGTERM, and SIGKILL with `appendfsync always`):
//!   a private `redis-server` on a free port, 8 concurrent runs of a 6-stage
//!   pipeline.
//! - Postgres: the store's own connections terminated three times in a row
//!   with `pg_terminate_backend`, filtered on a unique `application_name`.
//! - Redis frozen with SIGSTOP (accepts TCP, never answers): every call and
//!   every run fails within the configured timeout; after SIGCONT it works.
//!
//! A recording store wraps the real one and notes, outside the store, every
//! checkpoint the store acknowledged; after the fault, the stored checkpoint
//! of each run must be at least as far.
//!
//! Two tests pin down bugs these faults exposed and that are now fixed (the
//! first call after the store is back failed although the store was fine;
//! both stores now retry a call whose connection died). Without
//! `redis-server` or the Postgres server these tests skip loudly, unless `CI`
//! is set.

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fluxio::store::{Checkpoint, CheckpointStore, Lease};
use fluxio::{
    Context, Error, Outcome, Pipeline, PipelineBuilder, PostgresStore, RedisStore, RunStatus,
    StageResult, pipeline, stage,
};
use fluxio_test_support::{namespace, skip_unless_ci};
use fluxio_tests::StoreKind;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

/// Concurrent runs per scenario.
const RUNS: usize = 8;
/// A run (or a resume) that takes longer than this is hung.
const HANG: Duration = Duration::from_secs(20);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------
// The pipeline: six slow stages, deterministic output.

/// Stage executions per run tag (`test` key of the context).
static EXECUTIONS: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

async fn step(ctx: Context, k: usize) -> StageResult {
    let delays: Vec<u64> = ctx.get("delays_ms")?;
    let tag: String = ctx.get("tag")?;
    *lock(&EXECUTIONS)
        .get_or_insert_with(HashMap::new)
        .entry(tag)
        .or_default() += 1;
    tokio::time::sleep(Duration::from_millis(delays[k - 1])).await;
    let acc: u64 = ctx.get("acc")?;
    Ok(ctx
        .set("acc", acc.wrapping_mul(31).wrapping_add(k as u64))?
        .set(format!("f{k}"), k)?)
}

#[stage]
async fn f1(ctx: Context) -> StageResult {
    step(ctx, 1).await
}
#[stage]
async fn f2(ctx: Context) -> StageResult {
    step(ctx, 2).await
}
#[stage]
async fn f3(ctx: Context) -> StageResult {
    step(ctx, 3).await
}
#[stage]
async fn f4(ctx: Context) -> StageResult {
    step(ctx, 4).await
}
#[stage]
async fn f5(ctx: Context) -> StageResult {
    step(ctx, 5).await
}
#[stage]
async fn f6(ctx: Context) -> StageResult {
    step(ctx, 6).await
}

fn six_stages() -> PipelineBuilder {
    pipeline![f1, f2, f3, f4, f5, f6]
}

fn executions(tag: &str) -> usize {
    lock(&EXECUTIONS)
        .as_ref()
        .and_then(|m| m.get(tag).copied())
        .unwrap_or(0)
}

fn input(tag: &str, i: usize, delays: &[u64]) -> Context {
    Context::new()
        .set("tag", tag)
        .and_then(|c| c.set("acc", i as u64 + 7))
        .and_then(|c| c.set("delays_ms", delays.to_vec()))
        .expect("a valid input")
}

// ---------------------------------------------------------------------------
// The recording store: every acknowledged checkpoint, kept outside the store.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ack {
    ip: u32,
    status: RunStatus,
    saves: usize,
}

type Acks = Arc<Mutex<HashMap<String, Ack>>>;

#[derive(Debug)]
struct Recorder {
    inner: Arc<dyn CheckpointStore>,
    acked: Acks,
}

impl Recorder {
    fn ack(&self, cp: &Checkpoint) {
        let mut acked = lock(&self.acked);
        let saves = acked.get(&cp.run_id).map_or(0, |a| a.saves);
        acked.insert(
            cp.run_id.clone(),
            Ack {
                ip: cp.ip,
                status: cp.status,
                saves: saves + 1,
            },
        );
    }

    fn forget(&self, run_id: &str) {
        lock(&self.acked).remove(run_id);
    }
}

#[async_trait::async_trait]
impl CheckpointStore for Recorder {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
        let cp = checkpoint.clone();
        self.inner.save(checkpoint).await?;
        self.ack(&cp);
        Ok(())
    }
    async fn load(&self, run_id: &str) -> fluxio::Result<Option<Checkpoint>> {
        self.inner.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
        self.inner.delete(run_id).await?;
        self.forget(run_id);
        Ok(())
    }
    async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
        self.inner.exists(run_id).await
    }
    async fn acquire_lease(&self, run_id: &str, ttl: Duration) -> fluxio::Result<Lease> {
        self.inner.acquire_lease(run_id, ttl).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> fluxio::Result<()> {
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: Lease) -> fluxio::Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> fluxio::Result<()> {
        let cp = checkpoint.clone();
        self.inner.save_fenced(checkpoint, lease).await?;
        self.ack(&cp);
        Ok(())
    }
    async fn delete_fenced(&self, run_id: &str, lease: &Lease) -> fluxio::Result<()> {
        self.inner.delete_fenced(run_id, lease).await?;
        self.forget(run_id);
        Ok(())
    }
    async fn cancel(&self, run_id: &str) -> fluxio::Result<()> {
        self.inner.cancel(run_id).await
    }
}

/// Whether `stored` is at least as far as the acknowledged `ack`.
fn at_least(stored: &Checkpoint, ack: Ack) -> bool {
    let rank = |s: RunStatus| u8::from(s == RunStatus::Completed);
    stored.ip >= ack.ip && rank(stored.status) >= rank(ack.status)
}

// ---------------------------------------------------------------------------
// The scenario shared by the Redis restarts and the Postgres terminations.

struct Scenario {
    backend: &'static str,
    tag: String,
    rt: Runtime,
    raw: Arc<dyn CheckpointStore>,
    acked: Acks,
    durable: Pipeline,
    reference: Pipeline,
    inputs: Vec<Context>,
}

type RunResult = (
    Result<fluxio::Result<Context>, tokio::time::error::Elapsed>,
    Duration,
);

impl Scenario {
    fn new(
        backend: &'static str,
        tag: &str,
        rt: Runtime,
        raw: Arc<dyn CheckpointStore>,
        lease_ttl: Duration,
        delays: impl Fn(usize) -> Vec<u64>,
    ) -> Self {
        let acked = Acks::default();
        let recorder = Recorder {
            inner: Arc::clone(&raw),
            acked: Arc::clone(&acked),
        };
        let durable = six_stages()
            .name("test")
            .store(recorder)
            .lease_ttl(lease_ttl)
            .build()
            .expect("a valid pipeline");
        let reference = six_stages().build().expect("a valid pipeline");
        let inputs = (0..RUNS).map(|i| input(tag, i, &delays(i))).collect();
        Scenario {
            backend,
            tag: tag.to_owned(),
            rt,
            raw,
            acked,
            durable,
            reference,
            inputs,
        }
    }

    fn run_id(i: usize) -> String {
        format!("run-{i}")
    }

    /// Starts every run, each bounded by [`HANG`].
    fn start(&self) -> Vec<JoinHandle<RunResult>> {
        (0..RUNS)
            .map(|i| {
                let p = self.durable.clone();
                let ctx = self.inputs[i].clone();
                self.rt.spawn(async move {
                    let t = Instant::now();
                    let r = tokio::time::timeout(HANG, p.invoke(&Self::run_id(i), ctx))
                        .await
                        .map(|r| r.and_then(Outcome::completed));
                    (r, t.elapsed())
                })
            })
            .collect()
    }

    /// Blocks until every run has `saves` acknowledged checkpoints.
    fn wait_for_saves(&self, saves: impl Fn(usize) -> usize) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let acked = lock(&self.acked).clone();
            let behind: Vec<usize> = (0..RUNS)
                .filter(|i| acked.get(&Self::run_id(*i)).map_or(0, |a| a.saves) < saves(*i))
                .collect();
            if behind.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: runs {behind:?} did not get in flight: {acked:?}",
                self.backend
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for every run, checks each ended Ok or with a typed error, that
    /// no acknowledged checkpoint is lost, then resumes the failed runs and
    /// checks every final context against an uninterrupted run's.
    /// `must_hit`: the fault must have failed at least one run (a store that
    /// rides out the fault, as Postgres does with terminated connections,
    /// passes `false`: then every run must have finished on its own).
    fn finish(&self, runs: Vec<JoinHandle<RunResult>>, what: &str, must_hit: bool) {
        let backend = self.backend;
        let expected: Vec<Context> = self.rt.block_on(async {
            let runs = self.inputs.iter().enumerate().map(|(i, c)| {
                let (p, c) = (self.reference.clone(), c.clone());
                async move {
                    p.invoke(&format!("ref-{i}"), c)
                        .await
                        .and_then(Outcome::completed)
                }
            });
            futures::future::try_join_all(runs)
                .await
                .expect("the uninterrupted runs succeed")
        });

        let mut failed = Vec::new();
        let (mut ok, mut store_errs, mut lease_lost) = (0, 0, 0);
        let mut slowest = Duration::ZERO;
        for (i, handle) in runs.into_iter().enumerate() {
            let (result, took) = self
                .rt
                .block_on(handle)
                .expect("the run task did not panic");
            slowest = slowest.max(took);
            match result {
                Err(_) => panic!("{what}: run {i} hung for {HANG:?}"),
                Ok(Ok(ctx)) => {
                    assert_eq!(
                        ctx, expected[i],
                        "{what}: run {i} finished with another context"
                    );
                    ok += 1;
                }
                Ok(Err(Error::Store {
                    backend: b, source, ..
                })) if b == backend => {
                    eprintln!("{what}: run {i} failed after {took:?}: {source}");
                    store_errs += 1;
                    failed.push(i);
                }
                Ok(Err(e @ Error::LeaseLost { .. })) => {
                    eprintln!("{what}: run {i} failed after {took:?}: {e}");
                    lease_lost += 1;
                    failed.push(i);
                }
                Ok(Err(e)) => panic!("{what}: run {i} failed with an untyped error: {e:?}"),
            }
        }

        // No acknowledged checkpoint is lost (checked before any resume).
        let acked = lock(&self.acked).clone();
        for i in 0..RUNS {
            let id = Self::run_id(i);
            let ack = *acked
                .get(&id)
                .unwrap_or_else(|| panic!("{what}: run {i} has no acknowledged checkpoint"));
            let stored = self
                .rt
                .block_on(async {
                    tokio::time::timeout(HANG, self.raw.load(&format!("test/{id}"))).await
                })
                .unwrap_or_else(|_| panic!("{what}: loading run {i} hung"))
                .unwrap_or_else(|e| panic!("{what}: loading run {i} once the store is back: {e}"))
                .unwrap_or_else(|| panic!("{what}: run {i}'s checkpoint is gone (acked {ack:?})"));
            assert!(
                at_least(&stored, ack),
                "{what}: run {i} lost an acknowledged checkpoint: acked {ack:?}, stored ip {} {:?}",
                stored.ip,
                stored.status
            );
        }

        // Every failed run resumes to completion (all at once, as workers would).
        let resume_started = Instant::now();
        let resumed = self
            .rt
            .block_on(futures::future::join_all(failed.iter().map(|&i| {
                let p = self.durable.clone();
                async move { resume_until_done(&p, &Self::run_id(i)).await }
            })));
        let mut in_use_retries = 0;
        for (&i, (ctx, retries)) in failed.iter().zip(resumed) {
            in_use_retries += retries;
            assert_eq!(
                ctx, expected[i],
                "{what}: resumed run {i} ended with another context"
            );
        }
        for (i, want) in expected.iter().enumerate() {
            let stored = self
                .rt
                .block_on(self.raw.load(&format!("test/{}", Self::run_id(i))))
                .expect("load")
                .expect("stored");
            assert_eq!(stored.status, RunStatus::Completed, "{what}: run {i}");
            assert_eq!(stored.context.to_context(), *want, "{what}: run {i}");
        }
        eprintln!(
            "{what}: {RUNS} runs: {ok} ok, {store_errs} store errors, {lease_lost} lease lost; \
             slowest run {slowest:?}; {} resumed in {:?} ({in_use_retries} run-id-in-use retries); \
             {} stage executions for {} stages",
            failed.len(),
            resume_started.elapsed(),
            // the uninterrupted reference runs executed every stage once
            executions(&self.tag) - RUNS * 6,
            RUNS * 6
        );
        assert!(
            !must_hit || !failed.is_empty(),
            "{what}: the fault hit no run, so it tested nothing"
        );
        // A failed run re-executes at most the stage it was in: its resume
        // starts from its last acknowledged checkpoint or a later one.
        let repeated = executions(&self.tag) - 2 * RUNS * 6;
        assert!(
            repeated <= failed.len(),
            "{what}: {repeated} stages ran twice for {} interrupted runs",
            failed.len()
        );
    }
}

/// Resumes `run_id` until it completes, retrying while its previous lease
/// has not lapsed; returns the context and the number of retries.
async fn resume_until_done(p: &Pipeline, run_id: &str) -> (Context, usize) {
    let start = Instant::now();
    let mut retries = 0;
    loop {
        match tokio::time::timeout(HANG, p.resume(run_id))
            .await
            .map(|r| r.and_then(Outcome::completed))
        {
            Err(_) => panic!("resume of {run_id} hung for {HANG:?}"),
            Ok(Ok(ctx)) => return (ctx, retries),
            Ok(Err(Error::RunIdInUse { .. })) if start.elapsed() < Duration::from_secs(15) => {
                retries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(Err(e)) => panic!(
                "resume of {run_id} failed after {:?} and {retries} retries once the store was back: {e:?}",
                start.elapsed()
            ),
        }
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

// ---------------------------------------------------------------------------
// A private redis-server.

struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port with AOF (`appendfsync always`), or
    /// `None` (skipped) when `redis-server` is not installed.
    fn start(name: &str) -> Option<RedisServer> {
        if let Err(e) = Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
        {
            return skip_unless_ci("redis-server (the binary)", &e);
        }
        let dir = std::env::temp_dir().join(format!(
            "fluxio-faults-{}-{}",
            std::process::id(),
            namespace(name)
        ));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut server = RedisServer {
                port,
                dir: dir.clone(),
                child: None,
            };
            if server.spawn() {
                return Some(server);
            }
        }
        panic!("redis-server did not start; see {}", dir.display());
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the process on `port` and `dir`; `false` when it exited (port taken).
    fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if child.try_wait().expect("try_wait").is_some() {
                    self.child = None;
                    return false;
                }
            }
            if self.ping() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "redis-server on port {} did not answer PING; see {}",
            self.port,
            self.dir.join("redis.log").display()
        );
    }

    fn ping(&self) -> bool {
        let addr = ([127, 0, 0, 1], self.port).into();
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 64];
        s.write_all(b"PING\r\n").is_ok()
            && s.read(&mut buf)
                .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server runs").id()
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {sig} {}", self.pid());
    }

    /// Stops the server with `sig` and waits for it to exit.
    fn stop(&mut self, sig: &str) {
        self.signal(sig);
        let mut child = self.child.take().expect("the server runs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().expect("try_wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("redis-server ignored {sig} for 10 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Starts it again on the same port and directory.
    fn restart(&mut self) {
        assert!(self.spawn(), "redis-server restarts on port {}", self.port);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs one store call on a frozen redis: it must fail with a redis store
/// error within [`FROZEN_CALL_BOUND`].
fn timed(rt: &Runtime, name: &str, call: impl std::future::Future<Output = fluxio::Result<()>>) {
    let t = Instant::now();
    let r = rt
        .block_on(async { tokio::time::timeout(HANG, call).await })
        .unwrap_or_else(|_| panic!("{name} hung on a frozen redis"));
    let took = t.elapsed();
    match r {
        Err(Error::Store {
            backend: "redis",
            source,
            ..
        }) => eprintln!("sigstop: {name} failed after {took:?}: {source}"),
        other => panic!("{name} on a frozen redis: {other:?}"),
    }
    assert!(
        took < FROZEN_CALL_BOUND,
        "{name} took {took:?} on a frozen redis (timeout {FROZEN_TIMEOUT:?})"
    );
}

async fn redis_store(url: &str, ns: &str, timeout: Duration) -> fluxio::Result<RedisStore> {
    RedisStore::builder(url)
        .key_prefix(ns)
        .command_timeout(timeout)
        .connect()
        .await
}

// ---------------------------------------------------------------------------
// 1. Redis restarted mid-run.

fn redis_restart(sig: &str) {
    let what = format!("redis restart ({sig})");
    let Some(mut server) = RedisServer::start("restart") else {
        return;
    };
    let ns = namespace("faults_redis");
    let rt = runtime();
    let store = rt
        .block_on(redis_store(&server.url(), &ns, Duration::from_millis(500)))
        .expect("connects to its own redis-server");
    // Six runs of 6 x 150 ms; two whose third stage (1.5 s) spans the outage.
    let long = |i: usize| i >= RUNS - 2;
    let s = Scenario::new(
        "redis",
        &ns,
        rt,
        Arc::new(store),
        Duration::from_secs(2),
        |i| {
            if long(i) {
                vec![100, 100, 1_500, 100, 100, 100]
            } else {
                vec![150; 6]
            }
        },
    );
    let runs = s.start();
    // every run is past its first stage; the long ones are in their third
    s.wait_for_saves(|i| if long(i) { 3 } else { 2 });
    let down = Instant::now();
    server.stop(sig);
    std::thread::sleep(Duration::from_millis(800));
    server.restart();
    eprintln!("{what}: down for {:?}", down.elapsed());
    s.finish(runs, &what, true);
}

#[test]
fn redis_restart_with_sigterm_mid_run() {
    redis_restart("-TERM");
}

#[test]
fn redis_restart_with_sigkill_mid_run_keeps_acknowledged_checkpoints() {
    redis_restart("-KILL");
}

// ---------------------------------------------------------------------------
// 2. Postgres connections terminated mid-run.

/// A Postgres store over its own schema whose connections carry a unique
/// `application_name`, an admin pool to terminate them with, and that name;
/// `None` (skipped) when the server is unreachable.
struct Pg {
    admin: sqlx::PgPool,
    store: PostgresStore,
    ns: String,
    app: String,
}

impl Pg {
    fn connect(rt: &Runtime, check: &str) -> Option<Pg> {
        let ns = namespace(check);
        let base = StoreKind::Postgres.url();
        let app = format!("fluxio_faults_{ns}");
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}application_name={app}");
        let connected = rt.block_on(async {
            let admin = sqlx::PgPool::connect(&base)
                .await
                .map_err(|e| e.to_string())?;
            let store = PostgresStore::builder(&url)
                .schema(&ns)
                .timeout(Duration::from_secs(1))
                .max_connections(4)
                .connect()
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((admin, store))
        });
        match connected {
            Ok((admin, store)) => Some(Pg {
                admin,
                store,
                ns,
                app,
            }),
            Err(e) => skip_unless_ci("postgres", &e),
        }
    }

    /// Terminates every connection of the store (and of no one else);
    /// returns how many.
    fn terminate(&self, rt: &Runtime) -> i64 {
        rt.block_on(
            sqlx::query_scalar(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND application_name = $1 \
                 AND pid <> pg_backend_pid()) AS t",
            )
            .bind(&self.app)
            .fetch_one(&self.admin),
        )
        .expect("pg_terminate_backend")
    }

    fn drop_schema(&self, rt: &Runtime) {
        let sql = format!("DROP SCHEMA \"{}\" CASCADE", self.ns);
        let _ = rt.block_on(sqlx::query(&sql).execute(&self.admin));
    }
}

#[test]
fn postgres_connections_terminated_mid_run() {
    const TERMINATIONS: usize = 3;
    let what = "postgres terminations";
    let rt = runtime();
    let Some(pg) = Pg::connect(&rt, "faults_pg") else {
        return;
    };
    let s = Scenario::new(
        "postgres",
        &pg.ns,
        rt,
        Arc::new(pg.store.clone()),
        Duration::from_secs(2),
        |i| {
            if i >= RUNS - 2 {
                vec![100, 100, 1_200, 100, 100, 100]
            } else {
                vec![150; 6]
            }
        },
    );
    let runs = s.start();
    s.wait_for_saves(|_| 2);
    let mut killed = Vec::new();
    for _ in 0..TERMINATIONS {
        killed.push(pg.terminate(&s.rt));
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!("{what}: terminated {killed:?} connections, {TERMINATIONS} times");
    assert!(
        killed.iter().all(|n| *n > 0),
        "every termination hit the store's connections: {killed:?}"
    );
    // the store retries a statement whose connection was terminated before
    // it ran, so the runs may all ride the terminations out
    s.finish(runs, what, false);
    pg.drop_schema(&s.rt);
}

// ---------------------------------------------------------------------------
// 3. A frozen Redis (SIGSTOP): nothing hangs.

/// The command timeout of the frozen-redis test.
const FROZEN_TIMEOUT: Duration = Duration::from_millis(500);
/// One call on a frozen redis: its timeout, plus slack for a busy machine.
const FROZEN_CALL_BOUND: Duration = Duration::from_millis(1_500);

#[test]
fn redis_frozen_with_sigstop_fails_within_the_timeout_and_recovers() {
    let Some(server) = RedisServer::start("sigstop") else {
        return;
    };
    let ns = namespace("faults_stop");
    let rt = runtime();
    let store = rt
        .block_on(redis_store(&server.url(), &ns, FROZEN_TIMEOUT))
        .expect("connects to its own redis-server");
    let acked = Acks::default();
    let p = six_stages()
        .name("test")
        .store(Recorder {
            inner: Arc::new(store.clone()),
            acked: Arc::clone(&acked),
        })
        .lease_ttl(Duration::from_secs(2))
        .build()
        .expect("a valid pipeline");
    let input = input(&ns, 0, &[100; 6]);
    let expected = rt
        .block_on(
            six_stages()
                .build()
                .expect("valid")
                .invoke("ref", input.clone()),
        )
        .and_then(Outcome::completed)
        .expect("the uninterrupted run");

    let run = {
        let (p, input) = (p.clone(), input.clone());
        rt.spawn(async move { tokio::time::timeout(HANG, p.invoke("frozen", input)).await })
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while lock(&acked).get("frozen").map_or(0, |a| a.saves) < 2 {
        assert!(Instant::now() < deadline, "the run did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    // a checkpoint to save directly while frozen, under another run id
    let mut cp = rt
        .block_on(store.load("test/frozen"))
        .expect("load")
        .expect("stored");
    cp.run_id = "direct".to_owned();
    server.signal("-STOP");
    let frozen_at = Instant::now();

    // The run in flight fails: its next save times out, then its release.
    let outcome = rt.block_on(run).expect("the run task did not panic");
    let took = frozen_at.elapsed();
    match outcome {
        Err(_) => panic!("the run hung on a frozen redis for {HANG:?}"),
        Ok(Err(Error::Store {
            backend: "redis",
            source,
            ..
        })) => {
            eprintln!("sigstop: the run failed {took:?} after the freeze: {source}")
        }
        Ok(other) => {
            panic!("the run on a frozen redis must fail with a redis store error: {other:?}")
        }
    }
    // at most: the rest of a stage, a save and a release, each bounded
    assert!(
        took < Duration::from_millis(100) + 2 * FROZEN_CALL_BOUND,
        "the run took {took:?} to fail"
    );
    let acked_before = *lock(&acked).get("frozen").expect("acked");

    // Direct calls, a fresh run and a fresh connect: each within the timeout.
    timed(&rt, "load", async {
        store.load("test/frozen").await.map(drop)
    });
    timed(&rt, "save", store.save(cp));
    timed(&rt, "exists", async {
        store.exists("test/frozen").await.map(drop)
    });
    timed(&rt, "acquire_lease", async {
        store
            .acquire_lease("other", Duration::from_secs(1))
            .await
            .map(drop)
    });
    timed(&rt, "invoke", async {
        p.invoke("fresh", input.clone()).await.map(drop)
    });
    timed(&rt, "connect", async {
        redis_store(&server.url(), &ns, FROZEN_TIMEOUT)
            .await
            .map(drop)
    });

    server.signal("-CONT");
    let thawed = Instant::now();
    let first =
        rt.block_on(async { tokio::time::timeout(HANG, store.exists("test/frozen")).await });
    let recovered = thawed.elapsed();
    match first {
        Ok(Ok(true)) => {}
        other => panic!("the first call after SIGCONT must succeed: {other:?}"),
    }
    assert!(
        recovered < FROZEN_CALL_BOUND,
        "first call after SIGCONT took {recovered:?}"
    );
    let stored = rt
        .block_on(store.load("test/frozen"))
        .expect("load after the thaw")
        .expect("stored");
    assert!(
        at_least(&stored, acked_before),
        "acked {acked_before:?}, stored ip {} {:?}",
        stored.ip,
        stored.status
    );
    let (ctx, retries) = rt.block_on(resume_until_done(&p, "frozen"));
    assert_eq!(
        ctx, expected,
        "the resumed run ends like an uninterrupted one"
    );
    eprintln!(
        "sigstop: the first call after SIGCONT succeeded in {recovered:?}; \
         the run resumed after {retries} in-use retries"
    );
}

// ---------------------------------------------------------------------------
// 4. Regression tests for bugs these faults found (fixed): the first call
//    after the store was back failed, although nothing was wrong with it.

/// A run whose stage spans a Redis restart, with no store call during the
/// outage (its lease renewal is not due yet), must finish once the server is
/// back; a store that sat idle through a restart must serve the next run.
///
/// Both used to fail with `broken pipe`: redis-rs's `ConnectionManager`
/// learns that its connection died only from a failed call, returns that
/// error, and reconnects for the next call; `RedisStore` now retries once.
#[test]
fn redis_first_call_after_a_restart_succeeds() {
    let Some(mut server) = RedisServer::start("first_call") else {
        return;
    };
    let ns = namespace("faults_first");
    let rt = runtime();
    let connect = || {
        rt.block_on(redis_store(&server.url(), &ns, Duration::from_millis(500)))
            .expect("connects to its own redis-server")
    };
    let (busy, idle) = (connect(), connect());
    let acked = Acks::default();
    let durable = |store: &RedisStore, acked: &Acks| {
        six_stages()
            .name("test")
            .store(Recorder {
                inner: Arc::new(store.clone()),
                acked: Arc::clone(acked),
            })
            // renewal every 10 s: no store call during the outage
            .lease_ttl(Duration::from_secs(30))
            .build()
            .expect("a valid pipeline")
    };
    let input = input(&ns, 0, &[50, 1_500, 50, 50, 50, 50]);
    let expected = rt
        .block_on(
            six_stages()
                .build()
                .expect("valid")
                .invoke("ref", input.clone()),
        )
        .and_then(Outcome::completed)
        .expect("the uninterrupted run");
    rt.block_on(idle.exists("warm"))
        .expect("the idle store works");

    let p = durable(&busy, &acked);
    let run = {
        let (p, input) = (p.clone(), input.clone());
        rt.spawn(async move { tokio::time::timeout(HANG, p.invoke("spans", input)).await })
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while lock(&acked).get("spans").map_or(0, |a| a.saves) < 2 {
        assert!(Instant::now() < deadline, "the run did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    server.stop("-TERM");
    std::thread::sleep(Duration::from_millis(300));
    server.restart();
    let spanning = rt
        .block_on(run)
        .expect("no panic")
        .expect("no hang")
        .and_then(Outcome::completed);
    let fresh = rt.block_on(async {
        tokio::time::timeout(
            HANG,
            durable(&idle, &Acks::default()).invoke("fresh", input.clone()),
        )
        .await
        .expect("no hang")
        .and_then(Outcome::completed)
    });
    let ok = |r: &fluxio::Result<Context>| r.as_ref().is_ok_and(|c| *c == expected);
    assert!(
        ok(&spanning) && ok(&fresh),
        "once redis is back, a run whose stage spanned the restart must finish \
         ({:?}), and so must a run on a store that was idle through it ({:?})",
        spanning.map(drop),
        fresh.map(drop)
    );
}

/// Right after its connections were terminated (the database being fine), a
/// run on the store must finish.
///
/// The first calls used to fail, one per terminated connection, with
/// `57P01 terminating connection due to administrator command`: the pool
/// pings a connection only when it was idle for 1 s or more, so a dead one
/// used less than a second ago was handed out unchecked. The store now
/// retries a statement that provably did not run on a checked connection.
#[test]
fn postgres_first_call_after_terminations_succeeds() {
    let rt = &runtime();
    let Some(pg) = Pg::connect(rt, "faults_pgfirst") else {
        return;
    };
    let p = six_stages()
        .name("test")
        .store(pg.store.clone())
        .lease_ttl(Duration::from_secs(5))
        .build()
        .expect("a valid pipeline");
    // several pooled connections, all used within the last second
    rt.block_on(futures::future::try_join_all(
        (0..4).map(|i| pg.store.exists(if i % 2 == 0 { "a" } else { "b" })),
    ))
    .expect("the store works");
    let killed = pg.terminate(rt);
    std::thread::sleep(Duration::from_millis(100));
    let input = input(&pg.ns, 0, &[0; 6]);
    let r = rt.block_on(p.invoke("after", input));
    pg.drop_schema(rt);
    assert!(
        r.is_ok(),
        "a run right after {killed} connections were terminated: {:?}",
        r.map(drop)
    );
}
