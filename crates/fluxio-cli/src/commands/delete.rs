//! `fluxio runs delete RUN`: deletes a run under its own lease, so no
//! worker is running it meanwhile.

use fluxio_core::{CheckpointStore, Error};
use serde_json::json;

use super::{Out, confirm, not_found};
use crate::args::DeleteArgs;
use crate::exit::Failure;
use crate::render::{shown, status_name};

pub(crate) async fn delete(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    args: &DeleteArgs,
) -> Result<(), Failure> {
    let key = args.run.as_str();
    let Some(latest) = store.load(key).await? else {
        return Err(not_found(key));
    };
    if !args.yes
        && !confirm(&format!(
            "delete run {} ({}) and its history?",
            shown(key),
            status_name(latest.status)
        ))?
    {
        return Err(Failure::failed(format_args!(
            "run {} was not deleted",
            shown(key)
        )));
    }
    delete_run(store, key, args.force).await?;
    if out.json {
        return out.json(&json!({ "run": key, "deleted": true }));
    }
    writeln!(out.out, "deleted run {}", shown(key))?;
    Ok(())
}

/// Deletes `key` under its lease ([`fluxio_core::store::delete_run`]). A
/// run whose lease a worker holds is refused with a message saying so,
/// unless `force`, which deletes it without the lease (its worker's next
/// write is then refused, or starts the run again).
pub(crate) async fn delete_run(
    store: &dyn CheckpointStore,
    key: &str,
    force: bool,
) -> Result<(), Failure> {
    match fluxio_core::store::delete_run(store, key).await {
        Ok(()) => Ok(()),
        Err(Error::RunIdInUse { .. }) if force => Ok(store.delete(key).await?),
        Err(Error::RunIdInUse { .. }) => Err(Failure::failed(format_args!(
            "run {} is running: a worker holds its lease; cancel it first \
             (fluxio runs cancel), or pass --force to delete it anyway",
            shown(key)
        ))),
        Err(e) => Err(e.into()),
    }
}
