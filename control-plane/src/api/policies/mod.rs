//! Policies (spec 2.8, 4.8): CRUD, templates, the dry run and evaluation records.
//!
//! The rules (types, config shapes, scopes, evaluation order, conflicts) live with the
//! one evaluator in `warden_shared::policy`. A change is audited and published to the
//! proxies in its transaction; the proxies hold only enabled policies.

pub(crate) mod dry_run;
pub(crate) mod evaluations;
pub(crate) mod input;
pub(crate) mod service;
mod store;
pub(crate) mod templates;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::{ApiJson, ApiPath, OptionalJson};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

pub use dry_run::{dry_run, DryRunInput};
pub use evaluations::{
    audit_violations, draw_decision_ids, record_evaluations, result_set_ids, summarize_violations,
    DecisionRow, EvaluationReport, ReportedResult, ResultList, ResultLists,
};
pub use input::{CreatePolicyInput, Definition, UpdatePolicyInput};
pub use templates::PolicyTemplate;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_policies, create_policy))
        .routes(routes!(get_policy, update_policy, delete_policy))
        .routes(routes!(list_templates))
        .routes(routes!(create_from_template))
        .routes(routes!(dry_run::evaluate_policies))
        .routes(routes!(evaluations::list_evaluations))
}

/// A policy as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Policy {
    pub id: i64,
    pub name: String,
    pub description: Option<String>,
    pub policy_type: String,
    /// Normalised: defaults filled in.
    #[schema(value_type = Object)]
    pub config: Value,
    pub scope: String,
    pub enabled: bool,
    pub priority: i64,
    /// The template it was created from, if any.
    pub template_id: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

#[utoipa::path(get, path = "/policies", tag = "governance",
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The tenant's policies in evaluation order (priority descending, then id)", body = Envelope<Vec<Policy>>)))]
async fn list_policies(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    Ok(envelope::ok(service::list_policies(&state, &caller).await?))
}

#[utoipa::path(post, path = "/policies", tag = "governance", request_body = CreatePolicyInput,
    security(("bearer" = ["governance:write"])),
    responses((status = 201, description = "The policy; enabled ones are in force in every connected proxy when this answers", body = Envelope<Policy>)))]
async fn create_policy(
    caller: Authorized<require::GovernanceWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreatePolicyInput>,
) -> ApiResult<Response> {
    let value = service::create_policy(&state, &caller, input).await?;
    Ok(envelope::created(value))
}

#[utoipa::path(get, path = "/policies/{policy_id}", tag = "governance",
    params(("policy_id" = i64, Path)), security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The policy", body = Envelope<Policy>)))]
async fn get_policy(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::get_policy(&state, &caller, id).await?,
    ))
}

#[utoipa::path(patch, path = "/policies/{policy_id}", tag = "governance",
    params(("policy_id" = i64, Path)), request_body = UpdatePolicyInput,
    security(("bearer" = ["governance:write"])),
    responses((status = 200, description = "The updated policy", body = Envelope<Policy>)))]
async fn update_policy(
    caller: Authorized<require::GovernanceWrite>,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(input): ApiJson<UpdatePolicyInput>,
) -> ApiResult<Response> {
    let value = service::update_policy(&state, &caller, id, input).await?;
    Ok(envelope::ok(value))
}

#[utoipa::path(delete, path = "/policies/{policy_id}", tag = "governance",
    params(("policy_id" = i64, Path)), security(("bearer" = ["governance:write"])),
    responses((status = 204, description = "Deleted; connected proxies have stopped applying it when this answers")))]
async fn delete_policy(
    caller: Authorized<require::GovernanceWrite>,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Response> {
    service::delete_policy(&state, &caller, id).await?;
    Ok(envelope::no_content())
}

#[utoipa::path(get, path = "/policy-templates", tag = "governance",
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The built-in templates", body = Envelope<Vec<PolicyTemplate>>)))]
async fn list_templates(_caller: Authorized<require::GovernanceRead>) -> ApiResult<Response> {
    Ok(envelope::ok(templates::catalog()))
}

#[derive(Debug, Default, serde::Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FromTemplateInput {
    #[serde(default)]
    pub name: Option<input::PolicyName>,
    #[serde(default)]
    #[schema(minimum = -10_000, maximum = 10_000)]
    pub priority: Option<i64>,
}

#[utoipa::path(post, path = "/policies/from-template/{template_id}", tag = "governance",
    params(("template_id" = String, Path)),
    request_body(content = Option<FromTemplateInput>, description = "Optional; omitted values come from the template"),
    security(("bearer" = ["governance:write"])),
    responses((status = 201, description = "The policy, created disabled", body = Envelope<Policy>)))]
async fn create_from_template(
    caller: Authorized<require::GovernanceWrite>,
    State(state): State<AppState>,
    ApiPath(template_id): ApiPath<String>,
    OptionalJson(input): OptionalJson<FromTemplateInput>,
) -> ApiResult<Response> {
    let value = service::create_from_template(&state, &caller, template_id, input).await?;
    Ok(envelope::created(value))
}
