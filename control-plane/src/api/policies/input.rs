//! Policy request bodies and the rules a policy must keep (spec 2.8).

use serde::Deserialize;
use serde_json::Value;
use sqlx::{Any, Executor};
use utoipa::ToSchema;
use warden_shared::catalog::ProviderCatalog;
use warden_shared::policy::{check_scope, PolicyConfig, PolicyType, Scope};

use super::store;
use crate::api::provider_names;
use crate::error::{ApiError, ApiResult};
use crate::validate::{present, Text};

/// Priorities run from -10,000 to 10,000; higher is evaluated first.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i64> = -10_000..=10_000;

pub type PolicyName = Text<1, 200>;
pub type Description = Text<0, 1000>;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePolicyInput {
    pub name: PolicyName,
    #[serde(default)]
    pub description: Option<Description>,
    #[schema(schema_with = crate::api::openapi_enums::policy_type)]
    pub policy_type: PolicyType,
    /// The type's configuration (see the policy documentation).
    #[schema(value_type = Object)]
    pub config: Value,
    /// `global` (default), `team:<team_id>`, `agent:<agent_id>`, `environment:<name>`.
    #[serde(default)]
    pub scope: Option<String>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// -10000 to 10000, default 0; higher is evaluated first.
    #[serde(default)]
    #[schema(minimum = -10_000, maximum = 10_000)]
    pub priority: Option<i64>,
}

/// Any policy field; a new `policy_type` needs its `config` in the same request.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdatePolicyInput {
    #[serde(default)]
    pub name: Option<PolicyName>,
    /// `null` clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<Description>>,
    #[serde(default)]
    #[schema(schema_with = crate::api::openapi_enums::optional_policy_type)]
    pub policy_type: Option<PolicyType>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub config: Option<Value>,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    #[schema(minimum = -10_000, maximum = 10_000)]
    pub priority: Option<i64>,
}

/// A policy's type, config and scope, checked together.
#[derive(Debug, Clone)]
pub struct Definition {
    pub policy_type: PolicyType,
    pub config: PolicyConfig,
    pub scope: Scope,
}

impl Definition {
    /// Validates `config` for `policy_type` and `scope` for both, including that a team
    /// or agent scope names one of the tenant's own.
    pub async fn check<'e>(
        db: impl Executor<'e, Database = Any>,
        providers: &ProviderCatalog,
        tenant_id: &str,
        policy_type: PolicyType,
        config: &Value,
        scope: &str,
    ) -> ApiResult<Definition> {
        let config = PolicyConfig::from_json(policy_type, config)
            .map_err(|error| ApiError::validation(error.field, error.message))?;
        provider_names::require_known(providers, "config.providers", config.providers())?;
        let parsed = Scope::parse(scope).ok_or_else(|| {
            ApiError::validation(
                "scope",
                "scope: must be global, team:<team_id>, agent:<agent_id> or \
                 environment:<production|staging|dev>",
            )
        })?;
        check_scope(policy_type, &parsed)
            .map_err(|error| ApiError::validation(error.field, error.message))?;
        let exists = match &parsed {
            Scope::Team(id) => Some(store::live_team_exists(db, tenant_id, id).await?),
            Scope::Agent(id) => Some(crate::api::agents::agent_is_live(db, tenant_id, id).await?),
            Scope::Global | Scope::Environment(_) => None,
        };
        if exists == Some(false) {
            return Err(ApiError::validation(
                "scope",
                format!("scope: `{scope}` names no team or agent of this tenant"),
            ));
        }
        Ok(Definition {
            policy_type,
            config,
            scope: parsed,
        })
    }
}

pub fn check_priority(priority: i64) -> ApiResult<i64> {
    if PRIORITY_RANGE.contains(&priority) {
        Ok(priority)
    } else {
        Err(ApiError::validation(
            "priority",
            "priority: must be -10000 to 10000",
        ))
    }
}
