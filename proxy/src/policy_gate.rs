//! Policies on the request path: the tenant's enabled policies, evaluated by the shared
//! evaluator (`warden_shared::policy`) with counters read from this proxy's memory, and
//! the decision reported to the control plane afterwards (`crate::decisions`).

use std::cell::RefCell;

use serde_json::json;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::policy::{
    budget_scope, evaluate, rate_bucket, Counters, Decision, Outcome, Policy, PolicyConfig,
    PolicyResult, PolicyType, RatePer, RequestFacts, Scope,
};
use warden_shared::timestamp::Timestamp;

use crate::admission::Admitted;
use crate::budget::{BudgetRule, RuleSource};
use crate::decisions::{ApprovalAsk, DecisionReport, EvaluationReport};
use crate::rate_limit::{minute_of, retry_after_secs, RateWindows};
use crate::refusal::Refusal;
use crate::service::ProxyService;
use crate::state::{EnforcementState, KeyView};

/// What an admitted request owes the policies: the budgets of the `budget_limit`
/// policies it passed, which `crate::budget` must hold it to atomically (the evaluator
/// only read the spend), and, when it ends, its tokens to the rate windows that counted
/// it.
#[derive(Debug, Default)]
pub struct PolicyPass {
    pub budget_rules: Vec<BudgetRule>,
    counted: Vec<(i64, String)>,
    minute: i64,
}

impl PolicyPass {
    pub fn add_tokens(&self, rates: &RateWindows, tokens: i64) {
        for (policy_id, bucket) in &self.counted {
            rates.add_tokens(*policy_id, bucket, self.minute, tokens);
        }
    }

    /// The request was refused after the policies let it through (a budget had no room
    /// for it): the rate windows give back the request they counted.
    pub fn give_back(&self, rates: &RateWindows) {
        for (policy_id, bucket) in &self.counted {
            rates.uncount_request(*policy_id, bucket, self.minute);
        }
    }
}

/// Evaluates the tenant's policies for an admitted request. `Ok` lets it through.
pub fn check(
    service: &ProxyService,
    view: &KeyView,
    admitted: &Admitted,
    request_type: &'static str,
    estimated_cost_micros: i64,
    now_ms: i64,
) -> Result<PolicyPass, Refusal> {
    let key = &view.key;
    let Some(policies) = service.state.policies(&key.tenant_id) else {
        return Ok(PolicyPass::default());
    };
    let Some(agent) = &view.agent else {
        return Err(Refusal::AgentNotFound);
    };
    let request = RequestFacts {
        tenant_id: &key.tenant_id,
        agent_id: &agent.id,
        team_id: agent.team_id.as_deref(),
        environment: &agent.environment,
        api_key_id: Some(&key.id),
        provider: admitted.route.provider,
        model: &admitted.requested_model,
        estimated_cost_micros,
    };
    let counters = ProxyCounters {
        state: &service.state,
        rates: &service.rates,
        request: &request,
        now_ms,
        month: Timestamp::from_millis(now_ms).month_start(),
        counted: RefCell::new(Vec::new()),
    };
    let evaluation = evaluate(&policies, &request, &counters);
    let counted = counters.counted.into_inner();
    let minute = minute_of(now_ms);
    let outcome = match evaluation.decision {
        // A `require_human_review` flag travels in the results' reasons to the records.
        Decision::Allow => Ok(PolicyPass {
            budget_rules: budget_rules(&policies, &evaluation.results),
            counted,
            minute,
        }),
        Decision::Refuse {
            policy_id,
            policy_type,
        } => {
            for (id, bucket) in &counted {
                service.rates.uncount_request(*id, bucket, minute);
            }
            let reason = evaluation
                .results
                .iter()
                .find(|r| r.policy_id == policy_id && r.result == Outcome::Fail)
                .and_then(|r| r.reason.as_deref().map(str::to_owned))
                .unwrap_or_default();
            Err(match policy_type {
                PolicyType::RateLimit => Refusal::RateLimited {
                    policy_id,
                    reason,
                    retry_after_secs: retry_after_secs(now_ms),
                },
                PolicyType::BudgetLimit => Refusal::PolicyBudgetExceeded { policy_id, reason },
                _ => Refusal::PolicyViolation { policy_id, reason },
            })
        }
        Decision::RequireApproval { policy_id } => {
            for (id, bucket) in &counted {
                service.rates.uncount_request(*id, bucket, minute);
            }
            Err(Refusal::ApprovalRequired { policy_id })
        }
    };
    let approval = match &outcome {
        Err(Refusal::ApprovalRequired { policy_id }) => Some(ApprovalAsk {
            policy_id: *policy_id,
            request_context: json!({
                "provider": request.provider,
                "model": request.model,
                "upstream_model": admitted.route.upstream_model,
                "environment": request.environment,
                "request_type": request_type,
                "api_key_id": key.id,
            }),
        }),
        _ => None,
    };
    service.decisions.report(DecisionReport {
        tenant_id: key.tenant_id.clone(),
        evaluation: EvaluationReport {
            request_id: new_id(IdKind::Usage, now_ms),
            agent_id: agent.id.clone(),
            provider: request.provider,
            model: admitted.requested_model.clone(),
            evaluated_at: Timestamp::from_millis(now_ms),
            policies,
            results: evaluation.results,
        },
        approval,
    });
    outcome
}

/// The budgets of the `budget_limit` policies that passed (results are in policy order).
fn budget_rules(policies: &[Policy], results: &[PolicyResult]) -> Vec<BudgetRule> {
    policies
        .iter()
        .zip(results)
        .filter(|(_, result)| result.result == Outcome::Pass)
        .filter_map(|(policy, _)| match policy.config {
            PolicyConfig::BudgetLimit {
                monthly_limit_micros,
                warn_threshold_pct,
                block_threshold_pct,
            } => Some(BudgetRule {
                scope: budget_scope(&policy.scope),
                limit_micros: monthly_limit_micros,
                warn_pct: warn_threshold_pct,
                block_pct: block_threshold_pct,
                source: RuleSource::Policy(policy.id),
            }),
            _ => None,
        })
        .collect()
}

/// The evaluator's counters from this proxy's memory. Rate limits count the request as
/// they read (see `crate::rate_limit`); `check` gives the counts back on a refusal.
struct ProxyCounters<'a> {
    state: &'a EnforcementState,
    rates: &'a RateWindows,
    request: &'a RequestFacts<'a>,
    now_ms: i64,
    month: i64,
    counted: RefCell<Vec<(i64, String)>>,
}

impl Counters for ProxyCounters<'_> {
    fn month_spend_micros(&self, scope: &Scope) -> i64 {
        self.state
            .budgets
            .spent(self.request.tenant_id, &budget_scope(scope), self.month)
    }

    fn minute_counts(&self, policy_id: i64, per: RatePer) -> (i64, i64) {
        let bucket = rate_bucket(per, self.request);
        let counts = self.rates.count_request(policy_id, &bucket, self.now_ms);
        self.counted.borrow_mut().push((policy_id, bucket));
        counts
    }

    fn approval_granted(&self, policy_id: i64) -> bool {
        self.state.approval_granted(
            self.request.agent_id,
            policy_id,
            self.request.provider,
            self.request.model,
            self.now_ms,
        )
    }
}
