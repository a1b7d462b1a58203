//! Anomaly rules (spec 2.13, 4.7): a tenant's settings per anomaly type, at most one rule
//! per type (409 `anomaly_rule_exists`). Reading needs `anomaly:read`, writing
//! `anomaly:write`. A type without a rule is detected with the defaults; a disabled
//! rule stops its type's detection. `threshold_config` takes the type's keys only
//! (`crate::anomalies::thresholds` lists them with ranges and defaults);
//! `notification_config` takes `webhook_url`, checked by the outbound guard (422
//! `url_not_allowed`) and then sent each anomaly of the type (`anomaly.detected` and
//! `anomaly.resolved`), signed per Standard Webhooks with the rule's own secret, shown
//! once when the URL is first set. The URL is masked in responses. Writes are audited.

pub(crate) mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::anomalies::AnomalyType;
use crate::api::envelope::{self, Envelope};
use crate::api::extract::{ApiJson, ApiPath};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_rules, create_rule))
        .routes(routes!(update_rule, delete_rule))
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AnomalyRule {
    pub id: i64,
    pub anomaly_type: String,
    pub enabled: bool,
    #[schema(value_type = Object)]
    pub threshold_config: Value,
    /// `{webhook_url}` masked, or `{}`.
    #[schema(value_type = Object)]
    pub notification_config: Value,
    /// The webhook's `whsec_` signing secret, only in the answer that set the URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRuleInput {
    pub anomaly_type: AnomalyType,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub threshold_config: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub notification_config: Option<Value>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateRuleInput {
    #[serde(default)]
    pub anomaly_type: Option<AnomalyType>,
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Replaces the thresholds.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub threshold_config: Option<Value>,
    /// Replaces the notification settings (`{}` removes the webhook).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub notification_config: Option<Value>,
}

#[utoipa::path(get, path = "/anomaly-rules", tag = "anomalies",
    security(("bearer" = ["anomaly:read"])),
    responses((status = 200, description = "The tenant's rules", body = Envelope<Vec<AnomalyRule>>)))]
async fn list_rules(
    caller: Authorized<require::AnomalyRead>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    Ok(envelope::ok(service::list(&state, &caller).await?))
}

#[utoipa::path(post, path = "/anomaly-rules", tag = "anomalies", request_body = CreateRuleInput,
    security(("bearer" = ["anomaly:write"])),
    responses((status = 201, description = "The rule", body = Envelope<AnomalyRule>),
        (status = 409, description = "A rule for the type exists (`anomaly_rule_exists`)")))]
async fn create_rule(
    caller: Authorized<require::AnomalyWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateRuleInput>,
) -> ApiResult<Response> {
    Ok(envelope::created(
        service::create(&state, &caller, input).await?,
    ))
}

#[utoipa::path(patch, path = "/anomaly-rules/{rule_id}", tag = "anomalies",
    params(("rule_id" = i64, Path)), request_body = UpdateRuleInput,
    security(("bearer" = ["anomaly:write"])),
    responses((status = 200, description = "The updated rule", body = Envelope<AnomalyRule>),
        (status = 409, description = "Another rule has the type it is changed to (`anomaly_rule_exists`)")))]
async fn update_rule(
    caller: Authorized<require::AnomalyWrite>,
    State(state): State<AppState>,
    ApiPath(rule_id): ApiPath<i64>,
    ApiJson(input): ApiJson<UpdateRuleInput>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::update(&state, &caller, rule_id, input).await?,
    ))
}

#[utoipa::path(delete, path = "/anomaly-rules/{rule_id}", tag = "anomalies",
    params(("rule_id" = i64, Path)), security(("bearer" = ["anomaly:write"])),
    responses((status = 204, description = "Deleted: the type is detected with the defaults")))]
async fn delete_rule(
    caller: Authorized<require::AnomalyWrite>,
    State(state): State<AppState>,
    ApiPath(rule_id): ApiPath<i64>,
) -> ApiResult<Response> {
    service::delete(&state, &caller, rule_id).await?;
    Ok(envelope::no_content())
}
