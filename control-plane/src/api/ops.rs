//! Operational endpoints outside `/api/v1`: liveness, readiness, metrics, the OpenAPI
//! document. None needs a credential; expose them only where operators can reach them.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::openapi::OpenApi;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// Serves the finished document; it cannot be a documented route of itself.
pub fn openapi_router(openapi: OpenApi) -> axum::Router<AppState> {
    let json = openapi.to_pretty_json().unwrap_or_default();
    #[allow(clippy::disallowed_methods)]
    axum::Router::new().route(
        "/api/v1/openapi.json",
        axum::routing::get(
            move || async move { ([(CONTENT_TYPE, "application/json")], json.clone()) },
        ),
    )
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: &'static str,
}

/// Liveness: the process serves HTTP.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "Alive", body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: the database answers, so requests can be served.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, description = "Ready", body = Health),
        (status = 503, description = "The database does not answer (`not_ready`)")))]
async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    // Probes time out within a second or two: a database that does not answer quickly
    // is not ready, whatever the pool's own acquire timeout.
    let pinged = tokio::time::timeout(std::time::Duration::from_secs(2), state.db.ping())
        .await
        .unwrap_or(Err(sqlx::Error::PoolTimedOut));
    match pinged {
        Ok(()) => Ok(Json(Health { status: "ready" })),
        Err(error) => {
            tracing::warn!(%error, "readiness check failed");
            Err(ApiError::new(
                ErrorCode::NotReady,
                "the database does not answer",
            ))
        }
    }
}

/// Prometheus text exposition of the control plane's metrics.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
async fn metrics(State(state): State<AppState>) -> Response {
    state
        .metrics
        .gauges
        .refresh(&state.db, state.clock.now())
        .await;
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        state.metrics.render(),
    )
        .into_response()
}
