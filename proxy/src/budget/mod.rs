//! Budgets enforced from memory: proxy keys' `budget_limit_usd`, budget limits (tenant,
//! team, agent) and `budget_limit` policies, one mechanism for all.
//!
//! Each budgeted scope of a tenant (`warden_shared::budget`: `key:`, `tenant`, `team:`,
//! `agent:`) has counters. What it has spent this month, as this proxy sees it, is:
//! - `ledger`: the ledger's month-to-date figure, the highest seen of those the control
//!   plane streams (changed scopes every second, all of them on connect) and those the
//!   ledger returns when it acknowledges this proxy's own usage (which include it);
//! - `pending`: the cost of requests this proxy finished whose usage the ledger has not
//!   acknowledged yet;
//! - `reserved`: the estimated cost of this proxy's requests still in flight.
//!
//! Within a month the ledger's figure only grows, so taking the highest makes a late
//! stream message harmless, and a request's cost moves from `pending` to `ledger` in one
//! step when its batch is acknowledged: never counted twice, never missing. A streamed
//! figure that arrives while one of this proxy's batches for the scope awaits its
//! acknowledgement may or may not include that batch (it may have committed already),
//! so it is held back until the acknowledgement and then taken like any other: counting
//! the batch twice for that round trip would refuse requests that fit.
//!
//! A request must fit every budget that covers it ([`BudgetRule`]): it is admitted only
//! if, for each, the scope's sum plus the request's estimate stays within the block
//! threshold (`Thresholds::verdict`). The counters of all the request's scopes are
//! locked together (in one fixed order, so never deadlocked) while they are checked and
//! the estimate reserved in each, so concurrent requests on one proxy cannot all pass
//! on the same headroom. The estimate prices the request's input at one token per
//! [`BYTES_PER_TOKEN`] bytes of body (JSON is longer than its tokens, so this errs
//! high) and its output at `max_tokens` (or `max_completion_tokens`;
//! [`DEFAULT_OUTPUT_TOKENS`] when neither is set, at most [`MAX_OUTPUT_TOKENS`]). When
//! the request ends, the reservation gives way to its real cost; a request refused or
//! failed before it reached the provider releases it unspent.
//!
//! Every proxy sees the others' spend only when the ledger has it (a usage flush and a
//! spend message later), so counting alone N proxies could each admit up to the
//! threshold. A request must therefore also fit in the scope's allowance ([`allowance`]):
//! money the control plane grants this proxy only while the ledger's spend plus every
//! proxy's allowance stays within the threshold.
//!
//! Overshoot bound. The spend of a scope can pass its block threshold only by what
//! admitted requests cost beyond their estimates: answers longer than
//! [`DEFAULT_OUTPUT_TOKENS`] to requests without `max_tokens`, or input that tokenizes
//! worse than four bytes a token. Requests with `max_tokens` whose input is plain text
//! cannot overshoot at all. This holds for any number of proxies, except while a proxy
//! counts a scope alone because no control plane answered it (for [`allowance::ALONE_FOR_MS`] after
//! each failed request): such a proxy admits up to the threshold by its own count, as
//! every proxy did before allowances.

mod allowance;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, MutexGuard};

use allowance::Allowance;
pub use allowance::{Renewal, IDLE_MS};

use crate::maps::FastMap;
use warden_shared::budget::{percentage, Thresholds, Verdict};
use warden_shared::snapshot::ScopeSpend;

/// Body bytes per estimated input token.
pub const BYTES_PER_TOKEN: usize = 4;
/// Output tokens assumed for a request that sets no `max_tokens`.
pub const DEFAULT_OUTPUT_TOKENS: i64 = 1_024;
/// Output tokens an estimate never exceeds, whatever `max_tokens` says.
pub const MAX_OUTPUT_TOKENS: i64 = 128_000;

type Shared = Arc<Mutex<Counters>>;

#[derive(Default)]
pub struct Budgets {
    /// By tenant, then scope: looked up by `&str`, so a request allocates no key.
    tenants: FastMap<String, FastMap<String, Shared>>,
}

#[derive(Default)]
struct Counters {
    /// The month the figures belong to (`Timestamp::month_start`).
    month: i64,
    ledger: i64,
    pending: i64,
    reserved: i64,
    /// Records with a cost in this scope in a batch awaiting its acknowledgement.
    sending: u32,
    /// The highest streamed figure of `month` that arrived while `sending` was not 0.
    held_back: i64,
    /// The money the control plane granted this proxy for `month`.
    allowance: Allowance,
}

impl Counters {
    /// Starts a new month's figures when `month` moved on (in-flight reservations stay).
    fn roll_to(&mut self, month: i64) {
        if month > self.month {
            self.month = month;
            self.ledger = 0;
            self.pending = 0;
            self.held_back = 0;
            // Last month's holding lapses at the control plane by itself.
            self.allowance = self.allowance.next_month();
        }
    }

    /// Money this proxy spent or holds in flight that the ledger has not acknowledged.
    fn unacknowledged(&self) -> i64 {
        self.pending + self.reserved
    }

    fn take_ledger(&mut self, cost_micros: i64) {
        self.ledger = self.ledger.max(cost_micros);
    }

    fn spent(&self) -> i64 {
        self.ledger + self.pending + self.reserved
    }
}

/// Where a ledger figure reached the proxy from (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FigureSource {
    /// The state stream: a snapshot or a spend message.
    Stream,
    /// The acknowledgement of one of this proxy's usage batches.
    Acknowledgement,
}

/// One budget a request must fit in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetRule {
    /// `key:<id>`, `tenant`, `team:<id>` or `agent:<id>`.
    pub scope: String,
    pub limit_micros: i64,
    pub warn_pct: i64,
    pub block_pct: i64,
    pub source: RuleSource,
}

/// What set a budget, for the refusal and the warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleSource {
    /// The proxy key's own `budget_limit_usd`.
    Key,
    /// A budget limit, by id.
    Limit(String),
    /// A `budget_limit` policy, by id.
    Policy(i64),
}

/// A budget the request does not fit in, with the figures as the proxy knows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    pub scope: String,
    pub source: RuleSource,
    pub spent_micros: i64,
    pub limit_micros: i64,
    pub block_micros: i64,
}

/// Why a request was not reserved.
#[derive(Debug)]
pub enum Refused {
    /// It does not fit a budget.
    Over(OverBudget),
    /// It fits by this proxy's count, but this proxy's allowance in these scopes does
    /// not cover it: ask the control plane ([`Budgets::apply_grants`]) and try again.
    Short(Vec<Shortfall>),
}

/// A scope whose allowance does not cover a request, as asked of the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    pub scope: String,
    pub block_micros: i64,
    pub need_micros: i64,
    /// The allowance's answers when the request found it short (see `allowance`).
    pub answers_seen: u64,
    /// The budget to name if the control plane has no room.
    pub over: OverBudget,
}

/// A budget past its warn threshold, for the response's warning header.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetWarning {
    pub scope: String,
    /// Spent (with this request's estimate) as a percentage of the monthly limit.
    pub percentage: f64,
}

/// A request admitted under its budgets.
pub struct Admission {
    pub reservation: Reservation,
    pub warnings: Vec<BudgetWarning>,
}

/// What this proxy holds across every budget it counts, for `/metrics`: an operator (and
/// the exit-path tests) can see that no request leaves a reservation behind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// Estimated cost of requests in flight, summed over their scopes.
    pub reserved_micros: i64,
    /// Cost of finished requests whose usage the ledger has not acknowledged yet.
    pub pending_micros: i64,
    /// Money the control plane granted this proxy, summed over scopes.
    pub granted_micros: i64,
}

impl Budgets {
    /// The sums of every scope's reservations and pending costs (a scrape's work: every
    /// scope's lock is taken once, briefly).
    pub fn held(&self) -> Held {
        let mut held = Held::default();
        for scopes in self.tenants.iter() {
            for counters in scopes.iter() {
                let counters = lock(counters.value());
                held.reserved_micros += counters.reserved;
                held.pending_micros += counters.pending;
                held.granted_micros += counters.allowance.held();
            }
        }
        held
    }

    /// The scope's counters, if this proxy has any.
    fn existing(&self, tenant_id: &str, scope: &str) -> Option<Shared> {
        let scopes = self.tenants.get(tenant_id)?;
        let found = scopes.get(scope)?.clone();
        Some(found)
    }

    fn counters(&self, tenant_id: &str, scope: &str) -> Shared {
        if let Some(found) = self.existing(tenant_id, scope) {
            return found;
        }
        let scopes = self.tenants.entry(tenant_id.to_owned()).or_default();
        let found = scopes.entry(scope.to_owned()).or_default().clone();
        found
    }

    /// Takes the ledger's figures. A streamed figure (a snapshot or a spend message)
    /// for a scope with a batch awaiting its acknowledgement is held back; an
    /// acknowledgement's figures include its batch (release the batch's holds right
    /// after).
    pub fn apply_ledger(&self, scopes: &[ScopeSpend], from: FigureSource) {
        for spend in scopes {
            let counters = self.counters(&spend.tenant_id, &spend.scope);
            let mut counters = lock(&counters);
            counters.roll_to(spend.month);
            if spend.month != counters.month {
                continue;
            }
            if from == FigureSource::Stream && counters.sending > 0 {
                counters.held_back = counters.held_back.max(spend.cost_micros);
            } else {
                counters.take_ledger(spend.cost_micros);
            }
        }
    }

    /// What the scope has spent in `month` as this proxy knows it (ledger, pending and
    /// reserved); what a `budget_limit` policy is evaluated against.
    pub fn spent(&self, tenant_id: &str, scope: &str, month: i64) -> i64 {
        // Read in place: cloning the shared counters would bounce their reference count
        // between the cores serving requests, once per budget policy per request.
        let Some(scopes) = self.tenants.get(tenant_id) else {
            return 0;
        };
        let Some(counters) = scopes.get(scope) else {
            return 0;
        };
        let mut counters = lock(&counters);
        counters.roll_to(month);
        counters.spent()
    }

    /// Reserves `estimate_micros` in every scope of `rules` for a request in `month` at
    /// `now_ms`, or names the first budget it does not fit in, or the scopes whose
    /// allowance does not cover it. Released when dropped unsettled.
    pub fn reserve(
        &self,
        tenant_id: &str,
        rules: &[BudgetRule],
        estimate_micros: i64,
        month: i64,
        now_ms: i64,
    ) -> Result<Admission, Refused> {
        let mut slots: Vec<(&str, Shared)> = rules
            .iter()
            .map(|rule| (rule.scope.as_str(), self.counters(tenant_id, &rule.scope)))
            .collect();
        slots.sort_unstable_by(|a, b| a.0.cmp(b.0));
        slots.dedup_by(|a, b| a.0 == b.0);
        let mut guards: Vec<MutexGuard<'_, Counters>> =
            slots.iter().map(|(_, counters)| lock(counters)).collect();
        // Each scope's lowest block threshold, with the budget that sets it.
        let mut strictest: Vec<Option<OverBudget>> = vec![None; slots.len()];
        let mut warnings = Vec::new();
        for rule in rules {
            let Ok(index) = slots.binary_search_by(|(scope, _)| (*scope).cmp(&rule.scope)) else {
                continue;
            };
            let counters = &mut guards[index];
            counters.roll_to(month);
            let spent = counters.spent();
            let thresholds = Thresholds::new(rule.limit_micros, rule.warn_pct, rule.block_pct);
            let over = OverBudget {
                scope: rule.scope.clone(),
                source: rule.source.clone(),
                spent_micros: spent,
                limit_micros: rule.limit_micros,
                block_micros: thresholds.block_micros,
            };
            match thresholds.verdict(spent, estimate_micros) {
                Verdict::Block => return Err(Refused::Over(over)),
                Verdict::Warn => warnings.push(BudgetWarning {
                    scope: rule.scope.clone(),
                    percentage: percentage(
                        spent.saturating_add(estimate_micros),
                        rule.limit_micros,
                    ),
                }),
                Verdict::Within => {}
            }
            let slot = &mut strictest[index];
            if slot
                .as_ref()
                .is_none_or(|known| over.block_micros < known.block_micros)
            {
                *slot = Some(over);
            }
        }
        let mut short = Vec::new();
        for (counters, over) in guards.iter_mut().zip(&strictest) {
            let Some(over) = over else { continue };
            let unacknowledged = counters.unacknowledged();
            let need = counters
                .allowance
                .shortfall(unacknowledged, estimate_micros, now_ms);
            if need > 0 {
                short.push(Shortfall {
                    scope: over.scope.clone(),
                    block_micros: over.block_micros,
                    need_micros: need,
                    answers_seen: counters.allowance.answers(),
                    over: over.clone(),
                });
            }
        }
        if !short.is_empty() {
            return Err(Refused::Short(short));
        }
        for (counters, over) in guards.iter_mut().zip(&strictest) {
            counters.roll_to(month);
            counters.reserved += estimate_micros;
            if let Some(over) = over {
                counters.allowance.used(over.block_micros, now_ms);
            }
        }
        drop(guards);
        Ok(Admission {
            reservation: Reservation {
                counters: slots.into_iter().map(|(_, counters)| counters).collect(),
                estimate_micros,
                month,
                settled: false,
            },
            warnings,
        })
    }

    /// Adds what the control plane granted in `month` to an ask sent at `sent_at`:
    /// `(scope, granted_micros)`.
    pub fn apply_grants(&self, tenant_id: &str, month: i64, grants: &[(&str, i64)], sent_at: i64) {
        for (scope, granted) in grants {
            let counters = self.counters(tenant_id, scope);
            let mut counters = lock(&counters);
            counters.roll_to(month);
            if counters.month == month {
                counters.allowance.granted(*granted, sent_at);
            }
        }
    }

    /// What goes back to the control plane with an ask for the scope sent at `now_ms`
    /// (see `allowance`): taken, so it is sent once.
    pub fn take_release(&self, tenant_id: &str, scope: &str, now_ms: i64) -> i64 {
        self.existing(tenant_id, scope)
            .map_or(0, |counters| lock(&counters).allowance.take_release(now_ms))
    }

    /// Whether an ask for the scope was answered since `short` was found.
    pub fn answered_since(&self, tenant_id: &str, short: &Shortfall) -> bool {
        self.existing(tenant_id, &short.scope)
            .is_some_and(|counters| lock(&counters).allowance.answers() != short.answers_seen)
    }

    /// No control plane answered for `scopes`: they are counted by this proxy alone for
    /// a while.
    pub fn count_alone(&self, tenant_id: &str, scopes: &[&str], now_ms: i64) {
        for scope in scopes {
            lock(&self.counters(tenant_id, scope))
                .allowance
                .alone(now_ms);
        }
    }

    /// What a renewal round at `now_ms` tells the control plane, by tenant, scope and
    /// month (see `allowance`).
    pub fn renewals(&self, now_ms: i64) -> Vec<(String, String, i64, Renewal)> {
        let mut due = Vec::new();
        for scopes in self.tenants.iter() {
            for counters in scopes.iter() {
                let mut guard = lock(counters.value());
                let unacknowledged = guard.unacknowledged();
                let month = guard.month;
                if let Some(renewal) = guard.allowance.renewal(unacknowledged, now_ms) {
                    due.push((scopes.key().clone(), counters.key().clone(), month, renewal));
                }
            }
        }
        due
    }

    /// A renewal sent at `sent_at` for `scope` in `month` was answered.
    pub fn renewed(&self, tenant_id: &str, scope: &str, month: i64, sent_at: i64) {
        if let Some(counters) = self.existing(tenant_id, scope) {
            let mut counters = lock(&counters);
            if counters.month == month {
                counters.allowance.renewed(sent_at);
            }
        }
    }
}

/// A request's hold on its budgets.
pub struct Reservation {
    counters: Vec<Shared>,
    estimate_micros: i64,
    month: i64,
    settled: bool,
}

impl Reservation {
    /// The request ended costing `cost_micros`: it now waits for the ledger as pending,
    /// held by the returned hold until the ledger has it (`None`: no budget covers it).
    pub fn settle(mut self, cost_micros: i64) -> Option<BudgetHold> {
        self.settled = true;
        if self.counters.is_empty() {
            return None;
        }
        for counters in &self.counters {
            let mut counters = lock(counters);
            counters.reserved -= self.estimate_micros;
            if counters.month == self.month {
                counters.pending += cost_micros;
            }
        }
        Some(BudgetHold {
            counters: std::mem::take(&mut self.counters),
            month: self.month,
            cost_micros,
            sent: false,
        })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.settled {
            for counters in &self.counters {
                lock(counters).reserved -= self.estimate_micros;
            }
        }
    }
}

/// A finished request's cost, pending in its budgets until the ledger has it.
pub struct BudgetHold {
    counters: Vec<Shared>,
    month: i64,
    cost_micros: i64,
    /// In a batch on its way to the ledger.
    sent: bool,
}

impl BudgetHold {
    /// The record is about to be sent: until [`BudgetHold::release`], streamed figures
    /// of its scopes are held back (see the module documentation).
    pub fn sending(&mut self) {
        if !self.sent {
            self.sent = true;
            for counters in &self.counters {
                lock(counters).sending += 1;
            }
        }
    }

    /// The ledger acknowledged the cost (after `Budgets::apply_ledger` took the
    /// figures that include it) or will never have it: it leaves `pending`, and a figure
    /// held back while it was being sent is taken.
    pub fn release(&self) {
        for counters in &self.counters {
            let mut counters = lock(counters);
            if counters.month == self.month {
                counters.pending -= self.cost_micros;
                counters.allowance.acknowledged(self.cost_micros);
            }
            if self.sent {
                counters.sending -= 1;
                if counters.sending == 0 {
                    let held_back = std::mem::take(&mut counters.held_back);
                    counters.take_ledger(held_back);
                }
            }
        }
    }
}

impl std::fmt::Debug for BudgetHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetHold")
            .field("scopes", &self.counters.len())
            .field("month", &self.month)
            .field("cost_micros", &self.cost_micros)
            .finish()
    }
}

/// The counters stay consistent even if a holder panicked: every update is one step.
fn lock(counters: &Mutex<Counters>) -> MutexGuard<'_, Counters> {
    counters
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A request's estimated cost: see the module documentation.
pub fn estimate_micros(
    price: Option<&warden_shared::pricing::ModelPrice>,
    body_bytes: usize,
    max_output_tokens: Option<i64>,
) -> i64 {
    let Some(price) = price else {
        return 0;
    };
    let input = i64::try_from(body_bytes.div_ceil(BYTES_PER_TOKEN)).unwrap_or(i64::MAX);
    let output = max_output_tokens
        .unwrap_or(DEFAULT_OUTPUT_TOKENS)
        .clamp(0, MAX_OUTPUT_TOKENS);
    warden_shared::pricing::cost_micros(price, input, output)
}
