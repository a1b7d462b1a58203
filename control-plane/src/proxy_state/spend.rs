//! The spend the proxies' budgets are checked against: month-to-date spend of budget
//! scopes (`usage_spend_monthly`, kept by `crate::ledger::spend`), read for the stream's
//! snapshots and spend messages and for the deltas that change a budget.

use sqlx::{AnyPool, Row};
use warden_shared::policy::{budget_scope, PolicyType, Scope};
use warden_shared::snapshot::{Entity, ScopeSpend};
use warden_shared::timestamp::Timestamp;

/// The spend in `month` of every budgeted scope whose row changed at or after
/// `since_ms` (the writer's clock): proxy keys with a `budget_limit_usd`, and the
/// tenant, team and agent scopes the ledger tracks for budgets (see `crate::ledger`).
pub async fn since(
    pool: &AnyPool,
    month: i64,
    since_ms: i64,
) -> Result<Vec<ScopeSpend>, sqlx::Error> {
    // A key's id is the scope after `key:`, so the join probes proxy_keys' primary key.
    sqlx::query(
        "SELECT s.tenant_id, s.scope, s.month, s.cost_micros FROM usage_spend_monthly s \
         JOIN proxy_keys p ON p.api_key_id = substr(s.scope, 5) AND p.tenant_id = s.tenant_id \
         WHERE s.updated_at >= $2 AND s.month = $1 AND s.scope LIKE 'key:%' \
         AND p.budget_limit_micros IS NOT NULL \
         UNION ALL SELECT s.tenant_id, s.scope, s.month, s.cost_micros FROM usage_spend_monthly s \
         WHERE s.updated_at >= $2 AND s.month = $1 AND s.scope NOT LIKE 'key:%'",
    )
    .bind(month)
    .bind(since_ms)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| {
        Ok(ScopeSpend {
            tenant_id: row.try_get("tenant_id")?,
            scope: row.try_get("scope")?,
            month: row.try_get("month")?,
            cost_micros: row.try_get("cost_micros")?,
        })
    })
    .collect()
}

/// This month's spend of the scopes that the budget limits and `budget_limit` policies
/// among `upserts` name (a row `ledger::spend::track_scope` started when the budget was
/// written).
pub async fn of_budgets(
    pool: &AnyPool,
    upserts: &[Entity],
    now_ms: i64,
) -> Result<Vec<ScopeSpend>, sqlx::Error> {
    let mut scopes = std::collections::BTreeSet::new();
    for entity in upserts {
        match entity {
            Entity::BudgetLimit(limit) => {
                scopes.insert((limit.tenant_id.as_str(), limit.scope.clone()));
            }
            Entity::Policy(policy) if policy.policy_type == PolicyType::BudgetLimit => {
                if let Some(scope) = Scope::parse(&policy.scope) {
                    scopes.insert((policy.tenant_id.as_str(), budget_scope(&scope)));
                }
            }
            _ => {}
        }
    }
    let month = Timestamp::from_millis(now_ms).month_start();
    let mut spend = Vec::with_capacity(scopes.len());
    for (tenant_id, scope) in scopes {
        let cost: Option<i64> = sqlx::query_scalar(
            "SELECT cost_micros FROM usage_spend_monthly \
             WHERE tenant_id = $1 AND scope = $2 AND month = $3",
        )
        .bind(tenant_id)
        .bind(&scope)
        .bind(month)
        .fetch_optional(pool)
        .await?;
        spend.push(ScopeSpend {
            tenant_id: tenant_id.to_owned(),
            scope,
            month,
            cost_micros: cost.unwrap_or(0),
        });
    }
    Ok(spend)
}
