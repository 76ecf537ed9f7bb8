//! `fluxio runs list`: [`CheckpointStore::list_runs`], a page or all of them.

use fluxio_core::CheckpointStore;
use fluxio_core::store::{RunFilter, RunSummary};
use serde_json::json;

use super::{Out, note};
use crate::args::ListArgs;
use crate::exit::Failure;
use crate::render::{Table, one_line, shown, when};

pub(crate) async fn list(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    args: &ListArgs,
) -> Result<(), Failure> {
    let mut filter = RunFilter::new().limit(usize::from(args.limit));
    if let Some(pipeline) = &args.pipeline {
        filter = filter.pipeline(pipeline);
    }
    if let Some(status) = args.status {
        filter = filter.state(status);
    }
    if let Some(parent) = &args.parent {
        filter = filter.children_of(parent);
    }
    if let Some(version) = &args.version {
        filter = filter.version(version);
    }
    filter.created_after_ms = args.since;
    if let Some(after) = &args.after {
        filter = filter.after(after);
    }
    let (runs, next) = pages(store, filter, args.all).await?;
    if out.json {
        // one document: the runs and the cursor of the next page (`null`
        // on the last page)
        return out.json(&json!({ "runs": runs, "next": next }));
    }
    if runs.is_empty() {
        writeln!(out.out, "no runs")?;
    } else {
        write!(out.out, "{}", table(&runs).render(out.colour))?;
    }
    if let Some(next) = next {
        note(&format!(
            "more runs: add --after '{next}' for the next page, or --all for every page"
        ));
    }
    Ok(())
}

/// The runs of `filter`'s page, or of every page from it on with `all`,
/// and the cursor of the page after them.
pub(crate) async fn pages(
    store: &dyn CheckpointStore,
    mut filter: RunFilter,
    all: bool,
) -> Result<(Vec<RunSummary>, Option<String>), Failure> {
    let mut runs = Vec::new();
    loop {
        let page = store.list_runs(&filter).await?;
        runs.extend(page.runs);
        match page.next {
            Some(next) if all => filter = filter.after(next),
            next => return Ok((runs, next)),
        }
    }
}

/// The runs as a table: one row each.
pub(crate) fn table(runs: &[RunSummary]) -> Table {
    let mut table = Table::new([
        "RUN", "STATE", "STEP", "TRY", "VERSION", "STARTED", "UPDATED", "ERROR",
    ])
    .state_column(1);
    for run in runs {
        table.row(vec![
            one_line(&shown(&run.key), 80),
            run.state.as_str().to_owned(),
            one_line(&shown(&run.step), 40),
            run.attempt.to_string(),
            one_line(&shown(&run.version), 40),
            when(run.created_at_ms),
            when(run.updated_at_ms),
            run.error_message
                .as_deref()
                .map(|e| one_line(e, 60))
                .unwrap_or_default(),
        ]);
    }
    table
}
