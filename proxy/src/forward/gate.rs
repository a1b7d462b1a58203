//! The gate step: what an admitted request must pass before it is sent, in order: the
//! tenant's policies, its key's own rate limit (`rate_limit_override`) and every budget
//! that covers it. The policies and the key's limit count the request in their rate
//! windows as they let it through; a request refused further on gives those counts
//! back ([`GiveBack`]) and is never held in its budgets (a reservation is made only
//! when every budget has room).

use warden_shared::budget::{key_scope, TENANT_SCOPE};
use warden_shared::pricing::micros_to_decimal;
use warden_shared::timestamp::Timestamp;

use super::Ready;
use crate::approval_claims::RE_EVALUATIONS;
use crate::budget::{Admission, BudgetRule, BudgetWarning, OverBudget, Refused, RuleSource};
use crate::budget_grants::Asked;
use crate::policy_gate::{Action, PolicyGate, PolicyPass, Stopped};
use crate::refusal::Refusal;
use crate::resources::Resources;
use crate::state::{EnforcementState, KeyView};

/// A request through the gate. Dropped unsettled (sending failed), it releases its
/// budget reservation and then reports its decision on its own: fields drop in order.
pub(super) struct Passed {
    /// Its estimated cost held in its budgets, and the budgets past their warn threshold.
    pub(super) admission: Admission,
    /// Its rate-window counts (its tokens go to them when it ends) and its decision.
    pub(super) policies: PolicyPass,
    /// The value of `x-warden-budget-warning`, when a budget passed its warn threshold.
    pub(super) budget_warning: Option<String>,
}

/// Checks `ready` against the policies, its key's rate limit and the budgets. The
/// tenant's policies are read once: the shared rate limits among them get an allowance
/// for the request (see `crate::rate_grants`) before the evaluator reads them.
pub(super) async fn gate(shared: &Resources, ready: &Ready<'_>) -> Result<Passed, Stopped> {
    let Ready {
        view,
        endpoint,
        admitted,
        estimate_micros,
        ..
    } = ready;
    let now = shared.clock.now_ms();
    let tenant_policies = shared.state.policies(&view.key.tenant_id);
    let mut policies = PolicyGate {
        state: &shared.state,
        rates: &shared.rates,
        decisions: &shared.decisions,
        guardrails: &shared.guardrails,
        ask_again_when_short: true,
    };
    let (mut evaluations, mut asks) = (0, 0);
    // A single-use approval the request passed on is claimed first; one used elsewhere
    // meanwhile leaves the request to be evaluated again (see `crate::approval_claims`).
    // A shared rate limit's allowance spent by concurrent requests before this one was
    // counted is asked for again, until the control plane says the limit is reached.
    let passed_policies = loop {
        if let (Some(list), Some(agent)) = (&tenant_policies, &view.agent) {
            let request = crate::policy_gate::request_facts(&view.key, agent, admitted, 0);
            shared.rate_grants.ensure(list, &request, now).await;
        }
        policies.ask_again_when_short = asks < SHORT_ASKS;
        let pass = match policies.check_policies(
            tenant_policies.clone(),
            view,
            admitted,
            Action::Model {
                operation: endpoint.request_type(),
                body: ready.body,
            },
            endpoint.request_type(),
            *estimate_micros,
            now,
        ) {
            Err(stopped) if stopped.short_of_allowance => {
                asks += 1;
                continue;
            }
            checked => checked?,
        };
        if pass.claims.is_empty()
            || shared
                .approval_claims
                .claim_all(&shared.state, &view.key.tenant_id, &pass)
                .await?
        {
            break pass;
        }
        let approval_id = pass.claims[0];
        pass.discard();
        evaluations += 1;
        if evaluations > RE_EVALUATIONS {
            return Err(Refusal::ApprovalUnconfirmed(approval_id).into());
        }
    };
    let mut counted = GiveBack(passed_policies);
    if let Some(key_count) = shared.rates.count_key_request(&view.key, now)? {
        counted.0.counted_also(key_count);
    }
    let rules = std::mem::take(&mut counted.0.budget_rules);
    let admission = reserve_budget(shared, view, rules, *estimate_micros, now).await?;
    Ok(Passed {
        budget_warning: budget_warning_header(&admission.warnings),
        admission,
        policies: counted.keep(),
    })
}

/// What the policies let through, while the rest of the gate may still refuse it: when
/// dropped, the rate windows that counted the request (the policies' and its key's own)
/// give the count back, as for any refused request; [`GiveBack::keep`] takes it past
/// the gate with its counts. Requests that fail after the gate (the provider
/// unreachable, say) keep their counts: they were let through.
struct GiveBack(PolicyPass);

impl GiveBack {
    fn keep(mut self) -> PolicyPass {
        // What is left behind counts nothing, so the drop gives nothing back.
        std::mem::take(&mut self.0)
    }
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

/// How many times a request asks the control plane for allowances (concurrent
/// requests on this proxy may take what an ask brought before it is used).
const ASKS: usize = 3;

/// How many other requests' asks a request waits for before it is refused as short:
/// each ends within the ask's timeout, granted, refused or counted alone, so this only
/// bounds the unforeseen.
const WAITS: usize = 64;

/// How many times a request short of a rate limit's allowance asks again. Each ask
/// gives at least one request or says the limit is reached, and a grant is an eighth of
/// what is left, so a burst of any size on one proxy needs a few dozen at most; this
/// only bounds the unforeseen.
const SHORT_ASKS: usize = 64;

/// Holds the request's estimated cost in every budget that covers it: the key's own,
/// the tenant's budget limits on the tenant, the agent's team and the agent, and the
/// `budget_limit` policies it passed (`rules`; see `crate::budget`), asking the control
/// plane for allowances this proxy lacks (`crate::budget_grants`).
async fn reserve_budget(
    shared: &Resources,
    view: &KeyView,
    rules: Vec<BudgetRule>,
    estimate_micros: i64,
    now_ms: i64,
) -> Result<Admission, Refusal> {
    let rules = budget_rules(&shared.state, view, rules);
    let tenant_id = &view.key.tenant_id;
    let month = Timestamp::from_millis(now_ms).month_start();
    let budgets = &shared.state.budgets;
    let (mut asks, mut waits) = (0, 0);
    while asks < ASKS && waits < WAITS {
        match budgets.reserve(tenant_id, &rules, estimate_micros, month, now_ms) {
            Ok(admission) => return Ok(admission),
            Err(Refused::Over(over)) => return Err(budget_refusal(over)),
            Err(Refused::Short(short)) => {
                match shared
                    .budget_grants
                    .ask(budgets, tenant_id, month, &short, now_ms)
                    .await
                {
                    Asked::Granted => asks += 1,
                    Asked::Waited => waits += 1,
                    Asked::NoRoom(asked, committed_micros) => {
                        let mut over = asked.over;
                        over.spent_micros = over.spent_micros.max(committed_micros);
                        return Err(budget_refusal(over));
                    }
                }
            }
        }
    }
    // Still short after every ask: concurrent requests took what was granted.
    match budgets.reserve(tenant_id, &rules, estimate_micros, month, now_ms) {
        Ok(admission) => Ok(admission),
        Err(Refused::Over(over)) => Err(budget_refusal(over)),
        Err(Refused::Short(mut short)) => Err(budget_refusal(short.swap_remove(0).over)),
    }
}

/// The budgets that cover a request: `rules` (the `budget_limit` policies it passed),
/// its key's own and the tenant's budget limits on the tenant, the agent's team and
/// the agent.
fn budget_rules(
    state: &EnforcementState,
    view: &KeyView,
    mut rules: Vec<BudgetRule>,
) -> Vec<BudgetRule> {
    let key = &view.key;
    if let Some(limit_micros) = key.budget_limit_micros {
        rules.push(BudgetRule {
            scope: key_scope(&key.id),
            limit_micros,
            // A key's own budget blocks at its limit; its warning comes at 80 %.
            warn_pct: 80,
            block_pct: 100,
            source: RuleSource::Key,
        });
    }
    if let Some(limits) = state.budget_limits(&key.tenant_id) {
        let agent = view.agent.as_deref();
        let covers = |scope: &str| {
            scope == TENANT_SCOPE
                || scope.strip_prefix("agent:") == Some(key.agent_id.as_str())
                || scope
                    .strip_prefix("team:")
                    .is_some_and(|team| agent.and_then(|a| a.team_id.as_deref()) == Some(team))
        };
        rules.extend(
            limits
                .iter()
                .filter(|l| covers(&l.scope))
                .map(|limit| BudgetRule {
                    scope: limit.scope.clone(),
                    limit_micros: limit.monthly_limit_micros,
                    warn_pct: limit.warn_threshold_pct,
                    block_pct: limit.block_threshold_pct,
                    source: RuleSource::Limit(limit.id.clone()),
                }),
        );
    }
    rules
}

fn budget_refusal(over: OverBudget) -> Refusal {
    match over.source {
        RuleSource::Policy(policy_id) => Refusal::PolicyBudgetExceeded {
            policy_id,
            reason: format!(
                "spend this month has reached the budget's block threshold, or the \
                 request's estimated cost does not fit below it (${} of ${})",
                micros_to_decimal(over.spent_micros),
                micros_to_decimal(over.block_micros)
            ),
        },
        _ => Refusal::BudgetExceeded(over),
    }
}

/// The value of `x-warden-budget-warning` for budgets past their warn threshold:
/// `<scope>=<percent of the monthly limit>%`, comma-separated.
fn budget_warning_header(warnings: &[BudgetWarning]) -> Option<String> {
    if warnings.is_empty() {
        return None;
    }
    let parts: Vec<String> = warnings
        .iter()
        .map(|w| format!("{}={:.2}%", w.scope, w.percentage))
        .collect();
    Some(parts.join(", "))
}
