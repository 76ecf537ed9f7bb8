//! `fluxio runs cancel RUN`: [`CheckpointStore::cancel`] (contract rule 14).

use fluxio_core::CheckpointStore;
use serde_json::json;

use super::Out;
use crate::exit::Failure;
use crate::render::shown;

pub(crate) async fn cancel(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    key: &str,
) -> Result<(), Failure> {
    store.cancel(key).await?;
    if out.json {
        return out.json(&json!({ "run": key, "status": fluxio_core::RunStatus::Cancelled }));
    }
    writeln!(
        out.out,
        "cancelled run {}: its worker, if any, stops before its next stage",
        shown(key)
    )?;
    Ok(())
}
