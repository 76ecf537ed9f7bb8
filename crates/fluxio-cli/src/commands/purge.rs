//! `fluxio runs purge --status S --older-than D`: lists the runs in state
//! `S` last written before `D` ago, asks, and deletes each as `delete` does.

use fluxio_core::CheckpointStore;
use fluxio_core::store::RunFilter;
use serde_json::json;

use super::delete::delete_run;
use super::list::{pages, table};
use super::{Out, confirm};
use crate::args::PurgeArgs;
use crate::exit::Failure;
use crate::render::{ms_since_epoch, shown};

pub(crate) async fn purge(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    args: &PurgeArgs,
) -> Result<(), Failure> {
    let cutoff = std::time::SystemTime::now()
        .checked_sub(args.older_than)
        .map_or(0, ms_since_epoch);
    let mut filter = RunFilter::new().state(args.status).limit(1_000);
    if let Some(pipeline) = &args.pipeline {
        filter = filter.pipeline(pipeline);
    }
    filter.updated_before_ms = Some(cutoff);
    let (runs, _) = pages(store, filter, true).await?;
    let keys: Vec<&str> = runs.iter().map(|r| r.key.as_str()).collect();
    if args.dry_run || runs.is_empty() {
        if out.json {
            return out.json(&json!({ "dry_run": args.dry_run, "runs": runs, "deleted": [] }));
        }
        if runs.is_empty() {
            writeln!(out.out, "no runs to purge")?;
        } else {
            write!(out.out, "{}", table(&runs).render(out.colour))?;
            writeln!(out.out, "{} runs would be deleted (dry run)", runs.len())?;
        }
        return Ok(());
    }
    if !out.json {
        write!(out.out, "{}", table(&runs).render(out.colour))?;
        out.out.flush()?;
    }
    if !args.yes && !confirm(&format!("delete {} runs?", runs.len()))? {
        return Err(Failure::failed("nothing was deleted"));
    }
    let mut deleted = Vec::new();
    let mut failed = Vec::new();
    for key in keys {
        match delete_run(store, key, false).await {
            Ok(()) => deleted.push(key),
            Err(failure) => failed.push((key, failure.message)),
        }
    }
    if out.json {
        let failed: Vec<_> = failed
            .iter()
            .map(|(key, error)| json!({ "run": key, "error": error }))
            .collect();
        out.json(&json!({ "dry_run": false, "runs": runs, "deleted": deleted, "failed": failed }))?;
    } else {
        writeln!(out.out, "deleted {} runs", deleted.len())?;
    }
    if failed.is_empty() {
        Ok(())
    } else {
        // one line, naming each run that was not deleted and why
        let why: Vec<String> = failed
            .iter()
            .map(|(key, error)| format!("{} ({error})", shown(key)))
            .collect();
        Err(Failure::failed(format_args!(
            "{} of {} runs were not deleted: {}",
            failed.len(),
            runs.len(),
            why.join("; ")
        )))
    }
}
