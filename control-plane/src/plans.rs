//! Plans and what each includes: the one place every plan gate reads.
//!
//! A gate is checked inside the write it guards, before the input is looked at further,
//! so a tenant without the feature gets 402 `plan_upgrade_required` whatever it sent.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult, ErrorCode};

/// A tenant's plan. `free` is where self-service signups start, below `starter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Plan {
    Free,
    Starter,
    Professional,
    Enterprise,
    EnterprisePlus,
}

impl Plan {
    pub const fn as_str(self) -> &'static str {
        match self {
            Plan::Free => "free",
            Plan::Starter => "starter",
            Plan::Professional => "professional",
            Plan::Enterprise => "enterprise",
            Plan::EnterprisePlus => "enterprise_plus",
        }
    }

    pub fn parse(text: &str) -> Option<Plan> {
        [
            Plan::Free,
            Plan::Starter,
            Plan::Professional,
            Plan::Enterprise,
            Plan::EnterprisePlus,
        ]
        .into_iter()
        .find(|plan| plan.as_str() == text)
    }

    /// Active agents a tenant on this plan may have unless an operator set a limit.
    /// Starter's 25 comes from the spec; the others are Warden's choice.
    pub const fn default_agent_limit(self) -> i64 {
        match self {
            Plan::Free => 3,
            Plan::Starter => 25,
            Plan::Professional => 100,
            Plan::Enterprise => 1_000,
            Plan::EnterprisePlus => 10_000,
        }
    }
}

/// Something a plan may or may not include.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// The proxy and what it enforces: proxy keys, managed keys, budget limits.
    Proxy,
    /// Classifying agents' risk under the EU AI Act (2.20's `risk_classification`).
    RiskClassification,
    /// Incident evidence packs (spec 4.8: Professional or above).
    EvidencePacks,
}

impl Feature {
    /// The feature as a 402's message names it, and the lowest plan that has it.
    const fn describe(self) -> (&'static str, &'static str) {
        match self {
            Feature::Proxy => ("the proxy", "Starter"),
            Feature::RiskClassification => ("risk classification", "Starter"),
            Feature::EvidencePacks => ("incident evidence packs", "Professional"),
        }
    }
}

impl Plan {
    pub const fn includes(self, feature: Feature) -> bool {
        match feature {
            Feature::Proxy | Feature::RiskClassification => !matches!(self, Plan::Free),
            Feature::EvidencePacks => !matches!(self, Plan::Free | Plan::Starter),
        }
    }
}

/// 402 `plan_upgrade_required` unless `plan` includes `feature`: the check a route's
/// credential makes before the body is read (`auth::RequiredScope::FEATURE`).
pub fn check(plan: &str, feature: Feature) -> ApiResult<()> {
    gate(plan, feature, "this needs")
}

/// The one gate: `Ok` when `plan` includes `feature`, else the 402 whose message starts
/// with `subject` ("this needs", "proxy keys need").
fn gate(plan: &str, feature: Feature, subject: &str) -> ApiResult<()> {
    if Plan::parse(plan).is_some_and(|plan| plan.includes(feature)) {
        return Ok(());
    }
    let (needed, lowest_plan) = feature.describe();
    Err(ApiError::new(
        ErrorCode::PlanUpgradeRequired,
        format!("{subject} {needed}, which needs the {lowest_plan} plan or above"),
    ))
}

/// 402 `plan_upgrade_required` unless the tenant's plan includes `feature`; `what` names
/// what the caller was creating ("proxy keys", "budget limits", ...).
pub async fn require(
    tx: &mut WriteTx,
    tenant_id: &str,
    feature: Feature,
    what: &str,
) -> ApiResult<()> {
    let plan: String = sqlx::query_scalar("SELECT plan FROM tenants WHERE id = $1")
        .bind(tenant_id)
        .fetch_one(&mut **tx)
        .await?;
    gate(&plan, feature, &format!("{what} need"))
}
