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
    pub const ALL: [Plan; 5] = [
        Plan::Free,
        Plan::Starter,
        Plan::Professional,
        Plan::Enterprise,
        Plan::EnterprisePlus,
    ];

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
        Plan::ALL.into_iter().find(|plan| plan.as_str() == text)
    }

    /// A tenant's stored plan; one this build does not know (written by a newer
    /// control plane, say) counts as the lowest, so it unlocks nothing.
    pub fn of_tenant(stored: &str) -> Plan {
        Plan::parse(stored).unwrap_or(Plan::Free)
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

/// What a plan includes, as `GET /billing` shows it (spec 2.20's `features`), and the
/// figures the spec leaves open, chosen here:
///
/// | plan | agents | USD / month | anomalies | policies | approvals | risk | audit days | EU AI Act | FRIA | incidents | SSO | telemetry days |
/// |---|---|---|---|---|---|---|---|---|---|---|---|---|
/// | free | 3 | 0 | no | 3 | no | no | 30 | none | no | no | no | 7 |
/// | starter | 25 | 99 | yes | 25 | yes | yes | 90 | basic | no | no | no | 14 |
/// | professional | 100 | 499 | yes | unlimited | yes | yes | 365 | full | yes | yes | no | 30 |
/// | enterprise | 1,000 | 1,999 | yes | unlimited | yes | yes | 2,555 | full | yes | yes | yes | 30 |
/// | enterprise_plus | 10,000 | by contract | yes | unlimited | yes | yes | 3,650 | full | yes | yes | yes | 30 |
///
/// The audit trail is kept whole whatever the plan (it is a hash chain); the retention
/// figure is the plan's promise, the floor. Telemetry retention bounds payload capture.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, ToSchema)]
pub struct Features {
    pub anomaly_detection: bool,
    /// A number of policies, or `"unlimited"`.
    #[schema(schema_with = policy_allowance_schema)]
    pub governance_policies: PolicyAllowance,
    pub hitl_approvals: bool,
    pub risk_classification: bool,
    pub audit_trail_retention_days: i64,
    /// `none`, `basic` (risk classification and transparency cards) or `full`.
    pub eu_ai_act_compliance: &'static str,
    pub fria_support: bool,
    pub incident_reporting: bool,
    pub sso: bool,
}

/// `governance_policies` in the OpenAPI document: an integer or `"unlimited"`.
fn policy_allowance_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0)),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["unlimited"])),
            )
            .build(),
    )
}

/// `governance_policies`: a count or unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyAllowance {
    Count(i64),
    Unlimited,
}

impl Serialize for PolicyAllowance {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            PolicyAllowance::Count(count) => serializer.serialize_i64(*count),
            PolicyAllowance::Unlimited => serializer.serialize_str("unlimited"),
        }
    }
}

impl Plan {
    /// The plan's order, lowest first: an upgrade moves up it.
    pub const fn rank(self) -> u8 {
        match self {
            Plan::Free => 0,
            Plan::Starter => 1,
            Plan::Professional => 2,
            Plan::Enterprise => 3,
            Plan::EnterprisePlus => 4,
        }
    }

    /// List price per month in micro-dollars; enterprise_plus is by contract (0 here).
    pub const fn price_micros(self) -> i64 {
        match self {
            Plan::Free | Plan::EnterprisePlus => 0,
            Plan::Starter => 99_000_000,
            Plan::Professional => 499_000_000,
            Plan::Enterprise => 1_999_000_000,
        }
    }

    /// Days usage records and captured payloads are kept.
    pub const fn telemetry_retention_days(self) -> i64 {
        match self {
            Plan::Free => 7,
            Plan::Starter => 14,
            _ => 30,
        }
    }

    pub const fn features(self) -> Features {
        let paid = !matches!(self, Plan::Free);
        let full = self.rank() >= Plan::Professional.rank();
        Features {
            anomaly_detection: paid,
            governance_policies: match self {
                Plan::Free => PolicyAllowance::Count(3),
                Plan::Starter => PolicyAllowance::Count(25),
                _ => PolicyAllowance::Unlimited,
            },
            hitl_approvals: paid,
            risk_classification: self.includes(Feature::RiskClassification),
            audit_trail_retention_days: match self {
                Plan::Free => 30,
                Plan::Starter => 90,
                Plan::Professional => 365,
                Plan::Enterprise => 2_555,
                Plan::EnterprisePlus => 3_650,
            },
            eu_ai_act_compliance: match self {
                Plan::Free => "none",
                Plan::Starter => "basic",
                _ => "full",
            },
            fria_support: full,
            incident_reporting: full,
            sso: self.rank() >= Plan::Enterprise.rank(),
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
    let plan = tenant_plan(tx, tenant_id).await?;
    gate(&plan, feature, &format!("{what} need"))
}

/// The tenant's plan as stored, read in the write's transaction.
pub async fn tenant_plan(tx: &mut WriteTx, tenant_id: &str) -> Result<String, sqlx::Error> {
    sqlx::query_scalar("SELECT plan FROM tenants WHERE id = $1")
        .bind(tenant_id)
        .fetch_one(&mut **tx)
        .await
}
