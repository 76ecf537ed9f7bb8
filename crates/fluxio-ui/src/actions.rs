//! What the console does to runs (contract rule 38), when
//! [`Console::allow_actions`] lets it: the forms' handlers, the purge, the
//! sign-in, and the [`Guard`] every one of them passes first.
//!
//! Each action calls the library function the CLI's command calls
//! ([`retry_run`], [`cancel_with_children`], [`CheckpointStore::mark`],
//! [`wake_run`], [`CheckpointStore::send_signal`], [`delete_run`]), then
//! redirects to the page it acted on (post, redirect, get), which tells
//! what was done.

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use fluxio_core::clock::Clock;
use fluxio_core::history::{PlainCells, TableCells as _};
use fluxio_core::store::{
    CheckpointStore, Delivery, Mark, Payload, RunFilter, Signal, cancel_with_children,
    check_wait_name, delete_run, retry_run, wake_run,
};
use fluxio_core::{Error, Value};
use maud::html;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::runs::{RunsQuery, filter_of, same_filters};
use crate::{Console, PageError, base_of, cut, enc, page};

/// The cookie a signed-in browser sends: a digest of the console's secret
/// and its token, never the token.
const COOKIE: &str = "fluxio_console";

/// Who the history says sent the console's signals.
const SENDER: &str = "fluxio console";

/// The most runs one purge deletes; the page says when more are left.
const PURGE_MOST: usize = 10_000;

/// The secrets a console's forms and sign-ins are checked against.
pub(crate) struct Guard {
    /// The value every form carries (hex): another site cannot read it, so
    /// it cannot forge a form this console takes.
    csrf: String,
    /// The cookie's value once signed in (hex), when there is a token.
    session: Option<String>,
    /// The token's digest, to compare a sign-in or a bearer with.
    token: Option<[u8; 32]>,
}

impl Guard {
    /// The guard of a console, with a new random secret.
    pub(crate) fn new(token: Option<&str>) -> Guard {
        let mut secret = [0_u8; 32];
        if getrandom::fill(&mut secret).is_err() {
            // no randomness from the system: a digest of what differs per
            // process and moment (the forms still need this console's value)
            let mut h = Sha256::new();
            h.update(format!(
                "{:?}{}",
                std::time::SystemTime::now(),
                std::process::id()
            ));
            h.update(format!("{:p}", &secret));
            secret = h.finalize().into();
        }
        let derive = |what: &[u8], extra: &[u8]| -> String {
            let mut h = Sha256::new();
            h.update(what);
            h.update(secret);
            h.update(extra);
            hex(&h.finalize())
        };
        Guard {
            csrf: derive(b"fluxio console csrf\0", b""),
            session: token.map(|t| derive(b"fluxio console session\0", t.as_bytes())),
            token: token.map(|t| Sha256::digest(t.as_bytes()).into()),
        }
    }

    pub(crate) fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The value this console's forms carry.
    pub(crate) fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Whether a request may act: always without a token; with one, when
    /// it carries the sign-in cookie or `Authorization: Bearer TOKEN`.
    pub(crate) fn signed_in(&self, headers: &HeaderMap) -> bool {
        let Some(session) = &self.session else {
            return true;
        };
        self.bearer(headers)
            || cookie(headers, COOKIE).is_some_and(|c| eq(c.as_bytes(), session.as_bytes()))
    }

    /// Whether the request carries `Authorization: Bearer TOKEN`.
    fn bearer(&self, headers: &HeaderMap) -> bool {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        given.is_some_and(|given| self.is_token(given))
    }

    fn is_token(&self, given: &str) -> bool {
        self.token
            .is_some_and(|t| eq(&Sha256::digest(given.as_bytes()), &t))
    }

    /// Refuses a form that is not this console's (its `csrf` field, or a
    /// browser saying it came from another site), unless a script sent
    /// the bearer token (a browser cannot send that header across sites).
    fn check_form(&self, headers: &HeaderMap, csrf: Option<&str>) -> Result<(), PageError> {
        if self.bearer(headers) {
            return Ok(());
        }
        let cross_site = headers
            .get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes() == b"cross-site");
        let ours = csrf.is_some_and(|c| eq(c.as_bytes(), self.csrf.as_bytes()));
        if cross_site || !ours {
            return Err(PageError::Forbidden(
                "this form was not sent from this console's page (its csrf field is missing \
                 or stale, or another site sent it): open the page again and retry"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// What every action passes: the console takes actions, the form is
    /// its own, and the sender signed in when there is a token.
    fn admit(
        &self,
        console: &Console,
        headers: &HeaderMap,
        csrf: Option<&str>,
    ) -> Result<(), PageError> {
        if !console.actions {
            return Err(PageError::Forbidden(
                "this console is read-only: start it with actions allowed \
                 (`fluxio ui --allow-actions`, or `Console::allow_actions`) to act on runs"
                    .to_owned(),
            ));
        }
        self.check_form(headers, csrf)?;
        if !self.signed_in(headers) {
            return Err(PageError::Unauthorized(
                "actions on this console need its token: sign in first (the page `login`)"
                    .to_owned(),
            ));
        }
        Ok(())
    }
}

fn eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

/// A redirect to `to`, relative to the page the form was on.
pub(crate) fn see_other(to: &str) -> Response {
    let location = HeaderValue::from_str(to).unwrap_or(HeaderValue::from_static("./"));
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

/// A form's fields: every form sends `csrf`; a run's forms send `action`,
/// and `confirm=yes` the second time for delete; signal sends `wait` and
/// `payload`.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ActionForm {
    csrf: Option<String>,
    action: Option<String>,
    confirm: Option<String>,
    wait: Option<String>,
    payload: Option<String>,
    token: Option<String>,
}

/// The form, or a page saying why it could not be read.
fn form(form: Result<Form<ActionForm>, FormRejection>) -> Result<ActionForm, PageError> {
    form.map(|Form(f)| f).map_err(|e| {
        PageError::BadRequest(format!("the form could not be read: {}", e.body_text()))
    })
}

/// The form, read and checked to be this console's ([`Guard::check_form`]).
fn own_form(
    console: &Console,
    headers: &HeaderMap,
    body: Result<Form<ActionForm>, FormRejection>,
) -> Result<ActionForm, PageError> {
    let f = form(body)?;
    console.guard.check_form(headers, f.csrf.as_deref())?;
    Ok(f)
}

/// `POST runs/{key}`: one of a run's actions.
pub(crate) async fn act(
    State(console): State<Console>,
    uri: axum::http::Uri,
    key: Result<Path<String>, axum::extract::rejection::PathRejection>,
    headers: HeaderMap,
    body: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    let key = match crate::key_of(key, &uri) {
        Ok(key) => key,
        Err(page) => return page,
    };
    let base = base_of(&key);
    let done = async {
        let f = form(body)?;
        console.guard.admit(&console, &headers, f.csrf.as_deref())?;
        act_on(&console, &key, &base, f).await
    };
    done.await.unwrap_or_else(|e| e.page(&base))
}

async fn act_on(
    console: &Console,
    key: &str,
    base: &str,
    f: ActionForm,
) -> Result<Response, PageError> {
    let store = &*console.store;
    let done = match f.action.as_deref().unwrap_or_default() {
        "retry" => {
            retry_run(store, key).await?;
            "retried"
        }
        "cancel" => {
            cancel_with_children(store, key).await?;
            "cancelled"
        }
        "pause" => {
            store.mark(key, Mark::Pause).await?;
            "paused"
        }
        "unpause" => {
            let now_ms = Clock::store().now_ms(Some(store)).await?;
            store.mark(key, Mark::Unpause { now_ms }).await?;
            "unpaused"
        }
        "wake" => {
            let now_ms = Clock::store().now_ms(Some(store)).await?;
            wake_run(store, key, now_ms).await?;
            "woken"
        }
        "signal" => signal(store, key, &f).await?,
        "delete" if f.confirm.as_deref() == Some("yes") => {
            delete_run(store, key).await?;
            return Ok(see_other(&format!("{base}?done=deleted")));
        }
        "delete" => return confirm_delete(console, key, base).await,
        other => {
            return Err(PageError::BadRequest(format!(
                "unknown action `{}`; one of: retry, cancel, pause, unpause, wake, signal, delete",
                cut(other, 32)
            )));
        }
    };
    let last = key.rsplit('/').next().unwrap_or(key);
    Ok(see_other(&format!("{}?done={done}", enc(last))))
}

/// Sends the form's signal, checked as the CLI checks it: the wait's name,
/// the payload's JSON, and a wait the run's code has.
async fn signal(
    store: &dyn CheckpointStore,
    key: &str,
    f: &ActionForm,
) -> Result<&'static str, PageError> {
    let wait = f.wait.as_deref().unwrap_or_default();
    check_wait_name(wait)?;
    let text = f.payload.as_deref().unwrap_or_default();
    let value: Value = serde_json::from_str(text).map_err(|e| {
        PageError::BadRequest(format!(
            "the payload for wait `{}` is not JSON: {e}",
            cut(wait, 64)
        ))
    })?;
    let Some(latest) = store.load(key).await? else {
        return Err(Error::CheckpointNotFound {
            run_id: key.to_owned(),
        }
        .into());
    };
    if let Some(structure) = &latest.structure {
        let available = structure.wait_names();
        if !available.iter().any(|w| w == wait) {
            return Err(Error::UnknownWait {
                run_id: key.to_owned(),
                wait: wait.to_owned(),
                available,
            }
            .into());
        }
    }
    let payload = Payload::from_value(&value)?;
    let delivered = store
        .send_signal(key, Signal::new(wait, payload, SENDER)?)
        .await?;
    Ok(if delivered == Delivery::Duplicate {
        "duplicate"
    } else {
        "signalled"
    })
}

/// The page that asks before a run is deleted.
async fn confirm_delete(console: &Console, key: &str, base: &str) -> Result<Response, PageError> {
    let Some(latest) = console.store.load(key).await? else {
        return Err(PageError::NotFound(format!(
            "no run is stored under `{}`",
            cut(key, 200)
        )));
    };
    let markup = html! {
        p { "Delete run " strong { (latest.run_id) } " of " (latest.pipeline) " (" (format!("{:?}", latest.status)) ") and its whole history? This cannot be undone." }
        form method="post" action="" {
            input type="hidden" name="csrf" value=(console.guard.csrf());
            input type="hidden" name="action" value="delete";
            input type="hidden" name="confirm" value="yes";
            button type="submit" name="go" value="delete" { "delete it" }
            " "
            a href="" { "keep it" }
        }
    };
    Ok(page("delete a run?", base, markup))
}

/// What a purge deletes: the runs page's filters, a state required.
fn purge_filter(q: &RunsQuery) -> Result<RunFilter, PageError> {
    if q.state.as_deref().is_none_or(str::is_empty) {
        return Err(PageError::BadRequest(
            "a purge needs a state (`state=failed`)".to_owned(),
        ));
    }
    Ok(filter_of(q)?.limit(PAGE_OF_PURGE))
}

/// Runs a purge lists at a time.
const PAGE_OF_PURGE: usize = 1_000;

/// `GET purge?state=S[&pipeline=P]`: what a purge would delete, and the
/// form that does it.
pub(crate) async fn purge_form(
    State(console): State<Console>,
    Query(q): Query<RunsQuery>,
    headers: HeaderMap,
) -> Response {
    let shown = async {
        if !console.actions {
            return Err(PageError::Forbidden(
                "this console is read-only: purging needs actions allowed".to_owned(),
            ));
        }
        let filter = purge_filter(&q)?.limit(crate::PAGE);
        let listed = console.store.list_runs(&filter).await?;
        let signed_in = console.guard.signed_in(&headers);
        let markup = html! {
            @if listed.runs.is_empty() {
                p { "No run matches: nothing to purge." }
            } @else {
                p { "Delete every run these filters match, " code { (same_filters(&q).trim_start_matches('&')) } ", and its history (at most " (PURGE_MOST) " at a time)? These are the first:" }
                ul { @for r in &listed.runs { li { (r.key) " (" (PlainCells.time(r.updated_at_ms)) ")" } } }
                @if listed.next.is_some() { p { "…and more." } }
                @if signed_in {
                    form method="post" action="" {
                        input type="hidden" name="csrf" value=(console.guard.csrf());
                        input type="hidden" name="confirm" value="yes";
                        button type="submit" name="go" value="purge" { "delete them" }
                    }
                } @else {
                    p { a href="login" { "Sign in" } " to purge." }
                }
            }
        };
        Ok(page("purge runs?", "./", markup))
    };
    shown.await.unwrap_or_else(|e| e.page("./"))
}

/// `POST purge?state=S[&pipeline=P]` with `confirm=yes`: deletes the runs
/// in state `S`, each under its lease as `delete` does (a run a worker
/// holds is left), at most [`PURGE_MOST`].
pub(crate) async fn purge(
    State(console): State<Console>,
    Query(q): Query<RunsQuery>,
    headers: HeaderMap,
    body: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    let done = async {
        let f = form(body)?;
        console.guard.admit(&console, &headers, f.csrf.as_deref())?;
        if f.confirm.as_deref() != Some("yes") {
            return Err(PageError::BadRequest(
                "a purge needs `confirm=yes` (the purge page's button)".to_owned(),
            ));
        }
        let mut filter = purge_filter(&q)?;
        let mut deleted = 0_usize;
        let mut left = Vec::new();
        'pages: loop {
            let listed = console.store.list_runs(&filter).await?;
            for r in &listed.runs {
                if deleted == PURGE_MOST {
                    break 'pages;
                }
                match delete_run(&*console.store, &r.key).await {
                    Ok(()) => deleted += 1,
                    Err(Error::RunIdInUse { .. }) => left.push(r.key.clone()),
                    Err(e) => return Err(e.into()),
                }
            }
            match listed.next {
                Some(next) => filter = filter.after(next),
                None => break,
            }
        }
        if left.is_empty() {
            return Ok(see_other(&format!(
                "./?done=purged&count={deleted}{}",
                same_filters(&q)
            )));
        }
        let markup = html! {
            p.notice { "Purged " (deleted) " runs." }
            p.error { (left.len()) " were left: a worker holds each (cancel them first): " (left.iter().map(|k| cut(k, 100)).collect::<Vec<_>>().join(", ")) }
            p { a href="./" { "the runs" } }
        };
        Ok((StatusCode::CONFLICT, page("purge", "./", markup)).into_response())
    };
    done.await.unwrap_or_else(|e| e.page("./"))
}

/// `GET login`: the form that takes the console's token.
pub(crate) async fn login_form(State(console): State<Console>) -> Response {
    if !console.guard.has_token() {
        return see_other("./");
    }
    let markup = html! {
        form method="post" action="" {
            input type="hidden" name="csrf" value=(console.guard.csrf());
            label { "token " input type="password" name="token" autocomplete="current-password"; }
            " "
            button type="submit" name="go" value="login" { "sign in" }
        }
    };
    page("sign in", "./", markup)
}

/// `POST login`: a right token sets the cookie (a digest, never the token)
/// and leads to the runs.
pub(crate) async fn login(
    State(console): State<Console>,
    headers: HeaderMap,
    body: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    let done = async {
        let f = own_form(&console, &headers, body)?;
        let (Some(session), Some(token)) = (&console.guard.session, f.token.as_deref()) else {
            return Err(PageError::BadRequest(
                "this console has no token to sign in with".to_owned(),
            ));
        };
        if !console.guard.is_token(token) {
            return Err(PageError::Unauthorized(
                "that is not this console's token".to_owned(),
            ));
        }
        let cookie = format!("{COOKIE}={session}; HttpOnly; SameSite=Strict");
        let mut response = see_other("./");
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            response.headers_mut().insert(header::SET_COOKIE, v);
        }
        Ok(response)
    };
    done.await.unwrap_or_else(|e| e.page("./"))
}

/// `POST logout`: forgets the cookie.
pub(crate) async fn logout(
    State(console): State<Console>,
    headers: HeaderMap,
    body: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    let done = async {
        own_form(&console, &headers, body)?;
        let mut response = see_other("./");
        response.headers_mut().insert(
            header::SET_COOKIE,
            HeaderValue::from_static("fluxio_console=; Max-Age=0; HttpOnly; SameSite=Strict"),
        );
        Ok(response)
    };
    done.await.unwrap_or_else(|e: PageError| e.page("./"))
}
