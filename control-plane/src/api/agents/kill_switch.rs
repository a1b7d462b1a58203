//! The kill switch and quarantine (spec 3.4, 4.3): flags on an agent that the proxy
//! enforces, each change audited and published to the proxies in its transaction.
//!
//! Both are flags, not statuses: a blocked agent keeps its heartbeat-derived status.
//! Each call is an operator's act and is recorded even when the flag already had that
//! value (a repeated block updates the reason). The answers are 204 with no body.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::ids::{is_valid_id, IdKind};

use super::store::{self, EnforcementFlag};
use super::Agent;
use crate::api::envelope::{self, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery, OptionalJson};
use crate::api::validate::Text;
use crate::auth::{require, Authorized, Caller};
use crate::changes::{self, AuditEvent, Author, ChangeKind, Proxies};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(block_agent))
        .routes(routes!(unblock_agent))
        .routes(routes!(quarantine_agent))
        .routes(routes!(release_quarantine))
        .routes(routes!(list_quarantined_agents))
}

pub type Reason = Text<1, 1000>;

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
    set_flag(&state, &caller, &agent_id, flag, true, reason.as_ref()).await?;
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
    set_flag(
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
    set_flag(&state, &caller, &agent_id, flag, true, Some(&input.reason)).await?;
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
    set_flag(&state, &caller, &agent_id, flag, false, None).await?;
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
    let filter = store::Filter {
        quarantined_only: true,
        ..store::Filter::default()
    };
    let now = state.clock.now().as_millis();
    let agents = store::list(state.db.pool(), &caller.tenant_id, &filter, page, now).await?;
    let total = store::count(state.db.pool(), &caller.tenant_id, &filter, now).await?;
    Ok(envelope::paged(agents, page, total))
}

fn event_type(flag: EnforcementFlag, on: bool) -> &'static str {
    match (flag, on) {
        (EnforcementFlag::Blocked, true) => "agent.blocked",
        (EnforcementFlag::Blocked, false) => "agent.unblocked",
        (EnforcementFlag::Quarantined, true) => "agent.quarantined",
        (EnforcementFlag::Quarantined, false) => "agent.quarantine_released",
    }
}

/// Sets `flag` on the agent, audits it and tells the proxies, in one transaction.
async fn set_flag(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    flag: EnforcementFlag,
    on: bool,
    reason: Option<&Reason>,
) -> ApiResult<()> {
    if !is_valid_id(IdKind::Agent, agent_id) {
        return Err(ApiError::not_found("agent"));
    }
    let reason = reason.map(Reason::as_str);
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let (tenant_id, at) = (caller.tenant_id.as_str(), now.as_millis());
    if !store::set_flag(&mut tx, tenant_id, agent_id, flag, on, reason, at).await? {
        return Err(ApiError::not_found("agent"));
    }
    changes::record(
        &mut tx,
        Author {
            tenant_id: tenant_id,
            actor: &caller.actor,
        },
        now,
        AuditEvent {
            event_type: event_type(flag, on),
            target_type: "agent",
            target_id: agent_id,
            details: json!({ "reason": reason }),
        },
        Proxies::Reload(ChangeKind::Agent),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
