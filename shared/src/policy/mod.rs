//! Policies and the one evaluator both planes use: the proxy on every request, the
//! control plane's `POST /policies/evaluate` as a dry run. It is a pure function of the
//! policies, the request and the counters the caller read ([`Counters`]), so the two
//! reach the same decision for the same inputs by construction.
//!
//! **Scopes**: `global`, `team:<team_id>`, `agent:<agent_id>`, `environment:<name>`
//! (`production`, `staging`, `dev`). A policy whose scope does not cover the request is
//! `skip`.
//!
//! **Order and conflicts**: enabled policies are evaluated in descending `priority`
//! (ties: lower id first), and every one is recorded. Policies never cancel each other:
//! a request must pass every policy that covers it. Refusals (allowlist, blocked
//! provider, budget, rate limit) win over an approval requirement, since approving a
//! request that would be refused anyway helps nobody; among refusals, and among approval
//! requirements, the highest-priority one is the decision that is reported.
//!
//! **Config shapes** (`config` of each `policy_type`; unknown fields are refused):
//! - `model_allowlist`: `{allowed_models: [string, ...]}` (1 to 500 names; a trailing
//!   `*` matches a prefix, `gpt-4o*`). Fails when the model is not listed. The model is
//!   the one the client asked for.
//! - `block_provider`: `{providers: [provider, ...]}` (1 to 5). Fails when the request's
//!   provider is listed.
//! - `require_approval`: `{models?, providers?, environments?}`, each a list (models as
//!   for the allowlist, at most 500; environments among `production`, `staging`, `dev`); a request
//!   matches when it matches every list given (an empty or absent list matches
//!   anything). A match needs a human approval (403 `approval_required`) unless one was
//!   granted for the agent, policy, provider and model.
//! - `budget_limit`: `{monthly_limit_usd: 0-999999, warn_threshold_pct?: 1-100 (80),
//!   block_threshold_pct?: 1-200 (100)}`, counting the month's spend of the policy's
//!   scope (tenant for `global`; not allowed on `environment:` scopes). Fails once the
//!   spend reached the block threshold or the request's estimate does not fit below it;
//!   warns from the warn threshold (`crate::budget::Thresholds::verdict`, the rule
//!   `/budget/limits` share).
//! - `rate_limit`: `{requests_per_minute?: 1-1,000,000, tokens_per_minute?:
//!   1-1,000,000,000, per?: "agent" | "team" | "tenant" | "key" ("agent")}`, at least
//!   one limit. Fails when the current minute's count for the request's `per` bucket
//!   has reached a limit.
//! - `require_human_review`: `{models?, providers?, environments?}` as for approvals. A
//!   match is forwarded, but flagged for review (`pass` with a reason, `review: true`).
//! - `tool_allowlist`: `{allowed_tools: [string, ...]}` (1 to 500 tool names as agents
//!   see them, `<server>__<tool>`; a trailing `*` matches a prefix, `github__*` a whole
//!   server). Fails when a tool call's tool is not listed.
//! - `block_tool`: `{tools: [string, ...]}` (1 to 500, patterns as above). Fails when a
//!   tool call's tool is listed.
//!
//! **Tool calls** (the MCP gateway) are decided by the same evaluator, as requests to
//! provider `mcp` whose model is the prefixed tool name. `tool_allowlist` and
//! `block_tool` apply to tool calls only; `model_allowlist`, `block_provider` and
//! `budget_limit` to model requests only (a tool call has no model and no cost). A
//! `require_approval`, `require_human_review` or `rate_limit` policy with `tools`
//! (patterns as above; `models` and `providers` then must be empty, and a rate limit
//! counts requests only) applies to the tool calls it lists; without `tools`, to model
//! requests only, as before tools existed.

use std::borrow::Cow;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::registry::{Environment, Provider};
use crate::snapshot::PolicyState;

mod config;
mod evaluate;

pub use config::{check_scope, ConfigError, MAX_MODELS, MAX_MONTHLY_LIMIT_USD};
pub use evaluate::{
    budget_scope, evaluate, found_summary, minute_limit_reached, model_matches, rate_bucket,
    rate_bucket_id, sort_for_evaluation,
};

/// The kinds of policy: the spec's six, the MCP gateway's two, and guardrails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyType {
    ModelAllowlist,
    BlockProvider,
    RequireApproval,
    BudgetLimit,
    RateLimit,
    RequireHumanReview,
    ToolAllowlist,
    BlockTool,
    Guardrail,
}

impl PolicyType {
    pub const ALL: [PolicyType; 9] = [
        PolicyType::ModelAllowlist,
        PolicyType::BlockProvider,
        PolicyType::RequireApproval,
        PolicyType::BudgetLimit,
        PolicyType::RateLimit,
        PolicyType::RequireHumanReview,
        PolicyType::ToolAllowlist,
        PolicyType::BlockTool,
        PolicyType::Guardrail,
    ];

    pub fn parse(text: &str) -> Option<PolicyType> {
        PolicyType::ALL.into_iter().find(|t| t.as_str() == text)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            PolicyType::ModelAllowlist => "model_allowlist",
            PolicyType::BlockProvider => "block_provider",
            PolicyType::RequireApproval => "require_approval",
            PolicyType::BudgetLimit => "budget_limit",
            PolicyType::RateLimit => "rate_limit",
            PolicyType::RequireHumanReview => "require_human_review",
            PolicyType::ToolAllowlist => "tool_allowlist",
            PolicyType::BlockTool => "block_tool",
            PolicyType::Guardrail => "guardrail",
        }
    }
}

/// What a policy covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    Global,
    Team(String),
    Agent(String),
    Environment(String),
}

impl Scope {
    /// Parses `global`, `team:<id>`, `agent:<id>` or `environment:<name>`.
    pub fn parse(text: &str) -> Option<Scope> {
        if text == "global" {
            return Some(Scope::Global);
        }
        let (kind, value) = text.split_once(':')?;
        if value.is_empty() || value.len() > 100 {
            return None;
        }
        let value = value.to_owned();
        match kind {
            "team" => Some(Scope::Team(value)),
            "agent" => Some(Scope::Agent(value)),
            "environment" if Environment::parse(&value).is_some() => {
                Some(Scope::Environment(value))
            }
            _ => None,
        }
    }

    pub fn render(&self) -> String {
        match self {
            Scope::Global => "global".to_owned(),
            Scope::Team(id) => format!("team:{id}"),
            Scope::Agent(id) => format!("agent:{id}"),
            Scope::Environment(name) => format!("environment:{name}"),
        }
    }

    fn covers(&self, request: &RequestFacts<'_>) -> bool {
        self.covers_agent(request.agent_id, request.team_id, request.environment)
    }

    /// Whether the scope covers an agent with this id, team and environment: what a
    /// policy applies to, for a request or for a report about the agent.
    pub fn covers_agent(&self, agent_id: &str, team_id: Option<&str>, environment: &str) -> bool {
        match self {
            Scope::Global => true,
            Scope::Team(id) => team_id == Some(id.as_str()),
            Scope::Agent(id) => agent_id == id,
            Scope::Environment(name) => environment == name,
        }
    }
}

/// Which requests an approval or review policy matches: every list given must contain
/// the request's value (an empty list matches anything).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matcher {
    #[serde(default)]
    pub models: Vec<String>,
    #[serde(default)]
    pub providers: Vec<Provider>,
    #[serde(default)]
    pub environments: Vec<String>,
    /// Tool-name patterns: a matcher with tools matches tool calls only, one without
    /// them model requests only.
    #[serde(default)]
    pub tools: Vec<String>,
    /// What a reviewer's approval lets through (`require_approval` only); unset: the
    /// default for what the matcher matches ([`Matcher::releases`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub releases: Option<Releases>,
}

/// What an approval of a held request lets through afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Releases {
    /// The very action that was held (the same digest), once: the default for tool
    /// calls, where the arguments are the action.
    Action,
    /// The very action that was held, as often as it comes until the approval expires.
    ActionRepeatable,
    /// The agent's requests under the policy to that provider and model (or that
    /// tool), whatever they carry, until the approval expires: the default for model
    /// requests.
    #[default]
    Scope,
}

impl Releases {
    pub fn as_str(self) -> &'static str {
        match self {
            Releases::Action => "action",
            Releases::ActionRepeatable => "action_repeatable",
            Releases::Scope => "scope",
        }
    }

    pub fn parse(value: &str) -> Option<Releases> {
        match value {
            "action" => Some(Releases::Action),
            "action_repeatable" => Some(Releases::ActionRepeatable),
            "scope" => Some(Releases::Scope),
            _ => None,
        }
    }

    /// Whether the approval is bound to the held action's digest.
    pub fn is_bound_to_action(self) -> bool {
        self != Releases::Scope
    }
}

impl Matcher {
    /// What an approval under this matcher releases: as set, else the very action once
    /// for tool calls and the scope for model requests.
    pub fn releases(&self) -> Releases {
        self.releases.unwrap_or(if self.tools.is_empty() {
            Releases::Scope
        } else {
            Releases::Action
        })
    }

    fn matches(&self, request: &RequestFacts<'_>) -> bool {
        if request.is_tool_call() {
            return tools_match(&self.tools, request)
                && (self.environments.is_empty()
                    || self.environments.iter().any(|e| e == request.environment));
        }
        self.tools.is_empty()
            && (self.models.is_empty()
                || self.models.iter().any(|m| model_matches(m, request.model)))
            && (self.providers.is_empty() || self.providers.contains(&request.provider))
            && (self.environments.is_empty()
                || self.environments.iter().any(|e| e == request.environment))
    }
}

/// Who a rate limit counts per.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RatePer {
    #[default]
    Agent,
    Team,
    Tenant,
    Key,
}

/// A policy's `config`, by type.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyConfig {
    ModelAllowlist {
        allowed_models: Vec<String>,
    },
    BlockProvider {
        providers: Vec<Provider>,
    },
    RequireApproval(Matcher),
    BudgetLimit {
        monthly_limit_micros: i64,
        warn_threshold_pct: i64,
        block_threshold_pct: i64,
    },
    RateLimit {
        requests_per_minute: Option<i64>,
        tokens_per_minute: Option<i64>,
        per: RatePer,
        /// Tool-name patterns: with them the limit counts the tool calls they match,
        /// without them model requests.
        tools: Vec<String>,
    },
    RequireHumanReview(Matcher),
    ToolAllowlist {
        allowed_tools: Vec<String>,
    },
    BlockTool {
        tools: Vec<String>,
    },
    Guardrail(Guardrail),
}

/// What a guardrail does with what it finds in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardrailAction {
    /// Refused: 403 `guardrail_violation`, naming the detector and the field.
    #[default]
    Block,
    /// Each finding replaced by `[REDACTED:<detector>]` before the request is sent.
    Redact,
    /// Sent as it is; the finding is recorded with the decision.
    Flag,
}

/// A tenant's own pattern in a guardrail, with the limits of payload capture's rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardrailPattern {
    pub id: String,
    pub pattern: String,
}

/// A `guardrail` policy: its detectors compiled once, when the policy is read.
#[derive(Clone)]
pub struct Guardrail {
    pub action: GuardrailAction,
    pub detectors: Vec<crate::guardrail::Detector>,
    pub patterns: Vec<GuardrailPattern>,
    pub scanner: Arc<crate::guardrail::Scanner>,
}

impl PartialEq for Guardrail {
    fn eq(&self, other: &Guardrail) -> bool {
        // The scanner is compiled from the rest.
        (self.action, &self.detectors, &self.patterns)
            == (other.action, &other.detectors, &other.patterns)
    }
}

impl std::fmt::Debug for Guardrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guardrail")
            .field("action", &self.action)
            .field("detectors", &self.detectors)
            .field("patterns", &self.patterns)
            .finish_non_exhaustive()
    }
}

/// A guardrail's verdict on a request's content (see [`Counters::guardrail`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardrailVerdict {
    /// There is no content to scan (a dry run without one, a tool listing).
    NotScanned,
    Clean,
    /// What was found: detector and field, never the text.
    Found(Vec<crate::guardrail::Hit>),
    /// The scan failed (its deadline passed): the request is refused.
    Failed(String),
}

impl PolicyConfig {
    /// The providers the config names (blocked, or matched by an approval or review).
    pub fn providers(&self) -> &[Provider] {
        match self {
            PolicyConfig::BlockProvider { providers } => providers,
            PolicyConfig::RequireApproval(matcher) | PolicyConfig::RequireHumanReview(matcher) => {
                &matcher.providers
            }
            PolicyConfig::ModelAllowlist { .. }
            | PolicyConfig::BudgetLimit { .. }
            | PolicyConfig::RateLimit { .. }
            | PolicyConfig::ToolAllowlist { .. }
            | PolicyConfig::BlockTool { .. }
            | PolicyConfig::Guardrail(_) => &[],
        }
    }
}

/// An enabled policy as the evaluator sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub id: i64,
    pub name: String,
    pub scope: Scope,
    pub priority: i64,
    pub config: PolicyConfig,
}

impl Policy {
    /// The evaluator's form of a policy as the state stream (or the store) holds it,
    /// checked with the same rules the control plane wrote it with.
    pub fn from_state(state: &PolicyState) -> Result<Policy, ConfigError> {
        let scope = Scope::parse(&state.scope).ok_or_else(|| ConfigError {
            field: "scope".to_owned(),
            message: format!("scope: `{}` is not a scope", state.scope),
        })?;
        Ok(Policy {
            id: state.id,
            name: state.name.clone(),
            scope,
            priority: state.priority,
            config: PolicyConfig::from_json(state.policy_type, &state.config)?,
        })
    }

    pub fn policy_type(&self) -> PolicyType {
        match self.config {
            PolicyConfig::ModelAllowlist { .. } => PolicyType::ModelAllowlist,
            PolicyConfig::BlockProvider { .. } => PolicyType::BlockProvider,
            PolicyConfig::RequireApproval(_) => PolicyType::RequireApproval,
            PolicyConfig::BudgetLimit { .. } => PolicyType::BudgetLimit,
            PolicyConfig::RateLimit { .. } => PolicyType::RateLimit,
            PolicyConfig::RequireHumanReview(_) => PolicyType::RequireHumanReview,
            PolicyConfig::ToolAllowlist { .. } => PolicyType::ToolAllowlist,
            PolicyConfig::BlockTool { .. } => PolicyType::BlockTool,
            PolicyConfig::Guardrail(_) => PolicyType::Guardrail,
        }
    }
}

/// The request being decided.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    pub tenant_id: &'a str,
    pub agent_id: &'a str,
    pub team_id: Option<&'a str>,
    pub environment: &'a str,
    pub api_key_id: Option<&'a str>,
    pub provider: Provider,
    pub model: &'a str,
    /// The request's estimated cost (0 for a dry run without a body).
    pub estimated_cost_micros: i64,
}

impl RequestFacts<'_> {
    /// A tool call through the MCP gateway: provider `mcp`, the model its tool's name.
    pub fn is_tool_call(&self) -> bool {
        self.provider == Provider::Mcp
    }
}

/// Whether a tool call's tool is among `patterns` (none: it is not).
fn tools_match(patterns: &[String], request: &RequestFacts<'_>) -> bool {
    patterns.iter().any(|p| model_matches(p, request.model))
}

/// What the stateful policies need to know, read by the caller (the proxy from memory,
/// the dry run from the ledger) before evaluating.
pub trait Counters {
    /// This month's spend of a budget policy's scope (`budget_scope` names it).
    fn month_spend_micros(&self, scope: &Scope) -> i64;
    /// Requests and tokens counted in the current minute for a rate-limit policy, in the
    /// request's bucket for `per` (`rate_bucket` names it).
    fn minute_counts(&self, policy_id: i64, per: RatePer) -> (i64, i64);
    /// Whether a human approved this agent's requests for the policy, provider and model.
    fn approval_granted(&self, policy_id: i64) -> bool;
    /// What a guardrail policy finds in the request's content (and, for `redact`, has
    /// replaced in it). Without content: [`GuardrailVerdict::NotScanned`].
    fn guardrail(&self, _policy_id: i64, _guardrail: &Guardrail) -> GuardrailVerdict {
        GuardrailVerdict::NotScanned
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Fail,
    Skip,
}

impl Outcome {
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Skip => "skip",
        }
    }
}

/// One policy's result, as evaluation records and the dry run show it (with the
/// policy's name, which the caller has: results are in the policies' order).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PolicyResult {
    pub policy_id: i64,
    pub policy_type: PolicyType,
    pub result: Outcome,
    /// Fixed text for passes and skips; a formatted one only for failures (rare).
    pub reason: Option<Cow<'static, str>>,
}

/// What the proxy does with the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Refused by this policy (the highest-priority refusal).
    Refuse {
        policy_id: i64,
        policy_type: PolicyType,
    },
    /// Needs a human approval under this policy.
    RequireApproval {
        policy_id: i64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    pub decision: Decision,
    /// Budget policies whose warn threshold the request reached.
    pub warnings: Vec<i64>,
    /// Whether a `require_human_review` policy flagged the request.
    pub review: bool,
    /// Every enabled policy's result, in evaluation order.
    pub results: Vec<PolicyResult>,
}
