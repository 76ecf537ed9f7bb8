//! [`Counted`]: a store behind the trait that counts what is called through
//! it, for the tests and benches of the calls that fold round trips.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fluxio_core::Result;
use fluxio_core::store::{
    Begin, Begun, Checkpoint, CheckpointStore, Lease, RunFilter, RunPage, begin_run_stepwise,
    finish_run_stepwise,
};

/// `inner` behind [`CheckpointStore`], counting its `begin_run` and
/// `finish_run` calls ([`folds`](Self::folds)) and its checkpoint writes,
/// `save` and `save_fenced` ([`writes`](Self::writes)). Made
/// [`stepwise`](Self::stepwise), it makes `begin_run` and `finish_run`
/// through the trait's defaults ([`begin_run_stepwise`],
/// [`finish_run_stepwise`]: the calls one by one, through this wrapper);
/// made [`native`](Self::native), through `inner`'s own.
#[derive(Debug)]
pub struct Counted<S> {
    /// The store every call goes to.
    pub inner: S,
    native: bool,
    folds: AtomicU64,
    writes: AtomicU64,
}

impl<S> Counted<S> {
    /// `inner`, with its own `begin_run` and `finish_run`.
    pub fn native(inner: S) -> Self {
        Self::new(inner, true)
    }

    /// `inner`, with the trait's default `begin_run` and `finish_run`.
    pub fn stepwise(inner: S) -> Self {
        Self::new(inner, false)
    }

    fn new(inner: S, native: bool) -> Self {
        Counted {
            inner,
            native,
            folds: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }

    /// How many `begin_run` and `finish_run` calls were made.
    pub fn folds(&self) -> u64 {
        self.folds.load(Ordering::Relaxed)
    }

    /// How many `save` and `save_fenced` calls were made (those that
    /// `begin_run` and `finish_run` make [`stepwise`](Self::stepwise)
    /// too).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}

#[fluxio_core::async_trait]
impl<S: CheckpointStore> CheckpointStore for Counted<S> {
    async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.save(checkpoint).await
    }
    async fn load(&self, key: &str) -> Result<Option<Checkpoint>> {
        self.inner.load(key).await
    }
    async fn history(&self, key: &str) -> Result<Vec<Checkpoint>> {
        self.inner.history(key).await
    }
    async fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key).await
    }
    async fn exists(&self, key: &str) -> Result<bool> {
        self.inner.exists(key).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage> {
        self.inner.list_runs(filter).await
    }
    async fn acquire_lease(&self, key: &str, ttl: Duration) -> Result<Lease> {
        self.inner.acquire_lease(key, ttl).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: Lease) -> Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.save_fenced(checkpoint, lease).await
    }
    async fn delete_fenced(&self, key: &str, lease: &Lease) -> Result<()> {
        self.inner.delete_fenced(key, lease).await
    }
    async fn cancel(&self, key: &str) -> Result<()> {
        self.inner.cancel(key).await
    }
    async fn begin_run(&self, first: Checkpoint, ttl: Duration, begin: Begin) -> Result<Begun> {
        self.folds.fetch_add(1, Ordering::Relaxed);
        if self.native {
            self.inner.begin_run(first, ttl, begin).await
        } else {
            begin_run_stepwise(self, first, ttl, begin).await
        }
    }
    async fn finish_run(&self, last: Checkpoint, lease: Lease, delete: bool) -> Result<()> {
        self.folds.fetch_add(1, Ordering::Relaxed);
        if self.native {
            self.inner.finish_run(last, lease, delete).await
        } else {
            finish_run_stepwise(self, last, lease, delete).await
        }
    }
}
