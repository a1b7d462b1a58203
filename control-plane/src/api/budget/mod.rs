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
pub(crate) mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::pricing::micros_to_usd;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::{ApiJson, ApiPath};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
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
    #[serde(serialize_with = "crate::api::money::plain")]
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
    #[serde(serialize_with = "crate::api::money::plain")]
    pub monthly_limit_usd: f64,
    /// Spend recorded by the ledger this calendar month (UTC).
    #[serde(serialize_with = "crate::api::money::plain")]
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
    Ok(envelope::ok(service::list_limits(&state, &caller).await?))
}

#[utoipa::path(post, path = "/budget/limits", tag = "budget", request_body = CreateBudgetLimitInput,
    security(("bearer" = ["admin"])),
    responses((status = 201, description = "The limit; enabled ones are in force in every connected proxy when this answers", body = Envelope<BudgetLimit>),
        (status = 402, description = "The plan has no enforcement (`plan_upgrade_required`)"),
        (status = 409, description = "The scope already has a limit (`budget_limit_exists`)")))]
async fn create_limit(
    caller: Authorized<require::AdminWithProxy>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateBudgetLimitInput>,
) -> ApiResult<Response> {
    let value = service::create_limit(&state, &caller, input).await?;
    Ok(envelope::created(value))
}

#[utoipa::path(patch, path = "/budget/limits/{limit_id}", tag = "budget",
    params(("limit_id" = String, Path)), request_body = UpdateBudgetLimitInput,
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "The updated limit", body = Envelope<BudgetLimit>),
        (status = 402, description = "The plan has no enforcement (`plan_upgrade_required`)")))]
async fn update_limit(
    caller: Authorized<require::AdminWithProxy>,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(input): ApiJson<UpdateBudgetLimitInput>,
) -> ApiResult<Response> {
    let value = service::update_limit(&state, &caller, id, input).await?;
    Ok(envelope::ok(value))
}

#[utoipa::path(delete, path = "/budget/limits/{limit_id}", tag = "budget",
    params(("limit_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 204, description = "Deleted; connected proxies have stopped enforcing it when this answers")))]
async fn delete_limit(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Response> {
    service::delete_limit(&state, &caller, id).await?;
    Ok(envelope::no_content())
}

#[utoipa::path(get, path = "/budget/status", tag = "budget",
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "Each limit's scope with this month's spend", body = Envelope<BudgetStatus>)))]
async fn budget_status(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    let value = service::budget_status(&state, &caller).await?;
    Ok(envelope::ok(value))
}
