//! A run's page: its summary, history and context before any step, and,
//! on a console that takes actions, the forms that act on it.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use fluxio_core::RunStatus;
use fluxio_core::history::{History, PlainCells, TableCells as _};
use fluxio_core::store::Checkpoint;
use maud::{Markup, html};

use crate::{
    Console, ERROR_CHARS, PageError, VALUE_CHARS, actions::Guard, base_of, cut, enc, page,
};

/// The run page's query: `?step=N` shows the context before step `N`.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct RunQuery {
    step: Option<String>,
    /// What an action just did, told once (one of [`notice`]'s names).
    done: Option<String>,
}

/// What the page says after an action redirected to it.
fn notice(done: &str) -> Option<&'static str> {
    Some(match done {
        "retried" => "Marked for retry: a recovery worker of its pipeline resumes it.",
        "cancelled" => "Cancelled: its worker, if any, stops before its next stage.",
        "paused" => "Paused: its worker, if any, stops before its next stage.",
        "unpaused" => "Unpaused.",
        "woken" => "Due now: a worker of its pipeline continues it.",
        "signalled" => "Signal stored: the run takes it at (or when it reaches) the wait.",
        "duplicate" => "The wait had this signal already; nothing changed.",
        _ => return None,
    })
}

pub(crate) async fn run(
    State(console): State<Console>,
    Path(key): Path<String>,
    Query(q): Query<RunQuery>,
    headers: HeaderMap,
) -> Response {
    let base = base_of(&key);
    let signed_in = console.guard.signed_in(&headers);
    match run_page(&console, &key, &base, q, signed_in).await {
        Ok(page) => page,
        Err(e) => e.page(&base),
    }
}

async fn run_page(
    console: &Console,
    key: &str,
    base: &str,
    q: RunQuery,
    signed_in: bool,
) -> Result<Response, PageError> {
    let journal = console.store.history(key).await.map_err(PageError::Store)?;
    let Some(latest) = journal.last() else {
        return Err(PageError::NotFound(format!(
            "no run is stored under `{}`",
            cut(key, 200)
        )));
    };
    let shown: &Checkpoint = match q.step.as_deref().filter(|s| !s.is_empty()) {
        None => latest,
        Some(step) => {
            let n: u32 = step.parse().map_err(|_| {
                PageError::BadRequest(format!("step `{}` is not a step number", cut(step, 32)))
            })?;
            journal.iter().find(|cp| cp.seq == n).ok_or_else(|| {
                PageError::NotFound(format!("run `{}` keeps no step {n}", cut(key, 200)))
            })?
        }
    };
    let history = History::of(key, &journal);
    let markup = html! {
        @if let Some(n) = q.done.as_deref().and_then(notice) { p.notice { (n) } }
        dl.summary {
            dt { "run" } dd { (latest.run_id) }
            dt { "pipeline" } dd { (latest.pipeline) }
            dt { "status" } dd.state { (format!("{:?}", latest.status)) @if latest.is_failed_for_good() { " (for good)" } }
            @if !latest.step.is_empty() {
                dt { "step" } dd { (latest.step) " (try " (latest.attempt) ")" }
            }
            dt { "version" } dd { (latest.version) }
            dt { "created" } dd { (PlainCells.time(latest.created_at_ms)) }
            dt { "updated" } dd { (PlainCells.time(latest.updated_at_ms)) }
            @if let Some(e) = &latest.error_message { dt { "error" } dd.error { (e) } }
            @if let Some(p) = &latest.pending {
                @if !p.waits.is_empty() {
                    dt { "waits for" }
                    dd { @for (i, w) in p.waits.iter().enumerate() { @if i > 0 { ", " } (w.name) " (" (w.payload) ")" } }
                }
                @if let Some(until) = p.until_ms {
                    dt { @if p.waits.is_empty() { "sleeps until" } @else { "deadline" } }
                    dd { (PlainCells.time(until)) }
                }
            }
            @if let Some(parent) = fluxio_core::store::parent_of(&latest.run_id) {
                dt { "parent" } dd { a href={ (base) "runs/" (enc(parent)) } { (parent) } }
            }
            @if let Some(c) = &history.compensation { dt { "compensation" } dd { (c) } }
            @if let Some(o) = &history.forked_from { dt { "forked" } dd { (o) } }
        }
        @if console.actions {
            (actions(&console.guard, latest, base, signed_in))
        }
        h2 { "history" }
        table.history {
            thead { tr { @for h in History::TABLE_HEAD { th { (h) } } } }
            tbody {
                @for (row, step) in history.table(&PlainCells).iter().zip(&history.steps) {
                    tr {
                        td { a href={ "?step=" (step.number) } { (row[0]) } }
                        @for cell in &row[1..] { td { (cut(cell, ERROR_CHARS)) } }
                    }
                }
            }
        }
        @if shown.step.is_empty() {
            h2 { "context at the end (step " (shown.seq) ")" }
        } @else {
            h2 { "context before step " (shown.seq) " (" (shown.step) ")" }
        }
        @if shown.context.is_empty() {
            p { "empty" }
        } @else {
            table.context {
                thead { tr { th { "key" } th { "value" } } }
                tbody {
                    @for (name, value) in shown.context.iter() {
                        tr { td { (name) } td.v { (value_text(&value)) } }
                    }
                }
            }
        }
    };
    Ok(page(&cut(&latest.run_id, 80), base, markup))
}

/// A context value's text, cut at [`VALUE_CHARS`] characters.
fn value_text(value: &fluxio_core::Value) -> String {
    let (mut text, cut) = value.display_prefix(VALUE_CHARS);
    if cut {
        text.push_str(" …");
    }
    text
}

/// The forms that act on the run: those its state takes, and delete.
fn actions(guard: &Guard, latest: &Checkpoint, base: &str, signed_in: bool) -> Markup {
    if !signed_in {
        return html! {
            p { a href={ (base) "login" } { "Sign in" } " to act on this run." }
        };
    }
    let status = latest.status;
    let finished = matches!(status, RunStatus::Completed | RunStatus::Cancelled);
    let button = |action: &'static str, label: &'static str| {
        html! {
            form method="post" action="" {
                input type="hidden" name="csrf" value=(guard.csrf());
                input type="hidden" name="action" value=(action);
                button type="submit" name="go" value=(action) { (label) }
            }
        }
    };
    let waits = latest
        .structure
        .as_ref()
        .map(|s| s.wait_names())
        .unwrap_or_default();
    let parked_until = latest.pending.as_ref().and_then(|p| p.until_ms).is_some();
    html! {
        h2 { "actions" }
        div.actions {
            @if latest.is_failed_for_good() || matches!(status, RunStatus::Failed | RunStatus::NeedsAttention) {
                (button("retry", "retry"))
            }
            @if matches!(status, RunStatus::Sleeping) || (status == RunStatus::Waiting && parked_until) {
                (button("wake", "wake now"))
            }
            @if status == RunStatus::Paused {
                (button("unpause", "unpause"))
            } @else if !finished && !matches!(status, RunStatus::Failed | RunStatus::NeedsAttention) {
                (button("pause", "pause"))
            }
            @if !finished {
                (button("cancel", "cancel"))
            }
            (button("delete", "delete…"))
        }
        @if !finished && !waits.is_empty() {
            form.signal method="post" action="" {
                input type="hidden" name="csrf" value=(guard.csrf());
                input type="hidden" name="action" value="signal";
                label { "signal the wait " select name="wait" { @for w in &waits { option value=(w) { (w) } } } }
                " with the payload (JSON) "
                textarea name="payload" { "null" }
                " "
                button type="submit" name="go" value="signal" { "send" }
            }
        }
    }
}
