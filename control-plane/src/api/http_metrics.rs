//! The middleware that counts and times every request of the API into
//! `crate::metrics::HttpMetrics`, and logs one line per request.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::state::AppState;
use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Middleware that counts and times every request.
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    // The request's span (`crate::startup`) is named by its route for traces.
    let span = tracing::Span::current();
    let traced = span.context();
    if traced.has_active_span() {
        // The span started when it was entered: renamed in place.
        traced.span().update_name(format!("{method} {route}"));
    }
    span.record("http.route", route.as_str());
    let response = next.run(request).await;
    let seconds = started.elapsed().as_secs_f64();
    span.record(
        "http.response.status_code",
        i64::from(response.status().as_u16()),
    );
    if response.status().is_server_error() {
        span.record("otel.status_code", "error");
    }
    state
        .metrics
        .observe(&method, &route, response.status().as_str(), seconds);
    // One line per request, inside the request's span (its id, and the tenant once the
    // credential is known); never a credential or a body.
    tracing::info!(
        method = %method,
        route = %route,
        status = response.status().as_u16(),
        duration_ms = (seconds * 1000.0 * 100.0).round() / 100.0,
        "request"
    );
    response
}
