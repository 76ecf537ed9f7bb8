//! A run's page: its summary (with its lease, parent and children), its
//! steps on a timeline, its context before any step (a value cut, or one
//! shown whole), the diff of two of its points, and, on a console that
//! takes actions, the forms that act on it. A run that is running reloads
//! itself every few seconds.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use fluxio_core::RunStatus;
use fluxio_core::history::{History, PlainCells, TableCells as _};
use fluxio_core::store::{Checkpoint, RunFilter, RunState, RunSummary};
use fluxio_core::{Diff, Error};
use maud::{Markup, html};

use crate::{
    Console, ERROR_CHARS, PAGE, PageError, VALUE_CHARS, actions::Guard, base_of, cut, enc,
    page_with,
};

/// The most characters of one value `?key=K` shows.
const WHOLE_CHARS: usize = 1_000_000;

/// How often (seconds) a running run's page reloads itself.
const REFRESH_SECS: u32 = 3;

/// The run page's query: `?step=N` shows the context before step `N`;
/// `&key=K` shows that key's value whole (up to [`WHOLE_CHARS`]);
/// `?diff=A&to=B` the keys that differ between steps `A` and `B`.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct RunQuery {
    step: Option<String>,
    key: Option<String>,
    diff: Option<String>,
    to: Option<String>,
    /// What an action just did, told once (one of [`notice`]'s names).
    done: Option<String>,
}

/// The step number `text` in the query's `name`, and its checkpoint.
fn point<'j>(
    journal: &'j [Checkpoint],
    key: &str,
    name: &str,
    text: &str,
) -> Result<&'j Checkpoint, PageError> {
    let n: u32 = text.parse().map_err(|_| {
        PageError::BadRequest(format!("{name} `{}` is not a step number", cut(text, 32)))
    })?;
    journal
        .iter()
        .find(|cp| cp.seq == n)
        .ok_or_else(|| PageError::NotFound(format!("run `{}` keeps no step {n}", cut(key, 200))))
}

/// Whether a worker holds the run and until when, for a running run (its
/// listing summary: one indexed listing per state, `Running` then
/// `Abandoned`); `None` for any other, or from a store that cannot list.
async fn lease_of(console: &Console, latest: &Checkpoint) -> Result<Option<RunSummary>, PageError> {
    if latest.status != RunStatus::Running {
        return Ok(None);
    }
    let key = latest.key();
    for state in [RunState::Running, RunState::Abandoned] {
        let filter = RunFilter::new()
            .pipeline(latest.pipeline.clone())
            .state(state)
            .id_prefix(latest.run_id.clone())
            .limit(1);
        match console.store.list_runs(&filter).await {
            Ok(page) => {
                if let Some(me) = page.runs.into_iter().find(|r| r.key == key) {
                    return Ok(Some(me));
                }
            }
            Err(Error::Unsupported { .. }) => return Ok(None),
            Err(e) => return Err(PageError::Store(e)),
        }
    }
    Ok(None)
}

/// The child runs the journal says the run started (each a wait of one of
/// its checkpoints, rule 29), at most [`PAGE`], with their latest status
/// (`None`: no longer stored), in the order it started them.
async fn children_of(
    console: &Console,
    journal: &[Checkpoint],
) -> Result<Vec<(String, Option<RunStatus>)>, PageError> {
    let mut keys: Vec<String> = Vec::new();
    for cp in journal {
        if let Some(child) = fluxio_core::store::open_child(cp) {
            if !keys.contains(&child) {
                keys.push(child);
            }
        }
    }
    keys.truncate(PAGE);
    let mut children = Vec::with_capacity(keys.len());
    for key in keys {
        let status = console.store.load(&key).await?.map(|cp| cp.status);
        children.push((key, status));
    }
    Ok(children)
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
    uri: axum::http::Uri,
    key: Result<Path<String>, axum::extract::rejection::PathRejection>,
    Query(q): Query<RunQuery>,
    headers: HeaderMap,
) -> Response {
    let key = match crate::key_of(key, &uri) {
        Ok(key) => key,
        Err(page) => return page,
    };
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
    let given = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
    let shown: &Checkpoint = match given(&q.step) {
        None => latest,
        Some(step) => point(&journal, key, "step", &step)?,
    };
    let diff = match (given(&q.diff), given(&q.to)) {
        (Some(a), Some(b)) => {
            let (ca, cb) = (
                point(&journal, key, "diff", &a)?,
                point(&journal, key, "to", &b)?,
            );
            let (la, lb) = (format!("step {a}"), format!("step {b}"));
            Some(Diff::between(
                &la,
                &ca.context.to_context(),
                &lb,
                &cb.context.to_context(),
            ))
        }
        (None, None) => None,
        _ => {
            return Err(PageError::BadRequest(
                "a diff needs two steps: `?diff=A&to=B`".to_owned(),
            ));
        }
    };
    let whole = match given(&q.key) {
        None => None,
        Some(name) => match shown.context.get(&name) {
            Some(value) => Some((name, value.display_prefix(WHOLE_CHARS))),
            None => {
                return Err(PageError::NotFound(format!(
                    "run `{}` has no key `{}` before step {}",
                    cut(key, 200),
                    cut(&name, 200),
                    shown.seq
                )));
            }
        },
    };
    let me = lease_of(console, latest).await?;
    let children = children_of(console, &journal).await?;
    let history = History::of(key, &journal);
    let step_query = given(&q.step)
        .map(|s| format!("step={s}&"))
        .unwrap_or_default();
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
            @if let Some(me) = &me {
                dt { "state" } dd.state.(me.state.as_str()) {
                    (me.state.as_str())
                    @if let Some(until) = me.lease_expires_at_ms { ", a worker holds it until " (PlainCells.time(until)) }
                    @else if me.state == RunState::Abandoned { ": no worker holds it; a recovery worker of its pipeline takes it" }
                }
            }
            @if let Some(parent) = fluxio_core::store::parent_of(&latest.run_id) {
                dt { "parent" } dd { a href={ (base) "runs/" (enc(parent)) } { (parent) } }
            }
            @if !children.is_empty() {
                dt { "children" }
                dd { @for (i, (child, status)) in children.iter().enumerate() {
                    @if i > 0 { ", " }
                    a href={ (base) "runs/" (enc(child)) } { (child) }
                    " (" (status.map_or_else(|| "deleted".to_owned(), |s| format!("{s:?}"))) ")"
                } }
            }
            @if let Some(c) = &history.compensation { dt { "compensation" } dd { (c) } }
            @if let Some(o) = &history.forked_from { dt { "forked" } dd { (o) } }
        }
        @if console.actions {
            (actions(&console.guard, latest, base, signed_in))
        }
        h2 { "history" }
        (timeline(&history))
        @if journal.len() > 1 {
            form.filters method="get" action="" {
                label { "diff step " select name="diff" { @for cp in &journal { option value=(cp.seq) selected[diff.is_some() && q.diff.as_deref() == Some(cp.seq.to_string().as_str())] { (cp.seq) } } } }
                label { " to step " select name="to" { @for cp in journal.iter().rev() { option value=(cp.seq) selected[diff.is_some() && q.to.as_deref() == Some(cp.seq.to_string().as_str())] { (cp.seq) } } } }
                " " button type="submit" { "diff" }
            }
        }
        @if let Some(d) = &diff {
            h2 { "diff of " (d.run_a) " and " (d.run_b) }
            @if d.entries.is_empty() {
                p { "no key differs" }
            } @else {
                table.diff {
                    thead { tr { th { "key" } th { (d.run_a) } th { (d.run_b) } } }
                    tbody {
                        @for e in &d.entries {
                            tr {
                                td { (e.key) }
                                td.v { @if let Some(v) = &e.a { (value_text(v)) } @else { em { "absent" } } }
                                td.v { @if let Some(v) = &e.b { (value_text(v)) } @else { em { "absent" } } }
                            }
                        }
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
                        @let (text, more) = value.display_prefix(VALUE_CHARS);
                        tr {
                            td { (name) }
                            td.v { (text) @if more { " … " a.whole href={ "?" (step_query) "key=" (enc(name)) } { "show it whole" } } }
                        }
                    }
                }
            }
        }
        @if let Some((name, (text, more))) = &whole {
            h2 { "the value of " (name) }
            pre.v { (text) }
            @if *more { p { "… cut at " (WHOLE_CHARS) " characters" } }
        }
    };
    let refresh = (latest.status == RunStatus::Running).then_some(REFRESH_SECS);
    Ok(page_with(&cut(&latest.run_id, 80), base, markup, refresh))
}

/// A value's text, cut at [`VALUE_CHARS`] characters.
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

/// The steps as a table, each with a bar placed on the run's time span:
/// where it started and how long it took.
fn timeline(history: &History) -> Markup {
    let start = history.steps.first().map_or(0, |s| s.started_at_ms);
    let end = history
        .steps
        .iter()
        .map(|s| s.finished_at_ms.unwrap_or(s.started_at_ms))
        .max()
        .unwrap_or(start);
    let span = end.saturating_sub(start).max(1) as f64;
    let rows = history.table(&PlainCells);
    html! {
        table.history {
            thead { tr { @for h in History::TABLE_HEAD { th { (h) } } th.timeline { "timeline" } } }
            tbody {
                @for (row, step) in rows.iter().zip(&history.steps) {
                    @let left = (step.started_at_ms.saturating_sub(start)) as f64 / span * 100.0;
                    @let took = step.finished_at_ms.unwrap_or(step.started_at_ms).saturating_sub(step.started_at_ms) as f64 / span * 100.0;
                    tr {
                        td { a href={ "?step=" (step.number) } { (row[0]) } }
                        @for cell in &row[1..] { td { (cut(cell, ERROR_CHARS)) } }
                        td.timeline {
                            span.bar.(step_class(step)) style={ "margin-left:" (format!("{left:.1}")) "%;width:" (format!("{:.1}", took.max(0.5))) "%" } {}
                        }
                    }
                }
            }
        }
    }
}

/// The bar's class: how the step ended.
fn step_class(step: &fluxio_core::history::Step) -> &'static str {
    use fluxio_core::StepStatus as S;
    match step.status {
        S::Completed => "completed",
        S::Failed => "failed",
        _ => "running",
    }
}
