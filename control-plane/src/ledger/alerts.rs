//! Budget limits' thresholds crossed: each recorded once per limit, month and level
//! (`budget_alerts`), with an audit event, in the transaction of the batch whose spend
//! crossed it. The proxies answer requests past the warn threshold with a header; this
//! is the durable, once-per-period record of it.

use serde_json::json;
use sqlx::Row;
use warden_shared::budget::Thresholds;
use warden_shared::pricing::micros_to_usd;
use warden_shared::snapshot::ScopeSpend;
use warden_shared::timestamp::Timestamp;

use crate::changes::{self, AuditEvent, Author, Proxies};
use crate::db::WriteTx;

/// Who the audit trail names for these events.
const ACTOR: &str = "system:ledger";

/// Records the thresholds of `tenants`' enabled budget limits that `totals` (new
/// month-to-date figures) reached for the first time this month.
pub(super) async fn record_crossings(
    tx: &mut WriteTx,
    tenants: &[&str],
    totals: &[ScopeSpend],
    now: Timestamp,
) -> Result<(), sqlx::Error> {
    for tenant_id in tenants {
        let limits = sqlx::query(
            "SELECT id, scope, monthly_limit_micros, warn_threshold_pct, block_threshold_pct \
             FROM budget_limits WHERE tenant_id = $1 AND enabled = 1",
        )
        .bind(*tenant_id)
        .fetch_all(&mut **tx)
        .await?;
        for limit in &limits {
            let scope: String = limit.try_get("scope")?;
            let Some(total) = totals
                .iter()
                .find(|t| t.tenant_id == *tenant_id && t.scope == scope)
            else {
                continue;
            };
            let limit_micros: i64 = limit.try_get("monthly_limit_micros")?;
            let warn_pct: i64 = limit.try_get("warn_threshold_pct")?;
            let block_pct: i64 = limit.try_get("block_threshold_pct")?;
            let thresholds = Thresholds::new(limit_micros, warn_pct, block_pct);
            let crossing = Crossing {
                tenant_id,
                limit_id: &limit.try_get::<String, _>("id")?,
                scope: &scope,
                total,
                limit_micros,
            };
            for (level, threshold_micros, pct) in [
                ("warn", thresholds.warn_micros, warn_pct),
                ("block", thresholds.block_micros, block_pct),
            ] {
                if total.cost_micros > 0 && total.cost_micros >= threshold_micros {
                    crossing.record(tx, level, pct, now).await?;
                }
            }
        }
    }
    Ok(())
}

struct Crossing<'a> {
    tenant_id: &'a str,
    limit_id: &'a str,
    scope: &'a str,
    total: &'a ScopeSpend,
    limit_micros: i64,
}

impl Crossing<'_> {
    /// Records the level once per month; audits only the first time.
    async fn record(
        &self,
        tx: &mut WriteTx,
        level: &str,
        pct: i64,
        now: Timestamp,
    ) -> Result<(), sqlx::Error> {
        let first = sqlx::query(
            "INSERT INTO budget_alerts (tenant_id, limit_id, month, level, spend_micros, \
             recorded_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING \
             RETURNING limit_id",
        )
        .bind(self.tenant_id)
        .bind(self.limit_id)
        .bind(self.total.month)
        .bind(level)
        .bind(self.total.cost_micros)
        .bind(now.as_millis())
        .fetch_optional(&mut **tx)
        .await?
        .is_some();
        if !first {
            return Ok(());
        }
        let event_type = if level == "warn" {
            "budget.warn_threshold_reached"
        } else {
            "budget.block_threshold_reached"
        };
        changes::record(
            tx,
            Author {
                tenant_id: self.tenant_id,
                actor: ACTOR,
            },
            now,
            AuditEvent {
                event_type,
                target_type: "budget_limit",
                target_id: self.limit_id,
                details: json!({
                    "scope": self.scope,
                    "month": Timestamp::from_millis(self.total.month).to_string(),
                    "current_spend_usd": micros_to_usd(self.total.cost_micros),
                    "monthly_limit_usd": micros_to_usd(self.limit_micros),
                    "threshold_pct": pct,
                }),
            },
            Proxies::Unaffected,
        )
        .await
        .map(|_| ())
    }
}
