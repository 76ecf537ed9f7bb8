//! What a running stage knows of itself: [`StageInfo`], set for the length of each poll of a call.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as Context_, Poll};

/// What a running stage can learn about its call: the run, its position in
/// the program, and which attempt this is.
///
/// [`StageInfo::current`] returns it inside a stage called by a pipeline
/// (async or blocking), and `None` elsewhere, e.g. when a test calls the
/// function directly.
///
/// Use [`idempotency_key`](StageInfo::idempotency_key) to make side effects
/// idempotent: a stage's body runs at least once (a crash after a side effect
/// but before the next checkpoint re-runs the stage on resume), and the key
/// is the same on every such re-run (contract rule 12), so a payment API
/// given it charges once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageInfo {
    /// The run, as its store key: `pipeline/run_id` for a named pipeline,
    /// the run id alone otherwise (see [`run_key`](crate::store::run_key)).
    pub run_id: Arc<str>,
    /// The stage's name.
    pub stage: &'static str,
    /// The stage's position: the [position](crate::compile::Program::position)
    /// of its `CALL` instruction, its place in the pipeline's compiled
    /// shape. Schemas, timeouts and middleware do not move it, so it is the
    /// same on every version of the pipeline that a resume with
    /// [`allow_code_changes`](crate::ResumeOptions::allow_code_changes)
    /// accepts; in a pipeline without schemas it is the `CALL`'s ip.
    pub position: u32,
    /// 1 on the first run of the stage, one more on every resume that
    /// retries it (after a failure or a crash). Stages in a parallel block
    /// share the block's attempt.
    pub attempt: u32,
    /// When this call is a compensator's (contract rule 35): the name of
    /// the stage it compensates, whose `position` it has. `None` for every
    /// other stage call.
    pub compensates: Option<&'static str>,
}

thread_local! {
    /// The info of the stage being polled on this thread (set by
    /// [`WithInfo`] for the length of one poll), or of the blocking body
    /// running on it (set by [`run_blocking`] for the length of the body).
    pub(super) static CURRENT: Cell<Option<StageInfo>> = const { Cell::new(None) };
}

/// Puts the info in `slot` in [`CURRENT`] until dropped, and then back
/// into its slot, with what was there before restored (a stage may run a
/// pipeline of its own inside it). Both ways one swap of the two cells:
/// while the guard lives, the slot holds what `CURRENT` held.
pub(super) struct InfoGuard<'s> {
    slot: &'s Cell<Option<StageInfo>>,
}

impl<'s> InfoGuard<'s> {
    #[inline]
    fn enter(slot: &'s mut Option<StageInfo>) -> Self {
        let slot = Cell::from_mut(slot);
        // `try_with`: only fails while the thread is being torn down, and
        // then no stage can ask for its info anyway
        let _ = CURRENT.try_with(|c| c.swap(slot));
        InfoGuard { slot }
    }
}

impl Drop for InfoGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|c| c.swap(self.slot));
    }
}

/// A stage call (or its middleware chain) with its [`StageInfo`] set and
/// its span entered at every poll: what [`StageInfo::current`] reads. The
/// info is moved in and out of the caller's slot, never cloned.
pub(crate) struct WithInfo<'s, F> {
    slot: &'s mut Option<StageInfo>,
    span: Option<tracing::Span>,
    fut: F,
}

impl<'s, F> WithInfo<'s, F> {
    /// `fut` with the info in `slot` and `span` (see [`span_if_wanted`]).
    pub(crate) fn new(
        slot: &'s mut Option<StageInfo>,
        span: Option<tracing::Span>,
        fut: F,
    ) -> Self {
        WithInfo { slot, span, fut }
    }
}

/// `span`, or `None` when no subscriber wants it: a run without tracing
/// then enters nothing.
#[inline]
pub(crate) fn span_if_wanted(span: tracing::Span) -> Option<tracing::Span> {
    (!span.is_disabled()).then_some(span)
}

/// Runs `f` with the info in `slot` and `span` entered, as a poll of
/// [`WithInfo`] does.
#[inline]
pub(crate) fn with_info<R>(
    slot: &mut Option<StageInfo>,
    span: Option<&tracing::Span>,
    f: impl FnOnce() -> R,
) -> R {
    let _entered = span.map(tracing::Span::enter);
    let _info = InfoGuard::enter(slot);
    f()
}

impl<F: Future + Unpin> Future for WithInfo<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context_<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let fut = &mut this.fut;
        with_info(this.slot, this.span.as_ref(), || Pin::new(fut).poll(cx))
    }
}

impl StageInfo {
    /// The info of the stage running on this task or blocking thread.
    ///
    /// ```
    /// assert!(fluxio_core::StageInfo::current().is_none());
    /// ```
    #[must_use]
    pub fn current() -> Option<StageInfo> {
        CURRENT
            .try_with(|c| {
                let info = c.take();
                let copy = info.clone();
                c.set(info);
                copy
            })
            .ok()
            .flatten()
    }

    /// `"{run_id}/{position}"` (with the pipeline's name in `run_id`):
    /// the same for every attempt of one stage position of one run (retries
    /// in the process, resumes after a failure or a crash, also a resume on
    /// fixed code whose stages gained or lost schemas, a timeout or
    /// middleware), different for every other position, in parallel
    /// branches and routing bodies too, and for every other run and
    /// pipeline. The attempt is not part of it:
    /// read [`attempt`](StageInfo::attempt) for that.
    ///
    /// A compensator's key is its stage's with `/compensate` after it:
    /// the same on every attempt of that compensation, and never the key
    /// of the stage it undoes.
    ///
    /// ```
    /// use fluxio_core::StageInfo;
    /// let mut info = StageInfo {
    ///     run_id: "orders/42".into(),
    ///     stage: "charge",
    ///     position: 6,
    ///     attempt: 3,
    ///     compensates: None,
    /// };
    /// assert_eq!(info.idempotency_key(), "orders/42/6");
    /// info.stage = "refund";
    /// info.compensates = Some("charge");
    /// assert_eq!(info.idempotency_key(), "orders/42/6/compensate");
    /// ```
    #[must_use]
    pub fn idempotency_key(&self) -> String {
        match self.compensates {
            None => format!("{}/{}", self.run_id, self.position),
            Some(_) => format!("{}/{}/compensate", self.run_id, self.position),
        }
    }
}
