//! Internal endpoints for Warden's own services, under `/internal/v1`, authenticated by
//! the service token and never by tenant keys.

mod policy_decisions;
mod proxy_state;
mod usage_batches;

pub use policy_decisions::{
    forget_batches_before, forget_old_batches_every, BATCH_ID_RETENTION_MS,
};

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::keys;

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(usage_batches::ingest_usage_batch))
        .routes(routes!(policy_decisions::ingest_policy_decisions))
        .routes(routes!(proxy_state::stream_proxy_state))
}

/// Proof that the caller presented the service token.
#[derive(Debug)]
pub struct ServiceCaller;

impl FromRequestParts<AppState> for ServiceCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::MissingCredentials,
                    "send `Authorization: Bearer <service token>`",
                )
            })?;
        // Compared as hashes in constant time: no early exit reveals a matching prefix.
        if keys::verify_credential(token, &state.service_token_hash) {
            Ok(ServiceCaller)
        } else {
            Err(ApiError::new(
                ErrorCode::InvalidCredentials,
                "internal endpoints accept only the service token",
            ))
        }
    }
}
