//! `fluxio runs cancel RUN` (contract rule 14), `pause RUN` and `unpause RUN` (rule 30):
//! [`CheckpointStore::mark`].

use fluxio_core::CheckpointStore;
use fluxio_core::store::Mark;
use serde_json::json;

use super::Out;
use crate::exit::Failure;
use crate::render::shown;

pub(crate) async fn cancel(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    key: &str,
) -> Result<(), Failure> {
    // rule 29: with the child run it waits for, in this store
    let children = fluxio_core::store::cancel_with_children(store, key).await?;
    if out.json {
        return out.json(&json!({
            "run": key,
            "status": fluxio_core::RunStatus::Cancelled,
            "children": children,
        }));
    }
    writeln!(
        out.out,
        "cancelled run {}: its worker, if any, stops before its next stage",
        shown(key)
    )?;
    for child in &children {
        writeln!(out.out, "cancelled its child run {}", shown(child))?;
    }
    Ok(())
}

pub(crate) async fn pause(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    key: &str,
) -> Result<(), Failure> {
    store.mark(key, Mark::Pause).await?;
    if out.json {
        return out.json(&json!({ "run": key, "status": fluxio_core::RunStatus::Paused }));
    }
    writeln!(
        out.out,
        "paused run {}: its worker, if any, stops before its next stage; \
         `fluxio runs unpause` lets it go on",
        shown(key)
    )?;
    Ok(())
}

pub(crate) async fn unpause(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    key: &str,
) -> Result<(), Failure> {
    let now_ms = super::store_now(store).await?;
    store.mark(key, Mark::Unpause { now_ms }).await?;
    let status = store.load(key).await?.map(|cp| cp.status);
    if out.json {
        return out.json(&json!({ "run": key, "status": status }));
    }
    let how = match status {
        Some(fluxio_core::RunStatus::Waiting) => "it waits again",
        _ => "it is due: a worker of its pipeline continues it",
    };
    writeln!(out.out, "unpaused run {}: {how}", shown(key))?;
    Ok(())
}
