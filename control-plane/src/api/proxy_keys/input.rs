//! The body of `POST /proxy-keys` and its rules.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use warden_shared::registry::Provider;

use crate::error::{ApiError, ApiResult};
use crate::validate::Text;

const MAX_MODELS: usize = 100;
const MAX_OVERRIDES: usize = 50;
const MAX_EXPIRY_DAYS: i64 = 3650;
const MAX_BUDGET_USD: f64 = 999_999.0;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProxyKeyInput {
    /// Who uses the key, e.g. `alice-laptop` or `support-bot prod`.
    pub developer_label: Text<1, 100>,
    /// `openai`, `anthropic`, `google`, `nvidia`, `bedrock` or a provider the deployment
    /// declares (`providers.custom`); omitted or empty: all.
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>)]
    pub allowed_providers: Option<Vec<Provider>>,
    /// Model names (as requested, before overrides); omitted or empty: all.
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>)]
    pub allowed_models: Option<Vec<Text<1, 200>>>,
    /// Requested model → model to send instead (at most 50).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub model_overrides: Option<BTreeMap<Text<1, 200>, Text<1, 200>>>,
    #[serde(default, deserialize_with = "crate::api::extract::optional_object")]
    pub rate_limit_override: Option<RateLimitOverride>,
    /// 0 to 999999 US dollars per calendar month (UTC); omitted: no limit of its own.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 999_999)]
    pub budget_limit_usd: Option<f64>,
    /// 1 to 3650. Omitted: the key does not expire.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 3650)]
    pub expires_in_days: Option<i64>,
    /// Use the tenant's managed key for the provider instead of the proxy's own
    /// credential. Default false.
    #[serde(default)]
    pub use_managed_key: Option<bool>,
    /// The agent the key acts for; omitted: a new agent named after the label.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The team of a new agent (and of the key); omitted: the agent's team.
    #[serde(default)]
    pub team_id: Option<String>,
}

/// The key's own limits per UTC minute, counted by each proxy replica like a
/// `rate_limit` policy's. They apply on top of the tenant's `rate_limit` policies (a key
/// can be held tighter than its tenant's policies, never looser); over them the proxy
/// answers 429 `rate_limit_exceeded` with `Retry-After`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitOverride {
    /// 1 to 1,000,000.
    #[serde(default)]
    pub requests_per_minute: Option<i64>,
    /// 1 to 1,000,000,000.
    #[serde(default)]
    pub tokens_per_minute: Option<i64>,
}

/// The checked lists of a proxy key, deduplicated and sorted.
pub struct KeySettings {
    pub allowed_providers: Vec<String>,
    pub allowed_models: Vec<String>,
    pub model_overrides: BTreeMap<String, String>,
}

impl CreateProxyKeyInput {
    pub fn validate(&self) -> ApiResult<KeySettings> {
        if let Some(usd) = self.budget_limit_usd {
            if !(0.0..=MAX_BUDGET_USD).contains(&usd) {
                return Err(ApiError::validation(
                    "budget_limit_usd",
                    "budget_limit_usd: must be 0 to 999999",
                ));
            }
        }
        if let Some(days) = self.expires_in_days {
            if !(1..=MAX_EXPIRY_DAYS).contains(&days) {
                return Err(ApiError::validation(
                    "expires_in_days",
                    format!("expires_in_days: must be 1 to {MAX_EXPIRY_DAYS}"),
                ));
            }
        }
        if let Some(limits) = &self.rate_limit_override {
            check_range(limits.requests_per_minute, 1_000_000, "requests_per_minute")?;
            check_range(limits.tokens_per_minute, 1_000_000_000, "tokens_per_minute")?;
        }
        let models = self.allowed_models.as_deref().unwrap_or_default();
        if models.len() > MAX_MODELS {
            return Err(ApiError::validation(
                "allowed_models",
                format!("allowed_models: at most {MAX_MODELS}"),
            ));
        }
        let overrides = self.model_overrides.clone().unwrap_or_default();
        if overrides.len() > MAX_OVERRIDES {
            return Err(ApiError::validation(
                "model_overrides",
                format!("model_overrides: at most {MAX_OVERRIDES}"),
            ));
        }
        let providers: BTreeSet<&str> = self
            .allowed_providers
            .iter()
            .flatten()
            .map(|provider| provider.as_str())
            .collect();
        let models: BTreeSet<&str> = models.iter().map(Text::as_str).collect();
        Ok(KeySettings {
            allowed_providers: providers.into_iter().map(str::to_owned).collect(),
            allowed_models: models.into_iter().map(str::to_owned).collect(),
            model_overrides: overrides
                .into_iter()
                .map(|(from, to)| (from.into_inner(), to.into_inner()))
                .collect(),
        })
    }
}

fn check_range(value: Option<i64>, max: i64, field: &str) -> ApiResult<()> {
    match value {
        Some(value) if !(1..=max).contains(&value) => Err(ApiError::validation(
            format!("rate_limit_override.{field}"),
            format!("rate_limit_override.{field}: must be 1 to {max}"),
        )),
        _ => Ok(()),
    }
}
