//! Policies and the one evaluator both planes use: the proxy on every request, the
//! control plane's `POST /policies/evaluate` as a dry run. It is a pure function of the
//! policies, the request and the counters the caller read ([`Counters`]), so the two
//! reach the same decision for the same inputs by construction.
//!
//! **Scopes**: `global`, `team:<team_id>`, `agent:<agent_id>`, `environment:<name>`. A
//! policy whose scope does not cover the request is `skip`.
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
//!   `*` matches a prefix, `gpt-4o*`). Fails when the model is not listed.
//! - `block_provider`: `{providers: [provider, ...]}` (1 to 5). Fails when the request's
//!   provider is listed.
//! - `require_approval`: `{models?, providers?, environments?}`, each a list; a request
//!   matches when it matches every list given (an empty or absent list matches
//!   anything). A match needs a human approval (403 `approval_required`) unless one was
//!   granted for the agent, policy, provider and model.
//! - `budget_limit`: `{monthly_limit_usd: number > 0, warn_threshold_pct?: 1-100 (80),
//!   block_threshold_pct?: 1-200 (100)}`, counting the month's spend of the policy's
//!   scope (tenant for `global`; not allowed on `environment:` scopes). Fails once spend
//!   plus the request's estimate reaches the block threshold; warns from the warn
//!   threshold.
//! - `rate_limit`: `{requests_per_minute?: 1-1,000,000, tokens_per_minute?:
//!   1-1,000,000,000, per?: "agent" | "team" | "tenant" | "key" ("agent")}`, at least
//!   one limit. Fails when the current minute's count for the request's `per` bucket
//!   has reached a limit.
//! - `require_human_review`: `{models?, providers?, environments?}` as for approvals. A
//!   match is forwarded, but flagged for review (`pass` with a reason, `review: true`).

use std::cmp::Reverse;

use serde::{Deserialize, Serialize};

use crate::registry::Provider;

/// The six kinds of policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyType {
    ModelAllowlist,
    BlockProvider,
    RequireApproval,
    BudgetLimit,
    RateLimit,
    RequireHumanReview,
}

impl PolicyType {
    pub const fn as_str(self) -> &'static str {
        match self {
            PolicyType::ModelAllowlist => "model_allowlist",
            PolicyType::BlockProvider => "block_provider",
            PolicyType::RequireApproval => "require_approval",
            PolicyType::BudgetLimit => "budget_limit",
            PolicyType::RateLimit => "rate_limit",
            PolicyType::RequireHumanReview => "require_human_review",
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
            "environment" => Some(Scope::Environment(value)),
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
        match self {
            Scope::Global => true,
            Scope::Team(id) => request.team_id == Some(id.as_str()),
            Scope::Agent(id) => request.agent_id == id,
            Scope::Environment(name) => request.environment == name,
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
}

impl Matcher {
    fn matches(&self, request: &RequestFacts<'_>) -> bool {
        (self.models.is_empty() || self.models.iter().any(|m| model_matches(m, request.model)))
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
    },
    RequireHumanReview(Matcher),
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
    pub fn policy_type(&self) -> PolicyType {
        match self.config {
            PolicyConfig::ModelAllowlist { .. } => PolicyType::ModelAllowlist,
            PolicyConfig::BlockProvider { .. } => PolicyType::BlockProvider,
            PolicyConfig::RequireApproval(_) => PolicyType::RequireApproval,
            PolicyConfig::BudgetLimit { .. } => PolicyType::BudgetLimit,
            PolicyConfig::RateLimit { .. } => PolicyType::RateLimit,
            PolicyConfig::RequireHumanReview(_) => PolicyType::RequireHumanReview,
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

/// What the stateful policies need to know, read by the caller (the proxy from memory,
/// the dry run from the ledger) before evaluating.
pub trait Counters {
    /// This month's spend of a budget scope (`tenant`, `team:<id>`, `agent:<id>`).
    fn month_spend_micros(&self, budget_scope: &str) -> i64;
    /// Requests and tokens counted in the current minute for a policy's bucket.
    fn minute_counts(&self, policy_id: i64, bucket: &str) -> (i64, i64);
    /// Whether a human approved this agent's requests for the policy, provider and model.
    fn approval_granted(&self, policy_id: i64) -> bool;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Fail,
    Skip,
}

/// One policy's result, as evaluation records and the dry run show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyResult {
    pub policy_id: i64,
    pub policy_name: String,
    pub policy_type: PolicyType,
    pub result: Outcome,
    pub reason: Option<String>,
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

/// Sorts policies into evaluation order; do it once when they change, not per request.
pub fn sort_for_evaluation(policies: &mut [Policy]) {
    policies.sort_by_key(|policy| (Reverse(policy.priority), policy.id));
}

/// Decides `request` under `policies` (already in [`sort_for_evaluation`] order).
pub fn evaluate(
    policies: &[Policy],
    request: &RequestFacts<'_>,
    counters: &dyn Counters,
) -> Evaluation {
    let mut evaluation = Evaluation {
        decision: Decision::Allow,
        warnings: Vec::new(),
        review: false,
        results: Vec::with_capacity(policies.len()),
    };
    let mut approval: Option<i64> = None;
    for policy in policies {
        let (result, reason) = if policy.scope.covers(request) {
            check(policy, request, counters, &mut evaluation)
        } else {
            (
                Outcome::Skip,
                Some("the request is outside the policy's scope".to_owned()),
            )
        };
        if result == Outcome::Fail {
            match policy.config {
                PolicyConfig::RequireApproval(_) => {
                    approval.get_or_insert(policy.id);
                }
                _ => {
                    if evaluation.decision == Decision::Allow {
                        evaluation.decision = Decision::Refuse {
                            policy_id: policy.id,
                            policy_type: policy.policy_type(),
                        };
                    }
                }
            }
        }
        evaluation.results.push(PolicyResult {
            policy_id: policy.id,
            policy_name: policy.name.clone(),
            policy_type: policy.policy_type(),
            result,
            reason,
        });
    }
    if let (Decision::Allow, Some(policy_id)) = (&evaluation.decision, approval) {
        evaluation.decision = Decision::RequireApproval { policy_id };
    }
    evaluation
}

fn check(
    policy: &Policy,
    request: &RequestFacts<'_>,
    counters: &dyn Counters,
    evaluation: &mut Evaluation,
) -> (Outcome, Option<String>) {
    match &policy.config {
        PolicyConfig::ModelAllowlist { allowed_models } => {
            if allowed_models
                .iter()
                .any(|m| model_matches(m, request.model))
            {
                (Outcome::Pass, None)
            } else {
                fail(format!("model `{}` is not on the allowlist", request.model))
            }
        }
        PolicyConfig::BlockProvider { providers } => {
            if providers.contains(&request.provider) {
                fail(format!(
                    "provider `{}` is blocked",
                    request.provider.as_str()
                ))
            } else {
                (Outcome::Pass, None)
            }
        }
        PolicyConfig::RequireApproval(matcher) => {
            if !matcher.matches(request) {
                (Outcome::Skip, Some("the request does not match".to_owned()))
            } else if counters.approval_granted(policy.id) {
                (Outcome::Pass, Some("approved by a reviewer".to_owned()))
            } else {
                fail("requires human approval".to_owned())
            }
        }
        PolicyConfig::BudgetLimit {
            monthly_limit_micros,
            warn_threshold_pct,
            block_threshold_pct,
        } => {
            let scope = match &policy.scope {
                Scope::Team(id) => format!("team:{id}"),
                Scope::Agent(id) => format!("agent:{id}"),
                Scope::Global | Scope::Environment(_) => "tenant".to_owned(),
            };
            let spent = counters.month_spend_micros(&scope);
            let after = spent.saturating_add(request.estimated_cost_micros);
            let threshold = |pct: i64| i128::from(*monthly_limit_micros) * i128::from(pct) / 100;
            if i128::from(after) >= threshold(*block_threshold_pct) && after > 0 {
                fail(format!(
                    "spend this month has reached {block_threshold_pct}% of the budget"
                ))
            } else {
                if i128::from(after) >= threshold(*warn_threshold_pct) {
                    evaluation.warnings.push(policy.id);
                }
                (Outcome::Pass, None)
            }
        }
        PolicyConfig::RateLimit {
            requests_per_minute,
            tokens_per_minute,
            per,
        } => {
            let bucket = rate_bucket(*per, request);
            let (requests, tokens) = counters.minute_counts(policy.id, &bucket);
            if requests_per_minute.is_some_and(|limit| requests >= limit) {
                fail("requests per minute limit reached".to_owned())
            } else if tokens_per_minute.is_some_and(|limit| tokens >= limit) {
                fail("tokens per minute limit reached".to_owned())
            } else {
                (Outcome::Pass, None)
            }
        }
        PolicyConfig::RequireHumanReview(matcher) => {
            if matcher.matches(request) {
                evaluation.review = true;
                (Outcome::Pass, Some("flagged for human review".to_owned()))
            } else {
                (Outcome::Skip, Some("the request does not match".to_owned()))
            }
        }
    }
}

fn fail(reason: String) -> (Outcome, Option<String>) {
    (Outcome::Fail, Some(reason))
}

/// The bucket a rate limit counts the request in.
pub fn rate_bucket(per: RatePer, request: &RequestFacts<'_>) -> String {
    match per {
        RatePer::Agent => format!("agent:{}", request.agent_id),
        RatePer::Team => format!("team:{}", request.team_id.unwrap_or("")),
        RatePer::Tenant => "tenant".to_owned(),
        RatePer::Key => format!("key:{}", request.api_key_id.unwrap_or("")),
    }
}

/// `pattern` is a model name, or a prefix ending in `*`.
pub fn model_matches(pattern: &str, model: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => model.starts_with(prefix),
        None => pattern == model,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Fixed {
        spend: i64,
        requests: i64,
        approved: bool,
    }

    impl Counters for Fixed {
        fn month_spend_micros(&self, _: &str) -> i64 {
            self.spend
        }
        fn minute_counts(&self, _: i64, _: &str) -> (i64, i64) {
            (self.requests, 0)
        }
        fn approval_granted(&self, _: i64) -> bool {
            self.approved
        }
    }

    fn request(model: &str) -> RequestFacts<'_> {
        RequestFacts {
            tenant_id: "ten_1",
            agent_id: "agt_1",
            team_id: Some("tm_1"),
            environment: "production",
            api_key_id: Some("ak_1"),
            provider: Provider::Openai,
            model,
            estimated_cost_micros: 100,
        }
    }

    fn policy(id: i64, priority: i64, scope: Scope, config: PolicyConfig) -> Policy {
        Policy {
            id,
            name: format!("p{id}"),
            scope,
            priority,
            config,
        }
    }

    #[test]
    fn refusals_win_over_approvals_and_priority_picks_the_reason() {
        let mut policies = vec![
            policy(
                1,
                1,
                Scope::Global,
                PolicyConfig::RequireApproval(Matcher::default()),
            ),
            policy(
                2,
                5,
                Scope::Global,
                PolicyConfig::ModelAllowlist {
                    allowed_models: vec!["gpt-4o*".into()],
                },
            ),
            policy(
                3,
                9,
                Scope::Team("tm_1".into()),
                PolicyConfig::BlockProvider {
                    providers: vec![Provider::Openai],
                },
            ),
            policy(
                4,
                9,
                Scope::Agent("agt_other".into()),
                PolicyConfig::BlockProvider {
                    providers: vec![Provider::Openai],
                },
            ),
        ];
        sort_for_evaluation(&mut policies);
        let order: Vec<i64> = policies.iter().map(|p| p.id).collect();
        assert_eq!(order, [3, 4, 2, 1]);
        let evaluation = evaluate(&policies, &request("o3"), &Fixed::default());
        assert_eq!(
            evaluation.decision,
            Decision::Refuse {
                policy_id: 3,
                policy_type: PolicyType::BlockProvider
            }
        );
        let results: Vec<Outcome> = evaluation.results.iter().map(|r| r.result).collect();
        assert_eq!(
            results,
            [Outcome::Fail, Outcome::Skip, Outcome::Fail, Outcome::Fail]
        );
        // Without the refusals, the approval is what is left.
        let approval_only = &policies[3..];
        let evaluation = evaluate(approval_only, &request("o3"), &Fixed::default());
        assert_eq!(
            evaluation.decision,
            Decision::RequireApproval { policy_id: 1 }
        );
        let granted = Fixed {
            approved: true,
            ..Fixed::default()
        };
        assert_eq!(
            evaluate(approval_only, &request("o3"), &granted).decision,
            Decision::Allow
        );
    }

    #[test]
    fn budgets_warn_then_block_and_rate_limits_count_per_bucket() {
        let budget = [policy(
            7,
            0,
            Scope::Global,
            PolicyConfig::BudgetLimit {
                monthly_limit_micros: 1_000,
                warn_threshold_pct: 80,
                block_threshold_pct: 100,
            },
        )];
        let at = |spend| {
            evaluate(
                &budget,
                &request("gpt-4o"),
                &Fixed {
                    spend,
                    ..Fixed::default()
                },
            )
        };
        assert_eq!(at(500).decision, Decision::Allow);
        assert!(at(500).warnings.is_empty());
        assert_eq!(at(750).warnings, [7]);
        assert!(matches!(
            at(900).decision,
            Decision::Refuse { policy_id: 7, .. }
        ));
        let limit = [policy(
            8,
            0,
            Scope::Global,
            PolicyConfig::RateLimit {
                requests_per_minute: Some(10),
                tokens_per_minute: None,
                per: RatePer::Key,
            },
        )];
        let with = |requests| Fixed {
            requests,
            ..Fixed::default()
        };
        assert_eq!(
            evaluate(&limit, &request("gpt-4o"), &with(9)).decision,
            Decision::Allow
        );
        assert!(matches!(
            evaluate(&limit, &request("gpt-4o"), &with(10)).decision,
            Decision::Refuse { policy_id: 8, .. }
        ));
        assert_eq!(rate_bucket(RatePer::Key, &request("x")), "key:ak_1");
    }

    #[test]
    fn review_flags_without_blocking_and_scopes_parse_back() {
        let review = [policy(
            9,
            0,
            Scope::Environment("production".into()),
            PolicyConfig::RequireHumanReview(Matcher {
                providers: vec![Provider::Openai],
                ..Matcher::default()
            }),
        )];
        let evaluation = evaluate(&review, &request("gpt-4o"), &Fixed::default());
        assert_eq!(evaluation.decision, Decision::Allow);
        assert!(evaluation.review);
        for text in ["global", "team:tm_1", "agent:agt_1", "environment:staging"] {
            assert_eq!(
                Scope::parse(text).map(|s| s.render()).as_deref(),
                Some(text)
            );
        }
        for bad in ["", "team:", "squad:x", "global:x"] {
            assert_eq!(Scope::parse(bad), None, "{bad}");
        }
    }
}
