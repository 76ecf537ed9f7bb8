//! A web console over any fluxio store (contract rule 38): the runs it keeps
//! by state, each run's steps with the context as it was before any of
//! them, and, when allowed, the operator's actions on a run. Server-rendered
//! HTML, no script, nothing to build: mount [`Console::router`] in your
//! service, under its own path and behind your own authentication layer.
//!
//! Pages: the runs (filters by pipeline, state and run id prefix, keyset
//! pages) and a run's page (its summary, history, compensation, and its
//! context at its latest checkpoint or at any step).
//!
//! Actions, off unless [`Console::allow_actions`]: retry, cancel, pause,
//! unpause, wake, signal (a wait's payload as JSON), delete and purge
//! (each asked twice), through the same library functions the CLI uses.
//! Every form carries a token against cross-site requests, and with
//! [`Console::token`] an action needs the operator to have signed in with
//! that token first (or a script to send `Authorization: Bearer TOKEN`).
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
//! # fn main() -> Result<(), fluxio_core::Error> {
//! let store: Arc<dyn CheckpointStore> = Arc::new(InMemoryStore::new());
//! let app: axum::Router = fluxio_ui::Console::new(store)
//!     .allow_actions()
//!     .token("a long secret only operators know")?
//!     .router();
//! // serve it alone: axum::serve(listener, app), or under a path of your
//! // service, behind its own authentication layer:
//! let service: axum::Router = axum::Router::new().nest_service("/ops", app);
//! # let _ = service;
//! # Ok(()) }
//! ```

mod actions;
mod run;
mod runs;

use std::sync::Arc;

use axum::Router;
use axum::http::Uri;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use maud::{DOCTYPE, Markup, html};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use fluxio_core::store::CheckpointStore;

/// The most characters of one context value a page shows.
const VALUE_CHARS: usize = 2_000;

/// The most characters of an error message a runs page shows.
const ERROR_CHARS: usize = 200;

/// Runs per page.
const PAGE: usize = 50;

/// The longest token [`Console::token`] takes.
pub const MAX_TOKEN_LEN: usize = 1_024;

/// What every page answers with: no script runs, whatever a value holds.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'";

/// The console over one store: build it, then take its [`router`](Console::router).
#[derive(Clone)]
pub struct Console {
    store: Arc<dyn CheckpointStore>,
    actions: bool,
    guard: Arc<actions::Guard>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // the token and the secrets derived from it stay out of any log
        f.debug_struct("Console")
            .field("actions", &self.actions)
            .field("token", &self.guard.has_token())
            .finish_non_exhaustive()
    }
}

impl Console {
    /// A read-only console over `store`.
    #[must_use]
    pub fn new(store: Arc<dyn CheckpointStore>) -> Self {
        Console {
            store,
            actions: false,
            guard: Arc::new(actions::Guard::new(None)),
        }
    }

    /// Lets the console's forms act on runs: retry, cancel, pause, unpause,
    /// wake, signal, delete and purge. Without [`token`](Console::token),
    /// whoever reaches the console may act: keep it on a loopback address
    /// or behind your own authentication.
    #[must_use]
    pub fn allow_actions(mut self) -> Self {
        self.actions = true;
        self
    }

    /// Actions need `token`: an operator signs in with it once (the page
    /// `login`; the browser then keeps a cookie derived from it, never the
    /// token itself), a script sends `Authorization: Bearer TOKEN`. Pages
    /// stay readable without it. No page, header or log line shows it.
    ///
    /// # Errors
    /// [`fluxio_core::Error::InvalidSetting`] naming `token` when it is
    /// empty or longer than [`MAX_TOKEN_LEN`] bytes.
    pub fn token(mut self, token: impl Into<String>) -> Result<Self, fluxio_core::Error> {
        let token = token.into();
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Err(fluxio_core::Error::InvalidSetting {
                setting: "token",
                message: format!(
                    "a console token has 1 to {MAX_TOKEN_LEN} bytes; this one has {}",
                    token.len()
                ),
            });
        }
        self.guard = Arc::new(actions::Guard::new(Some(&token)));
        Ok(self)
    }

    /// The console's routes, relative to wherever it is mounted (mount it
    /// with `nest_service("/ops", ...)`: `/ops` then leads to `/ops/`,
    /// since its links are relative): `/` (the runs), `/pipelines` (runs
    /// per pipeline and state), `/runs/{key}` (a run, by its store key `pipeline/run_id`,
    /// percent-encoded; a form posts its actions there), `/purge`, and
    /// `/login` and `/logout` for a console with a token.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(runs::runs))
            .route("/pipelines", get(runs::pipelines))
            .route("/runs/{*key}", get(run::run).post(actions::act))
            .route("/purge", get(actions::purge_form).post(actions::purge))
            .route("/login", get(actions::login_form).post(actions::login))
            .route("/logout", axum::routing::post(actions::logout))
            .fallback(not_found)
            .with_state(self)
    }
}

/// Any other path: a page saying so.
async fn not_found(uri: Uri) -> Response {
    PageError::NotFound(format!(
        "the console has no page `{}`",
        cut(uri.path(), 200)
    ))
    .page(&base_of_path(uri.path()))
}

/// The run's key a `runs/{key}` route was given, or the error page for one
/// that is not percent-encoded UTF-8.
fn key_of(
    key: Result<axum::extract::Path<String>, axum::extract::rejection::PathRejection>,
    uri: &Uri,
) -> Result<String, Response> {
    key.map(|axum::extract::Path(key)| key).map_err(|_| {
        PageError::BadRequest("a run's key in the URL is not percent-encoded UTF-8".to_owned())
            .page(&base_of_path(uri.path()))
    })
}

/// The relative path from the page at `path` (as the console's router
/// sees it, wherever it is mounted) back to the runs page.
fn base_of_path(path: &str) -> String {
    match path.matches('/').count().saturating_sub(1) {
        0 => "./".to_owned(),
        depth => "../".repeat(depth),
    }
}

/// Why a page could not be shown, or an action not done.
enum PageError {
    /// A query parameter or form field is wrong: which, and why.
    BadRequest(String),
    /// Nothing is stored under the key.
    NotFound(String),
    /// The action needs a sign-in first.
    Unauthorized(String),
    /// The console does not take actions, or the form is not this console's.
    Forbidden(String),
    /// The store failed, or refused the action.
    Store(fluxio_core::Error),
}

impl PageError {
    /// The error page; `base` leads back to the runs page.
    fn page(self, base: &str) -> Response {
        use fluxio_core::Error as E;
        let (status, message) = match self {
            PageError::BadRequest(m) => (StatusCode::BAD_REQUEST, m),
            PageError::NotFound(m) => (StatusCode::NOT_FOUND, m),
            PageError::Unauthorized(m) => (StatusCode::UNAUTHORIZED, m),
            PageError::Forbidden(m) => (StatusCode::FORBIDDEN, m),
            PageError::Store(e @ E::Unsupported { .. }) => {
                (StatusCode::NOT_IMPLEMENTED, e.message_with_causes())
            }
            PageError::Store(e @ (E::Store { .. } | E::Internal { .. })) => {
                (StatusCode::SERVICE_UNAVAILABLE, e.message_with_causes())
            }
            PageError::Store(e @ E::CheckpointNotFound { .. }) => {
                (StatusCode::NOT_FOUND, e.message_with_causes())
            }
            // the store answered: the run is not in a state the action takes
            PageError::Store(e) => (StatusCode::CONFLICT, e.message_with_causes()),
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

impl From<fluxio_core::Error> for PageError {
    fn from(e: fluxio_core::Error) -> Self {
        PageError::Store(e)
    }
}

/// `markup` in the console's page shell, with its security headers; `base`
/// is the relative path to the runs page, so that the console works
/// wherever it is mounted.
fn page(title: &str, base: &str, markup: Markup) -> Response {
    page_with(title, base, markup, None)
}

/// [`page`], reloading itself every `refresh` seconds when given (no
/// script: the browser's own refresh).
fn page_with(title: &str, base: &str, markup: Markup, refresh: Option<u32>) -> Response {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if let Some(secs) = refresh { meta http-equiv="refresh" content=(secs); }
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · fluxio" }
                style { (maud::PreEscaped(STYLE)) }
            }
            body {
                header {
                    a.brand href=(base) { "fluxio" } " " span.title { (title) }
                    nav { a href=(base) { "runs" } " " a href={ (base) "pipelines" } { "pipelines" } }
                }
                main { (markup) }
            }
        }
    };
    (
        [
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        doc,
    )
        .into_response()
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330}\
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;gap:.6em}header nav{margin-left:auto;display:flex;gap:1em}header a{color:#fff;text-decoration:none;font-weight:600}\
main{padding:1em 1.2em}table{border-collapse:collapse;width:100%}\
th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #e3e6ee;vertical-align:top}\
th{background:#f4f6fa}td.v{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}\
.error{color:#a4161a}.state{font-weight:600}.failed,.needs-attention{color:#a4161a}\
.completed{color:#2b7a0b}.running,.sleeping,.waiting{color:#1f5fbf}\
form.filters,div.actions{display:flex;gap:.6em;flex-wrap:wrap;margin-bottom:1em;align-items:flex-start}\
div.actions form{margin:0}p.notice{background:#e8f3e0;padding:.4em .8em}\
textarea{font-family:ui-monospace,monospace;width:28em;height:4em}\
th.timeline,td.timeline{width:22%}span.bar{display:block;height:.8em;border-radius:2px;background:#1f5fbf}\
span.bar.completed{background:#2b7a0b}span.bar.failed{background:#a4161a}pre.v{white-space:pre-wrap;word-break:break-all}\
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{color:#5a6275}";

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

/// The relative path from a run's page (`runs/{key}`) back to the runs page.
fn base_of(key: &str) -> String {
    "../".repeat(key.split('/').count())
}
