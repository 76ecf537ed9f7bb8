//! What the console's tests share: requests through the router (tower
//! `oneshot`), their replies, and the stages of the pipelines that seed the
//! stores. Each test binary uses part of it.
#![allow(dead_code)]

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use fluxio::{Context, StageResult, TerminalError, stage};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

#[stage]
pub async fn take(ctx: Context) -> StageResult {
    Ok(ctx.set("taken", true)?)
}

/// Refuses for good when the context says `refuse`.
#[stage]
pub async fn refuse(ctx: Context) -> StageResult {
    if ctx.get_opt::<bool>("refuse").unwrap_or(false) {
        return Err(TerminalError::new("refused <b>for good</b>").into());
    }
    Ok(ctx.set("accepted", true)?)
}

/// `pipeline![take, refuse]`, named `orders`, over `store`.
pub fn orders(store: &std::sync::Arc<dyn fluxio::store::CheckpointStore>) -> fluxio::Pipeline {
    fluxio::pipeline![take, refuse]
        .name("orders")
        .store_arc(std::sync::Arc::clone(store))
        .build()
        .expect("valid")
}

/// A reply, read whole.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// The `csrf` value of the page's forms.
    pub fn csrf(&self) -> String {
        self.body
            .split("name=\"csrf\" value=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("no form on the page: {}", self.body))
            .to_owned()
    }

    /// The header `name`, or `""`.
    pub fn header(&self, name: header::HeaderName) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// Where a redirect leads.
    pub fn location(&self) -> &str {
        self.header(header::LOCATION)
    }
}

pub async fn send(app: &Router, request: Request<Body>) -> Reply {
    let response = app.clone().oneshot(request).await.expect("answered");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).expect("UTF-8"),
    }
}

/// `GET uri`, with the cookie when given.
pub async fn get(app: &Router, uri: &str, cookie: Option<&str>) -> Reply {
    let mut request = Request::get(uri);
    if let Some(c) = cookie {
        request = request.header(header::COOKIE, c);
    }
    send(app, request.body(Body::empty()).expect("a request")).await
}
