//! `fluxio runs show RUN`: one run, readable without the pipeline's types.

use fluxio_core::store::{Checkpoint, RunFilter, RunSummary};
use fluxio_core::{CheckpointStore, Error, History};
use serde_json::json;

use super::{Out, check_key};
use crate::args::ShowArgs;
use crate::exit::Failure;
use crate::render::{
    SHORT, Table, context_json, one_line, paint_state, status_name, value_text, when,
};

pub(crate) async fn show(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    args: &ShowArgs,
) -> Result<(), Failure> {
    let key = args.run.as_str();
    check_key(key)?;
    let journal = store.history(key).await?;
    let Some(latest) = journal.last() else {
        return Err(Failure::of(&Error::CheckpointNotFound {
            run_id: key.to_owned(),
        }));
    };
    let listed = listed(store, key, latest).await;
    let history = History::of(key, &journal);
    if out.json {
        return out.json(&json!({
            "key": key,
            "pipeline": latest.pipeline,
            "run_id": latest.run_id,
            // the serde names, as in `list --json` and the history
            "status": latest.status,
            "state": listed.summary.as_ref().map(|s| s.state),
            "step": latest.step,
            "attempt": latest.attempt,
            "error_message": latest.error_message,
            "version": latest.version,
            "created_at_ms": latest.created_at_ms,
            "updated_at_ms": latest.updated_at_ms,
            "lease_expires_at_ms": listed.summary.as_ref().and_then(|s| s.lease_expires_at_ms),
            "context": context_json(&latest.context, args.full),
            "history": history,
        }));
    }
    let state = listed.summary.as_ref().map_or_else(
        || status_name(latest.status),
        |summary| summary.state.as_str(),
    );
    let mut head = Table::new(["", ""]);
    let mut field = |name: &str, value: String| head.row(vec![name.to_owned(), value]);
    field("run", key.to_owned());
    field("pipeline", latest.pipeline.clone());
    field("run id", latest.run_id.clone());
    field("status", paint_state(state, out.colour));
    field(
        "step",
        if latest.step.is_empty() {
            "-".to_owned()
        } else {
            format!("{} (attempt {})", latest.step, latest.attempt)
        },
    );
    field("version", latest.version.clone());
    field("started", when(latest.created_at_ms));
    field(
        "updated",
        format!(
            "{} ({} after the start)",
            when(latest.updated_at_ms),
            took(latest.updated_at_ms.saturating_sub(latest.created_at_ms))
        ),
    );
    field("lease", listed.lease());
    if let Some(error) = &latest.error_message {
        field("error", error.clone());
    }
    // the header rows are `name  value`: drop the empty header line
    let rendered = head.render(false);
    let rows = rendered.split_once('\n').map_or("", |(_, rows)| rows);
    write!(out.out, "{rows}")?;

    writeln!(out.out, "\ncontext ({} keys)", latest.context.len())?;
    let limit = if args.full { usize::MAX } else { SHORT };
    let mut context = Table::new(["KEY", "VALUE"]);
    for (name, value) in latest.context.iter() {
        let bytes = latest.context.encoded_len(name).unwrap_or(0);
        context.row(vec![
            one_line(name, limit),
            value_text(&value, bytes, limit),
        ]);
    }
    if !latest.context.is_empty() {
        write!(out.out, "{}", indent(&context.render(out.colour)))?;
    }
    writeln!(out.out, "\nhistory")?;
    write!(out.out, "{}", indent(&history.to_string()))?;
    Ok(())
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn took(ms: u64) -> String {
    humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
}

/// What a listing says of the run: its state (a running run may be
/// abandoned) and its lease.
struct Listed {
    summary: Option<RunSummary>,
    /// Why there is no summary, when the store could not say.
    unknown: Option<String>,
}

impl Listed {
    fn lease(&self) -> String {
        match (&self.summary, &self.unknown) {
            (Some(s), _) => s.lease_expires_at_ms.map_or_else(
                || "not held".to_owned(),
                |at| format!("held until {}", when(at)),
            ),
            (None, Some(why)) => format!("unknown ({why})"),
            (None, None) => "unknown".to_owned(),
        }
    }
}

/// The run's listing entry: its lease is known only to the store's listing
/// (nothing else reads a lease without taking it). Looked up by pipeline
/// and version, from just before its key, a few pages at most.
async fn listed(store: &dyn CheckpointStore, key: &str, latest: &Checkpoint) -> Listed {
    let mut before: String = key.to_owned();
    before.pop();
    let mut filter = RunFilter::new()
        .pipeline(&latest.pipeline)
        .version(&latest.version)
        .limit(100);
    if !before.is_empty() {
        filter = filter.after(before);
    }
    for _ in 0..20 {
        match store.list_runs(&filter).await {
            Ok(page) => {
                if let Some(found) = page.runs.iter().find(|r| r.key == key) {
                    return Listed {
                        summary: Some(found.clone()),
                        unknown: None,
                    };
                }
                let past = page.runs.last().is_some_and(|r| r.key.as_str() > key);
                match page.next {
                    Some(next) if !past => filter = filter.after(next),
                    _ => break,
                }
            }
            Err(Error::Unsupported { .. }) => {
                return Listed {
                    summary: None,
                    unknown: Some("the store does not list runs".to_owned()),
                };
            }
            Err(e) => {
                return Listed {
                    summary: None,
                    unknown: Some(e.message_with_causes()),
                };
            }
        }
    }
    Listed {
        summary: None,
        unknown: Some("not found in the store's listing".to_owned()),
    }
}
