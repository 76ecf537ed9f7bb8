//! The timeout middleware: a stage call that takes too long fails.

use std::time::Duration;

use super::{Middleware, Next};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::stage::{Output, Stage};

/// Fails a stage call that takes longer than the given time with
/// [`Error::StageTimeout`] (like `#[stage(timeout = "...")]`, but set on the
/// pipeline or per stage without touching the stage's code).
#[derive(Clone, Copy, Debug)]
pub struct Timeout(pub Duration);

#[async_trait::async_trait]
impl Middleware for Timeout {
    async fn call(&self, stage: &Stage, ctx: Context, next: Next<'_>) -> Result<Output> {
        match tokio::time::timeout(self.0, next.run(ctx)).await {
            Ok(out) => out,
            Err(_) => Err(Error::StageTimeout {
                stage: stage.name().to_owned(),
                timeout: self.0,
            }),
        }
    }
}
