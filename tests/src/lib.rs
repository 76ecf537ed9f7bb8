//! Shared code of the end-to-end tests: the pipeline the worker process runs,
//! and opening a store by kind. The tests themselves live in `tests/`.

pub mod family;
pub mod process;
pub mod queues;

use std::io::Write as _;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fluxio::store::CheckpointStore;
use fluxio::{Context, PipelineBuilder, StageResult, pipeline, stage};

/// Which shared store a worker or a test uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// `RedisStore`; the namespace is the key prefix.
    Redis,
    /// `RedisStore` on a Redis Cluster (`RedisStore::cluster_builder`); the
    /// "url" is the nodes' URLs joined by `,` (the local cluster of
    /// `fluxio_test_support::redis::cluster`), the namespace the key prefix.
    RedisCluster,
    /// `PostgresStore`; the namespace is the schema.
    Postgres,
    /// `SqliteStore`; the "url" is a directory, the namespace names the file in it.
    Sqlite,
    /// `MySqlStore` (MySQL or MariaDB); the namespace is the database.
    MySql,
}

impl StoreKind {
    /// Parses `redis`, `redis-cluster`, `postgres`, `sqlite` or `mysql`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "redis" => Some(StoreKind::Redis),
            "redis-cluster" => Some(StoreKind::RedisCluster),
            "postgres" => Some(StoreKind::Postgres),
            "sqlite" => Some(StoreKind::Sqlite),
            "mysql" => Some(StoreKind::MySql),
            _ => None,
        }
    }

    /// The name used on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Redis => "redis",
            StoreKind::RedisCluster => "redis-cluster",
            StoreKind::Postgres => "postgres",
            StoreKind::Sqlite => "sqlite",
            StoreKind::MySql => "mysql",
        }
    }

    /// The server's URL (`FLUXIO_REDIS_URL` / `FLUXIO_POSTGRES_URL` /
    /// `FLUXIO_MYSQL_URL`, or the
    /// local default: see `fluxio_test_support`), or for SQLite a directory;
    /// for a cluster, the nodes of the local cluster this call starts (once
    /// per process), or `""` after a loud skip when it cannot (then
    /// [`open`](Self::open) fails, and the test skips).
    #[must_use]
    pub fn url(self) -> String {
        match self {
            StoreKind::Redis => fluxio_test_support::redis::url(),
            StoreKind::RedisCluster => fluxio_test_support::redis::cluster()
                .map(fluxio_test_support::redis::Cluster::url)
                .unwrap_or_default(),
            StoreKind::Postgres => fluxio_test_support::postgres::url(),
            StoreKind::MySql => fluxio_test_support::mysql::url(),
            StoreKind::Sqlite => {
                let dir = std::env::temp_dir().join("fluxio-tests-sqlite");
                let _ = std::fs::create_dir_all(&dir);
                dir.to_string_lossy().into_owned()
            }
        }
    }

    /// Opens the store over namespace `ns`.
    ///
    /// # Errors
    /// The store's connection error.
    pub async fn open(self, url: &str, ns: &str) -> fluxio::Result<Arc<dyn CheckpointStore>> {
        Ok(match self {
            StoreKind::Redis => Arc::new(
                fluxio::RedisStore::builder(url)
                    .key_prefix(ns)
                    .connect()
                    .await?,
            ),
            StoreKind::RedisCluster => Arc::new(
                fluxio::RedisStore::cluster_builder(url.split(',').filter(|n| !n.is_empty()))
                    .key_prefix(ns)
                    .connect()
                    .await?,
            ),
            StoreKind::Sqlite => Arc::new(
                fluxio::SqliteStore::connect(std::path::Path::new(url).join(format!("{ns}.db")))
                    .await?,
            ),
            StoreKind::Postgres => Arc::new(
                fluxio::PostgresStore::builder(url)
                    .schema(ns)
                    .max_connections(4)
                    .connect()
                    .await?,
            ),
            StoreKind::MySql => Arc::new(
                fluxio::MySqlStore::builder(url)
                    .database(ns)
                    .max_connections(4)
                    .connect()
                    .await?,
            ),
        })
    }
}

/// Where this process records stage attempts, and how long stages sleep.
#[derive(Debug, Default)]
pub struct WorkerSettings {
    /// The ledger file (opened with `O_APPEND` per line: lines of concurrent
    /// processes never interleave).
    pub ledger: Option<String>,
    /// `(stage, ms)`: the named stage sleeps that long in this process.
    pub hold: Option<(String, u64)>,
}

static SETTINGS: OnceLock<WorkerSettings> = OnceLock::new();

/// Sets this process's worker settings (once).
pub fn configure(settings: WorkerSettings) {
    let _ = SETTINGS.set(settings);
}

/// Appends `line` and a newline with ONE `write(2)` on a file opened with
/// `O_APPEND`: a process killed mid-write can never leave half a line that the
/// next process's line would run into.
fn append_line(path: &str, line: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(format!("{line}\n").as_bytes())
}

/// Beside the ledger `path`, the file where the worker's stages record
/// `stage idempotency-key attempt pid`, one line per attempt.
#[must_use]
pub fn keys_path(ledger: &str) -> String {
    format!("{ledger}.keys")
}

async fn run_stage(ctx: Context, stage: &str, value: u64) -> StageResult {
    let settings = SETTINGS.get_or_init(WorkerSettings::default);
    if let Some(path) = &settings.ledger {
        append_line(path, &format!("{stage} {}", std::process::id()))?;
        // the side effect a payment API would see: the stage's idempotency key
        let info = fluxio::StageInfo::current().ok_or("worker stages run inside a pipeline")?;
        append_line(
            &keys_path(path),
            &format!(
                "{stage} {} {} {}",
                info.idempotency_key(),
                info.attempt,
                std::process::id()
            ),
        )?;
    }
    println!("in {stage}");
    if let Some((held, ms)) = &settings.hold {
        if held == stage {
            tokio::time::sleep(Duration::from_millis(*ms)).await;
        }
    }
    let acc: u64 = ctx.get_opt("acc").unwrap_or(1);
    Ok(ctx
        .set("acc", acc.wrapping_mul(31).wrapping_add(value))?
        .set(format!("{stage}_done"), true)?)
}

#[stage]
async fn s1(ctx: Context) -> StageResult {
    run_stage(ctx, "s1", 1).await
}

#[stage]
async fn s2(ctx: Context) -> StageResult {
    run_stage(ctx, "s2", 2).await
}

#[stage]
async fn s3(ctx: Context) -> StageResult {
    run_stage(ctx, "s3", 3).await
}

/// The worker's pipeline: three stages that record every attempt.
pub fn worker_pipeline() -> PipelineBuilder {
    pipeline![s1, s2, s3].name(WORKER_PIPELINE)
}

/// The name of [`worker_pipeline`]: its runs are kept under `worker/<run id>`.
pub const WORKER_PIPELINE: &str = "worker";

// ---- the crash-test pipeline ------------------------------------------------

/// Appends `run_id stage attempt pid` to the ledger, one line per attempt.
fn crash_ledger(stage: &str) -> StageResult<u32> {
    let info = fluxio::StageInfo::current().ok_or("crash stages run inside a pipeline")?;
    if let Some(path) = &SETTINGS.get_or_init(WorkerSettings::default).ledger {
        append_line(
            path,
            &format!(
                "{} {stage} {} {}",
                info.run_id,
                info.attempt,
                std::process::id()
            ),
        )?;
    }
    Ok(info.attempt)
}

async fn crash_step(ctx: Context, stage: &str, key: &str, value: u64) -> StageResult {
    let attempt = crash_ledger(stage)?;
    if ctx.get_opt::<String>("fail_first_attempt_of").as_deref() == Some(stage) && attempt == 1 {
        return Err(format!("{stage} fails on its first attempt").into());
    }
    tokio::time::sleep(Duration::from_millis(15)).await;
    let base: u64 = ctx.get_opt("seed").unwrap_or(7);
    Ok(ctx.set(key, base.wrapping_mul(1_000_003).wrapping_add(value))?)
}

#[stage]
async fn c1(ctx: Context) -> StageResult {
    crash_step(ctx, "c1", "c1", 1).await
}

#[stage(reads = [], writes = ["c2a"])]
async fn c2a(ctx: Context) -> StageResult {
    crash_step(ctx, "c2a", "c2a", 2).await
}

#[stage(reads = [], writes = ["c2b"])]
fn c2b(ctx: Context) -> StageResult {
    // a blocking stage in the parallel block, slower than `c2a`: a kill
    // often lands after `c2a`'s branch record and before the block ends
    crash_ledger("c2b")?;
    std::thread::sleep(Duration::from_millis(60));
    let base: u64 = ctx.get_opt("seed").unwrap_or(7);
    Ok(ctx.set("c2b", base ^ 0x5a)?)
}

#[stage]
async fn pick(ctx: Context) -> StageResult<fluxio::Route> {
    crash_ledger("pick")?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let route: String = ctx.get_opt("route").unwrap_or_else(|| "x".to_owned());
    Ok(fluxio::Route::to(route).with("picked", true)?)
}

#[stage]
async fn c3x(ctx: Context) -> StageResult {
    crash_step(ctx, "c3x", "c3", 3).await
}

#[stage]
async fn c3y(ctx: Context) -> StageResult {
    crash_step(ctx, "c3y", "c3", 33).await
}

#[stage]
async fn c4(ctx: Context) -> StageResult {
    crash_step(ctx, "c4", "c4", 4).await
}

#[stage]
async fn c5(ctx: Context) -> StageResult {
    crash_step(ctx, "c5", "c5", 5).await
}

/// The crash-test pipeline: a stage, a parallel block (async and blocking
/// branches), a router with a routing block, and a last stage. Every stage
/// appends `run_id stage attempt pid` to the ledger.
pub fn crash_pipeline() -> PipelineBuilder {
    pipeline![c1, parallel![c2a, c2b], pick => { "x" => [c3x, c4], "y" => c3y }, c5]
        .name(CRASH_PIPELINE)
}

/// The name of [`crash_pipeline`]: its runs are kept under `crash/<run id>`.
pub const CRASH_PIPELINE: &str = "crash";

/// The durable steps of [`crash_pipeline`] along route `x`, in order: each
/// is a set of stages covered by one checkpoint.
pub const CRASH_STEPS_X: &[&[&str]] = &[
    &["c1"],
    &["c2a", "c2b"],
    &["pick"],
    &["c3x"],
    &["c4"],
    &["c5"],
];

// ---- the waits crash-test pipeline (rules 25-27) ----------------------------

#[stage]
async fn w1(ctx: Context) -> StageResult {
    crash_step(ctx, "w1", "w1", 1).await
}

#[stage]
async fn w2(ctx: Context) -> StageResult {
    crash_step(ctx, "w2", "w2", 2).await
}

#[stage]
async fn w3(ctx: Context) -> StageResult {
    let go: u64 = ctx.get("go")?;
    crash_step(ctx, "w3", "w3", go).await
}

#[stage]
async fn w3t(ctx: Context) -> StageResult {
    crash_step(ctx, "w3t", "w3", 0).await
}

#[stage]
async fn w4(ctx: Context) -> StageResult {
    crash_step(ctx, "w4", "w4", 4).await
}

/// The waits crash-test pipeline: a stage, a sleep of 100 ms, a stage, a
/// wait for the signal `go` (a `u64`; a deadline of 60 s routes to `w3t`),
/// the stage after it, and a last stage. Every stage appends
/// `run_id stage attempt pid` to the ledger, as the crash pipeline's do.
pub fn waits_pipeline() -> PipelineBuilder {
    pipeline![
        w1,
        sleep!("100ms"),
        w2,
        wait!("go" as u64, deadline = "60s") => { "go" => w3, "timeout" => w3t },
        w4,
    ]
    .name(WAITS_PIPELINE)
}

/// The name of [`waits_pipeline`]: its runs are kept under `waits/<run id>`.
pub const WAITS_PIPELINE: &str = "waits";

/// The stages of [`waits_pipeline`] signalled in time, in order, each with
/// the place of its step (its checkpoint's step name): a stage, or the
/// sleep or wait before it.
pub const WAITS_STEPS: &[&str] = &["w1", "sleep(100ms)", "w2", "wait(go)", "w3", "w4"];
