//! Budget limits (spec 2.11, 4.6): a monthly spending limit on the tenant, a team or an
//! agent, enforced by the proxies against the ledger's month-to-date spend of the scope
//! (`crate::ledger::spend`), and their status.
//!
//! Rules Warden chose where the spec is silent: one limit per scope (a second is 409
//! `budget_limit_exists`); `warn_threshold_pct` may not exceed `block_threshold_pct`;
//! a limit's scope is fixed at creation; every route needs `admin`, and creating or
//! updating also a plan with the proxy (Starter or above, else 402). A limit's first
//! crossing of each threshold in a month is recorded once (`budget_alerts`, audited as
//! `budget.warn_threshold_reached` / `budget.block_threshold_reached`).

mod input;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::budget::{agent_scope, percentage, team_scope, TENANT_SCOPE};
use warden_shared::ids::{new_id, IdKind};
use warden_shared::pricing::micros_to_usd;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::{ApiJson, ApiPath};
use crate::auth::{require, Authorized, Caller};
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::ledger::spend::track_scope;
use crate::plans::{self, Feature};
use crate::state::AppState;

pub use input::{CreateBudgetLimitInput, UpdateBudgetLimitInput};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_limits, create_limit))
        .routes(routes!(update_limit, delete_limit))
        .routes(routes!(budget_status))
}

/// A budget limit as the API shows it (spec 2.11).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BudgetLimit {
    pub id: String,
    pub tenant_id: String,
    pub team_id: Option<String>,
    pub agent_id: Option<String>,
    /// `tenant`, `team:<team_id>` or `agent:<agent_id>`: whose spend the limit counts.
    pub scope: String,
    pub monthly_limit_usd: f64,
    #[serde(skip)]
    pub monthly_limit_micros: i64,
    pub warn_threshold_pct: i64,
    pub block_threshold_pct: i64,
    pub enabled: bool,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

impl BudgetLimit {
    fn amounts(&self) -> input::Amounts {
        input::Amounts {
            monthly_limit_micros: self.monthly_limit_micros,
            warn_threshold_pct: self.warn_threshold_pct,
            block_threshold_pct: self.block_threshold_pct,
        }
    }

    fn set_amounts(&mut self, amounts: input::Amounts) {
        self.monthly_limit_micros = amounts.monthly_limit_micros;
        self.monthly_limit_usd = micros_to_usd(amounts.monthly_limit_micros);
        self.warn_threshold_pct = amounts.warn_threshold_pct;
        self.block_threshold_pct = amounts.block_threshold_pct;
    }

    fn audit_details(&self) -> serde_json::Value {
        json!({
            "scope": self.scope, "monthly_limit_usd": self.monthly_limit_usd,
            "warn_threshold_pct": self.warn_threshold_pct,
            "block_threshold_pct": self.block_threshold_pct, "enabled": self.enabled,
        })
    }
}

/// One scope of `/budget/status` (spec 2.11).
#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetScopeStatus {
    /// `tenant`, `team:<team_id>` or `agent:<agent_id>`.
    pub scope: String,
    pub limit_id: String,
    pub monthly_limit_usd: f64,
    /// Spend recorded by the ledger this calendar month (UTC).
    pub current_spend_usd: f64,
    /// Current spend as a percentage of the limit, two decimals.
    pub percentage: f64,
    pub warn_threshold_pct: i64,
    pub block_threshold_pct: i64,
    pub enabled: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetStatus {
    pub scopes: Vec<BudgetScopeStatus>,
}

#[utoipa::path(get, path = "/budget/limits", tag = "budget",
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "The tenant's budget limits, oldest first", body = Envelope<Vec<BudgetLimit>>)))]
async fn list_limits(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        store::list(state.db.pool(), &caller.tenant_id).await?,
    ))
}

#[utoipa::path(post, path = "/budget/limits", tag = "budget", request_body = CreateBudgetLimitInput,
    security(("bearer" = ["admin"])),
    responses((status = 201, description = "The limit; enabled ones reach every proxy within a second", body = Envelope<BudgetLimit>),
        (status = 402, description = "The plan has no enforcement (`plan_upgrade_required`)"),
        (status = 409, description = "The scope already has a limit (`budget_limit_exists`)")))]
async fn create_limit(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateBudgetLimitInput>,
) -> ApiResult<Response> {
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
        &caller,
        &limit.id,
        "budget_limit.created",
        details,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(envelope::created(limit))
}

#[utoipa::path(patch, path = "/budget/limits/{limit_id}", tag = "budget",
    params(("limit_id" = String, Path)), request_body = UpdateBudgetLimitInput,
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "The updated limit", body = Envelope<BudgetLimit>),
        (status = 402, description = "The plan has no enforcement (`plan_upgrade_required`)")))]
async fn update_limit(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(input): ApiJson<UpdateBudgetLimitInput>,
) -> ApiResult<Response> {
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
        &caller,
        &limit.id,
        "budget_limit.updated",
        details,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(envelope::ok(limit))
}

#[utoipa::path(delete, path = "/budget/limits/{limit_id}", tag = "budget",
    params(("limit_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 204, description = "Deleted; the proxies stop enforcing it within a second")))]
async fn delete_limit(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Response> {
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(scope) = store::delete(&mut tx, &caller.tenant_id, &id).await? else {
        return Err(ApiError::not_found("budget_limit"));
    };
    publish(
        &mut tx,
        &caller,
        &id,
        "budget_limit.deleted",
        json!({ "scope": scope }),
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(envelope::no_content())
}

#[utoipa::path(get, path = "/budget/status", tag = "budget",
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "Each limit's scope with this month's spend", body = Envelope<BudgetStatus>)))]
async fn budget_status(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
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
    Ok(envelope::ok(BudgetStatus { scopes }))
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
