//! `/docs`: the API reference, Redoc (vendored, embedded) over the control plane's own
//! OpenAPI document. Public, as the document is. Redoc styles its components with
//! inline `<style>` elements and searches in a worker it starts from a `blob:` URL, so
//! this page alone allows inline styles and blob workers; scripts stay `'self'` only.

use askama::Template;
use axum::http::header::CONTENT_SECURITY_POLICY;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};

use super::assets;
use super::page;

/// Where the document is served (the API router's `/api/v1/openapi.json`).
const SPEC: &str = "/api/v1/openapi.json";

const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
    img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src blob:; \
    form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

#[derive(Template)]
#[template(path = "docs.html")]
struct DocsPage {
    icon: String,
    css: String,
    own_css: String,
    redoc: String,
    script: String,
    spec: &'static str,
}

/// `GET /docs`.
pub async fn show() -> Response {
    let docs = DocsPage {
        icon: assets::url("favicon.svg"),
        css: assets::url("console.css"),
        own_css: assets::url("docs.css"),
        redoc: assets::url("redoc.standalone.js"),
        script: assets::url("docs.js"),
        spec: SPEC,
    };
    let mut response = page::render(&docs).into_response();
    response
        .headers_mut()
        .insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    response
}
