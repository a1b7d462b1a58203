//! Anomalies (spec 2.13, 3.3, 4.7) as the detector (`crate::anomalies`) opened them:
//! listed, read, summarised (`anomaly:read`), acknowledged and resolved
//! (`anomaly:write`). `open` → `acknowledged` (with an optional `note`) → `resolved`
//! (with an optional `resolution`); `open` → `resolved` directly too. Any other move is
//! 409 `invalid_anomaly_transition`. Both moves are audited (`anomaly.acknowledged`,
//! `anomaly.resolved`, which channels hear and PagerDuty resolves on).

pub(crate) mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, PageQuery, Paged};
use crate::api::extract::{ApiPath, ApiQuery, OptionalJson};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_anomalies))
        .routes(routes!(anomaly_summary))
        .routes(routes!(get_anomaly))
        .routes(routes!(acknowledge_anomaly))
        .routes(routes!(resolve_anomaly))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyType {
    CostSpike,
    ReliabilityDecay,
    BehavioralDrift,
    SecurityThreat,
}

impl AnomalyType {
    pub const fn as_str(self) -> &'static str {
        match self {
            AnomalyType::CostSpike => "cost_spike",
            AnomalyType::ReliabilityDecay => "reliability_decay",
            AnomalyType::BehavioralDrift => "behavioral_drift",
            AnomalyType::SecurityThreat => "security_threat",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyStatus {
    Open,
    Acknowledged,
    Resolved,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Low,
    Medium,
    High,
    Critical,
}

impl AnomalyStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            AnomalyStatus::Open => "open",
            AnomalyStatus::Acknowledged => "acknowledged",
            AnomalyStatus::Resolved => "resolved",
        }
    }
}

impl Severity {
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Anomaly {
    pub id: String,
    pub agent_id: String,
    /// Null when the agent was deleted since.
    pub agent_name: Option<String>,
    pub anomaly_type: String,
    pub severity: String,
    pub status: String,
    pub description: String,
    #[schema(value_type = String, format = DateTime)]
    pub detected_at: Timestamp,
    /// The numbers it was found by: observed value, baseline, threshold, window,
    /// `cause` and an `explanation` (cost spikes: `current_cost_usd`,
    /// `baseline_cost_usd`, `deviation_percent`).
    #[schema(value_type = Object)]
    pub details: Value,
    /// The last pass that found it again, and how many passes found it.
    #[schema(value_type = String, format = DateTime)]
    pub last_seen_at: Timestamp,
    pub occurrences: i64,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub acknowledged_at: Option<Timestamp>,
    pub acknowledged_by: Option<String>,
    pub note: Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub resolved_at: Option<Timestamp>,
    pub resolved_by: Option<String>,
    pub resolution: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AnomalyQuery {
    pub status: Option<AnomalyStatus>,
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub anomaly_type: Option<AnomalyType>,
    pub agent_id: Option<Text<1, 100>>,
    pub severity: Option<Severity>,
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = AnomalySummary)]
pub struct Summary {
    pub total: i64,
    #[schema(value_type = Object)]
    pub by_status: Value,
    #[schema(value_type = Object)]
    pub by_type: Value,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcknowledgeInput {
    #[serde(default)]
    pub note: Option<Text<1, 2_000>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveInput {
    #[serde(default)]
    pub resolution: Option<Text<1, 2_000>>,
}

#[utoipa::path(get, path = "/anomalies", tag = "anomalies", params(AnomalyQuery),
    security(("bearer" = ["anomaly:read"])),
    responses((status = 200, description = "Anomalies, newest first", body = Paged<Anomaly>)))]
async fn list_anomalies(
    caller: Authorized<require::AnomalyRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<AnomalyQuery>,
) -> ApiResult<Response> {
    let page = PageQuery {
        page: query.page,
        limit: query.limit,
    }
    .try_into()?;
    let (anomalies, total) = service::list(&state, &caller, &query, page).await?;
    Ok(envelope::paged(anomalies, page, total))
}

#[utoipa::path(get, path = "/anomalies/summary", tag = "anomalies",
    security(("bearer" = ["anomaly:read"])),
    responses((status = 200, description = "Counts by status and by type", body = Envelope<Summary>)))]
async fn anomaly_summary(
    caller: Authorized<require::AnomalyRead>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    Ok(envelope::ok(service::summary(&state, &caller).await?))
}

#[utoipa::path(get, path = "/anomalies/{anomaly_id}", tag = "anomalies",
    params(("anomaly_id" = String, Path)), security(("bearer" = ["anomaly:read"])),
    responses((status = 200, description = "The anomaly", body = Envelope<Anomaly>)))]
async fn get_anomaly(
    caller: Authorized<require::AnomalyRead>,
    State(state): State<AppState>,
    ApiPath(anomaly_id): ApiPath<String>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::get(&state, &caller, &anomaly_id).await?,
    ))
}

#[utoipa::path(post, path = "/anomalies/{anomaly_id}/acknowledge", tag = "anomalies",
    params(("anomaly_id" = String, Path)),
    request_body(content = Option<AcknowledgeInput>, description = "Optional"),
    security(("bearer" = ["anomaly:write"])),
    responses((status = 204, description = "Acknowledged"),
        (status = 409, description = "Not open (`invalid_anomaly_transition`)")))]
async fn acknowledge_anomaly(
    caller: Authorized<require::AnomalyWrite>,
    State(state): State<AppState>,
    ApiPath(anomaly_id): ApiPath<String>,
    OptionalJson(input): OptionalJson<AcknowledgeInput>,
) -> ApiResult<Response> {
    let note = input.and_then(|input| input.note).map(Text::into_inner);
    service::transition(
        &state,
        &caller,
        &anomaly_id,
        service::Move::Acknowledge,
        note,
    )
    .await?;
    Ok(envelope::no_content())
}

#[utoipa::path(post, path = "/anomalies/{anomaly_id}/resolve", tag = "anomalies",
    params(("anomaly_id" = String, Path)),
    request_body(content = Option<ResolveInput>, description = "Optional"),
    security(("bearer" = ["anomaly:write"])),
    responses((status = 204, description = "Resolved"),
        (status = 409, description = "Resolved already (`invalid_anomaly_transition`)")))]
async fn resolve_anomaly(
    caller: Authorized<require::AnomalyWrite>,
    State(state): State<AppState>,
    ApiPath(anomaly_id): ApiPath<String>,
    OptionalJson(input): OptionalJson<ResolveInput>,
) -> ApiResult<Response> {
    let resolution = input
        .and_then(|input| input.resolution)
        .map(Text::into_inner);
    service::transition(
        &state,
        &caller,
        &anomaly_id,
        service::Move::Resolve,
        resolution,
    )
    .await?;
    Ok(envelope::no_content())
}
