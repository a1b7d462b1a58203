//! Policies on the request path: the tenant's enabled policies, evaluated by the shared
//! evaluator (`warden_shared::policy`) with counters read from this proxy's memory, and
//! the decision reported to the control plane afterwards: a forwarded request's by its
//! usage record (`crate::usage`), any other on its own (`crate::decisions`).

use std::cell::{Cell, OnceCell, RefCell};
use std::sync::Arc;

use serde_json::json;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::policy::{
    budget_scope, evaluate, rate_bucket_id, Counters, Decision, Guardrail, GuardrailVerdict,
    Outcome, Policy, PolicyConfig, PolicyType, RatePer, RequestFacts, Scope,
};
use warden_shared::registry::Provider;
use warden_shared::snapshot::{AgentState, ProxyKeyState};
use warden_shared::timestamp::Timestamp;

pub use crate::action::Action;
use crate::admission::Admitted;
use crate::budget::{BudgetRule, RuleSource};
use crate::decisions::{ApprovalAsk, DecisionReport, DecisionSink, PolicyResults};
use crate::guardrails::{Content, Guardrails, ScanFailure};
use crate::rate_limit::{retry_after_secs, Counted, Limiter, RateWindows};
use crate::refusal::Refusal;
use crate::state::{EnforcementState, GrantUse, KeyView};
use crate::usage::RecordEvaluation;

/// What an admitted request owes the policies: the budgets of the `budget_limit`
/// policies it passed, which `crate::budget` must hold it to atomically (the evaluator
/// only read the spend), when it ends, its tokens to the rate windows that counted it
/// (the policies' and its key's own, [`PolicyPass::counted_also`]), and the report of
/// its decision.
#[derive(Debug, Default)]
pub struct PolicyPass {
    pub budget_rules: Vec<BudgetRule>,
    /// Single-use approvals the request passed on, by id: each must be claimed through
    /// the control plane before the request goes on (`crate::approval_claims`).
    pub claims: Vec<i64>,
    /// The request's action digest, when a policy needed it.
    pub action_digest: Option<String>,
    /// The approval that let the request through a `require_approval` policy, by id.
    pub released_by: Option<i64>,
    /// The content as `redact` guardrails left it, with the header that says so: sent in
    /// place of the request's own.
    pub redacted: Option<(serde_json::Value, String)>,
    counted: Vec<Counted>,
    /// `None` when the tenant has no enabled policies.
    decision: Option<HeldDecision>,
}

impl PolicyPass {
    /// The decision, for the request's usage record to carry to the control plane.
    pub fn decision_for_usage(&mut self) -> Option<RecordEvaluation> {
        Some(self.decision.as_mut()?.parts.take()?.evaluation)
    }

    /// A window that counted the request besides the policies' (its key's own limit):
    /// it gets its tokens and its give-back with theirs.
    pub fn counted_also(&mut self, counted: Counted) {
        self.counted.push(counted);
    }

    pub fn add_tokens(&self, tokens: i64) {
        for counted in &self.counted {
            counted.add_tokens(tokens);
        }
    }

    /// The request was refused after the policies let it through (its key's rate limit or
    /// a budget had no room for it): the rate windows give back the request they counted.
    pub fn give_back(&self) {
        for counted in &self.counted {
            counted.give_back();
        }
    }

    /// The pass does not stand (its single-use approval was used elsewhere) and the
    /// request is evaluated again: its counts go back and its decision is not reported.
    pub fn discard(mut self) {
        self.give_back();
        if let Some(decision) = self.decision.as_mut() {
            decision.parts = None;
        }
    }
}

/// What the policies are checked with: the tenant's policies and approval grants, the
/// rate windows their limits count in, and where the decision of a request they refuse
/// goes: borrowed from what every request shares, so making one per request is free.
pub struct PolicyGate<'a> {
    pub state: &'a EnforcementState,
    pub rates: &'a RateWindows,
    pub decisions: &'a DecisionSink,
    pub guardrails: &'a Guardrails,
    /// A request refused by a shared rate limit only because concurrent requests took
    /// this proxy's allowance (see `crate::rate_grants`) is not reported but stopped with
    /// [`Stopped::short_of_allowance`], for the caller to ask for more and check again.
    pub ask_again_when_short: bool,
}

impl PolicyGate<'_> {
    /// Evaluates the tenant's policies for an admitted request. `Ok` lets it through;
    /// a refused request's rate-window counts are given back and its decision reported.
    pub fn check(
        &self,
        view: &KeyView,
        admitted: &Admitted,
        action: Action<'_>,
        request_type: &'static str,
        estimated_cost_micros: i64,
        now_ms: i64,
    ) -> Result<PolicyPass, Stopped> {
        let policies = self.state.policies(&view.key.tenant_id);
        self.check_policies(
            policies,
            view,
            admitted,
            action,
            request_type,
            estimated_cost_micros,
            now_ms,
        )
    }

    /// [`PolicyGate::check`] with the tenant's enabled policies already read.
    #[allow(clippy::too_many_arguments)] // The request's facts, each from its own place.
    pub fn check_policies(
        &self,
        policies: Option<Arc<Vec<Policy>>>,
        view: &KeyView,
        admitted: &Admitted,
        action: Action<'_>,
        request_type: &'static str,
        estimated_cost_micros: i64,
        now_ms: i64,
    ) -> Result<PolicyPass, Stopped> {
        let key = &view.key;
        let Some(policies) = policies else {
            return Ok(PolicyPass::default());
        };
        let Some(agent) = &view.agent else {
            return Err(Refusal::AgentNotFound.into());
        };
        let request = request_facts(key, agent, admitted, estimated_cost_micros);
        let counters = ProxyCounters {
            state: self.state,
            rates: self.rates,
            request: &request,
            now_ms,
            month: Timestamp::from_millis(now_ms).month_start(),
            counted: RefCell::new(Vec::new()),
            action,
            digest: OnceCell::new(),
            claims: RefCell::new(Vec::new()),
            released: Cell::new(None),
            content: Content::new(action, self.guardrails),
        };
        let evaluation = evaluate(&policies, &request, &counters);
        let counted = counters.counted.into_inner();
        let claims = counters.claims.into_inner();
        let released_by = counters.released.get();
        let digest = counters.digest;
        let guardrail_failed = counters.content.failed();
        let redacted = counters.content.into_redacted();
        let decision = HeldParts {
            key: key.clone(),
            provider: request.provider,
            evaluation: RecordEvaluation {
                model: admitted.requested_model.clone(),
                evaluated_at: Timestamp::from_millis(now_ms),
                policy_results: PolicyResults {
                    policies,
                    results: evaluation.results,
                },
            },
        };
        let list = &decision.evaluation.policy_results;
        let Some(refusal) = refusal_for(evaluation.decision, list, now_ms, guardrail_failed) else {
            return Ok(PolicyPass {
                budget_rules: budget_rules(list),
                claims,
                action_digest: digest.into_inner(),
                released_by,
                redacted,
                counted,
                decision: Some(HeldDecision {
                    parts: Some(decision),
                    sink: self.decisions.clone(),
                }),
            });
        };
        for counted in &counted {
            counted.give_back();
        }
        if self.ask_again_when_short
            && matches!(refusal, Refusal::RateLimited { .. })
            && counted.iter().any(Counted::short_of_allowance)
        {
            return Err(Stopped {
                refusal,
                approval: None,
                short_of_allowance: true,
            });
        }
        let policy_list = Arc::clone(&list.policies);
        let held = Held {
            request: &request,
            admitted,
            request_type,
            policies: &policy_list,
            digest: || {
                digest
                    .get_or_init(|| action.digest(request.provider, request.model))
                    .clone()
            },
        };
        let report = decision.into_report(approval_ask(&refusal, held));
        if report.approval.is_some() {
            // Queued with the control plane before the refusal is answered.
            return Err(Stopped {
                refusal,
                approval: Some(Box::new(report)),
                short_of_allowance: false,
            });
        }
        self.decisions.report(report);
        Err(refusal.into())
    }
}

/// A request the gate stopped: the refusal to answer and, when a `require_approval`
/// policy held it, the decision whose approval must be queued (through
/// `crate::decisions::ApprovalQueue`) before the refusal is answered.
pub struct Stopped {
    pub refusal: Refusal,
    /// Boxed: the rare case should not make every refusal large.
    pub approval: Option<Box<DecisionReport>>,
    /// Refused only for want of this proxy's allowance of a shared rate limit, not
    /// reported (see [`PolicyGate::ask_again_when_short`]).
    pub short_of_allowance: bool,
}

impl From<Refusal> for Stopped {
    fn from(refusal: Refusal) -> Self {
        Stopped {
            refusal,
            approval: None,
            short_of_allowance: false,
        }
    }
}

/// What the evaluator knows of the request.
pub(crate) fn request_facts<'r>(
    key: &'r ProxyKeyState,
    agent: &'r AgentState,
    admitted: &'r Admitted,
    estimated_cost_micros: i64,
) -> RequestFacts<'r> {
    RequestFacts {
        tenant_id: &key.tenant_id,
        agent_id: &agent.id,
        team_id: agent.team_id.as_deref(),
        environment: &agent.environment,
        api_key_id: Some(&key.id),
        provider: admitted.route.provider,
        model: &admitted.requested_model,
        estimated_cost_micros,
    }
}

/// The refusal the evaluator's `decision` comes to (`None`: the request may pass), with
/// the failing policy's reason from `list`.
fn refusal_for(
    decision: Decision,
    list: &PolicyResults,
    now_ms: i64,
    guardrail_failed: Option<(i64, ScanFailure)>,
) -> Option<Refusal> {
    let (policy_id, policy_type) = match decision {
        // A `require_human_review` flag travels in the results' reasons to the records.
        Decision::Allow => return None,
        Decision::RequireApproval { policy_id } => {
            return Some(Refusal::ApprovalRequired { policy_id })
        }
        Decision::Refuse {
            policy_id,
            policy_type,
        } => (policy_id, policy_type),
    };
    let reason = list
        .results
        .iter()
        .find(|r| r.policy_id == policy_id && r.result == Outcome::Fail)
        .and_then(|r| r.reason.as_deref().map(str::to_owned))
        .unwrap_or_default();
    Some(match policy_type {
        PolicyType::RateLimit => Refusal::RateLimited {
            policy_id: Some(policy_id),
            reason,
            retry_after_secs: retry_after_secs(now_ms),
        },
        PolicyType::BudgetLimit => Refusal::PolicyBudgetExceeded { policy_id, reason },
        PolicyType::Guardrail => match guardrail_failed {
            Some((failed, ScanFailure::TimedOut)) if failed == policy_id => {
                Refusal::GuardrailUnavailable { policy_id, reason }
            }
            Some((failed, ScanFailure::Unreadable(why))) if failed == policy_id => {
                Refusal::BadRequest(why)
            }
            _ => Refusal::GuardrailViolation { policy_id, reason },
        },
        _ => Refusal::PolicyViolation { policy_id, reason },
    })
}

/// What the approval asked for a held request is made of.
struct Held<'r, D: FnOnce() -> String> {
    request: &'r RequestFacts<'r>,
    admitted: &'r Admitted,
    request_type: &'static str,
    policies: &'r [Policy],
    digest: D,
}

/// The approval to queue for a request a `require_approval` policy holds: what a
/// reviewer sees of it, what approving it releases, and the held action's digest.
fn approval_ask(refusal: &Refusal, held: Held<'_, impl FnOnce() -> String>) -> Option<ApprovalAsk> {
    let Refusal::ApprovalRequired { policy_id } = refusal else {
        return None;
    };
    let request = held.request;
    let releases = held
        .policies
        .iter()
        .find(|p| p.id == *policy_id)
        .and_then(|p| match &p.config {
            PolicyConfig::RequireApproval(matcher) => Some(matcher.releases()),
            _ => None,
        })
        .unwrap_or_default();
    Some(ApprovalAsk {
        policy_id: *policy_id,
        request_context: json!({
            "provider": request.provider,
            "model": request.model,
            "upstream_model": held.admitted.route.upstream_model,
            "environment": request.environment,
            "request_type": held.request_type,
            "api_key_id": request.api_key_id,
        }),
        releases,
        // Every held request's digest: the reviewer sees what an approval would cover.
        action_digest: (held.digest)(),
    })
}

/// A forwarded request's decision, held until its usage record can carry it
/// ([`PolicyPass::decision_for_usage`]). A request that ends without a usage record
/// (refused by a budget, the provider unreachable, the client gone and the request
/// dropped) drops this instead, which reports the decision on its own: either way it is
/// recorded once.
struct HeldDecision {
    parts: Option<HeldParts>,
    sink: DecisionSink,
}

impl std::fmt::Debug for HeldDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldDecision")
            .field("held", &self.parts.is_some())
            .finish_non_exhaustive()
    }
}

/// One request's decision: held for its usage record when the request was let through,
/// reported on its own when it was not.
struct HeldParts {
    key: Arc<ProxyKeyState>,
    provider: Provider,
    evaluation: RecordEvaluation,
}

impl Drop for HeldDecision {
    fn drop(&mut self) {
        if let Some(parts) = self.parts.take() {
            self.sink.report(parts.into_report(None));
        }
    }
}

impl HeldParts {
    /// The decision as reported on its own, under a request id of its own.
    fn into_report(self, approval: Option<ApprovalAsk>) -> DecisionReport {
        let request_id = new_id(IdKind::Usage, self.evaluation.evaluated_at.as_millis());
        self.evaluation
            .into_report(request_id, &self.key, self.provider, approval)
    }
}

/// The budgets of the `budget_limit` policies that passed (results are in policy order).
fn budget_rules(list: &PolicyResults) -> Vec<BudgetRule> {
    list.policies
        .iter()
        .zip(&list.results)
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
/// they read (see `crate::rate_limit`); `PolicyGate::check` gives the counts back on a refusal.
struct ProxyCounters<'a> {
    state: &'a EnforcementState,
    rates: &'a RateWindows,
    request: &'a RequestFacts<'a>,
    now_ms: i64,
    month: i64,
    counted: RefCell<Vec<Counted>>,
    action: Action<'a>,
    /// The action's digest, once an approval bound to an action is looked up.
    digest: OnceCell<String>,
    /// The single-use approvals the request passed on.
    claims: RefCell<Vec<i64>>,
    /// The approval a `require_approval` policy let the request through on.
    released: Cell<Option<i64>>,
    /// What guardrails scan, parsed at the first.
    content: Content<'a>,
}

impl Counters for ProxyCounters<'_> {
    fn month_spend_micros(&self, scope: &Scope) -> i64 {
        self.state
            .budgets
            .spent(self.request.tenant_id, &budget_scope(scope), self.month)
    }

    fn minute_counts(&self, policy_id: i64, per: RatePer) -> (i64, i64) {
        let bucket = rate_bucket_id(per, self.request);
        let (counts, counted) =
            self.rates
                .count_request(Limiter::Policy(policy_id), bucket, self.now_ms);
        self.counted.borrow_mut().push(counted);
        counts
    }

    fn approval_granted(&self, policy_id: i64) -> bool {
        let request = self.request;
        let digest = || {
            self.digest
                .get_or_init(|| self.action.digest(request.provider, request.model))
                .clone()
        };
        match self.state.approval_granted(
            request.agent_id,
            policy_id,
            request.provider,
            request.model,
            digest,
            self.now_ms,
        ) {
            Some(GrantUse::Free(approval_id)) => {
                self.released.set(Some(approval_id));
                true
            }
            Some(GrantUse::Claim(approval_id)) => {
                self.claims.borrow_mut().push(approval_id);
                self.released.set(Some(approval_id));
                true
            }
            None => false,
        }
    }

    fn guardrail(&self, policy_id: i64, guardrail: &Guardrail) -> GuardrailVerdict {
        self.content.scan(policy_id, guardrail)
    }
}
