//! Human oversight (spec 2.20, 4.8): how much of an agent's activity in a window was
//! subject to a person — policy evaluations and refusals, human reviews, approvals by
//! outcome and reviewer, time to decision, blocks and quarantines — with a score whose
//! formula is in `score.rs`; and the tenant's aggregate over every live agent.
//!
//! Windows: `start` and `end` (a date or date-time; `end` exclusive), by default the last
//! 30 days, at most 180 (422 beyond).

mod score;
mod service;
mod store;

pub(crate) use score::covers;
pub(crate) use store::{agents as live_agents, AgentFacts, Scope as AgentScope};

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::{ApiPath, ApiQuery};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

use score::{ApprovalCounts, Scorecard};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(agent_oversight))
        .routes(routes!(oversight_summary))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WindowQuery {
    /// From this date (midnight UTC) or date-time; default `end` minus 30 days.
    #[param(value_type = Option<String>, format = DateTime)]
    pub start: Option<String>,
    /// Up to this date (its end) or date-time, exclusive; default now.
    #[param(value_type = Option<String>, format = DateTime)]
    pub end: Option<String>,
}

/// The tenant's oversight over a window.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OversightSummary)]
pub struct Summary {
    #[schema(value_type = String, format = DateTime)]
    pub start: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub end: Timestamp,
    /// Live agents scored.
    pub agents_evaluated: i64,
    /// Of those, agents an approval or human-review policy covers.
    pub agents_with_human_oversight: i64,
    /// Mean of the agents' scores (one decimal).
    pub average_score: f64,
    pub policy_evaluations: i64,
    pub policy_failures: i64,
    pub human_reviews: i64,
    pub approvals: ApprovalCounts,
    pub blocks: i64,
    pub quarantines: i64,
    /// Agents scoring under 50: where oversight is thinnest.
    pub agents_below_50: Vec<String>,
}

#[utoipa::path(get, path = "/agents/{agent_id}/oversight", tag = "governance",
    params(("agent_id" = String, Path), WindowQuery), security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The agent's oversight scorecard for the window", body = Envelope<Scorecard>)))]
async fn agent_oversight(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<WindowQuery>,
) -> ApiResult<Response> {
    let card = service::agent_scorecard(&state, &caller, &agent_id, &query).await?;
    Ok(envelope::ok(card))
}

#[utoipa::path(get, path = "/oversight/summary", tag = "governance", params(WindowQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The tenant's oversight over the window, with `agents_evaluated`", body = Envelope<Summary>)))]
async fn oversight_summary(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<WindowQuery>,
) -> ApiResult<Response> {
    let summary = service::summary(&state, &caller, &query).await?;
    Ok(envelope::ok(summary))
}
