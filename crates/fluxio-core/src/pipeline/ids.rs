//! Runs whose id the caller does not give: [`Pipeline::new_run_id`] and
//! the calls that start a run under one and return it.

use super::Pipeline;
use crate::context::Context;
use crate::error::Result;
use crate::outcome::Outcome;

impl Pipeline {
    /// A new run id: a UUIDv7 in its hyphenated form
    /// (`01938c3e-7b4a-7c2e-9a51-0d4f3e2b1a90`). Ids made later sort later
    /// (the time comes first, and ids made in one millisecond by this
    /// process keep their order), so listing runs by key lists them in the
    /// order they were made; and two processes never make the same one.
    ///
    /// ```
    /// use fluxio_core::Pipeline;
    ///
    /// let (a, b) = (Pipeline::new_run_id(), Pipeline::new_run_id());
    /// assert_eq!(a.len(), 36);
    /// assert!(a < b, "time-ordered");
    /// ```
    #[must_use]
    pub fn new_run_id() -> String {
        uuid::Uuid::now_v7().hyphenated().to_string()
    }

    /// [`invoke`](Self::invoke) under a [new run id](Self::new_run_id),
    /// returned beside the outcome, also when the run fails, so that the
    /// caller can resume it.
    pub async fn invoke_new(&self, input: Context) -> (String, Result<Outcome>) {
        let run_id = Self::new_run_id();
        let outcome = self.invoke(&run_id, input).await;
        (run_id, outcome)
    }

    /// [`start`](Self::start) under a [new run id](Self::new_run_id),
    /// returned beside the outcome, also when the run fails.
    pub async fn start_new(&self, input: Context) -> (String, Result<Outcome>) {
        let run_id = Self::new_run_id();
        let outcome = self.start(&run_id, input).await;
        (run_id, outcome)
    }
}
