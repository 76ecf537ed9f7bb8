//! A web console over any fluxio store (contract rule 38): the runs it keeps
//! by state, and each run's steps, with the context as it was before any of
//! them. Server-rendered HTML, no script, nothing to build: mount
//! [`Console::router`] in your service, under its own path and behind your
//! own authentication layer.
//!
//! This first slice is read-only: the runs page (filters by pipeline, state
//! and run id prefix, keyset pages) and a run's page (its summary, history,
//! compensation, and its context at its latest checkpoint or at any step).
//!
//! Every value shown is HTML-escaped (a run id or a context value holding
//! `<script>` is shown, never run), every response forbids scripts with its
//! `Content-Security-Policy`, and a store that fails answers an error page
//! naming what failed, never a panic.
//!
//! ```
//! use std::sync::Arc;
//! use fluxio_core::store::{CheckpointStore, InMemoryStore};
//!
//! let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
//! let app: axum::Router = fluxio_ui::Console::new(store).router();
//! // axum::serve(listener, app) in your service, or `.nest("/ops", app)`
//! # let _ = app;
//! ```

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use fluxio_core::history::{History, PlainCells, TableCells as _};
use fluxio_core::store::{Checkpoint, CheckpointStore, RunFilter, RunState};
use maud::{DOCTYPE, Markup, html};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// The most characters of one context value a page shows.
const VALUE_CHARS: usize = 2_000;

/// The most characters of an error message a runs page shows.
const ERROR_CHARS: usize = 200;

/// Runs per page.
const PAGE: usize = 50;

/// What every page answers with: no script runs, whatever a value holds.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'";

/// The console over one store: build it, then take its [`router`](Console::router).
#[derive(Clone)]
pub struct Console {
    store: Arc<dyn CheckpointStore>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console").finish_non_exhaustive()
    }
}

impl Console {
    /// A console over `store`.
    #[must_use]
    pub fn new(store: Arc<dyn CheckpointStore>) -> Self {
        Console { store }
    }

    /// The console's routes: `/` (the runs) and `/runs/{key}` (a run, by
    /// its store key `pipeline/run_id`, percent-encoded).
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(runs))
            .route("/runs/{*key}", get(run))
            .with_state(self)
    }
}

/// Why a page could not be shown.
enum PageError {
    /// A query parameter is wrong: which, and why.
    BadRequest(String),
    /// Nothing is stored under the key.
    NotFound(String),
    /// The store failed.
    Store(fluxio_core::Error),
}

impl PageError {
    /// The error page; `base` leads back to the runs page.
    fn page(self, base: &str) -> Response {
        let (status, message) = match self {
            PageError::BadRequest(m) => (StatusCode::BAD_REQUEST, m),
            PageError::NotFound(m) => (StatusCode::NOT_FOUND, m),
            PageError::Store(e @ fluxio_core::Error::Unsupported { .. }) => {
                (StatusCode::NOT_IMPLEMENTED, e.to_string())
            }
            PageError::Store(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        };
        let title = status.canonical_reason().unwrap_or("error");
        let body = page(
            title,
            base,
            html! {
                p.error { (message) }
                p { a href=(base) { "the runs" } }
            },
        );
        (status, body).into_response()
    }
}

/// `markup` in the console's page shell, with its security headers; `base`
/// is the relative path to the runs page, so that the console works
/// wherever it is mounted.
fn page(title: &str, base: &str, markup: Markup) -> Response {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · fluxio" }
                style { (maud::PreEscaped(STYLE)) }
            }
            body {
                header { a.brand href=(base) { "fluxio" } " " span.title { (title) } }
                main { (markup) }
            }
        }
    };
    (
        [
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        doc,
    )
        .into_response()
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330}\
header{background:#1d2330;color:#fff;padding:.6em 1.2em}header a{color:#fff;text-decoration:none;font-weight:600}\
main{padding:1em 1.2em}table{border-collapse:collapse;width:100%}\
th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #e3e6ee;vertical-align:top}\
th{background:#f4f6fa}td.v{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}\
.error{color:#a4161a}.state{font-weight:600}.failed,.needs-attention{color:#a4161a}\
.completed{color:#2b7a0b}.running,.sleeping,.waiting{color:#1f5fbf}\
form.filters{display:flex;gap:.6em;flex-wrap:wrap;margin-bottom:1em}dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}\
dt{color:#5a6275}";

/// What [`enc`] leaves as it is: letters, digits and RFC 3986's other
/// unreserved characters.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `s` percent-encoded for a URL path or query.
fn enc(s: &str) -> String {
    // keys keep their `/` readable; everything else reserved is encoded
    utf8_percent_encode(s, UNRESERVED)
        .to_string()
        .replace("%2F", "/")
}

/// At most `limit` characters of `text`, with how much was cut.
fn cut(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        None => text.to_owned(),
        Some((at, _)) => format!("{}… ({} bytes in all)", &text[..at], text.len()),
    }
}

/// At most `limit` characters of a value's text, written no further than
/// that (a 50 MB value is not rendered whole to be cut).
fn value_text(value: &fluxio_core::Value, limit: usize) -> String {
    use std::fmt::Write as _;
    struct Bounded {
        text: String,
        chars: usize,
        limit: usize,
        cut: bool,
    }
    impl std::fmt::Write for Bounded {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            for c in s.chars() {
                if self.chars == self.limit {
                    self.cut = true;
                    return Err(std::fmt::Error);
                }
                self.text.push(c);
                self.chars += 1;
            }
            Ok(())
        }
    }
    let mut out = Bounded {
        text: String::new(),
        chars: 0,
        limit,
        cut: false,
    };
    let _ = write!(out, "{value}");
    if out.cut {
        out.text.push_str(" …");
    }
    out.text
}

/// The runs page's query: `?pipeline=orders&state=failed&prefix=o-&after=...`.
#[derive(Debug, Default, serde::Deserialize)]
struct RunsQuery {
    pipeline: Option<String>,
    state: Option<String>,
    prefix: Option<String>,
    after: Option<String>,
}

fn state_of(name: &str) -> Result<RunState, PageError> {
    RunState::ALL
        .into_iter()
        .find(|s| s.as_str() == name)
        .ok_or_else(|| {
            let all: Vec<&str> = RunState::ALL.iter().map(|s| s.as_str()).collect();
            PageError::BadRequest(format!(
                "unknown state `{}`; one of: {}",
                cut(name, 64),
                all.join(", ")
            ))
        })
}

async fn runs(State(console): State<Console>, Query(q): Query<RunsQuery>) -> Response {
    match runs_page(&console, q).await {
        Ok(page) => page,
        Err(e) => e.page("./"),
    }
}

async fn runs_page(console: &Console, q: RunsQuery) -> Result<Response, PageError> {
    let nonempty = |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
    let mut filter = RunFilter::new().limit(PAGE);
    if let Some(p) = nonempty(&q.pipeline) {
        filter = filter.pipeline(p);
    }
    if let Some(s) = nonempty(&q.state) {
        filter = filter.state(state_of(&s)?);
    }
    if let Some(p) = nonempty(&q.prefix) {
        filter = filter.id_prefix(p);
    }
    if let Some(a) = nonempty(&q.after) {
        filter = filter.after(a);
    }
    let listed = console
        .store
        .list_runs(&filter)
        .await
        .map_err(PageError::Store)?;
    let keep = |name: &str, v: &Option<String>| {
        nonempty(v)
            .map(|v| format!("&{name}={}", enc(&v)))
            .unwrap_or_default()
    };
    let same_filters = format!(
        "{}{}{}",
        keep("pipeline", &q.pipeline),
        keep("state", &q.state),
        keep("prefix", &q.prefix)
    );
    let markup = html! {
        form.filters method="get" action="" {
            input name="pipeline" placeholder="pipeline" value=[nonempty(&q.pipeline)];
            select name="state" {
                option value="" { "any state" }
                @for s in RunState::ALL {
                    option value=(s.as_str()) selected[nonempty(&q.state).as_deref() == Some(s.as_str())] { (s.as_str()) }
                }
            }
            input name="prefix" placeholder="run id prefix" value=[nonempty(&q.prefix)];
            button type="submit" { "filter" }
        }
        @if listed.runs.is_empty() {
            p { "No run matches." }
        } @else {
            table.runs {
                thead { tr { th { "run" } th { "pipeline" } th { "state" } th { "step" } th { "try" } th { "updated" } th { "error" } } }
                tbody {
                    @for r in &listed.runs {
                        tr {
                            td { a href={ "runs/" (enc(&r.key)) } { (r.run_id) } }
                            td { (r.pipeline) }
                            td.state.(r.state.as_str()) { (r.state.as_str()) }
                            td { (r.step) }
                            td { (r.attempt) }
                            td { (PlainCells.time(r.updated_at_ms)) }
                            td.error { (r.error_message.as_deref().map(|e| cut(e, ERROR_CHARS)).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
        @if let Some(next) = &listed.next {
            p { a.next href={ "?after=" (enc(next)) (same_filters) } { "next page →" } }
        }
    };
    Ok(page("runs", "./", markup))
}

/// The run page's query: `?step=N` shows the context before step `N`.
#[derive(Debug, Default, serde::Deserialize)]
struct RunQuery {
    step: Option<String>,
}

async fn run(
    State(console): State<Console>,
    Path(key): Path<String>,
    Query(q): Query<RunQuery>,
) -> Response {
    // from `runs/pipeline/id` back to the runs page
    let base = "../".repeat(key.split('/').count());
    match run_page(&console, &key, &base, q).await {
        Ok(page) => page,
        Err(e) => e.page(&base),
    }
}

async fn run_page(
    console: &Console,
    key: &str,
    base: &str,
    q: RunQuery,
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
        dl.summary {
            dt { "run" } dd { (latest.run_id) }
            dt { "pipeline" } dd { (latest.pipeline) }
            dt { "status" } dd.state { (format!("{:?}", latest.status)) @if latest.is_failed_for_good() { " (for good)" } }
            dt { "step" } dd { (latest.step) " (try " (latest.attempt) ")" }
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
        h2 { "context before step " (shown.seq) " (" (shown.step) ")" }
        @if shown.context.is_empty() {
            p { "empty" }
        } @else {
            table.context {
                thead { tr { th { "key" } th { "value" } } }
                tbody {
                    @for (name, value) in shown.context.iter() {
                        tr { td { (name) } td.v { (value_text(&value, VALUE_CHARS)) } }
                    }
                }
            }
        }
    };
    Ok(page(&cut(&latest.run_id, 80), base, markup))
}
