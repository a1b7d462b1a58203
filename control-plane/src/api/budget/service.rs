//! The rules of budget limits: the plan gate, one limit per scope, live targets,
//! thresholds, the ledger's tracking of each scope, and the status of each limit.

use serde_json::json;
use warden_shared::budget::{agent_scope, percentage, team_scope, TENANT_SCOPE};
use warden_shared::ids::{new_id, IdKind};
use warden_shared::pricing::micros_to_usd;
use warden_shared::timestamp::Timestamp;

use super::{
    store, BudgetLimit, BudgetScopeStatus, BudgetStatus, CreateBudgetLimitInput,
    UpdateBudgetLimitInput,
};
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::ledger::spend::track_scope;
use crate::plans::{self, Feature};
use crate::state::AppState;

pub async fn list_limits(state: &AppState, caller: &Caller) -> ApiResult<Vec<BudgetLimit>> {
    Ok(store::list(state.db.pool(), &caller.tenant_id).await?)
}

pub async fn create_limit(
    state: &AppState,
    caller: &Caller,
    input: CreateBudgetLimitInput,
) -> ApiResult<BudgetLimit> {
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    // The plan first: a free tenant learns it needs an upgrade, not how to fix its body.
    plans::require(&mut tx, &caller.tenant_id, Feature::Proxy, "budget limits").await?;
    let amounts = input.amounts()?;
    let scope = match (&input.team_id, &input.agent_id) {
        (Some(_), Some(_)) => {
            return Err(ApiError::validation(
                "agent_id",
                "team_id, agent_id: set at most one (neither: a tenant-wide limit)",
            ))
        }
        (Some(team_id), None) => team_scope(team_id),
        (None, Some(agent_id)) => agent_scope(agent_id),
        (None, None) => TENANT_SCOPE.to_owned(),
    };
    if let Some(team_id) = &input.team_id {
        if !store::live_target_exists(&mut tx, &caller.tenant_id, team_id, false).await? {
            return Err(ApiError::validation(
                "team_id",
                "team_id: no such team in this tenant",
            ));
        }
    }
    if let Some(agent_id) = &input.agent_id {
        if !store::live_target_exists(&mut tx, &caller.tenant_id, agent_id, true).await? {
            return Err(ApiError::validation(
                "agent_id",
                "agent_id: no such agent in this tenant",
            ));
        }
    }
    let mut limit = BudgetLimit {
        id: new_id(IdKind::BudgetLimit, now.as_millis()),
        tenant_id: caller.tenant_id.clone(),
        team_id: input.team_id,
        agent_id: input.agent_id,
        scope,
        monthly_limit_usd: 0.0,
        monthly_limit_micros: 0,
        warn_threshold_pct: 0,
        block_threshold_pct: 0,
        enabled: input.enabled.unwrap_or(true),
        created_at: now,
        updated_at: now,
    };
    limit.set_amounts(amounts);
    if !store::insert(&mut tx, &limit).await? {
        return Err(ApiError::new(
            ErrorCode::BudgetLimitExists,
            format!(
                "scope `{}` already has a budget limit; update that one",
                limit.scope
            ),
        ));
    }
    track_scope(&mut tx, &caller.tenant_id, &limit.scope, now).await?;
    let details = limit.audit_details();
    publish(
        &mut tx,
        caller,
        &limit.id,
        "budget_limit.created",
        details,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(limit)
}

pub async fn update_limit(
    state: &AppState,
    caller: &Caller,
    id: String,
    input: UpdateBudgetLimitInput,
) -> ApiResult<BudgetLimit> {
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(mut limit) = store::get(&mut *tx, &caller.tenant_id, &id).await? else {
        return Err(ApiError::not_found("budget_limit"));
    };
    plans::require(&mut tx, &caller.tenant_id, Feature::Proxy, "budget limits").await?;
    let amounts = input.apply(limit.amounts())?;
    if amounts != limit.amounts() {
        // Crossings this month were of the old amounts: report the new ones afresh.
        store::forget_alerts(&mut tx, &caller.tenant_id, &id, now.month_start()).await?;
    }
    limit.set_amounts(amounts);
    if let Some(enabled) = input.enabled {
        limit.enabled = enabled;
    }
    limit.updated_at = now;
    store::update(&mut tx, &limit).await?;
    let details = limit.audit_details();
    publish(
        &mut tx,
        caller,
        &limit.id,
        "budget_limit.updated",
        details,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(limit)
}

pub async fn delete_limit(state: &AppState, caller: &Caller, id: String) -> ApiResult<()> {
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(scope) = store::delete(&mut tx, &caller.tenant_id, &id).await? else {
        return Err(ApiError::not_found("budget_limit"));
    };
    publish(
        &mut tx,
        caller,
        &id,
        "budget_limit.deleted",
        json!({ "scope": scope }),
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

pub async fn budget_status(state: &AppState, caller: &Caller) -> ApiResult<BudgetStatus> {
    let month = state.clock.now().month_start();
    let pool = state.db.pool();
    let limits = store::list(pool, &caller.tenant_id).await?;
    let spend = store::spend_of_limits(pool, &caller.tenant_id, month).await?;
    let scopes = limits
        .into_iter()
        .map(|limit| {
            let spent = spend
                .iter()
                .find(|(id, _)| *id == limit.id)
                .map_or(0, |(_, spent)| *spent);
            BudgetScopeStatus {
                percentage: percentage(spent, limit.monthly_limit_micros),
                current_spend_usd: micros_to_usd(spent),
                scope: limit.scope,
                limit_id: limit.id,
                monthly_limit_usd: limit.monthly_limit_usd,
                warn_threshold_pct: limit.warn_threshold_pct,
                block_threshold_pct: limit.block_threshold_pct,
                enabled: limit.enabled,
            }
        })
        .collect();
    Ok(BudgetStatus { scopes })
}

/// Audits a change to limit `id` and publishes it to the proxies.
async fn publish(
    tx: &mut WriteTx,
    caller: &Caller,
    id: &str,
    event_type: &str,
    details: serde_json::Value,
    now: Timestamp,
) -> ApiResult<()> {
    changes::record(
        tx,
        caller.author(),
        now,
        AuditEvent {
            event_type,
            target_type: "budget_limit",
            target_id: id,
            details,
        },
        Proxies::Reload(ChangeKind::BudgetLimit),
    )
    .await?;
    Ok(())
}
