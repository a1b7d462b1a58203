//! Risk classification (spec 2.10, 4.8): each agent's EU AI Act risk level, set by a
//! person one agent at a time or in bulk, with its history, and a suggestion from
//! explained rules (`suggestion.rs`).
//!
//! Levels are the EU AI Act's tiers (Regulation (EU) 2024/1689): `prohibited` (Article 5
//! practices), `high` (Annex III areas and Article 6), `limited` (Article 50
//! transparency duties) and `minimal` (everything else). An agent never classified has
//! no level (`risk_level: null` on the agent). Every classification is kept; the newest
//! is the agent's level. Writes need the Starter plan or above (402).

pub(crate) mod service;
mod store;
pub(crate) mod suggestion;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, Page, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::telemetry::ItemError;
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

use suggestion::{RuleResult, SuggestionInputs};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_classification, classify_agent))
        .routes(routes!(get_suggestion))
        .routes(routes!(list_classifications))
        .routes(routes!(classify_in_bulk))
}

pub use crate::api::risk_level::RiskLevel;

/// One classification of an agent.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RiskClassification {
    pub id: String,
    pub agent_id: String,
    pub agent_name: String,
    pub risk_level: RiskLevel,
    /// The agent's level before this classification (null: it had none).
    pub previous_risk_level: Option<RiskLevel>,
    pub justification: String,
    /// Who classified: the caller (`api_key:<id>`, `user:<id>`), or the `assessed_by`
    /// a bulk item named.
    pub assessed_by: String,
    #[schema(value_type = String, format = DateTime)]
    pub assessed_at: Timestamp,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassifyInput {
    pub risk_level: RiskLevel,
    /// 1 to 5,000 characters.
    pub justification: Text<1, 5000>,
}

/// One item of a bulk classification.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkItem {
    pub agent_id: Text<1, 100>,
    pub risk_level: RiskLevel,
    pub justification: Text<1, 5000>,
    /// Who assessed it (1 to 200 characters); the caller when omitted.
    pub assessed_by: Option<Text<1, 200>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkInput {
    /// Up to 100 items, each a `BulkItem`. Each is checked alone: one that is not valid
    /// is reported in `errors` (by index) and the others are applied.
    #[schema(value_type = Vec<Value>, max_items = 100)]
    pub classifications: Vec<Box<RawValue>>,
}

/// What a bulk call did: `created` (agents classified for the first time), `updated`
/// (agents that had a level), `failed`, and why each failed item failed.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct BulkOutcome {
    pub created: usize,
    pub updated: usize,
    pub failed: usize,
    pub errors: Vec<ItemError>,
}

/// The rules' suggestion for an agent (advice; it changes nothing).
#[derive(Debug, Serialize, ToSchema)]
pub struct Suggestion {
    pub agent_id: String,
    pub suggested_risk_level: RiskLevel,
    pub current_risk_level: Option<RiskLevel>,
    pub differs_from_current: bool,
    /// Every rule, matched or not, with its evidence.
    pub rules: Vec<RuleResult>,
    /// What the rules read, so the result can be reproduced.
    pub inputs: SuggestionInputs,
    #[schema(value_type = String, format = DateTime)]
    pub generated_at: Timestamp,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    pub risk_level: Option<RiskLevel>,
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

#[utoipa::path(get, path = "/agents/{agent_id}/risk-classification", tag = "governance",
    params(("agent_id" = String, Path)), security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The agent's current classification", body = Envelope<RiskClassification>),
        (status = 404, description = "No such agent, or it was never classified (`not_found`)")))]
async fn get_classification(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    let record = service::current(&state, &caller, &agent_id).await?;
    Ok(envelope::ok(record))
}

#[utoipa::path(post, path = "/agents/{agent_id}/risk-classification", tag = "governance",
    params(("agent_id" = String, Path)), request_body = ClassifyInput,
    security(("bearer" = ["governance:write"])),
    responses((status = 201, description = "The new classification; the agent's `risk_level` follows it", body = Envelope<RiskClassification>),
        (status = 402, description = "The plan has no risk classification (`plan_upgrade_required`)")))]
async fn classify_agent(
    caller: Authorized<require::GovernanceWriteWithRisk>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(input): ApiJson<ClassifyInput>,
) -> ApiResult<Response> {
    let record = service::classify(&state, &caller, &agent_id, input).await?;
    Ok(envelope::created(record))
}

#[utoipa::path(get, path = "/agents/{agent_id}/risk-suggestion", tag = "governance",
    params(("agent_id" = String, Path)), security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The rules' suggested level with each rule's evidence", body = Envelope<Suggestion>)))]
async fn get_suggestion(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    let suggestion = service::suggest(&state, &caller, &agent_id).await?;
    Ok(envelope::ok(suggestion))
}

#[utoipa::path(get, path = "/risk-classifications", tag = "governance", params(ListQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The agents' current classifications, newest first", body = Paged<RiskClassification>)))]
async fn list_classifications(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Response> {
    let page: Page = PageQuery {
        page: query.page,
        limit: query.limit,
    }
    .try_into()?;
    let (items, total) = service::list(&state, &caller, query.risk_level, page).await?;
    Ok(envelope::paged(items, page, total))
}

#[utoipa::path(post, path = "/risk-classifications/bulk", tag = "governance", request_body = BulkInput,
    security(("bearer" = ["governance:write"])),
    responses((status = 200, description = "How many were created, updated and failed, and why each failure failed", body = Envelope<BulkOutcome>),
        (status = 402, description = "The plan has no risk classification (`plan_upgrade_required`)")))]
async fn classify_in_bulk(
    caller: Authorized<require::GovernanceWriteWithRisk>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<BulkInput>,
) -> ApiResult<Response> {
    let outcome = service::classify_bulk(&state, &caller, input.classifications).await?;
    Ok(envelope::ok(outcome))
}
