//! Shared code of the end-to-end tests: the pipeline the worker process runs,
//! and opening a store by kind. The tests themselves live in `tests/`.

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
    /// `PostgresStore`; the namespace is the schema.
    Postgres,
}

impl StoreKind {
    /// Parses `redis` or `postgres`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "redis" => Some(StoreKind::Redis),
            "postgres" => Some(StoreKind::Postgres),
            _ => None,
        }
    }

    /// The name used on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Redis => "redis",
            StoreKind::Postgres => "postgres",
        }
    }

    /// The server URL from `FLUXIO_REDIS_URL` / `FLUXIO_POSTGRES_URL`, or the local default.
    #[must_use]
    pub fn url(self) -> String {
        let (var, default) = match self {
            StoreKind::Redis => ("FLUXIO_REDIS_URL", "redis://127.0.0.1:6379"),
            StoreKind::Postgres => (
                "FLUXIO_POSTGRES_URL",
                "postgres://postgres@127.0.0.1:5432/test",
            ),
        };
        std::env::var(var).unwrap_or_else(|_| default.to_owned())
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
            StoreKind::Postgres => Arc::new(
                fluxio::PostgresStore::builder(url)
                    .schema(ns)
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

async fn run_stage(ctx: Context, stage: &str, value: u64) -> StageResult {
    let settings = SETTINGS.get_or_init(WorkerSettings::default);
    if let Some(path) = &settings.ledger {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(f, "{stage} {}", std::process::id())?;
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
    pipeline![s1, s2, s3]
}
