//! A policy's `config` as JSON: parsed and validated into [`PolicyConfig`] by both planes
//! (the control plane when a policy is written, the proxy when one arrives on the state
//! stream), and rendered back in its normalised form (defaults filled in).

use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    Guardrail, GuardrailAction, GuardrailPattern, Matcher, PolicyConfig, PolicyType, RatePer, Scope,
};
use crate::guardrail::{Detector, Scanner};
use crate::pricing::{micros_to_usd, usd_to_micros};
use crate::registry::{Environment, Provider};

/// Most entries of a model list.
pub const MAX_MODELS: usize = 500;
/// Most characters of a model name or pattern.
pub const MAX_MODEL_CHARS: usize = 200;
/// The budget range of spec 2.11, also used for `budget_limit` policies.
pub const MAX_MONTHLY_LIMIT_USD: f64 = 999_999.0;

/// A config that breaks a rule; `field` is a dotted path such as `config.allowed_models`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

fn error(field: &str, message: impl Into<String>) -> ConfigError {
    let field = if field.is_empty() {
        "config".to_owned()
    } else {
        format!("config.{field}")
    };
    ConfigError {
        message: format!("{field}: {}", message.into()),
        field,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Allowlist {
    allowed_models: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolAllowlist {
    allowed_tools: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockedTools {
    tools: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockedProviders {
    providers: Vec<Provider>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Budget {
    monthly_limit_usd: f64,
    #[serde(default)]
    warn_threshold_pct: Option<i64>,
    #[serde(default)]
    block_threshold_pct: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimit {
    #[serde(default)]
    requests_per_minute: Option<i64>,
    #[serde(default)]
    tokens_per_minute: Option<i64>,
    #[serde(default)]
    per: RatePer,
    #[serde(default)]
    tools: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GuardrailInput {
    #[serde(default)]
    action: GuardrailAction,
    #[serde(default)]
    detectors: Option<Vec<Detector>>,
    #[serde(default)]
    patterns: Vec<GuardrailPattern>,
}

/// Most patterns of one guardrail.
pub const MAX_GUARDRAIL_PATTERNS: usize = 20;

fn guardrail(value: &Value) -> Result<Guardrail, ConfigError> {
    let input: GuardrailInput = parse_as(value)?;
    let mut detectors = input.detectors.unwrap_or_else(|| Detector::ALL.to_vec());
    detectors.sort_by_key(|d| d.as_str());
    detectors.dedup();
    if input.patterns.len() > MAX_GUARDRAIL_PATTERNS {
        return Err(error("patterns", "at most 20"));
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut patterns = Vec::with_capacity(input.patterns.len());
    for (index, pattern) in input.patterns.iter().enumerate() {
        let field = format!("patterns[{index}]");
        let id_ok = (1..=50).contains(&pattern.id.len())
            && pattern
                .id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !id_ok || Detector::ALL.iter().any(|d| d.as_str() == pattern.id) {
            return Err(error(
                &format!("{field}.id"),
                "1 to 50 of a-z, 0-9, _ and -, not a built-in detector's name",
            ));
        }
        if !ids.insert(pattern.id.as_str()) {
            return Err(error(&format!("{field}.id"), "named twice"));
        }
        if pattern.pattern.is_empty()
            || pattern.pattern.chars().count() > crate::redaction::MAX_PATTERN_CHARS
            || crate::redaction::compile_pattern(&pattern.pattern).is_err()
        {
            return Err(error(
                &format!("{field}.pattern"),
                "a regular expression of 1 to 500 characters within the size limit",
            ));
        }
        patterns.push((pattern.id.clone(), pattern.pattern.clone()));
    }
    if detectors.is_empty() && patterns.is_empty() {
        return Err(error("detectors", "name at least one detector or pattern"));
    }
    let scanner = Scanner::new(&detectors, &patterns)
        .map_err(|cause| error("patterns", format!("cannot be compiled together: {cause}")))?;
    Ok(Guardrail {
        action: input.action,
        detectors,
        patterns: input.patterns,
        scanner: std::sync::Arc::new(scanner),
    })
}

fn parse_as<T: for<'de> Deserialize<'de>>(value: &Value) -> Result<T, ConfigError> {
    T::deserialize(value).map_err(|cause| {
        // serde names the offending field in its message (`unknown field `x``, `missing
        // field `y``); the message is the caller's to show.
        error("", cause.to_string())
    })
}

impl PolicyConfig {
    /// Parses and validates the `config` of a policy of `policy_type`.
    pub fn from_json(policy_type: PolicyType, value: &Value) -> Result<PolicyConfig, ConfigError> {
        if !value.is_object() {
            return Err(error("", "must be an object"));
        }
        match policy_type {
            PolicyType::ModelAllowlist => {
                let Allowlist { allowed_models } = parse_as(value)?;
                check_models("allowed_models", &allowed_models, 1)?;
                Ok(PolicyConfig::ModelAllowlist { allowed_models })
            }
            PolicyType::BlockProvider => {
                let BlockedProviders { mut providers } = parse_as(value)?;
                providers.sort_by(|a, b| a.as_str().cmp(b.as_str()));
                providers.dedup();
                if providers.is_empty() {
                    return Err(error("providers", "must name at least one provider"));
                }
                Ok(PolicyConfig::BlockProvider { providers })
            }
            PolicyType::RequireApproval => Ok(PolicyConfig::RequireApproval(matcher(value)?)),
            PolicyType::RequireHumanReview => {
                let matcher = matcher(value)?;
                if matcher.releases.is_some() {
                    return Err(error(
                        "releases",
                        "only a require_approval policy releases anything",
                    ));
                }
                Ok(PolicyConfig::RequireHumanReview(matcher))
            }
            PolicyType::BudgetLimit => {
                let budget: Budget = parse_as(value)?;
                if !budget.monthly_limit_usd.is_finite()
                    || !(0.0..=MAX_MONTHLY_LIMIT_USD).contains(&budget.monthly_limit_usd)
                {
                    return Err(error("monthly_limit_usd", "must be 0 to 999999"));
                }
                let warn = budget.warn_threshold_pct.unwrap_or(80);
                if !(1..=100).contains(&warn) {
                    return Err(error("warn_threshold_pct", "must be 1 to 100"));
                }
                let block = budget.block_threshold_pct.unwrap_or(100);
                if !(1..=200).contains(&block) {
                    return Err(error("block_threshold_pct", "must be 1 to 200"));
                }
                Ok(PolicyConfig::BudgetLimit {
                    monthly_limit_micros: usd_to_micros(budget.monthly_limit_usd),
                    warn_threshold_pct: warn,
                    block_threshold_pct: block,
                })
            }
            PolicyType::RateLimit => {
                let limit: RateLimit = parse_as(value)?;
                if limit.requests_per_minute.is_none() && limit.tokens_per_minute.is_none() {
                    return Err(error(
                        "",
                        "set requests_per_minute, tokens_per_minute or both",
                    ));
                }
                if limit
                    .requests_per_minute
                    .is_some_and(|n| !(1..=1_000_000).contains(&n))
                {
                    return Err(error("requests_per_minute", "must be 1 to 1000000"));
                }
                if limit
                    .tokens_per_minute
                    .is_some_and(|n| !(1..=1_000_000_000).contains(&n))
                {
                    return Err(error("tokens_per_minute", "must be 1 to 1000000000"));
                }
                check_models("tools", &limit.tools, 0)?;
                if !limit.tools.is_empty() && limit.tokens_per_minute.is_some() {
                    return Err(error(
                        "tokens_per_minute",
                        "tool calls have no tokens: a limit with tools counts requests only",
                    ));
                }
                Ok(PolicyConfig::RateLimit {
                    requests_per_minute: limit.requests_per_minute,
                    tokens_per_minute: limit.tokens_per_minute,
                    per: limit.per,
                    tools: limit.tools,
                })
            }
            PolicyType::ToolAllowlist => {
                let ToolAllowlist { allowed_tools } = parse_as(value)?;
                check_models("allowed_tools", &allowed_tools, 1)?;
                Ok(PolicyConfig::ToolAllowlist { allowed_tools })
            }
            PolicyType::BlockTool => {
                let BlockedTools { tools } = parse_as(value)?;
                check_models("tools", &tools, 1)?;
                Ok(PolicyConfig::BlockTool { tools })
            }
            PolicyType::Guardrail => Ok(PolicyConfig::Guardrail(guardrail(value)?)),
        }
    }

    /// The normalised JSON form (defaults filled in), as stored and shown.
    pub fn to_json(&self) -> Value {
        match self {
            PolicyConfig::ModelAllowlist { allowed_models } => {
                json!({ "allowed_models": allowed_models })
            }
            PolicyConfig::BlockProvider { providers } => json!({ "providers": providers }),
            PolicyConfig::RequireApproval(matcher) | PolicyConfig::RequireHumanReview(matcher) => {
                let mut config = json!({
                    "models": matcher.models,
                    "providers": matcher.providers,
                    "environments": matcher.environments,
                });
                // Shown only when set: a model-request matcher reads as it always has.
                if !matcher.tools.is_empty() {
                    config["tools"] = json!(matcher.tools);
                }
                if matches!(self, PolicyConfig::RequireApproval(_)) {
                    config["releases"] = json!(matcher.releases());
                }
                config
            }
            PolicyConfig::ToolAllowlist { allowed_tools } => {
                json!({ "allowed_tools": allowed_tools })
            }
            PolicyConfig::BlockTool { tools } => json!({ "tools": tools }),
            PolicyConfig::Guardrail(guardrail) => json!({
                "action": guardrail.action,
                "detectors": guardrail.detectors,
                "patterns": guardrail.patterns,
            }),
            PolicyConfig::BudgetLimit {
                monthly_limit_micros,
                warn_threshold_pct,
                block_threshold_pct,
            } => json!({
                "monthly_limit_usd": micros_to_usd(*monthly_limit_micros),
                "warn_threshold_pct": warn_threshold_pct,
                "block_threshold_pct": block_threshold_pct,
            }),
            PolicyConfig::RateLimit {
                requests_per_minute,
                tokens_per_minute,
                per,
                tools,
            } => {
                let mut config = json!({
                    "requests_per_minute": requests_per_minute,
                    "tokens_per_minute": tokens_per_minute,
                    "per": per,
                });
                if !tools.is_empty() {
                    config["tools"] = json!(tools);
                }
                config
            }
        }
    }
}

/// Whether a policy of `policy_type` may have `scope`: a budget counts the spend of a
/// tenant, team or agent, and an environment has no spend of its own.
pub fn check_scope(policy_type: PolicyType, scope: &Scope) -> Result<(), ConfigError> {
    if policy_type == PolicyType::BudgetLimit && matches!(scope, Scope::Environment(_)) {
        return Err(ConfigError {
            field: "scope".to_owned(),
            message: "scope: a budget_limit policy applies to global, team: or agent: scopes"
                .to_owned(),
        });
    }
    Ok(())
}

fn matcher(value: &Value) -> Result<Matcher, ConfigError> {
    let mut matcher: Matcher = parse_as(value)?;
    check_models("models", &matcher.models, 0)?;
    check_models("tools", &matcher.tools, 0)?;
    let matches_models = !matcher.models.is_empty() || !matcher.providers.is_empty();
    if !matcher.tools.is_empty() && matches_models {
        return Err(error(
            "tools",
            "a matcher with tools matches tool calls: leave models and providers empty",
        ));
    }
    matcher.providers.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    matcher.providers.dedup();
    if let Some(bad) = matcher
        .environments
        .iter()
        .find(|e| Environment::parse(e).is_none())
    {
        return Err(error(
            "environments",
            format!("`{bad}` is not an environment (production, staging, dev)"),
        ));
    }
    Ok(matcher)
}

fn check_models(field: &str, models: &[String], at_least: usize) -> Result<(), ConfigError> {
    if models.len() < at_least || models.len() > MAX_MODELS {
        return Err(error(
            field,
            format!("must list {at_least} to {MAX_MODELS} names"),
        ));
    }
    for model in models {
        let name = model.strip_suffix('*').unwrap_or(model);
        if model.is_empty()
            || model.chars().count() > MAX_MODEL_CHARS
            || name.contains('*')
            || model.chars().any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(error(
                field,
                format!("`{model}` is not a name (or a prefix ending in `*`)"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
