//! Budget arithmetic both planes share: a budget's thresholds and what they say about a
//! request, so the proxy, the dry run and `/budget/status` agree by construction.
//!
//! A budget counts the month-to-date spend of one scope of a tenant, named as the ledger
//! tracks it (`usage_spend_monthly.scope`):
//! - `tenant`: everything the tenant spends;
//! - `team:<team_id>`: its agents' spend (the team a record was attributed to);
//! - `agent:<agent_id>`: one agent's spend;
//! - `key:<api_key_id>`: what went through one proxy key (its `budget_limit_usd`).

/// The scope of a tenant-wide budget.
pub const TENANT_SCOPE: &str = "tenant";

/// The scope of a team's budget.
pub fn team_scope(team_id: &str) -> String {
    format!("team:{team_id}")
}

/// The scope of an agent's budget.
pub fn agent_scope(agent_id: &str) -> String {
    format!("agent:{agent_id}")
}

/// The scope of a proxy key's own budget.
pub fn key_scope(api_key_id: &str) -> String {
    format!("key:{api_key_id}")
}

/// `pct` percent of `limit_micros`, rounded down.
pub fn threshold_micros(limit_micros: i64, pct: i64) -> i64 {
    let amount = i128::from(limit_micros) * i128::from(pct) / 100;
    i64::try_from(amount).unwrap_or(i64::MAX)
}

/// A budget's two thresholds in micro-dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub warn_micros: i64,
    pub block_micros: i64,
}

impl Thresholds {
    pub fn new(limit_micros: i64, warn_pct: i64, block_pct: i64) -> Thresholds {
        Thresholds {
            warn_micros: threshold_micros(limit_micros, warn_pct),
            block_micros: threshold_micros(limit_micros, block_pct),
        }
    }

    /// What a request estimated at `estimate_micros` meets, `spent_micros` being what the
    /// scope has spent or holds for requests in flight.
    ///
    /// Blocked once the spend reached the block threshold (spec 3.5), and also when the
    /// request's estimate does not fit below it: admitting it could only overshoot. A
    /// zero budget therefore blocks everything.
    pub fn verdict(&self, spent_micros: i64, estimate_micros: i64) -> Verdict {
        let after = spent_micros.saturating_add(estimate_micros.max(0));
        if spent_micros >= self.block_micros || after > self.block_micros {
            Verdict::Block
        } else if after >= self.warn_micros {
            Verdict::Warn
        } else {
            Verdict::Within
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Within,
    /// Admitted, past the warn threshold.
    Warn,
    Block,
}

/// `spent` as a percentage of `limit`, two decimals (`/budget/status`); 0 for a zero limit
/// with nothing spent, and 100 per whole limit otherwise.
pub fn percentage(spent_micros: i64, limit_micros: i64) -> f64 {
    if limit_micros <= 0 {
        return if spent_micros > 0 { 100.0 } else { 0.0 };
    }
    let basis_points = i128::from(spent_micros) * 10_000 / i128::from(limit_micros);
    basis_points as f64 / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_warn_then_block_and_an_estimate_must_fit() {
        let budget = Thresholds::new(1_000, 80, 100);
        assert_eq!(budget.verdict(0, 100), Verdict::Within);
        assert_eq!(budget.verdict(700, 100), Verdict::Warn);
        assert_eq!(budget.verdict(900, 100), Verdict::Warn);
        assert_eq!(budget.verdict(901, 100), Verdict::Block);
        assert_eq!(budget.verdict(1_000, 0), Verdict::Block);
        let over = Thresholds::new(1_000, 80, 150);
        assert_eq!(over.verdict(1_400, 100), Verdict::Warn);
        assert_eq!(Thresholds::new(0, 80, 100).verdict(0, 0), Verdict::Block);
    }

    #[test]
    fn percentages_have_two_decimals() {
        assert_eq!(percentage(1, 3), 33.33);
        assert_eq!(percentage(2_500_000, 10_000_000), 25.0);
        assert_eq!(percentage(0, 0), 0.0);
        assert_eq!(percentage(5, 0), 100.0);
    }
}
