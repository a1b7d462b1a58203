//! The agent registry (spec 2.2, 4.2): register, list with filters, read, update and
//! soft-delete agents.
//!
//! `team` on an agent names a team. Naming a team that does not exist yet creates it in
//! the same transaction (audited as `team.created`), so an agent can register itself with
//! its team in one call; `team: null` on update removes the agent from its team.

mod input;
mod kill_switch;
mod lifecycle;
pub(crate) mod service;
mod store;

pub(crate) use input::Reason;
pub(crate) use store::{EnforcementFlag, Only};

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

pub use input::{CreateAgentInput, UpdateAgentInput};
pub use service::{agents_owned_by, get_agent as get_agent_for, register_agent_in};
pub use store::is_live as agent_is_live;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_agents, register_agent))
        .routes(routes!(get_agent, update_agent, delete_agent))
        .merge(kill_switch::router())
        .merge(lifecycle::router())
}

/// An agent as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Agent {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub framework: Option<String>,
    pub model_provider: Option<String>,
    pub model_name: Option<String>,
    /// `production`, `staging` or `dev`; `production` when not given at registration.
    pub environment: String,
    /// `healthy`, `degraded`, `down` or `unknown` (new agents).
    pub status: String,
    /// The team's name, or null.
    pub team: Option<String>,
    pub team_id: Option<String>,
    #[schema(value_type = Object)]
    pub tags: serde_json::Value,
    pub risk_level: Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_heartbeat: Option<Timestamp>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
    pub review_frequency: Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub review_date: Option<Timestamp>,
    pub sponsor_id: Option<String>,
    /// Set by the kill switch: the proxy refuses the agent's requests.
    pub blocked: bool,
    pub block_reason: Option<String>,
    /// Quarantined agents are refused by the proxy too, with their own error code.
    pub quarantined: bool,
    pub quarantine_reason: Option<String>,
}

/// Filters of `GET /agents`, all exact matches, combined with AND.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AgentFilter {
    /// `healthy`, `degraded`, `down` or `unknown`.
    #[param(value_type = Option<String>, pattern = "^(healthy|degraded|down|unknown)$")]
    pub status: Option<warden_shared::registry::AgentStatus>,
    pub framework: Option<String>,
    /// Team name.
    pub team: Option<String>,
    /// `production`, `staging` or `dev`.
    #[param(value_type = Option<String>, pattern = "^(production|staging|dev)$")]
    pub environment: Option<warden_shared::registry::Environment>,
    /// `minimal`, `limited`, `high` or `prohibited`: the latest classification.
    #[param(value_type = Option<String>, pattern = "^(minimal|limited|high|prohibited)$")]
    pub risk_level: Option<crate::api::risk_level::RiskLevel>,
    /// Names containing this text, ignoring case (1 to 100 characters).
    pub search: Option<crate::validate::Text<1, 100>>,
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

#[utoipa::path(get, path = "/agents", tag = "agents", params(AgentFilter),
    security(("bearer" = ["registry:read"])),
    responses((status = 200, description = "One page of agents, newest first", body = Paged<Agent>)))]
async fn list_agents(
    caller: Authorized<require::RegistryRead>,
    State(state): State<AppState>,
    ApiQuery(filter): ApiQuery<AgentFilter>,
) -> ApiResult<Response> {
    let page = PageQuery {
        page: filter.page,
        limit: filter.limit,
    }
    .try_into()?;
    let (agents, total) = service::list_agents(&state, &caller, &filter, page).await?;
    Ok(envelope::paged(agents, page, total))
}

#[utoipa::path(post, path = "/agents", tag = "agents", request_body = CreateAgentInput,
    security(("bearer" = ["registry:write"])),
    responses((status = 201, description = "The registered agent, status `unknown`", body = Envelope<Agent>),
        (status = 402, description = "The plan's agent limit is reached (`agent_limit_reached`)")))]
async fn register_agent(
    caller: Authorized<require::RegistryWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateAgentInput>,
) -> ApiResult<Response> {
    let agent = service::register_agent(&state, &caller, input).await?;
    Ok(envelope::created(agent))
}

#[utoipa::path(get, path = "/agents/{agent_id}", tag = "agents",
    params(("agent_id" = String, Path)), security(("bearer" = ["registry:read"])),
    responses((status = 200, description = "The agent", body = Envelope<Agent>)))]
async fn get_agent(
    caller: Authorized<require::RegistryRead>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::get_agent(&state, &caller, &agent_id).await?,
    ))
}

#[utoipa::path(patch, path = "/agents/{agent_id}", tag = "agents", request_body = UpdateAgentInput,
    params(("agent_id" = String, Path)), security(("bearer" = ["registry:write"])),
    responses((status = 200, description = "The updated agent", body = Envelope<Agent>)))]
async fn update_agent(
    caller: Authorized<require::RegistryWrite>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(input): ApiJson<UpdateAgentInput>,
) -> ApiResult<Response> {
    let agent = service::update_agent(&state, &caller, &agent_id, input).await?;
    Ok(envelope::ok(agent))
}

/// Soft delete: the agent disappears from every read; its audit history stays.
#[utoipa::path(delete, path = "/agents/{agent_id}", tag = "agents",
    params(("agent_id" = String, Path)), security(("bearer" = ["registry:write"])),
    responses((status = 204, description = "Deleted")))]
async fn delete_agent(
    caller: Authorized<require::RegistryWrite>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    service::delete_agent(&state, &caller, &agent_id).await?;
    Ok(envelope::no_content())
}
