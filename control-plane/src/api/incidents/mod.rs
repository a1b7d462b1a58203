//! Serious incidents (spec 2.16, 3.5, 4.8, 4.9; EU AI Act Art. 73): reported with their
//! legal reporting deadline fixed at once (`deadline.rs`), updated by operators (status,
//! notes, the authority's notification), each response kept and audited, and an evidence
//! pack of the window before the report (`evidence.rs`). Reading needs
//! `governance:read`, writing `governance:write`; evidence packs need the Professional
//! plan or above (402).
//!
//! Statuses: `open` (new), `investigating`, `mitigated`, `resolved`, `closed`; any move
//! is allowed but out of `closed` (409 `incident_closed`). `authority_notified` can only
//! become true (the time is recorded; false afterwards is a 422). A report is audited as
//! `incident.created` (announced to channels) and every update as `incident.updated`.

pub(crate) mod deadline;
pub(crate) mod evidence;
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
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

pub use deadline::Reporting;
pub use evidence::EvidencePack;
pub use store::overdue as overdue_count;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_incidents, report_incident))
        .routes(routes!(get_incident, update_incident))
        .routes(routes!(evidence_pack))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum IncidentSeverity {
    Low,
    Medium,
    High,
    Critical,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum IncidentStatus {
    Open,
    Investigating,
    Mitigated,
    Resolved,
    Closed,
}

impl IncidentStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            IncidentStatus::Open => "open",
            IncidentStatus::Investigating => "investigating",
            IncidentStatus::Mitigated => "mitigated",
            IncidentStatus::Resolved => "resolved",
            IncidentStatus::Closed => "closed",
        }
    }
}

impl IncidentSeverity {
    pub const fn as_str(self) -> &'static str {
        match self {
            IncidentSeverity::Low => "low",
            IncidentSeverity::Medium => "medium",
            IncidentSeverity::High => "high",
            IncidentSeverity::Critical => "critical",
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportIncidentInput {
    pub agent_id: String,
    pub title: Text<1, 200>,
    pub severity: IncidentSeverity,
    pub description: Text<1, 10_000>,
    #[serde(default)]
    pub impact: Option<Text<1, 10_000>>,
    #[serde(default)]
    pub immediate_actions: Option<Text<1, 10_000>>,
    #[serde(default)]
    pub root_cause: Option<Text<1, 10_000>>,
    /// 0 to 1,000,000,000; default 0.
    #[serde(default)]
    pub affected_persons_count: Option<i64>,
    /// A person died or was seriously harmed: a 10-day deadline. Default false.
    #[serde(default)]
    pub involves_health_or_death: Option<bool>,
    /// A widespread infringement (Art. 3(61)): a 2-day deadline. Default false.
    #[serde(default)]
    pub widespread_infringement: Option<bool>,
    /// A serious and irreversible disruption of critical infrastructure: a 2-day
    /// deadline. Default false.
    #[serde(default)]
    pub critical_infrastructure: Option<bool>,
}

/// Any of the fields, at least one (`minProperties: 1`, set by
/// `openapi_bodies::AtLeastOneField`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateIncidentInput {
    #[serde(default)]
    pub status: Option<IncidentStatus>,
    #[serde(default)]
    pub update_note: Option<Text<1, 5_000>>,
    /// True records that the authority was notified (once; it cannot be undone).
    #[serde(default)]
    pub authority_notified: Option<bool>,
}

/// One operator response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct IncidentUpdate {
    pub status: Option<String>,
    pub note: Option<String>,
    pub authority_notified: bool,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    pub created_by: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Incident {
    pub id: String,
    pub agent_id: String,
    pub title: String,
    pub severity: String,
    pub description: String,
    pub impact: String,
    pub immediate_actions: String,
    pub root_cause: String,
    pub affected_persons_count: i64,
    pub involves_health_or_death: bool,
    pub widespread_infringement: bool,
    pub critical_infrastructure: bool,
    pub status: String,
    pub authority_notified: bool,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub authority_notified_at: Option<Timestamp>,
    #[schema(value_type = String, format = DateTime)]
    pub reported_at: Timestamp,
    pub reported_by: String,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// The Art. 73 deadline and where the incident stands against it.
    pub reporting: Reporting,
    /// Operator responses, oldest first (in a single incident's answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updates: Option<Vec<IncidentUpdate>>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct IncidentQuery {
    pub status: Option<IncidentStatus>,
    pub agent_id: Option<Text<1, 100>>,
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EvidenceQuery {
    /// Hours before `reported_at` the pack covers: 1 to 168, default 24.
    #[param(minimum = 1, maximum = 168)]
    pub window_hours: Option<i64>,
}

#[utoipa::path(post, path = "/incidents", tag = "compliance", request_body = ReportIncidentInput,
    security(("bearer" = ["governance:write"])),
    responses((status = 201, description = "The incident with its reporting deadline", body = Envelope<Incident>)))]
async fn report_incident(
    caller: Authorized<require::GovernanceWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<ReportIncidentInput>,
) -> ApiResult<Response> {
    let incident = service::report(&state, &caller, input).await?;
    Ok(envelope::created(incident))
}

#[utoipa::path(get, path = "/incidents", tag = "compliance", params(IncidentQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "Incidents, newest first", body = Paged<Incident>)))]
async fn list_incidents(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<IncidentQuery>,
) -> ApiResult<Response> {
    let page = PageQuery {
        page: query.page,
        limit: query.limit,
    }
    .try_into()?;
    let (incidents, total) = service::list(&state, &caller, &query, page).await?;
    Ok(envelope::paged(incidents, page, total))
}

#[utoipa::path(get, path = "/incidents/{incident_id}", tag = "compliance",
    params(("incident_id" = String, Path)), security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The incident with its deadline and responses", body = Envelope<Incident>)))]
async fn get_incident(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiPath(incident_id): ApiPath<String>,
) -> ApiResult<Response> {
    let incident = service::get(&state, &caller, &incident_id).await?;
    Ok(envelope::ok(incident))
}

#[utoipa::path(patch, path = "/incidents/{incident_id}", tag = "compliance",
    params(("incident_id" = String, Path)), request_body = UpdateIncidentInput,
    security(("bearer" = ["governance:write"])),
    responses((status = 200, description = "The updated incident", body = Envelope<Incident>),
        (status = 409, description = "The incident is closed (`incident_closed`)")))]
async fn update_incident(
    caller: Authorized<require::GovernanceWrite>,
    State(state): State<AppState>,
    ApiPath(incident_id): ApiPath<String>,
    ApiJson(input): ApiJson<UpdateIncidentInput>,
) -> ApiResult<Response> {
    let incident = service::update(&state, &caller, &incident_id, input).await?;
    Ok(envelope::ok(incident))
}

#[utoipa::path(get, path = "/incidents/{incident_id}/evidence-pack", tag = "compliance",
    params(("incident_id" = String, Path), EvidenceQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The evidence of the window before the report, with the audit chain's head and the pack's own hash", body = Envelope<EvidencePack>),
        (status = 402, description = "The plan has no evidence packs (`plan_upgrade_required`)")))]
async fn evidence_pack(
    caller: Authorized<require::GovernanceReadWithEvidence>,
    State(state): State<AppState>,
    ApiPath(incident_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<EvidenceQuery>,
) -> ApiResult<Response> {
    let pack = evidence::pack(&state, &caller, &incident_id, &query).await?;
    Ok(envelope::ok(pack))
}
