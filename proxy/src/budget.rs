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
//! Overshoot bound. On one proxy the spend of a scope can pass its block threshold only
//! by what admitted requests cost beyond their estimates: answers longer than
//! [`DEFAULT_OUTPUT_TOKENS`] to requests without `max_tokens`, or input that tokenizes
//! worse than four bytes a token. Requests with `max_tokens` whose input is plain text
//! cannot overshoot at all. With N proxies each sees the others' spend up to about one
//! usage flush plus one spend interval late (about 2 s by default), so the scope can
//! overshoot by at most what the other N-1 proxies admit within that window (each of
//! them stays within the threshold by its own count); a scope used through one proxy
//! keeps the single-proxy bound.

use std::sync::{Arc, Mutex, MutexGuard};

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
}

impl Counters {
    /// Starts a new month's figures when `month` moved on (in-flight reservations stay).
    fn roll_to(&mut self, month: i64) {
        if month > self.month {
            self.month = month;
            self.ledger = 0;
            self.pending = 0;
            self.held_back = 0;
        }
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

    /// Reserves `estimate_micros` in every scope of `rules` for a request in `month`, or
    /// names the first budget it does not fit in. Released when dropped unsettled.
    pub fn reserve(
        &self,
        tenant_id: &str,
        rules: &[BudgetRule],
        estimate_micros: i64,
        month: i64,
    ) -> Result<Admission, OverBudget> {
        let mut slots: Vec<(&str, Shared)> = rules
            .iter()
            .map(|rule| (rule.scope.as_str(), self.counters(tenant_id, &rule.scope)))
            .collect();
        slots.sort_unstable_by(|a, b| a.0.cmp(b.0));
        slots.dedup_by(|a, b| a.0 == b.0);
        let mut guards: Vec<MutexGuard<'_, Counters>> =
            slots.iter().map(|(_, counters)| lock(counters)).collect();
        let mut warnings = Vec::new();
        for rule in rules {
            let Ok(index) = slots.binary_search_by(|(scope, _)| (*scope).cmp(&rule.scope)) else {
                continue;
            };
            let counters = &mut guards[index];
            counters.roll_to(month);
            let spent = counters.spent();
            let thresholds = Thresholds::new(rule.limit_micros, rule.warn_pct, rule.block_pct);
            match thresholds.verdict(spent, estimate_micros) {
                Verdict::Block => {
                    return Err(OverBudget {
                        scope: rule.scope.clone(),
                        source: rule.source.clone(),
                        spent_micros: spent,
                        limit_micros: rule.limit_micros,
                        block_micros: thresholds.block_micros,
                    })
                }
                Verdict::Warn => warnings.push(BudgetWarning {
                    scope: rule.scope.clone(),
                    percentage: percentage(
                        spent.saturating_add(estimate_micros),
                        rule.limit_micros,
                    ),
                }),
                Verdict::Within => {}
            }
        }
        for counters in &mut guards {
            counters.roll_to(month);
            counters.reserved += estimate_micros;
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

#[cfg(test)]
mod tests {
    use super::*;

    const MONTH: i64 = 1_000;
    const TENANT: &str = "ten_1";

    fn streamed(budgets: &Budgets, scope: &str, cost_micros: i64) {
        budgets.apply_ledger(
            &[ScopeSpend {
                tenant_id: TENANT.into(),
                scope: scope.into(),
                month: MONTH,
                cost_micros,
            }],
            FigureSource::Stream,
        );
    }

    fn rule(scope: &str, limit_micros: i64) -> BudgetRule {
        BudgetRule {
            scope: scope.into(),
            limit_micros,
            warn_pct: 80,
            block_pct: 100,
            source: RuleSource::Key,
        }
    }

    fn reserve(
        budgets: &Budgets,
        rules: &[BudgetRule],
        estimate: i64,
    ) -> Result<Admission, OverBudget> {
        budgets.reserve(TENANT, rules, estimate, MONTH)
    }

    #[test]
    fn reservations_share_the_headroom_and_release_when_dropped() {
        let budgets = Budgets::default();
        streamed(&budgets, "key:ak_1", 600);
        let key = [rule("key:ak_1", 1_000)];
        let first = reserve(&budgets, &key, 300).unwrap();
        let refused = reserve(&budgets, &key, 300).err().unwrap();
        assert_eq!(refused.spent_micros, 900);
        drop(first);
        assert!(reserve(&budgets, &key, 300).is_ok());
    }

    #[test]
    fn settled_cost_counts_once_until_and_after_the_ledger_has_it() {
        let budgets = Budgets::default();
        streamed(&budgets, "key:ak_1", 100);
        let key = [rule("key:ak_1", 1_000)];
        let hold = reserve(&budgets, &key, 500)
            .unwrap()
            .reservation
            .settle(700)
            .unwrap();
        // Pending: 800 of 1,000 spent, so a 300 estimate no longer fits.
        let over = reserve(&budgets, &key, 300).err().unwrap();
        assert_eq!(over.spent_micros, 800);
        // Acknowledged with the ledger's new figure: still 800, not 1,500.
        streamed(&budgets, "key:ak_1", 800);
        hold.release();
        let over = reserve(&budgets, &key, 300).err().unwrap();
        assert_eq!(over.spent_micros, 800);
        // A stale figure arriving late changes nothing.
        streamed(&budgets, "key:ak_1", 100);
        assert!(reserve(&budgets, &key, 200).is_ok());
    }

    #[test]
    fn a_figure_streamed_while_a_batch_is_sent_waits_for_its_acknowledgement() {
        let budgets = Budgets::default();
        streamed(&budgets, "key:ak_1", 100);
        let key = [rule("key:ak_1", 1_000)];
        let mut hold = reserve(&budgets, &key, 400)
            .unwrap()
            .reservation
            .settle(300)
            .unwrap();
        hold.sending();
        // The batch committed (100 + 300) and the stream told us before the ack did.
        streamed(&budgets, "key:ak_1", 400);
        assert_eq!(budgets.spent(TENANT, "key:ak_1", MONTH), 400);
        budgets.apply_ledger(
            &[ScopeSpend {
                tenant_id: TENANT.into(),
                scope: "key:ak_1".into(),
                month: MONTH,
                cost_micros: 400,
            }],
            FigureSource::Acknowledgement,
        );
        hold.release();
        assert_eq!(budgets.spent(TENANT, "key:ak_1", MONTH), 400);
        // Another proxy's spend, streamed while a batch was out, is taken after its ack.
        let mut hold = reserve(&budgets, &key, 100)
            .unwrap()
            .reservation
            .settle(50)
            .unwrap();
        hold.sending();
        streamed(&budgets, "key:ak_1", 700);
        assert_eq!(budgets.spent(TENANT, "key:ak_1", MONTH), 450);
        hold.release();
        assert_eq!(budgets.spent(TENANT, "key:ak_1", MONTH), 700);
    }

    #[test]
    fn a_request_must_fit_every_budget_and_holds_each() {
        let budgets = Budgets::default();
        streamed(&budgets, "tenant", 500);
        let mut team = rule("team:tm_1", 10_000);
        team.source = RuleSource::Limit("bud_1".into());
        let rules = [rule("tenant", 1_000), team.clone()];
        let admitted = reserve(&budgets, &rules, 350).unwrap();
        // 850 of the tenant's 1,000: past its 80 % warning, not the team's.
        assert_eq!(admitted.warnings.len(), 1);
        assert_eq!(admitted.warnings[0].scope, "tenant");
        assert_eq!(budgets.spent(TENANT, "team:tm_1", MONTH), 350);
        let over = reserve(&budgets, &rules, 200).err().unwrap();
        assert_eq!(over.scope, "tenant");
        // Refused whole: the team's budget kept nothing of it.
        assert_eq!(budgets.spent(TENANT, "team:tm_1", MONTH), 350);
        drop(admitted);
        assert_eq!(budgets.spent(TENANT, "team:tm_1", MONTH), 0);
        // Two rules on one scope hold it once.
        let twice = [team.clone(), team];
        let _held = reserve(&budgets, &twice, 100).unwrap();
        assert_eq!(budgets.spent(TENANT, "team:tm_1", MONTH), 100);
    }

    #[test]
    fn a_new_month_starts_from_nothing() {
        let budgets = Budgets::default();
        streamed(&budgets, "key:ak_1", 5_000);
        let key = [rule("key:ak_1", 1_000)];
        assert!(reserve(&budgets, &key, 1).is_err());
        assert!(budgets.reserve(TENANT, &key, 1, MONTH + 1).is_ok());
    }

    #[test]
    fn estimates_price_body_and_max_tokens() {
        let price =
            warden_shared::pricing::find_price(warden_shared::registry::Provider::Openai, "gpt-4o")
                .unwrap();
        let small = estimate_micros(Some(price), 400, Some(10));
        let large = estimate_micros(Some(price), 400, Some(10_000));
        assert!(small > 0 && large > small);
        assert_eq!(
            estimate_micros(Some(price), 400, None),
            estimate_micros(Some(price), 400, Some(DEFAULT_OUTPUT_TOKENS))
        );
        assert_eq!(
            estimate_micros(Some(price), 400, Some(i64::MAX)),
            estimate_micros(Some(price), 400, Some(MAX_OUTPUT_TOKENS))
        );
        assert_eq!(estimate_micros(None, 400, Some(10)), 0);
    }
}
