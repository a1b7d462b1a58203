//! Month-to-date spend per budget scope (`usage_spend_monthly`), added in the batch's
//! transaction like the rollups. Proxies enforce budgets against it: the control plane
//! streams rows whose `updated_at` changed (see `crate::proxy_state`).
//!
//! Scopes are strings so one table serves every kind of budget
//! (`warden_shared::budget`): `key:<api_key_id>` for records of proxy keys created with
//! a `budget_limit_usd`, and `tenant`, `team:<id>` and `agent:<id>` only while a budget
//! limit or a `budget_limit` policy names them, so usage without budgets costs the
//! ledger no extra rows. [`track_scope`] starts a scope with its month-to-date spend summed from
//! the daily rollups when a budget first names it.
//!
//! A batch reads which scopes are budgeted after it took its tenants' ledger lock
//! (`days::lock_marks_for_batch`), and [`track_scope`] takes the same lock exclusively: so a
//! batch either committed before the scope's spend was summed (and is in the sum) or
//! sees the budget and adds to the scope itself. Never both, never neither.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use sqlx::Row;
use warden_shared::budget::{agent_scope, key_scope, team_scope, TENANT_SCOPE};
use warden_shared::snapshot::ScopeSpend;
use warden_shared::timestamp::Timestamp;

use super::{alerts, days, Record, DAY_MS};
use crate::db::bulk::{for_backend, placeholders, rows_per_statement};
use crate::db::WriteTx;

/// Bound values per row: tenant, scope, month, requests, cost, updated_at.
const COLUMNS: usize = 6;

/// Tenant, agent, team and month: the spend of an agent's records in a batch.
type AgentMonth<'r> = (&'r str, &'r str, Option<&'r str>, i64);

/// Adds `records` to the spend of their scopes; `now` marks the rows as changed. Returns
/// the scopes' new totals, which the proxy that sent the batch takes at once (they
/// include its records, so it need not wait for the stream).
pub(super) async fn add(
    tx: &mut WriteTx,
    records: &[Record<'_, '_>],
    now: Timestamp,
) -> Result<Vec<ScopeSpend>, sqlx::Error> {
    let mut tenants: Vec<&str> = records.iter().map(|(entry, ..)| entry.tenant_id).collect();
    tenants.sort_unstable();
    tenants.dedup();
    let budgeted = budgeted_scopes(tx, &tenants).await?;
    let keys_with_budget = keys_with_budget(tx, records).await?;
    let mut sums: HashMap<(&str, String, i64), (i64, i64)> = HashMap::new();
    let mut add_to = |tenant_id, scope: String, month, (requests, cost): (i64, i64)| {
        let sum = sums.entry((tenant_id, scope, month)).or_default();
        sum.0 += requests;
        sum.1 += cost;
    };
    // Records are first summed by agent (a batch holds few agents): the scope names are
    // then written once per agent, not once per record.
    let mut by_agent: HashMap<AgentMonth<'_>, (i64, i64)> = HashMap::new();
    for (entry, _, team_id, cost_micros, _) in records {
        let month = entry.recorded_at.month_start();
        if let Some(api_key_id) = entry.api_key_id {
            if !keys_with_budget.is_empty()
                && keys_with_budget.contains(&(entry.tenant_id, api_key_id))
            {
                add_to(
                    entry.tenant_id,
                    key_scope(api_key_id),
                    month,
                    (1, *cost_micros),
                );
            }
        }
        if budgeted.contains_key(entry.tenant_id) {
            let sum = by_agent
                .entry((entry.tenant_id, entry.agent_id, team_id.as_deref(), month))
                .or_default();
            sum.0 += 1;
            sum.1 += cost_micros;
        }
    }
    for ((tenant_id, agent_id, team_id, month), sum) in by_agent {
        let Some(scopes) = budgeted.get(tenant_id) else {
            continue;
        };
        let mut candidates = vec![TENANT_SCOPE.to_owned(), agent_scope(agent_id)];
        if let Some(team_id) = team_id {
            candidates.push(team_scope(team_id));
        }
        for scope in candidates {
            if scopes.contains(&scope) {
                add_to(tenant_id, scope, month, sum);
            }
        }
    }
    // Key order, so concurrent batches lock shared rows in the same order (no deadlock).
    let mut rows: Vec<_> = sums.into_iter().collect();
    rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut totals = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(rows_per_statement(tx, COLUMNS)) {
        let values = placeholders(tx, chunk.len(), COLUMNS, 1);
        let sql = for_backend(
            tx,
            format!(
                "INSERT INTO usage_spend_monthly (tenant_id, scope, month, requests, cost_micros, \
             updated_at) VALUES {} ON CONFLICT (tenant_id, scope, month) DO UPDATE SET \
             requests = usage_spend_monthly.requests + excluded.requests, \
             cost_micros = usage_spend_monthly.cost_micros + excluded.cost_micros, \
             updated_at = excluded.updated_at RETURNING tenant_id, scope, month, cost_micros",
                values
            ),
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
                tenant_id: row.try_get("tenant_id")?,
                scope: row.try_get("scope")?,
                month: row.try_get("month")?,
                cost_micros: row.try_get("cost_micros")?,
            });
        }
    }
    // Only tenants with a budget can cross a threshold (in tenant order, like the rest).
    let mut budgeted_tenants: Vec<&str> = budgeted.keys().copied().collect();
    if !budgeted_tenants.is_empty() {
        budgeted_tenants.sort_unstable();
        alerts::record_crossings(tx, &budgeted_tenants, &totals, now).await?;
    }
    Ok(totals)
}

/// The records' proxy keys that have a `budget_limit_usd`: only their spend is kept. A
/// key's budget is set when it is created and never changes, so a key without one never
/// needs its month's spend, and a record always arrives after its key's row exists.
async fn keys_with_budget<'r>(
    tx: &mut WriteTx,
    records: &[Record<'_, 'r>],
) -> Result<HashSet<(&'r str, &'r str)>, sqlx::Error> {
    let mut keys: Vec<(&str, &str)> = records
        .iter()
        .filter_map(|(entry, ..)| Some((entry.tenant_id, entry.api_key_id?)))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut with_budget = HashSet::new();
    for chunk in keys.chunks(rows_per_statement(tx, 2)) {
        let values = placeholders(tx, chunk.len(), 2, 1);
        let sql = for_backend(
            tx,
            format!(
                "SELECT tenant_id, api_key_id FROM proxy_keys \
                 WHERE budget_limit_micros IS NOT NULL AND (tenant_id, api_key_id) IN (VALUES {})",
                values
            ),
        );
        let mut query = sqlx::query(&sql);
        for (tenant_id, api_key_id) in chunk {
            query = query.bind(*tenant_id).bind(*api_key_id);
        }
        for row in query.fetch_all(&mut **tx).await? {
            let found: (String, String) = (row.try_get("tenant_id")?, row.try_get("api_key_id")?);
            // The chunk is sorted: its own (borrowed) pair goes in the set.
            if let Ok(at) = chunk.binary_search_by(|k| k.cmp(&(&found.0, &found.1))) {
                with_budget.insert(chunk[at]);
            }
        }
    }
    Ok(with_budget)
}

/// The `tenant`, `team:` and `agent:` scopes that `tenants`' budget limits and
/// `budget_limit` policies name (disabled ones too: enabling one must not find a gap).
async fn budgeted_scopes<'t>(
    tx: &mut WriteTx,
    tenants: &[&'t str],
) -> Result<HashMap<&'t str, HashSet<String>>, sqlx::Error> {
    let mut budgeted = HashMap::new();
    for tenant_id in tenants {
        let rows = sqlx::query(
            "SELECT scope FROM budget_limits WHERE tenant_id = $1 \
             UNION SELECT CASE WHEN scope = 'global' THEN 'tenant' ELSE scope END AS scope \
             FROM policies WHERE tenant_id = $1 AND policy_type = 'budget_limit'",
        )
        .bind(*tenant_id)
        .fetch_all(&mut **tx)
        .await?;
        let scopes = rows
            .iter()
            .map(|row| row.try_get("scope"))
            .collect::<Result<HashSet<String>, _>>()?;
        if !scopes.is_empty() {
            budgeted.insert(*tenant_id, scopes);
        }
    }
    Ok(budgeted)
}

/// The sums of a tenant's usage in `[$2, $3)` (whole days) from the daily rollups
/// (closed and open days) and the hours not yet rolled into them, with an optional extra
/// condition on `$4`.
macro_rules! sum_month {
    ($filter:literal) => {
        concat!(
            "SELECT CAST(COALESCE(SUM(requests), 0) AS BIGINT) AS requests, \
             CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) AS cost FROM (\
             SELECT requests, cost_micros FROM usage_daily \
             WHERE tenant_id = $1 AND day >= $2 AND day < $3",
            $filter,
            " UNION ALL SELECT requests, cost_micros FROM usage_daily_open \
             WHERE tenant_id = $1 AND day >= $2 AND day < $3",
            $filter,
            " UNION ALL SELECT requests, cost_micros FROM usage_hourly \
             WHERE tenant_id = $1 AND hour < $3 AND hour >= ",
            super::unrolled_from!("$1", "$2", "$3"),
            $filter,
            ") d"
        )
    };
}

/// Starts (or re-sums) the spend of `scope` (`tenant`, `team:<id>`, `agent:<id>`) for
/// the month of `now` from the rollups (see `super::days`). Call it in the transaction that makes a budget name the scope.
pub async fn track_scope(
    tx: &mut WriteTx,
    tenant_id: &str,
    scope: &str,
    now: Timestamp,
) -> Result<(), sqlx::Error> {
    // Waits for the tenant's batches in flight and holds off new ones until commit.
    days::lock_marks(tx, tenant_id).await?;
    let month = now.month_start();
    // The month's last day ends before the next month starts: 31 days always reach past it.
    let next_month = Timestamp::from_millis(month + 31 * DAY_MS).month_start();
    let (sql, filter) = if scope == TENANT_SCOPE {
        (sum_month!(""), None)
    } else if let Some(team_id) = scope.strip_prefix("team:") {
        (sum_month!(" AND team_id = $4"), Some(team_id))
    } else if let Some(agent_id) = scope.strip_prefix("agent:") {
        (sum_month!(" AND agent_id = $4"), Some(agent_id))
    } else {
        return Ok(());
    };
    let mut query = sqlx::query(sql)
        .bind(tenant_id)
        .bind(month)
        .bind(next_month);
    if let Some(filter) = filter {
        query = query.bind(filter);
    }
    let row = query.fetch_one(&mut **tx).await?;
    let requests: i64 = row.try_get("requests")?;
    let cost_micros: i64 = row.try_get("cost")?;
    sqlx::query(
        "INSERT INTO usage_spend_monthly (tenant_id, scope, month, requests, cost_micros, \
         updated_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant_id, scope, month) \
         DO UPDATE SET requests = excluded.requests, cost_micros = excluded.cost_micros, \
         updated_at = excluded.updated_at",
    )
    .bind(tenant_id)
    .bind(scope)
    .bind(month)
    .bind(requests)
    .bind(cost_micros)
    .bind(now.as_millis())
    .execute(&mut **tx)
    .await?;
    Ok(())
}
