//! Policies on the request path: the tenant's enabled policies, evaluated by the shared
//! evaluator (`warden_shared::policy`) with counters read from this proxy's memory, and
//! the decision reported to the control plane afterwards (`crate::decisions`).

use std::cell::RefCell;

use serde_json::json;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::policy::{evaluate, Counters, Decision, Outcome, PolicyType, RequestFacts};
use warden_shared::timestamp::Timestamp;

use crate::admission::Admitted;
use crate::decisions::{ApprovalAsk, DecisionReport, EvaluationReport};
use crate::rate_limit::{minute_of, retry_after_secs, RateWindows};
use crate::refusal::Refusal;
use crate::service::ProxyService;
use crate::state::{EnforcementState, KeyView};

/// What an admitted request owes the policies when it ends: its tokens, to the rate
/// windows that counted it.
#[derive(Debug, Default)]
pub struct PolicyPass {
    counted: Vec<(i64, String)>,
    minute: i64,
}

impl PolicyPass {
    pub fn add_tokens(&self, rates: &RateWindows, tokens: i64) {
        for (policy_id, bucket) in &self.counted {
            rates.add_tokens(*policy_id, bucket, self.minute, tokens);
        }
    }
}

/// Evaluates the tenant's policies for an admitted request. `Ok` lets it through.
pub fn check(
    service: &ProxyService,
    view: &KeyView,
    admitted: &Admitted,
    request_type: &'static str,
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
        estimated_cost_micros: 0,
    };
    let counters = ProxyCounters {
        state: &service.state,
        rates: &service.rates,
        request: &request,
        now_ms,
        counted: RefCell::new(Vec::new()),
    };
    let evaluation = evaluate(&policies, &request, &counters);
    let counted = counters.counted.into_inner();
    let minute = minute_of(now_ms);
    let outcome = match evaluation.decision {
        // A `require_human_review` flag travels in the results' reasons to the records.
        Decision::Allow => Ok(PolicyPass { counted, minute }),
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
                .and_then(|r| r.reason.clone())
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
            evaluated_at: Timestamp::from_millis(now_ms).to_string(),
            results: evaluation.results,
        },
        approval,
    });
    outcome
}

/// The evaluator's counters from this proxy's memory. Rate limits count the request as
/// they read (see `crate::rate_limit`); `check` gives the counts back on a refusal.
struct ProxyCounters<'a> {
    state: &'a EnforcementState,
    rates: &'a RateWindows,
    request: &'a RequestFacts<'a>,
    now_ms: i64,
    counted: RefCell<Vec<(i64, String)>>,
}

impl Counters for ProxyCounters<'_> {
    fn month_spend_micros(&self, _budget_scope: &str) -> i64 {
        // Team, agent and tenant spend reach the proxy with budget limits (issue 5's
        // budget part); until then a budget_limit policy sees only its own estimate.
        0
    }

    fn minute_counts(&self, policy_id: i64, bucket: &str) -> (i64, i64) {
        let counts = self.rates.count_request(policy_id, bucket, self.now_ms);
        self.counted
            .borrow_mut()
            .push((policy_id, bucket.to_owned()));
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
