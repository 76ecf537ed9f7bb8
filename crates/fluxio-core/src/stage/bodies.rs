//! Blocking stage bodies that outlive their call: [`RunBodies`] keeps each one's stage position and the run's lease until it returns (rule 16).

use crate::error::{BoxError, Error, Result};
use crate::interpret::ownership::{BodyLease, KeepLease};
use info::CURRENT;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use super::*;

/// The blocking stage bodies of one run (rule 16: one body at a time).
///
/// A blocking body cannot be stopped once it started: a timeout, a retry or
/// a dropped run only stops *waiting* for it. So each body holds, until it
/// returns:
///
/// - the lock of its stage position, so that a retry (or any second call of
///   that stage in the run) waits for the body before it instead of running
///   beside it; a call still waiting for the lock has started nothing and
///   can be dropped or time out freely;
/// - the run's lease (durable runs), so that no other run of the run id
///   (a resume, in this process or another) starts while it executes.
///
/// Set for the whole run as a task-local (`Pipeline` scopes it around the
/// interpreter of every durable run, and of a plain run whose program has a
/// blocking stage: nothing else reads it; parallel branches are futures of
/// the same task and share it). Fire-and-forget branches are spawned tasks outside the run and do
/// not see it, nor do [`StageTest`](crate::testing::StageTest) calls.
pub(crate) struct RunBodies {
    keep: Option<KeepLease>,
    positions: Mutex<HashMap<u32, Arc<tokio::sync::Mutex<()>>>>,
}

tokio::task_local! {
    static RUN_BODIES: Arc<RunBodies>;
}

/// What a running blocking body holds (see [`RunBodies`]); dropped on the
/// blocking thread right after the body returns, before its result is handed
/// back.
pub(super) struct BodyHold {
    _position: tokio::sync::OwnedMutexGuard<()>,
    _lease: Option<BodyLease>,
}

impl RunBodies {
    /// Runs `run` with `keep` (a durable run's lease; `None` for a run
    /// without one) as what its blocking bodies hold.
    /// (A plain `fn`: an `async fn` would keep `run` twice in its future,
    /// as its argument and inside the task-local scope.)
    pub(crate) fn scope<F: Future>(
        keep: Option<KeepLease>,
        run: F,
    ) -> impl Future<Output = F::Output> {
        let bodies = Arc::new(RunBodies {
            keep,
            positions: Mutex::default(),
        });
        RUN_BODIES.scope(bodies, run)
    }

    /// Waits until no other body of the stage at `position` runs, then
    /// holds its lock and the run's lease.
    async fn hold(&self, position: u32) -> BodyHold {
        let lock = Arc::clone(
            self.positions
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(position)
                .or_default(),
        );
        BodyHold {
            _position: lock.lock_owned().await,
            _lease: self.keep.as_ref().map(KeepLease::body),
        }
    }
}

/// Runs a blocking stage body on tokio's blocking pool, holding what
/// [`RunBodies`] says until the body returns.
pub(crate) fn run_blocking<F>(f: F) -> StageFuture
where
    F: FnOnce() -> Result<Output, BoxError> + std::marker::Send + 'static,
{
    /// Clears the thread's `StageInfo` when the body ends, by returning or
    /// by panicking: pool threads are reused, and a stale `StageInfo` would
    /// be reported to whatever runs on the thread next.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            let _ = CURRENT.try_with(|c| c.set(None));
        }
    }
    let info = StageInfo::current();
    let bodies = RUN_BODIES.try_with(Arc::clone).ok();
    StageFuture::new(async move {
        let hold = match (&bodies, &info) {
            (Some(bodies), Some(info)) => Some(bodies.hold(info.position).await),
            _ => None,
        };
        let f = move || {
            // dropped last: after the body and `Reset`, before the result
            // is handed back to the awaiting call
            let _hold = hold;
            let _ = CURRENT.try_with(|c| c.set(info));
            let _reset = Reset;
            f()
        };
        match tokio::task::spawn_blocking(f).await {
            Ok(r) => r,
            Err(join) => {
                let message = if join.is_panic() {
                    panic_message(&*join.into_panic())
                } else {
                    "blocking task was cancelled".to_owned()
                };
                Err(Box::new(Error::StagePanic {
                    stage: String::new(),
                    message,
                }) as BoxError)
            }
        }
    })
}
