//! The kill switch and quarantine (spec 3.4, 4.3): flags on an agent that the proxy
//! enforces, each change audited and published to the proxies in its transaction.
//!
//! Both are flags, not statuses: a blocked agent keeps its heartbeat-derived status.
//! Each call is an operator's act and is recorded even when the flag already had that
//! value (a repeated block updates the reason). The answers are 204 with no body.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input::Reason;
use super::service;
use super::store::EnforcementFlag;
use super::Agent;
use crate::api::envelope::{self, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery, OptionalJson};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(block_agent))
        .routes(routes!(unblock_agent))
        .routes(routes!(quarantine_agent))
        .routes(routes!(release_quarantine))
        .routes(routes!(list_quarantined_agents))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BlockInput {
    #[serde(default)]
    pub reason: Option<Reason>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuarantineInput {
    pub reason: Reason,
}

#[utoipa::path(post, path = "/agents/{agent_id}/block", tag = "security",
    params(("agent_id" = String, Path)), request_body(content = Option<BlockInput>,
        description = "Optional; the body may be left out"),
    security(("bearer" = ["admin"])),
    responses((status = 204, description = "Blocked: the proxy refuses the agent's requests (`agent_blocked`)")))]
async fn block_agent(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
    OptionalJson(input): OptionalJson<BlockInput>,
) -> ApiResult<Response> {
    let reason = input.and_then(|input| input.reason);
    let flag = EnforcementFlag::Blocked;
    service::set_flag(&state, &caller, &agent_id, flag, true, reason.as_ref()).await?;
    Ok(envelope::no_content())
}

#[utoipa::path(post, path = "/agents/{agent_id}/unblock", tag = "security",
    params(("agent_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 204, description = "The block is lifted")))]
async fn unblock_agent(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    service::set_flag(
        &state,
        &caller,
        &agent_id,
        EnforcementFlag::Blocked,
        false,
        None,
    )
    .await?;
    Ok(envelope::no_content())
}

#[utoipa::path(post, path = "/agents/{agent_id}/quarantine", tag = "security",
    params(("agent_id" = String, Path)), request_body = QuarantineInput,
    security(("bearer" = ["admin"])),
    responses((status = 204, description = "Quarantined: the proxy refuses the agent's requests (`agent_quarantined`)")))]
async fn quarantine_agent(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(input): ApiJson<QuarantineInput>,
) -> ApiResult<Response> {
    let flag = EnforcementFlag::Quarantined;
    service::set_flag(&state, &caller, &agent_id, flag, true, Some(&input.reason)).await?;
    Ok(envelope::no_content())
}

#[utoipa::path(post, path = "/agents/{agent_id}/release-quarantine", tag = "security",
    params(("agent_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 204, description = "The quarantine is lifted")))]
async fn release_quarantine(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    let flag = EnforcementFlag::Quarantined;
    service::set_flag(&state, &caller, &agent_id, flag, false, None).await?;
    Ok(envelope::no_content())
}

#[utoipa::path(get, path = "/agents/quarantined", tag = "security", params(PageQuery),
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "Quarantined agents, newest first", body = Paged<Agent>)))]
async fn list_quarantined_agents(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page = query.try_into()?;
    let (agents, total) =
        service::list_security_subset(&state, &caller, super::store::Only::Quarantined, page)
            .await?;
    Ok(envelope::paged(agents, page, total))
}
