//! Policies (spec 2.8, 4.8): CRUD, templates, the dry run and evaluation records.
//!
//! The rules (types, config shapes, scopes, evaluation order, conflicts) live with the
//! one evaluator in `warden_shared::policy`. A change is audited and published to the
//! proxies in its transaction; the proxies hold only enabled policies.

mod dry_run;
mod evaluations;
mod input;
mod store;
mod templates;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::policy::{budget_scope, PolicyType, Scope};
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::{ApiJson, ApiPath, OptionalJson};
use crate::auth::{require, Authorized, Caller};
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult};
use crate::ledger::spend::track_scope;
use crate::state::AppState;

pub use dry_run::{dry_run, DryRunInput};
pub use evaluations::{
    audit_violations, draw_decision_ids, record_evaluations, result_set_ids, DecisionRow,
    EvaluationReport, ReportedResult, ResultList, ResultLists,
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
    Ok(envelope::ok(
        store::list(state.db.pool(), &caller.tenant_id).await?,
    ))
}

#[utoipa::path(post, path = "/policies", tag = "governance", request_body = CreatePolicyInput,
    security(("bearer" = ["governance:write"])),
    responses((status = 201, description = "The policy; enabled ones reach every proxy within a second", body = Envelope<Policy>)))]
async fn create_policy(
    caller: Authorized<require::GovernanceWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreatePolicyInput>,
) -> ApiResult<Response> {
    let priority = input::check_priority(input.priority.unwrap_or(0))?;
    let scope = input.scope.unwrap_or_else(|| "global".to_owned());
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let definition = Definition::check(
        &mut *tx,
        &caller.tenant_id,
        input.policy_type,
        &input.config,
        &scope,
    )
    .await?;
    let policy = Policy {
        id: 0,
        name: input.name.into_inner(),
        description: input.description.map(|d| d.into_inner()),
        policy_type: definition.policy_type.as_str().to_owned(),
        config: definition.config.to_json(),
        scope: definition.scope.render(),
        enabled: input.enabled.unwrap_or(true),
        priority,
        template_id: None,
        created_at: now,
        updated_at: now,
    };
    let policy = insert(&mut tx, &caller, policy).await?;
    tx.commit().await?;
    Ok(envelope::created(policy))
}

/// Inserts, audits and publishes a new policy; returns it with its id.
async fn insert(tx: &mut WriteTx, caller: &Caller, mut policy: Policy) -> ApiResult<Policy> {
    policy.id = store::insert(tx, &caller.tenant_id, &policy).await?;
    let id = policy.id.to_string();
    changes::record(
        tx,
        caller.author(),
        policy.created_at,
        AuditEvent {
            event_type: "policy.created",
            target_type: "policy",
            target_id: &id,
            details: json!({
                "name": policy.name, "policy_type": policy.policy_type,
                "scope": policy.scope, "enabled": policy.enabled,
                "template_id": policy.template_id,
            }),
        },
        Proxies::Reload(ChangeKind::Policy),
    )
    .await?;
    track_budget_scope(tx, &caller.tenant_id, &policy).await?;
    Ok(policy)
}

/// A `budget_limit` policy needs the ledger to keep its scope's spend.
async fn track_budget_scope(tx: &mut WriteTx, tenant_id: &str, policy: &Policy) -> ApiResult<()> {
    if policy.policy_type != PolicyType::BudgetLimit.as_str() {
        return Ok(());
    }
    if let Some(scope) = Scope::parse(&policy.scope) {
        track_scope(tx, tenant_id, &budget_scope(&scope), policy.updated_at).await?;
    }
    Ok(())
}

#[utoipa::path(get, path = "/policies/{policy_id}", tag = "governance",
    params(("policy_id" = i64, Path)), security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The policy", body = Envelope<Policy>)))]
async fn get_policy(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Response> {
    store::get(state.db.pool(), &caller.tenant_id, id)
        .await?
        .map(envelope::ok)
        .ok_or_else(|| ApiError::not_found("policy"))
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
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(mut policy) = store::get(&mut *tx, &caller.tenant_id, id).await? else {
        return Err(ApiError::not_found("policy"));
    };
    if let Some(new_type) = input.policy_type {
        if new_type.as_str() != policy.policy_type && input.config.is_none() {
            return Err(ApiError::validation(
                "config",
                "config: a new policy_type needs its config in the same request",
            ));
        }
    }
    let policy_type = match input.policy_type {
        Some(policy_type) => policy_type,
        None => PolicyType::parse(&policy.policy_type)
            .ok_or_else(|| ApiError::internal("a stored policy has an unknown type"))?,
    };
    let config = input.config.as_ref().unwrap_or(&policy.config);
    let scope = input.scope.as_deref().unwrap_or(&policy.scope);
    let definition =
        Definition::check(&mut *tx, &caller.tenant_id, policy_type, config, scope).await?;
    if let Some(priority) = input.priority {
        policy.priority = input::check_priority(priority)?;
    }
    if let Some(name) = input.name {
        policy.name = name.into_inner();
    }
    if let Some(description) = input.description {
        policy.description = description.map(|d| d.into_inner());
    }
    if let Some(enabled) = input.enabled {
        policy.enabled = enabled;
    }
    policy.policy_type = definition.policy_type.as_str().to_owned();
    policy.config = definition.config.to_json();
    policy.scope = definition.scope.render();
    policy.updated_at = now;
    store::update(&mut tx, &caller.tenant_id, &policy).await?;
    let target_id = id.to_string();
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "policy.updated",
            target_type: "policy",
            target_id: &target_id,
            details: json!({
                "name": policy.name, "policy_type": policy.policy_type, "config": policy.config,
                "scope": policy.scope, "enabled": policy.enabled, "priority": policy.priority,
            }),
        },
        Proxies::Reload(ChangeKind::Policy),
    )
    .await?;
    track_budget_scope(&mut tx, &caller.tenant_id, &policy).await?;
    tx.commit().await?;
    Ok(envelope::ok(policy))
}

#[utoipa::path(delete, path = "/policies/{policy_id}", tag = "governance",
    params(("policy_id" = i64, Path)), security(("bearer" = ["governance:write"])),
    responses((status = 204, description = "Deleted; the proxies stop applying it within a second")))]
async fn delete_policy(
    caller: Authorized<require::GovernanceWrite>,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Response> {
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(name) = store::delete(&mut tx, &caller.tenant_id, id).await? else {
        return Err(ApiError::not_found("policy"));
    };
    let target_id = id.to_string();
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "policy.deleted",
            target_type: "policy",
            target_id: &target_id,
            details: json!({ "name": name }),
        },
        Proxies::Reload(ChangeKind::Policy),
    )
    .await?;
    tx.commit().await?;
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
    let Some(template) = templates::find(&template_id) else {
        return Err(ApiError::not_found("policy_template"));
    };
    let input = input.unwrap_or_default();
    let priority = input::check_priority(input.priority.unwrap_or(template.priority))?;
    let now = state.clock.now();
    let policy = Policy {
        id: 0,
        name: input
            .name
            .map_or_else(|| template.name.to_owned(), |n| n.into_inner()),
        description: Some(template.description.to_owned()),
        policy_type: template.policy_type.to_owned(),
        config: template.config,
        scope: template.scope.to_owned(),
        enabled: false,
        priority,
        template_id: Some(template.id.to_owned()),
        created_at: now,
        updated_at: now,
    };
    let mut tx = state.db.begin_write().await?;
    let policy = insert(&mut tx, &caller, policy).await?;
    tx.commit().await?;
    Ok(envelope::created(policy))
}
