//! Shared test stages and helpers.
//!
//! Stages record every call in a journal keyed by the `test` key of the
//! context (so tests running in parallel do not see each other), and fail
//! when the test has armed them.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use fluxio::store::{Checkpoint, CheckpointStore, InMemoryStore, Lease};
use fluxio::{Context, StageResult, stage};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

static JOURNAL: Mutex<Option<HashMap<String, Vec<String>>>> = Mutex::new(None);
static ARMED: Mutex<Option<HashSet<(String, String)>>> = Mutex::new(None);

/// Appends `entry` to the journal of test `test`.
pub fn record(test: &str, entry: impl Into<String>) {
    lock(&JOURNAL)
        .get_or_insert_with(HashMap::new)
        .entry(test.to_owned())
        .or_default()
        .push(entry.into());
}

/// The journal of test `test`.
pub fn journal(test: &str) -> Vec<String> {
    lock(&JOURNAL)
        .as_ref()
        .and_then(|j| j.get(test).cloned())
        .unwrap_or_default()
}

/// How many times `stage` was called in test `test`.
pub fn calls(test: &str, stage: &str) -> usize {
    let want = format!("call:{stage}");
    journal(test).iter().filter(|e| **e == want).count()
}

/// Makes `stage` fail in test `test` until disarmed.
pub fn arm(test: &str, stage: &str) {
    lock(&ARMED)
        .get_or_insert_with(HashSet::new)
        .insert((test.to_owned(), stage.to_owned()));
}

pub fn disarm(test: &str, stage: &str) {
    if let Some(a) = lock(&ARMED).as_mut() {
        a.remove(&(test.to_owned(), stage.to_owned()));
    }
}

/// Whether `stage` is armed (made to fail) in test `test`.
pub fn is_armed(test: &str, stage: &str) -> bool {
    armed(test, stage)
}

fn armed(test: &str, stage: &str) -> bool {
    lock(&ARMED)
        .as_ref()
        .is_some_and(|a| a.contains(&(test.to_owned(), stage.to_owned())))
}

/// The error a test stage fails with.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("stage {stage} failed on purpose")]
pub struct StageFailed {
    pub stage: String,
}

/// Records the call, fails when armed, appends the stage to `path`.
pub fn step(ctx: Context, stage: &str) -> StageResult {
    let test: String = ctx.get("test")?;
    record(&test, format!("call:{stage}"));
    if armed(&test, stage) {
        return Err(Box::new(StageFailed {
            stage: stage.to_owned(),
        }));
    }
    let path = ctx.update::<Vec<String>, _>("path", |p| {
        let mut p = p.unwrap_or_default();
        p.push(stage.to_owned());
        p
    })?;
    Ok(path)
}

#[stage]
pub async fn a(ctx: Context) -> StageResult {
    step(ctx, "a")
}

#[stage]
pub async fn b(ctx: Context) -> StageResult {
    tokio::task::yield_now().await;
    step(ctx, "b")
}

#[stage]
pub fn c(ctx: Context) -> StageResult {
    step(ctx, "c")
}

/// The input of test `test`.
pub fn input(test: &str) -> Context {
    Context::new()
        .set("test", test)
        .expect("a string is always serializable")
}

/// A store that journals every save (as `save:<step>:<status>`) for a test.
#[derive(Debug, Clone)]
pub struct Recording {
    pub test: String,
    pub inner: Arc<InMemoryStore>,
}

impl Recording {
    pub fn new(test: &str) -> Self {
        Recording {
            test: test.to_owned(),
            inner: Arc::new(InMemoryStore::new()),
        }
    }
}

#[async_trait::async_trait]
impl CheckpointStore for Recording {
    async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
        record(
            &self.test,
            format!("save:{}:{:?}", checkpoint.step, checkpoint.status),
        );
        self.inner.save(checkpoint).await
    }
    async fn load(&self, run_id: &str) -> fluxio::Result<Option<Checkpoint>> {
        self.inner.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
        record(&self.test, "delete");
        self.inner.delete(run_id).await
    }
    async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
        self.inner.exists(run_id).await
    }
    async fn acquire_lease(&self, run_id: &str, ttl: std::time::Duration) -> fluxio::Result<Lease> {
        self.inner.acquire_lease(run_id, ttl).await
    }
}
