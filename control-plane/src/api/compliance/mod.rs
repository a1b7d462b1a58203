//! EU AI Act compliance views (spec 2.15, 2.20, 4.9): the tenant's readiness
//! (`readiness.rs`) and each agent's transparency card (`transparency.rs`), both computed
//! on read from the records (`store.rs`), `governance:read`. Impact assessments and
//! incidents are resources of their own (`api::fria`, `api::incidents`).

pub(crate) mod readiness;
mod store;
pub(crate) mod transparency;

use axum::extract::State;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::ApiPath;
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

use readiness::Readiness;
use transparency::TransparencyCard;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_readiness))
        .routes(routes!(get_transparency_card))
}

#[utoipa::path(get, path = "/compliance/readiness", tag = "compliance",
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "Seven components with score, evidence and recommendations", body = Envelope<Readiness>)))]
async fn get_readiness(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    Ok(envelope::ok(readiness::assess(&state, &caller).await?))
}

#[utoipa::path(get, path = "/agents/{agent_id}/transparency-card", tag = "compliance",
    params(("agent_id" = String, Path)), security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The card, generated now", body = Envelope<TransparencyCard>)))]
async fn get_transparency_card(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        transparency::card(&state, &caller, &agent_id).await?,
    ))
}
