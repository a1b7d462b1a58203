//! Cost views (spec 4.5): summary, by agent, by team, by model and a time series, all
//! read from the ledger's hourly rollups (see `crate::ledger`).

pub(crate) mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, PageQuery, Paged};
use crate::api::extract::ApiQuery;
use crate::api::range::{Granularity, Period};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(cost_summary))
        .routes(routes!(cost_by_agent))
        .routes(routes!(cost_by_team))
        .routes(routes!(cost_by_model))
        .routes(routes!(cost_timeseries))
}

/// `from` and `to` of every view: ISO 8601 dates (whole UTC days) or date-times.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SummaryQuery {
    /// `day`, `week` or `month` (default).
    #[param(value_type = Option<String>, pattern = "^(day|week|month)$")]
    pub period: Option<Period>,
    /// Default: the start of the current period.
    #[param(value_type = Option<String>, format = DateTime)]
    pub from: Option<String>,
    /// Default: today (inclusive).
    #[param(value_type = Option<String>, format = DateTime)]
    pub to: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CostSummary {
    #[serde(serialize_with = "crate::api::money::plain")]
    pub total_cost_usd: f64,
    pub total_input_tokens: i64,
    pub total_output_tokens: i64,
    pub total_requests: i64,
    pub period: &'static str,
    #[schema(value_type = String, format = DateTime)]
    pub from: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub to: Timestamp,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BreakdownQuery {
    /// Default: the start of the current month.
    #[param(value_type = Option<String>, format = DateTime)]
    pub from: Option<String>,
    /// Default: today (inclusive).
    #[param(value_type = Option<String>, format = DateTime)]
    pub to: Option<String>,
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

/// `from` and `to` of the unpaged breakdowns (`by-team`, `by-model`: every row at once).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RangeQuery {
    /// Default: the start of the current month.
    #[param(value_type = Option<String>, format = DateTime)]
    pub from: Option<String>,
    /// Default: today (inclusive).
    #[param(value_type = Option<String>, format = DateTime)]
    pub to: Option<String>,
}

/// The range of `by-model`, and optionally the one agent or team whose usage it sums
/// (as `/cost/timeseries` filters; an extension of the spec's `from`).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ModelQuery {
    /// Default: the start of the current month.
    #[param(value_type = Option<String>, format = DateTime)]
    pub from: Option<String>,
    /// Default: today (inclusive).
    #[param(value_type = Option<String>, format = DateTime)]
    pub to: Option<String>,
    /// Only this agent's usage.
    pub agent_id: Option<String>,
    /// Only the usage attributed to this team (its name) when it was recorded.
    pub team: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AgentCost {
    pub agent_id: String,
    pub agent_name: Option<String>,
    pub team: Option<String>,
    #[serde(serialize_with = "crate::api::money::plain")]
    pub total_cost_usd: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub requests: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TeamCost {
    /// The team's name; null for usage of agents without a team.
    pub team: Option<String>,
    #[serde(serialize_with = "crate::api::money::plain")]
    pub total_cost_usd: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub requests: i64,
    /// Agents of the team that spent in the range.
    pub agent_count: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelCost {
    pub model_provider: String,
    pub model_name: String,
    #[serde(serialize_with = "crate::api::money::plain")]
    pub total_cost_usd: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub requests: i64,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TimeseriesQuery {
    /// `hour`, `day` (default) or `week` (weeks start on Monday, UTC).
    #[param(value_type = Option<String>, pattern = "^(hour|day|week)$")]
    pub granularity: Option<Granularity>,
    /// Default: 30 days ago.
    #[param(value_type = Option<String>, format = DateTime)]
    pub from: Option<String>,
    /// Default: today (inclusive).
    #[param(value_type = Option<String>, format = DateTime)]
    pub to: Option<String>,
    pub agent_id: Option<String>,
    /// Team name.
    pub team: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CostPoint {
    #[schema(value_type = String, format = DateTime)]
    pub timestamp: Timestamp,
    #[serde(serialize_with = "crate::api::money::plain")]
    pub cost_usd: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub requests: i64,
}

#[utoipa::path(get, path = "/cost/summary", tag = "cost", params(SummaryQuery),
    security(("bearer" = ["cost:read"])),
    responses((status = 200, description = "Totals over the range", body = Envelope<CostSummary>)))]
async fn cost_summary(
    caller: Authorized<require::CostRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<SummaryQuery>,
) -> ApiResult<Response> {
    let summary = service::cost_summary(&state, &caller, &query).await?;
    Ok(envelope::ok(summary))
}

/// Spend per agent, most expensive first, paged.
#[utoipa::path(get, path = "/cost/by-agent", tag = "cost", params(BreakdownQuery),
    security(("bearer" = ["cost:read"])),
    responses((status = 200, description = "One page of agents by cost", body = Paged<AgentCost>)))]
async fn cost_by_agent(
    caller: Authorized<require::CostRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<BreakdownQuery>,
) -> ApiResult<Response> {
    let page = PageQuery {
        page: query.page,
        limit: query.limit,
    }
    .try_into()?;
    let (agents, total) = service::cost_by_agent(&state, &caller, &query, page).await?;
    Ok(envelope::paged(agents, page, total))
}

/// Spend per team the usage was attributed to when it was recorded.
#[utoipa::path(get, path = "/cost/by-team", tag = "cost", params(RangeQuery),
    security(("bearer" = ["cost:read"])),
    responses((status = 200, description = "Teams by cost", body = Envelope<Vec<TeamCost>>)))]
async fn cost_by_team(
    caller: Authorized<require::CostRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<RangeQuery>,
) -> ApiResult<Response> {
    let teams = service::cost_by_team(&state, &caller, &query).await?;
    Ok(envelope::ok(teams))
}

#[utoipa::path(get, path = "/cost/by-model", tag = "cost", params(ModelQuery),
    security(("bearer" = ["cost:read"])),
    responses((status = 200, description = "Models by cost", body = Envelope<Vec<ModelCost>>)))]
async fn cost_by_model(
    caller: Authorized<require::CostRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ModelQuery>,
) -> ApiResult<Response> {
    let models = service::cost_by_model(&state, &caller, &query).await?;
    Ok(envelope::ok(models))
}

/// Spend per bucket over the range; buckets without usage are present with zeros.
#[utoipa::path(get, path = "/cost/timeseries", tag = "cost", params(TimeseriesQuery),
    security(("bearer" = ["cost:read"])),
    responses((status = 200, description = "One point per bucket", body = Envelope<Vec<CostPoint>>)))]
async fn cost_timeseries(
    caller: Authorized<require::CostRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<TimeseriesQuery>,
) -> ApiResult<Response> {
    let points = service::cost_timeseries(&state, &caller, &query).await?;
    Ok(envelope::ok(points))
}
