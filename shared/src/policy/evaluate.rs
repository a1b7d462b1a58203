//! The evaluator itself: order, per-policy checks and the resulting decision (the rules
//! are in the parent module's documentation).

use std::cmp::Reverse;

use super::*;
use crate::budget::{Thresholds, Verdict};

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
                Some(Cow::Borrowed("the request is outside the policy's scope")),
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
) -> (Outcome, Option<Cow<'static, str>>) {
    if let Some(reason) = not_for_this_kind(&policy.config, request) {
        return (Outcome::Skip, Some(Cow::Borrowed(reason)));
    }
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
                (
                    Outcome::Skip,
                    Some(Cow::Borrowed("the request does not match")),
                )
            } else if counters.approval_granted(policy.id) {
                (Outcome::Pass, Some(Cow::Borrowed("approved by a reviewer")))
            } else {
                fail("requires human approval")
            }
        }
        PolicyConfig::BudgetLimit {
            monthly_limit_micros,
            warn_threshold_pct,
            block_threshold_pct,
        } => {
            let spent = counters.month_spend_micros(&policy.scope);
            let thresholds = Thresholds::new(
                *monthly_limit_micros,
                *warn_threshold_pct,
                *block_threshold_pct,
            );
            match thresholds.verdict(spent, request.estimated_cost_micros) {
                Verdict::Block => fail(format!(
                    "spend this month has reached {block_threshold_pct}% of the budget, or \
                     the request's estimated cost does not fit below it"
                )),
                Verdict::Warn => {
                    evaluation.warnings.push(policy.id);
                    (Outcome::Pass, None)
                }
                Verdict::Within => (Outcome::Pass, None),
            }
        }
        PolicyConfig::RateLimit {
            requests_per_minute,
            tokens_per_minute,
            per,
            ..
        } => {
            let counts = counters.minute_counts(policy.id, *per);
            match minute_limit_reached(counts, *requests_per_minute, *tokens_per_minute) {
                Some(reason) => fail(reason),
                None => (Outcome::Pass, None),
            }
        }
        PolicyConfig::ToolAllowlist { allowed_tools } => {
            if tools_match(allowed_tools, request) {
                (Outcome::Pass, None)
            } else {
                fail(format!("tool `{}` is not on the allowlist", request.model))
            }
        }
        PolicyConfig::BlockTool { tools } => {
            if tools_match(tools, request) {
                fail(format!("tool `{}` is blocked", request.model))
            } else {
                (Outcome::Pass, None)
            }
        }
        PolicyConfig::Guardrail(guardrail) => match counters.guardrail(policy.id, guardrail) {
            GuardrailVerdict::NotScanned => {
                (Outcome::Skip, Some(Cow::Borrowed("no content to scan")))
            }
            GuardrailVerdict::Clean => (Outcome::Pass, None),
            GuardrailVerdict::Found(hits) => {
                let found = found_summary(&hits);
                match guardrail.action {
                    GuardrailAction::Block => fail(found),
                    GuardrailAction::Redact => {
                        (Outcome::Pass, Some(format!("redacted {found}").into()))
                    }
                    GuardrailAction::Flag => {
                        (Outcome::Pass, Some(format!("flagged {found}").into()))
                    }
                }
            }
            GuardrailVerdict::Failed(why) => fail(format!(
                "the guardrail could not scan the request ({why}), so it is refused"
            )),
        },
        PolicyConfig::RequireHumanReview(matcher) => {
            if matcher.matches(request) {
                evaluation.review = true;
                (
                    Outcome::Pass,
                    Some(Cow::Borrowed("flagged for human review")),
                )
            } else {
                (
                    Outcome::Skip,
                    Some(Cow::Borrowed("the request does not match")),
                )
            }
        }
    }
}

/// Why `config` does not apply to a request of this kind (a tool call or a model
/// request), if it does not; the module documentation has the rules.
fn not_for_this_kind(config: &PolicyConfig, request: &RequestFacts<'_>) -> Option<&'static str> {
    const MODEL_ONLY: &str = "the policy applies to model requests, not tool calls";
    const TOOLS_ONLY: &str = "the policy applies to tool calls";
    const NOT_LISTED: &str = "the tool call is not among the policy's tools";
    let tool_call = request.is_tool_call();
    match config {
        PolicyConfig::ModelAllowlist { .. }
        | PolicyConfig::BlockProvider { .. }
        | PolicyConfig::BudgetLimit { .. } => tool_call.then_some(MODEL_ONLY),
        PolicyConfig::ToolAllowlist { .. } | PolicyConfig::BlockTool { .. } => {
            (!tool_call).then_some(TOOLS_ONLY)
        }
        PolicyConfig::RateLimit { tools, .. } => match (tools.is_empty(), tool_call) {
            (true, true) => Some(MODEL_ONLY),
            (false, false) => Some(TOOLS_ONLY),
            (false, true) if !tools_match(tools, request) => Some(NOT_LISTED),
            _ => None,
        },
        // Their matchers tell tool calls from model requests; guardrails scan both.
        PolicyConfig::RequireApproval(_)
        | PolicyConfig::RequireHumanReview(_)
        | PolicyConfig::Guardrail(_) => None,
    }
}

/// Why a request may not start in a minute whose earlier requests counted `(requests,
/// tokens)`, under these per-minute limits; `None` when it may. The one rule of rate
/// limits, for `rate_limit` policies and proxy keys' own limits alike.
pub fn minute_limit_reached(
    (requests, tokens): (i64, i64),
    requests_per_minute: Option<i64>,
    tokens_per_minute: Option<i64>,
) -> Option<&'static str> {
    if requests_per_minute.is_some_and(|limit| requests >= limit) {
        Some("requests per minute limit reached")
    } else if tokens_per_minute.is_some_and(|limit| tokens >= limit) {
        Some("tokens per minute limit reached")
    } else {
        None
    }
}

/// What a guardrail found, by detector and field (never the text): `email at
/// messages[0].content, openai_key in the name of metadata.*` (the first five).
pub fn found_summary(hits: &[crate::guardrail::Hit]) -> String {
    let mut parts: Vec<String> = hits
        .iter()
        .take(5)
        .map(|hit| {
            let place = if hit.in_name { "in the name of" } else { "at" };
            format!("{} {place} {}", hit.detector, hit.path)
        })
        .collect();
    if hits.len() > 5 {
        parts.push(format!("and {} more", hits.len() - 5));
    }
    parts.join(", ")
}

fn fail(reason: impl Into<Cow<'static, str>>) -> (Outcome, Option<Cow<'static, str>>) {
    (Outcome::Fail, Some(reason.into()))
}

/// The spend a budget policy of `scope` counts: `tenant`, `team:<id>` or `agent:<id>`.
pub fn budget_scope(scope: &Scope) -> String {
    match scope {
        Scope::Team(id) => crate::budget::team_scope(id),
        Scope::Agent(id) => crate::budget::agent_scope(id),
        Scope::Global | Scope::Environment(_) => crate::budget::TENANT_SCOPE.to_owned(),
    }
}

/// The bucket a rate limit counts the request in: `agent:<id>`, `team:<id>`, `tenant` or
/// `key:<id>` (a request without a team or key counts in `team:` or `key:`).
pub fn rate_bucket(per: RatePer, request: &RequestFacts<'_>) -> String {
    let kind = match per {
        RatePer::Agent => "agent",
        RatePer::Team => "team",
        RatePer::Tenant => return "tenant".to_owned(),
        RatePer::Key => "key",
    };
    format!("{kind}:{}", rate_bucket_id(per, request))
}

/// The id in the request's [`rate_bucket`] for `per` (empty for `tenant`). A policy
/// counts per one kind, so within one policy the id alone names the bucket: the proxy
/// counts by it without building the name.
pub fn rate_bucket_id<'r>(per: RatePer, request: &RequestFacts<'r>) -> &'r str {
    match per {
        RatePer::Agent => request.agent_id,
        RatePer::Team => request.team_id.unwrap_or(""),
        RatePer::Tenant => "",
        RatePer::Key => request.api_key_id.unwrap_or(""),
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
        fn month_spend_micros(&self, _: &Scope) -> i64 {
            self.spend
        }
        fn minute_counts(&self, _: i64, _: RatePer) -> (i64, i64) {
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
        assert_eq!(at(900).decision, Decision::Allow);
        assert!(matches!(
            at(901).decision,
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
                tools: Vec::new(),
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

    /// A tool call through the MCP gateway, to `tool` (`<server>__<tool>`).
    fn tool_call(tool: &str) -> RequestFacts<'_> {
        RequestFacts {
            provider: Provider::Mcp,
            estimated_cost_micros: 0,
            ..request(tool)
        }
    }

    #[test]
    fn tool_policies_decide_tool_calls_and_model_policies_model_requests() {
        let policies = [
            policy(
                1,
                9,
                Scope::Global,
                PolicyConfig::ToolAllowlist {
                    allowed_tools: vec!["docs__*".into(), "github__create_issue".into()],
                },
            ),
            policy(
                2,
                8,
                Scope::Global,
                PolicyConfig::BlockTool {
                    tools: vec!["docs__delete*".into()],
                },
            ),
            policy(
                3,
                7,
                Scope::Global,
                PolicyConfig::ModelAllowlist {
                    allowed_models: vec!["gpt-4o".into()],
                },
            ),
            policy(
                4,
                6,
                Scope::Global,
                PolicyConfig::RequireApproval(Matcher {
                    tools: vec!["github__create_issue".into()],
                    ..Matcher::default()
                }),
            ),
            policy(
                5,
                5,
                Scope::Global,
                PolicyConfig::RateLimit {
                    requests_per_minute: Some(2),
                    tokens_per_minute: None,
                    per: RatePer::Agent,
                    tools: vec!["docs__search".into()],
                },
            ),
        ];
        let decide = |facts: RequestFacts<'_>, requests| {
            evaluate(
                &policies,
                &facts,
                &Fixed {
                    requests,
                    ..Fixed::default()
                },
            )
            .decision
        };
        // The model allowlist does not refuse tools, nor tool policies models.
        assert_eq!(decide(tool_call("docs__search"), 0), Decision::Allow);
        assert_eq!(decide(request("gpt-4o"), 9), Decision::Allow);
        assert!(matches!(
            decide(request("o3"), 0),
            Decision::Refuse { policy_id: 3, .. }
        ));
        assert!(matches!(
            decide(tool_call("github__delete_repo"), 0),
            Decision::Refuse { policy_id: 1, .. }
        ));
        assert!(matches!(
            decide(tool_call("docs__delete_page"), 0),
            Decision::Refuse { policy_id: 2, .. }
        ));
        assert_eq!(
            decide(tool_call("github__create_issue"), 0),
            Decision::RequireApproval { policy_id: 4 }
        );
        // The rate limit counts its tool only.
        assert!(matches!(
            decide(tool_call("docs__search"), 2),
            Decision::Refuse { policy_id: 5, .. }
        ));
        assert_eq!(decide(tool_call("docs__read"), 2), Decision::Allow);
        // An approval matcher without tools holds model requests, not tool calls.
        let model_approval = [policy(
            6,
            0,
            Scope::Global,
            PolicyConfig::RequireApproval(Matcher::default()),
        )];
        let fixed = Fixed::default();
        assert_eq!(
            evaluate(&model_approval, &tool_call("docs__read"), &fixed).decision,
            Decision::Allow
        );
        assert_eq!(
            evaluate(&model_approval, &request("gpt-4o"), &fixed).decision,
            Decision::RequireApproval { policy_id: 6 }
        );
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
