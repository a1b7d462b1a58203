//! Month-to-date spend per budget scope (`usage_spend_monthly`), added in the batch's
//! transaction like the rollups. Proxies enforce budgets against it: the control plane
//! streams rows whose `updated_at` changed (see `crate::proxy_state`).
//!
//! Scopes are strings so one table serves every kind of budget: `key:<api_key_id>` for
//! a proxy key's `budget_limit_usd`.

use std::collections::HashMap;

use sqlx::Row;
use warden_shared::snapshot::ScopeSpend;
use warden_shared::timestamp::Timestamp;

use super::{placeholders, rows_per_statement, Record};
use crate::db::WriteTx;

/// Bound values per row: tenant, scope, month, requests, cost, updated_at.
const COLUMNS: usize = 6;

/// The scope of a proxy key's own budget.
pub fn key_scope(api_key_id: &str) -> String {
    format!("key:{api_key_id}")
}

/// Adds `records` to the spend of their scopes; `now` marks the rows as changed. Returns
/// the scopes' new totals, which the proxy that sent the batch takes at once (they
/// include its records, so it need not wait for the stream).
pub(super) async fn add(
    tx: &mut WriteTx,
    records: &[Record<'_, '_>],
    now: Timestamp,
) -> Result<Vec<ScopeSpend>, sqlx::Error> {
    let mut sums: HashMap<(&str, String, i64), (i64, i64)> = HashMap::new();
    for (entry, _, _, cost_micros, _) in records {
        let Some(api_key_id) = entry.api_key_id else {
            continue;
        };
        let month = entry.recorded_at.month_start();
        let sum = sums
            .entry((entry.tenant_id, key_scope(api_key_id), month))
            .or_default();
        sum.0 += 1;
        sum.1 += cost_micros;
    }
    // Key order, so concurrent batches lock shared rows in the same order (no deadlock).
    let mut rows: Vec<_> = sums.into_iter().collect();
    rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut totals = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(rows_per_statement(tx, COLUMNS)) {
        let sql = format!(
            "INSERT INTO usage_spend_monthly (tenant_id, scope, month, requests, cost_micros, \
             updated_at) VALUES {} ON CONFLICT (tenant_id, scope, month) DO UPDATE SET \
             requests = usage_spend_monthly.requests + excluded.requests, \
             cost_micros = usage_spend_monthly.cost_micros + excluded.cost_micros, \
             updated_at = excluded.updated_at RETURNING scope, month, cost_micros",
            placeholders(chunk.len(), COLUMNS, 1)
        );
        let mut query = sqlx::query(&sql);
        for ((tenant_id, scope, month), (requests, cost_micros)) in chunk {
            query = query
                .bind(*tenant_id)
                .bind(scope.as_str())
                .bind(*month)
                .bind(*requests)
                .bind(*cost_micros)
                .bind(now.as_millis());
        }
        for row in query.fetch_all(&mut **tx).await? {
            totals.push(ScopeSpend {
                scope: row.try_get("scope")?,
                month: row.try_get("month")?,
                cost_micros: row.try_get("cost_micros")?,
            });
        }
    }
    Ok(totals)
}
