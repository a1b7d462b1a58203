//! Proxy keys' monthly budgets (`budget_limit_usd`), enforced from memory.
//!
//! What a key has spent this month, as this proxy sees it, is the sum of:
//! - `ledger`: the ledger's month-to-date figure, the highest seen of those the control
//!   plane streams (changed keys every second, all of them on connect) and those the
//!   ledger returns when it acknowledges this proxy's own usage (which include it);
//! - `pending`: the cost of requests this proxy finished whose usage the ledger has not
//!   acknowledged yet;
//! - `reserved`: the estimated cost of this proxy's requests still in flight.
//!
//! Within a month the ledger's figure only grows, so taking the highest makes a late
//! stream message harmless, and a request's cost moves from `pending` to `ledger` in one
//! step when its batch is acknowledged: never counted twice, never missing.
//!
//! A request is admitted only if that sum plus its own estimate stays within the limit;
//! the check and the reservation happen under the key's lock, so concurrent requests on
//! one proxy cannot all pass on the same headroom. The estimate prices the request's
//! input at one token per [`BYTES_PER_TOKEN`] bytes of body (JSON is longer than its
//! tokens, so this errs high) and its output at `max_tokens` (or
//! `max_completion_tokens`; [`DEFAULT_OUTPUT_TOKENS`] when neither is set). When the
//! request ends, the reservation gives way to its real cost; a request refused or failed
//! before it reached the provider releases it unspent.
//!
//! Overshoot: on one proxy, only by requests whose real cost exceeds their estimate
//! (no `max_tokens` and a longer answer than the default, or input that tokenizes
//! worse than four bytes a token). With N proxies each sees the others' spend up to
//! about a usage flush plus a spend interval late (about 2 s by default), so a key used
//! through several proxies at once can overshoot by what the others spend in that time.

use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use warden_shared::snapshot::ScopeSpend;

use crate::usage::BudgetHold;

/// Body bytes per estimated input token.
pub const BYTES_PER_TOKEN: usize = 4;
/// Output tokens assumed for a request that sets no `max_tokens`.
pub const DEFAULT_OUTPUT_TOKENS: i64 = 1_024;
/// Output tokens an estimate never exceeds, whatever `max_tokens` says.
pub const MAX_OUTPUT_TOKENS: i64 = 128_000;

/// The scope prefix of a proxy key's budget in the spend the control plane streams.
const KEY_SCOPE: &str = "key:";

#[derive(Default)]
pub struct Budgets {
    keys: DashMap<String, Arc<Mutex<Counters>>>,
}

#[derive(Default)]
struct Counters {
    /// The month the figures belong to (`Timestamp::month_start`).
    month: i64,
    ledger: i64,
    pending: i64,
    reserved: i64,
}

impl Counters {
    /// Starts a new month's figures when `month` moved on (in-flight reservations stay).
    fn roll_to(&mut self, month: i64) {
        if month > self.month {
            self.month = month;
            self.ledger = 0;
            self.pending = 0;
        }
    }

    fn spent(&self) -> i64 {
        self.ledger + self.pending + self.reserved
    }
}

/// A key's budget would be exceeded: what it has spent as far as the proxy knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    pub spent_micros: i64,
    pub limit_micros: i64,
}

impl Budgets {
    fn counters(&self, key_id: &str) -> Arc<Mutex<Counters>> {
        if let Some(found) = self.keys.get(key_id) {
            return found.clone();
        }
        self.keys.entry(key_id.to_owned()).or_default().clone()
    }

    /// Takes the ledger's figures (from the stream, or from an acknowledgement).
    pub fn apply_ledger(&self, scopes: &[ScopeSpend]) {
        for spend in scopes {
            let Some(key_id) = spend.scope.strip_prefix(KEY_SCOPE) else {
                continue;
            };
            let counters = self.counters(key_id);
            let mut counters = lock(&counters);
            counters.roll_to(spend.month);
            if spend.month == counters.month {
                counters.ledger = counters.ledger.max(spend.cost_micros);
            }
        }
    }

    /// Reserves `estimate_micros` of `key_id`'s budget for a request in `month`, or says
    /// the budget would be exceeded. The reservation is released when dropped unsettled.
    pub fn reserve(
        &self,
        key_id: &str,
        limit_micros: i64,
        estimate_micros: i64,
        month: i64,
    ) -> Result<Reservation, OverBudget> {
        let counters = self.counters(key_id);
        {
            let mut guard = lock(&counters);
            guard.roll_to(month);
            let spent = guard.spent();
            // Refused when nothing is left or its estimate does not fit in what is: the
            // strict reading, which keeps one proxy within the limit.
            if spent >= limit_micros || spent.saturating_add(estimate_micros) > limit_micros {
                return Err(OverBudget {
                    spent_micros: spent,
                    limit_micros,
                });
            }
            guard.reserved += estimate_micros;
        }
        Ok(Reservation {
            counters,
            estimate_micros,
            month,
            settled: false,
        })
    }

    /// A finished request's cost left `pending`: the ledger acknowledged it (after
    /// [`Budgets::apply_ledger`] took the figure that includes it) or will never have it.
    pub fn finished(&self, key_id: &str, cost_micros: i64, month: i64) {
        let Some(counters) = self.keys.get(key_id).map(|c| c.clone()) else {
            return;
        };
        let mut counters = lock(&counters);
        if counters.month == month {
            counters.pending -= cost_micros;
        }
    }
}

/// A request's hold on a key's budget.
pub struct Reservation {
    counters: Arc<Mutex<Counters>>,
    estimate_micros: i64,
    month: i64,
    settled: bool,
}

impl Reservation {
    /// The request ended costing `cost_micros`: it now waits for the ledger as pending,
    /// held by the returned record until the ledger has it.
    pub fn settle(mut self, cost_micros: i64) -> BudgetHold {
        let mut counters = lock(&self.counters);
        counters.reserved -= self.estimate_micros;
        if counters.month == self.month {
            counters.pending += cost_micros;
        }
        drop(counters);
        self.settled = true;
        BudgetHold {
            month: self.month,
            cost_micros,
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.settled {
            lock(&self.counters).reserved -= self.estimate_micros;
        }
    }
}

/// The counters stay consistent even if a holder panicked: every update is one step.
fn lock(counters: &Mutex<Counters>) -> std::sync::MutexGuard<'_, Counters> {
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

    fn streamed(budgets: &Budgets, cost_micros: i64) {
        budgets.apply_ledger(&[ScopeSpend {
            scope: "key:ak_1".into(),
            month: MONTH,
            cost_micros,
        }]);
    }

    #[test]
    fn reservations_share_the_headroom_and_release_when_dropped() {
        let budgets = Budgets::default();
        streamed(&budgets, 600);
        let first = budgets.reserve("ak_1", 1_000, 300, MONTH).unwrap();
        let refused = budgets.reserve("ak_1", 1_000, 300, MONTH).err().unwrap();
        assert_eq!(refused.spent_micros, 900);
        drop(first);
        assert!(budgets.reserve("ak_1", 1_000, 300, MONTH).is_ok());
    }

    #[test]
    fn settled_cost_counts_once_until_and_after_the_ledger_has_it() {
        let budgets = Budgets::default();
        streamed(&budgets, 100);
        budgets
            .reserve("ak_1", 1_000, 500, MONTH)
            .unwrap()
            .settle(700);
        // Pending: 800 of 1,000 spent, so a 300 estimate no longer fits.
        let over = budgets.reserve("ak_1", 1_000, 300, MONTH).err().unwrap();
        assert_eq!(over.spent_micros, 800);
        // Acknowledged with the ledger's new figure: still 800, not 1,500.
        streamed(&budgets, 800);
        budgets.finished("ak_1", 700, MONTH);
        let over = budgets.reserve("ak_1", 1_000, 300, MONTH).err().unwrap();
        assert_eq!(over.spent_micros, 800);
        // A stale figure arriving late changes nothing.
        streamed(&budgets, 100);
        assert!(budgets.reserve("ak_1", 1_000, 200, MONTH).is_ok());
    }

    #[test]
    fn a_new_month_starts_from_nothing() {
        let budgets = Budgets::default();
        streamed(&budgets, 5_000);
        assert!(budgets.reserve("ak_1", 1_000, 1, MONTH).is_err());
        assert!(budgets.reserve("ak_1", 1_000, 1, MONTH + 1).is_ok());
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
