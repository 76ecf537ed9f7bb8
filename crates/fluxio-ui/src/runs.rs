//! The runs page: the store's runs by pipeline, state and id prefix, a
//! page of [`PAGE`] at a time in key order.

use axum::extract::rejection::QueryRejection;
use axum::extract::{OriginalUri, Query, State};
use axum::response::Response;
use fluxio_core::history::{PlainCells, TableCells as _};
use fluxio_core::store::{RunFilter, RunState};
use maud::html;

use crate::{Console, ERROR_CHARS, PAGE, PageError, cut, enc, page};

/// The runs page's query: `?pipeline=orders&state=failed&prefix=o-&after=...`;
/// `created_from` and `updated_before` are UTC times, `2026-12-01T08:00`.
/// A purge takes the same filters.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct RunsQuery {
    pub(crate) pipeline: Option<String>,
    pub(crate) state: Option<String>,
    prefix: Option<String>,
    version: Option<String>,
    created_from: Option<String>,
    updated_before: Option<String>,
    after: Option<String>,
    /// What an action just did, told once: `deleted` or `purged`.
    done: Option<String>,
    /// How many runs a purge deleted.
    count: Option<u64>,
}

pub(crate) fn state_of(name: &str) -> Result<RunState, PageError> {
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

/// The query's value of a filter, when given and not empty.
fn given(v: &Option<String>) -> Option<String> {
    v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned)
}

/// `text`, a UTC time (`2026-12-01T08:00`, seconds optional, or RFC 3339),
/// in milliseconds since the Unix epoch.
fn utc_ms(name: &str, text: &str) -> Result<u64, PageError> {
    let full = if text.len() == 16 {
        format!("{text}:00")
    } else {
        text.to_owned()
    };
    humantime::parse_rfc3339_weak(&full)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| u64::try_from(d.as_millis()).ok())
        .ok_or_else(|| {
            PageError::BadRequest(format!(
                "{name} `{}` is not a UTC time like 2026-12-01T08:00",
                cut(text, 40)
            ))
        })
}

/// The runs the query's filters ask for (its page cursor aside).
pub(crate) fn filter_of(q: &RunsQuery) -> Result<RunFilter, PageError> {
    let mut filter = RunFilter::new().limit(PAGE);
    if let Some(p) = given(&q.pipeline) {
        filter = filter.pipeline(p);
    }
    if let Some(s) = given(&q.state) {
        filter = filter.state(state_of(&s)?);
    }
    if let Some(p) = given(&q.prefix) {
        filter = filter.id_prefix(p);
    }
    if let Some(v) = given(&q.version) {
        filter.version = Some(v);
    }
    if let Some(t) = given(&q.created_from) {
        filter.created_after_ms = Some(utc_ms("created_from", &t)?);
    }
    if let Some(t) = given(&q.updated_before) {
        filter.updated_before_ms = Some(utc_ms("updated_before", &t)?);
    }
    Ok(filter)
}

/// The query's filters (its page cursor aside) as `&name=value` pairs.
pub(crate) fn same_filters(q: &RunsQuery) -> String {
    [
        ("pipeline", &q.pipeline),
        ("state", &q.state),
        ("prefix", &q.prefix),
        ("version", &q.version),
        ("created_from", &q.created_from),
        ("updated_before", &q.updated_before),
    ]
    .into_iter()
    .filter_map(|(name, v)| given(v).map(|v| format!("&{name}={}", enc(&v))))
    .collect()
}

pub(crate) async fn runs(
    State(console): State<Console>,
    OriginalUri(uri): OriginalUri,
    q: Result<Query<RunsQuery>, QueryRejection>,
) -> Response {
    // mounted under `/ops` (`nest_service`), `/ops` is this page too: its
    // links are relative, so it answers from `/ops/`
    if !uri.path().ends_with('/') {
        let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
        let last = uri.path().rsplit('/').next().unwrap_or_default();
        return crate::actions::see_other(&format!("{}/{query}", enc(last)));
    }
    let page = async {
        let Query(q) = q.map_err(|e| PageError::BadRequest(e.body_text()))?;
        runs_page(&console, q).await
    };
    page.await.unwrap_or_else(|e| e.page("./"))
}

async fn runs_page(console: &Console, q: RunsQuery) -> Result<Response, PageError> {
    let nonempty = given;
    let mut filter = filter_of(&q)?;
    if let Some(a) = nonempty(&q.after) {
        filter = filter.after(a);
    }
    let listed = console
        .store
        .list_runs(&filter)
        .await
        .map_err(PageError::Store)?;
    let same_filters = same_filters(&q);
    let notice = match q.done.as_deref() {
        Some("deleted") => Some("The run was deleted.".to_owned()),
        Some("purged") => Some(format!("Purged {} runs.", q.count.unwrap_or(0))),
        _ => None,
    };
    // a purge of what the page shows, for states a run ends in
    let purgeable = console.actions
        && nonempty(&q.state).is_some_and(|s| {
            ["failed", "completed", "cancelled", "needs-attention"].contains(&s.as_str())
        });
    let markup = html! {
        @if let Some(n) = notice { p.notice { (n) } }
        form.filters method="get" action="" {
            input name="pipeline" placeholder="pipeline" value=[nonempty(&q.pipeline)];
            select name="state" {
                option value="" { "any state" }
                @for s in RunState::ALL {
                    option value=(s.as_str()) selected[nonempty(&q.state).as_deref() == Some(s.as_str())] { (s.as_str()) }
                }
            }
            input name="prefix" placeholder="run id prefix" value=[nonempty(&q.prefix)];
            input name="version" placeholder="version" size="14" value=[nonempty(&q.version)];
            label { "created from " input type="datetime-local" name="created_from" value=[nonempty(&q.created_from)]; }
            label { "updated before " input type="datetime-local" name="updated_before" value=[nonempty(&q.updated_before)]; }
            " (UTC) "
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
        @if purgeable && !listed.runs.is_empty() {
            p { a.purge href={ "purge?" (same_filters.trim_start_matches('&')) } { "purge these runs…" } }
        }
    };
    Ok(page("runs", "./", markup))
}

/// `GET pipelines`: each pipeline with runs, and how many are in each
/// state, every count a link to those runs. It counts every run the store
/// keeps ([`CheckpointStore::count_runs`](fluxio_core::store::CheckpointStore::count_runs)):
/// a page of its own, not a part of every runs page.
pub(crate) async fn pipelines(State(console): State<Console>) -> Response {
    let shown = async {
        let counts = console.store.count_runs(&RunFilter::new()).await?;
        let states: Vec<RunState> = RunState::ALL
            .into_iter()
            .filter(|s| counts.iter().any(|c| c.state == *s))
            .collect();
        let mut names: Vec<&str> = counts.iter().map(|c| c.pipeline.as_str()).collect();
        names.dedup();
        let of = |p: &str, s: RunState| {
            counts
                .iter()
                .find(|c| c.pipeline == p && c.state == s)
                .map_or(0, |c| c.runs)
        };
        let markup = html! {
            @if names.is_empty() {
                p { "No runs are stored." }
            } @else {
                table.pipelines {
                    thead { tr { th { "pipeline" } th { "runs" } @for s in &states { th.(s.as_str()) { (s.as_str()) } } } }
                    tbody {
                        @for p in &names {
                            tr {
                                td { a href={ "./?pipeline=" (enc(p)) } { @if p.is_empty() { em { "unnamed" } } @else { (p) } } }
                                td { (states.iter().map(|s| of(p, *s)).sum::<u64>()) }
                                @for s in &states {
                                    td {
                                        @let n = of(p, *s);
                                        @if n > 0 { a href={ "./?pipeline=" (enc(p)) "&state=" (s.as_str()) } { (n) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        };
        Ok::<_, PageError>(page("pipelines", "./", markup))
    };
    shown.await.unwrap_or_else(|e| e.page("./"))
}
