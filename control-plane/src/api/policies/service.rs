//! The rules of policies: validation against the tenant's state, priorities, templates,
//! budget scopes the ledger must track, and each write with its audit event and the
//! proxies' change row.

use serde_json::json;
use warden_shared::policy::{budget_scope, PolicyType, Scope};

use super::input::{self, CreatePolicyInput, Definition, UpdatePolicyInput};
use super::{store, templates, FromTemplateInput, Policy};
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult};
use crate::ledger::spend::track_scope;
use crate::state::AppState;

pub async fn list_policies(state: &AppState, caller: &Caller) -> ApiResult<Vec<Policy>> {
    Ok(store::list(state.db.pool(), &caller.tenant_id).await?)
}

pub async fn get_policy(state: &AppState, caller: &Caller, id: i64) -> ApiResult<Policy> {
    store::get(state.db.pool(), &caller.tenant_id, id)
        .await?
        .ok_or_else(|| ApiError::not_found("policy"))
}

pub async fn create_policy(
    state: &AppState,
    caller: &Caller,
    input: CreatePolicyInput,
) -> ApiResult<Policy> {
    let priority = input::check_priority(input.priority.unwrap_or(0))?;
    let scope = input.scope.unwrap_or_else(|| "global".to_owned());
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let definition = Definition::check(
        &mut *tx,
        &state.providers,
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
    let policy = insert(&mut tx, caller, policy).await?;
    tx.commit().await?;
    Ok(policy)
}

pub async fn update_policy(
    state: &AppState,
    caller: &Caller,
    id: i64,
    input: UpdatePolicyInput,
) -> ApiResult<Policy> {
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
    let definition = Definition::check(
        &mut *tx,
        &state.providers,
        &caller.tenant_id,
        policy_type,
        config,
        scope,
    )
    .await?;
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
    Ok(policy)
}

pub async fn delete_policy(state: &AppState, caller: &Caller, id: i64) -> ApiResult<()> {
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
    Ok(())
}

pub async fn create_from_template(
    state: &AppState,
    caller: &Caller,
    template_id: String,
    input: Option<FromTemplateInput>,
) -> ApiResult<Policy> {
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
    let policy = insert(&mut tx, caller, policy).await?;
    tx.commit().await?;
    Ok(policy)
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
