//! `fluxio runs retry RUN`: [`retry_run`] hands a failed or needs-attention
//! run back to the recovery workers (contract rules 22, 23).

use fluxio_core::CheckpointStore;
use fluxio_core::store::retry_run;
use serde_json::json;

use super::Out;
use crate::exit::Failure;
use crate::render::shown;

pub(crate) async fn retry(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    key: &str,
) -> Result<(), Failure> {
    let retried = retry_run(store, key).await?;
    if out.json {
        return out.json(&json!({ "run": key, "retry": true, "step": retried.step }));
    }
    writeln!(
        out.out,
        "run {} is marked for retry at stage {}: it lists as abandoned until a \
         recovery worker of its pipeline resumes it",
        shown(key),
        shown(&retried.step)
    )?;
    Ok(())
}
