//! `fluxio runs show RUN`: one run, readable without the pipeline's types.

use fluxio_core::history::TableCells;
use fluxio_core::store::{Pending, RunFilter, RunSummary, StoreErrorKind};
use fluxio_core::{CheckpointStore, Error, History};
use serde_json::json;

use super::{Out, not_found};
use crate::args::ShowArgs;
use crate::exit::Failure;
use crate::render::{
    SHORT, Table, context_json, one_line, paint_state, shown, status_name, value_text, when,
};

pub(crate) async fn show(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    args: &ShowArgs,
) -> Result<(), Failure> {
    let key = args.run.as_str();
    let journal = match store.history(key).await {
        Ok(journal) => journal,
        // a store that answers, but not with this run's history (a row it
        // cannot read): what its listing knows, beside the error
        Err(e) if answered(&e) => return unreadable(out, store, key, e).await,
        Err(e) => return Err(e.into()),
    };
    let Some(latest) = journal.last() else {
        return Err(not_found(key));
    };
    let listed = listed(store, key, &latest.pipeline, Some(&latest.version)).await;
    let mut history = History::of(key, &journal);
    history.signals = store.signals(key).await?;
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
            "pending": latest.pending,
            "deadline_ms": latest.deadline_ms,
            "queue": latest.queue,
            "failed_for_good": latest.is_failed_for_good(),
            "compensation": latest.compensation,
            "parent": fluxio_core::child::parent_of(&latest.run_id),
            "child": fluxio_core::store::open_child(latest),
            "context": context_json(&latest.context, args.full),
            "history": history,
        }));
    }
    let state = listed.summary.as_ref().map_or_else(
        || status_name(latest.status),
        |summary| summary.state.as_str(),
    );
    let known = Known {
        key,
        pipeline: &latest.pipeline,
        run_id: &latest.run_id,
        state,
        step: &latest.step,
        attempt: latest.attempt,
        version: &latest.version,
        created_at_ms: latest.created_at_ms,
        updated_at_ms: latest.updated_at_ms,
        error: latest.error_message.as_deref(),
        pending: latest.pending.as_deref(),
        deadline_ms: latest.deadline_ms,
        queue: latest.queue.as_deref(),
        failed_for_good: latest.is_failed_for_good(),
    };
    write!(out.out, "{}", known.head(&listed, out.colour))?;
    if let Some(origin) = &history.forked_from {
        writeln!(out.out, "{}", shown(&origin.to_string()))?;
    }
    if let Some(comp) = &latest.compensation {
        writeln!(out.out, "{}", shown(&comp.to_string()))?;
    }

    writeln!(out.out, "\ncontext ({} keys)", latest.context.len())?;
    let limit = if args.full { usize::MAX } else { SHORT };
    let mut context = Table::new(["KEY", "VALUE"]);
    for (name, value) in latest.context.iter() {
        let bytes = latest.context.encoded_len(name).unwrap_or(0);
        context.row(vec![
            one_line(&shown(name), limit),
            value_text(&value, bytes, limit),
        ]);
    }
    if !latest.context.is_empty() {
        write!(out.out, "{}", indent(&context.render(out.colour)))?;
    }
    writeln!(out.out, "\nhistory")?;
    write!(
        out.out,
        "{}",
        indent(&history_text(&history, limit, out.colour))
    )?;
    Ok(())
}

/// Whether the store answered with `e` (rather than failing to answer, or
/// refusing the key): then the listing may still know the run.
fn answered(e: &Error) -> bool {
    !matches!(e, Error::InvalidRunId { .. })
        && !matches!(
            e.store_error_kind(),
            Some(StoreErrorKind::Connection | StoreErrorKind::Timeout)
        )
}

/// A run whose history the store cannot read (`error`): what its listing
/// says of it (state, step, attempt, error, times, lease), then `error`
/// itself as the command's failure. Without a listing entry, just `error`.
async fn unreadable(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    key: &str,
    error: Error,
) -> Result<(), Failure> {
    let pipeline = key.split_once('/').map_or("", |(pipeline, _)| pipeline);
    let listed = listed(store, key, pipeline, None).await;
    let Some(summary) = &listed.summary else {
        return Err(error.into());
    };
    let failure = Failure::of(&error);
    if out.json {
        out.json(&json!({
            "key": key,
            "pipeline": summary.pipeline,
            "run_id": summary.run_id,
            "state": summary.state,
            "step": summary.step,
            "attempt": summary.attempt,
            "error_message": summary.error_message,
            "version": summary.version,
            "created_at_ms": summary.created_at_ms,
            "updated_at_ms": summary.updated_at_ms,
            "lease_expires_at_ms": summary.lease_expires_at_ms,
            "context": null,
            "history": null,
            "unreadable": failure.message,
        }))?;
    } else {
        let known = Known {
            key,
            pipeline: &summary.pipeline,
            run_id: &summary.run_id,
            state: summary.state.as_str(),
            step: &summary.step,
            attempt: summary.attempt,
            version: &summary.version,
            created_at_ms: summary.created_at_ms,
            updated_at_ms: summary.updated_at_ms,
            error: summary.error_message.as_deref(),
            pending: None,
            deadline_ms: None,
            queue: None,
            failed_for_good: false,
        };
        write!(out.out, "{}", known.head(&listed, out.colour))?;
        writeln!(
            out.out,
            "\ncontext and history cannot be read: {}",
            one_line(&failure.message, usize::MAX)
        )?;
    }
    Err(failure)
}

/// What is known of a run: from its latest checkpoint, or from its listing
/// when its history cannot be read.
struct Known<'a> {
    key: &'a str,
    pipeline: &'a str,
    run_id: &'a str,
    state: &'a str,
    step: &'a str,
    attempt: u32,
    version: &'a str,
    created_at_ms: u64,
    updated_at_ms: u64,
    error: Option<&'a str>,
    /// What a sleeping or waiting run waits for (rules 25-26).
    pending: Option<&'a Pending>,
    /// The run's deadline (rule 30).
    deadline_ms: Option<u64>,
    /// The run's queue (rule 31).
    queue: Option<&'a fluxio_core::store::QueueEntry>,
    /// Whether it failed for good (rule 35).
    failed_for_good: bool,
}

impl Known<'_> {
    /// The rows `name  value`: key, pipeline, run id, state, step and
    /// attempt, version, times, lease, error.
    fn head(&self, listed: &Listed, colour: bool) -> String {
        let mut head = Table::new(["", ""]);
        let mut field = |name: &str, value: String| head.row(vec![name.to_owned(), value]);
        field("run", shown(self.key).into_owned());
        field("pipeline", shown(self.pipeline).into_owned());
        field("run id", shown(self.run_id).into_owned());
        field("status", paint_state(self.state, colour));
        field(
            "step",
            if self.step.is_empty() {
                "-".to_owned()
            } else {
                format!("{} (attempt {})", shown(self.step), self.attempt)
            },
        );
        field("version", shown(self.version).into_owned());
        field("started", when(self.created_at_ms));
        field(
            "updated",
            format!(
                "{} ({} after the start)",
                when(self.updated_at_ms),
                took(self.updated_at_ms.saturating_sub(self.created_at_ms))
            ),
        );
        field("lease", listed.lease());
        if let Some(parent) = fluxio_core::child::parent_of(self.run_id) {
            field("parent", shown(parent).into_owned());
        }
        let child = self.pending.and_then(|p| {
            p.waits
                .iter()
                .find_map(|w| w.name.strip_prefix(fluxio_core::store::CHILD_WAIT_PREFIX))
        });
        if let (Some(child), Some(pending)) = (child, self.pending) {
            field("waits for", format!("child run {}", shown(child)));
            let until = pending.until_ms.map(when);
            field(
                "looks again",
                until.unwrap_or_else(|| "-".to_owned()) + " (or when the child ends)",
            );
        } else if let Some(pending) = self.pending {
            let until = pending.until_ms.map(when);
            if pending.is_sleep() {
                field("sleeps until", until.unwrap_or_else(|| "-".to_owned()));
            } else {
                let waits: Vec<String> = pending
                    .waits
                    .iter()
                    .map(|w| format!("{} ({})", shown(&w.name), shown(&w.payload)))
                    .collect();
                field("waits for", waits.join(" or "));
                field(
                    "deadline",
                    until.unwrap_or_else(|| "none (only a signal wakes it)".to_owned()),
                );
            }
        }
        if let Some(deadline) = self.deadline_ms {
            field("run deadline", when(deadline));
        }
        if let Some(q) = self.queue {
            let key = q
                .key
                .as_deref()
                .map_or_else(String::new, |k| format!(", key {}", shown(k)));
            let state = if q.queued { "queued" } else { "started" };
            field(
                "queue",
                format!("{}{key}, priority {}, {state}", shown(&q.queue), q.priority),
            );
        }
        if let Some(error) = self.error {
            field("error", one_line(error, usize::MAX));
        }
        if self.failed_for_good {
            field(
                "for good",
                "a stage's TerminalError: start, resume and workers leave it; `runs retry`, replay or fork run it again".to_owned(),
            );
        }
        // the header rows are `name  value`: drop the empty header line
        let rendered = head.render(false);
        rendered
            .split_once('\n')
            .map_or("", |(_, rows)| rows)
            .to_owned()
    }
}

/// The history as a table, one row per step ([`History::table`]): the
/// keys it wrote (`+key`) and removed (`-key`), each
/// [shown](crate::render::shown) (so `+-coupon` wrote `-coupon` and
/// `-coupon` removed `coupon`), or its error; then the run's status.
fn history_text(history: &History, limit: usize, colour: bool) -> String {
    let mut table = Table::new(History::TABLE_HEAD);
    for row in history.table(&Cells { limit }) {
        table.row(row.into());
    }
    let mut text = format!(
        "{}run {}: {} ({} checkpoints kept)\n",
        table.render(colour),
        shown(&history.run),
        status_name(history.status),
        history.checkpoints
    );
    for signal in &history.signals {
        let from = if signal.sender.is_empty() {
            String::new()
        } else {
            format!(" from {}", shown(&signal.sender))
        };
        let payload = value_text(&signal.payload.value(), signal.payload.bytes().len(), limit);
        text.push_str(&format!(
            "signal {}: {}{from} at {}: {payload}\n",
            shown(&signal.name),
            signal.state.as_str(),
            when(signal.sent_at_ms)
        ));
    }
    text
}

/// The history table's cells as the CLI writes them: times to the second,
/// names and keys [shown](crate::render::shown), keys a blank apart, an
/// error on one line of at most `limit` characters.
struct Cells {
    limit: usize,
}

impl TableCells for Cells {
    fn time(&self, ms: u64) -> String {
        when(ms)
    }

    fn stage(&self, stage: &str) -> String {
        shown(stage).into_owned()
    }

    fn keys(&self, written: &[String], removed: &[String]) -> String {
        let written = written.iter().map(|k| format!("+{}", shown(k)));
        let removed = removed.iter().map(|k| format!("-{}", shown(k)));
        written.chain(removed).collect::<Vec<_>>().join(" ")
    }

    fn error(&self, error: &str) -> String {
        one_line(error, self.limit)
    }
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
/// (and version, when known), from just before its key, a few pages at
/// most.
async fn listed(
    store: &dyn CheckpointStore,
    key: &str,
    pipeline: &str,
    version: Option<&str>,
) -> Listed {
    let mut before: String = key.to_owned();
    before.pop();
    let mut filter = RunFilter::new().pipeline(pipeline).limit(100);
    if let Some(version) = version {
        filter = filter.version(version);
    }
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
