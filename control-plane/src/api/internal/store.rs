//! SQL of the internal endpoints' own rows: decision batch ids, the agents and policies
//! a proxy's decision names, the MCP gateway's tool calls and the tool drifts proxies
//! report. Every statement on a tenant's rows filters by tenant; decision batch ids are
//! the proxies', not a tenant's. Usage is written by
//! `crate::ledger`, evaluation records by `api::policies`, approvals by `api::approvals`.

use std::collections::{BTreeSet, HashMap};

use warden_shared::timestamp::Timestamp;

use super::input::{ProxyUsageRecord, ToolCallInput};
use crate::db::bulk::{self, is_postgres};
use crate::db::WriteTx;

/// Which of `tenant_ids` still exist. On PostgreSQL each found tenant row is locked
/// (`FOR KEY SHARE`) until the transaction ends, in id order: a tenant deletion locks
/// its row first (`tenancy::delete_tenant_rows`), so it either commits before the batch
/// looks (and the batch drops the tenant's records) or waits until the batch commits
/// (and deletes what the batch wrote). On SQLite write transactions run one at a time.
pub async fn live_tenants<'a>(
    tx: &mut WriteTx,
    tenant_ids: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeSet<String>, sqlx::Error> {
    let wanted: BTreeSet<&str> = tenant_ids.into_iter().collect();
    let sql = if is_postgres(tx) {
        "SELECT id FROM tenants WHERE id = $1 FOR KEY SHARE"
    } else {
        "SELECT id FROM tenants WHERE id = $1"
    };
    let mut live = BTreeSet::new();
    for tenant_id in wanted {
        let found: Option<String> = sqlx::query_scalar(sql)
            .bind(tenant_id)
            .fetch_optional(&mut **tx)
            .await?;
        live.extend(found);
    }
    Ok(live)
}

/// Remembers a decision batch's id; false when it was seen before. A concurrent resend
/// on PostgreSQL waits here on the first one's key.
pub async fn claim_decision_batch(
    tx: &mut WriteTx,
    batch_id: &str,
    received_at: Timestamp,
) -> Result<bool, sqlx::Error> {
    let inserted = sqlx::query(
        "INSERT INTO policy_decision_batches (batch_id, received_at) VALUES ($1, $2) \
         ON CONFLICT (batch_id) DO NOTHING",
    )
    .bind(batch_id)
    .bind(received_at.as_millis())
    .execute(&mut **tx)
    .await?;
    Ok(inserted.rows_affected() == 1)
}

/// Forgets the ids of decision batches received before `before_ms`; returns how many.
pub async fn forget_decision_batches_before(
    tx: &mut WriteTx,
    before_ms: i64,
) -> Result<u64, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM policy_decision_batches WHERE received_at < $1")
        .bind(before_ms)
        .execute(&mut **tx)
        .await?;
    Ok(deleted.rows_affected())
}

/// `Some(team_id)` when the tenant has the agent, deleted or not (`Some(None)`: without
/// a team).
pub async fn agent_team(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
) -> Result<Option<Option<String>>, sqlx::Error> {
    sqlx::query_scalar("SELECT team_id FROM agents WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(agent_id)
        .fetch_optional(&mut **tx)
        .await
}

/// Whether the tenant has the policy.
pub async fn policy_exists(
    tx: &mut WriteTx,
    tenant_id: &str,
    policy_id: i64,
) -> Result<bool, sqlx::Error> {
    let count: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM policies WHERE tenant_id = $1 AND id = $2")
            .bind(tenant_id)
            .bind(policy_id)
            .fetch_one(&mut **tx)
            .await?;
    Ok(count > 0)
}

/// Stores the tool call `call` of `record` unless the tenant has a record of that id
/// already; whether it was new.
pub async fn insert_tool_call(
    tx: &mut WriteTx,
    record: &ProxyUsageRecord,
    call: &ToolCallInput,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO tool_calls (id, tenant_id, agent_id, api_key_id, server_id, server, \
         tool, outcome, decision, policy_id, latency_ms, recorded_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
         ON CONFLICT (tenant_id, id) DO NOTHING",
    )
    .bind(record.record_id.as_str())
    .bind(&record.tenant_id)
    .bind(&record.agent_id)
    .bind(record.api_key_id.as_ref().map(|id| id.as_str()))
    .bind(call.server_id.as_str())
    .bind(call.server.as_str())
    .bind(call.tool.as_str())
    .bind(call.outcome.as_str())
    .bind(call.decision.as_str())
    .bind(call.policy_id)
    .bind(call.latency_ms.max(0))
    .bind(record.recorded_at.as_millis())
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// The name of the tenant's MCP server, if it still has it.
pub async fn mcp_server_name(
    tx: &mut WriteTx,
    tenant_id: &str,
    server_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT name FROM mcp_servers WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(server_id)
        .fetch_optional(&mut **tx)
        .await
}

/// Records that the server's `tool` was listed with definition `fingerprint` where
/// `pinned_fingerprint` was approved (none: the tool was added since), unless that
/// definition was recorded already; whether it was new.
pub async fn insert_tool_drift(
    tx: &mut WriteTx,
    tenant_id: &str,
    server_id: &str,
    tool: &str,
    fingerprint: &str,
    pinned_fingerprint: Option<&str>,
    first_seen_at: Timestamp,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO mcp_tool_drifts (tenant_id, server_id, tool, fingerprint, \
         pinned_fingerprint, first_seen_at) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (server_id, tool, fingerprint) DO NOTHING",
    )
    .bind(tenant_id)
    .bind(server_id)
    .bind(tool)
    .bind(fingerprint)
    .bind(pinned_fingerprint)
    .bind(first_seen_at.as_millis())
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Grants up to `want` requests of `limit` in a limiter's bucket and minute: a share of
/// what is left (an eighth, at least one, at most `want`), none once the grants reach
/// the limit. One statement, so concurrent grants from several proxies never pass it
/// together. Returns what this grant gave.
pub async fn grant_rate(
    tx: &mut WriteTx,
    key: (&str, &str, &str, i64),
    limit: i64,
    want: i64,
) -> Result<i64, sqlx::Error> {
    let (tenant_id, limiter, bucket, minute) = key;
    let first = (limit / RATE_SHARE_DIVISOR).clamp(1, want).min(limit);
    sqlx::query_scalar(
        "INSERT INTO rate_grants (tenant_id, limiter, bucket, minute, granted, last_grant) \
         VALUES ($1, $2, $3, $4, $5, $5) \
         ON CONFLICT (tenant_id, limiter, bucket, minute) DO UPDATE SET \
         last_grant = CASE WHEN rate_grants.granted >= $6 THEN 0 \
           WHEN ($6 - rate_grants.granted) / $8 < 1 THEN 1 \
           WHEN ($6 - rate_grants.granted) / $8 < $7 THEN ($6 - rate_grants.granted) / $8 \
           ELSE $7 END, \
         granted = rate_grants.granted + CASE WHEN rate_grants.granted >= $6 THEN 0 \
           WHEN ($6 - rate_grants.granted) / $8 < 1 THEN 1 \
           WHEN ($6 - rate_grants.granted) / $8 < $7 THEN ($6 - rate_grants.granted) / $8 \
           ELSE $7 END \
         RETURNING last_grant",
    )
    .bind(tenant_id)
    .bind(limiter)
    .bind(bucket)
    .bind(minute)
    .bind(first)
    .bind(limit)
    .bind(want)
    .bind(RATE_SHARE_DIVISOR)
    .fetch_one(&mut **tx)
    .await
}

/// A rate limit's bucket and minute: tenant id, limiter, bucket, minute.
pub type RateKey<'a> = (&'a str, &'a str, &'a str, i64);

/// [`grant_rate`] for many buckets and minutes of one `limit` and `want` (a policy's),
/// in one statement per [`bulk::rows_per_statement`]: what each key was granted, in the
/// keys' order (a key the statement did not return: 0). The keys must differ
/// (PostgreSQL refuses to update a row twice in one statement) and come in key order
/// (row locks taken in one order by every batch).
pub async fn grant_rates(
    tx: &mut WriteTx,
    keys: &[RateKey<'_>],
    limit: i64,
    want: i64,
) -> Result<Vec<i64>, sqlx::Error> {
    // What is left's share, as in `grant_rate`, from the statement's first parameters.
    const SHARE: &str = "CASE WHEN rate_grants.granted >= rate_limit THEN 0 \
        WHEN (rate_limit - rate_grants.granted) / divisor < 1 THEN 1 \
        WHEN (rate_limit - rate_grants.granted) / divisor < want \
          THEN (rate_limit - rate_grants.granted) / divisor \
        ELSE want END";
    let first = (limit / RATE_SHARE_DIVISOR).clamp(1, want).min(limit);
    // RETURNING gives rows in no set order on either engine: each is placed by its key.
    let position: HashMap<RateKey<'_>, usize> =
        keys.iter().enumerate().map(|(i, key)| (*key, i)).collect();
    let mut granted = vec![0; keys.len()];
    for chunk in keys.chunks(bulk::rows_per_statement(tx, 6)) {
        let rows = bulk::placeholders(tx, chunk.len(), 6, 4);
        let sql = format!(
            "WITH share (rate_limit, want, divisor) AS (SELECT $1, $2, $3) \
             INSERT INTO rate_grants (tenant_id, limiter, bucket, minute, granted, last_grant) \
             VALUES {rows} \
             ON CONFLICT (tenant_id, limiter, bucket, minute) DO UPDATE SET \
             last_grant = (SELECT {SHARE} FROM share), \
             granted = rate_grants.granted + (SELECT {SHARE} FROM share) \
             RETURNING tenant_id, limiter, bucket, minute, last_grant"
        );
        let sql = bulk::for_backend(tx, sql);
        let mut query = sqlx::query_as::<_, (String, String, String, i64, i64)>(&sql)
            .bind(limit)
            .bind(want)
            .bind(RATE_SHARE_DIVISOR);
        for (tenant_id, limiter, bucket, minute) in chunk {
            query = query
                .bind(*tenant_id)
                .bind(*limiter)
                .bind(*bucket)
                .bind(*minute)
                .bind(first)
                .bind(first);
        }
        for (tenant_id, limiter, bucket, minute, gave) in query.fetch_all(&mut **tx).await? {
            let key = (
                tenant_id.as_str(),
                limiter.as_str(),
                bucket.as_str(),
                minute,
            );
            if let Some(&i) = position.get(&key) {
                granted[i] = gave;
            }
        }
    }
    Ok(granted)
}

/// A grant gives at most this fraction of what is left of a limit, so that the
/// allowance proxies hold unused when the limit is reached stays small.
const RATE_SHARE_DIVISOR: i64 = 8;

/// Forgets the grants of minutes before `minute`.
pub async fn forget_rate_grants(db: &crate::db::Db, minute: i64) -> Result<u64, sqlx::Error> {
    let mut tx = db.begin_write().await?;
    let done = sqlx::query("DELETE FROM rate_grants WHERE minute < $1")
        .bind(minute)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(done)
}

/// One proxy's holding in one budget scope and month.
pub struct GrantKey<'a> {
    pub tenant_id: &'a str,
    pub scope: &'a str,
    pub month: i64,
    pub holder: &'a str,
}

/// What a budget scope's month has committed, as a grant sees it.
pub struct BudgetFigures {
    /// The ledger's month-to-date spend.
    pub spend: i64,
    /// What the other live holders hold.
    pub others: i64,
    /// What this holder holds (0 if its holding lapsed).
    pub own: i64,
}

/// Reads a scope's figures for a grant, holding the scope's spend row until the
/// transaction ends (created at 0 if the ledger has none yet): grants of one scope, and
/// the ledger batches adding to it, go one at a time (see `budget_grants`).
pub async fn budget_figures(
    tx: &mut WriteTx,
    key: &GrantKey<'_>,
    now: Timestamp,
    lapse_ms: i64,
) -> Result<BudgetFigures, sqlx::Error> {
    // The no-op update takes the row's lock on PostgreSQL; SQLite writes one at a time.
    let spend: i64 = sqlx::query_scalar(
        "INSERT INTO usage_spend_monthly (tenant_id, scope, month, requests, cost_micros, \
         updated_at) VALUES ($1, $2, $3, 0, 0, $4) ON CONFLICT (tenant_id, scope, month) \
         DO UPDATE SET requests = usage_spend_monthly.requests RETURNING cost_micros",
    )
    .bind(key.tenant_id)
    .bind(key.scope)
    .bind(key.month)
    .bind(now.as_millis())
    .fetch_one(&mut **tx)
    .await?;
    let live_from = now.as_millis() - lapse_ms;
    let (others, own): (i64, i64) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(CASE WHEN holder <> $4 THEN held_micros ELSE 0 END), 0) \
         AS BIGINT), CAST(COALESCE(SUM(CASE WHEN holder = $4 THEN held_micros ELSE 0 END), 0) \
         AS BIGINT) FROM budget_grants WHERE tenant_id = $1 AND scope = $2 AND month = $3 \
         AND renewed_at >= $5 AND held_micros > 0",
    )
    .bind(key.tenant_id)
    .bind(key.scope)
    .bind(key.month)
    .bind(key.holder)
    .bind(live_from)
    .fetch_one(&mut **tx)
    .await?;
    Ok(BudgetFigures { spend, others, own })
}

/// Sets what `key`'s holder holds, renewed now (a holding of 0 is removed).
pub async fn hold_budget(
    tx: &mut WriteTx,
    key: &GrantKey<'_>,
    held_micros: i64,
    now: Timestamp,
) -> Result<(), sqlx::Error> {
    let query = if held_micros > 0 {
        sqlx::query(
            "INSERT INTO budget_grants (tenant_id, scope, month, holder, held_micros, renewed_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant_id, scope, month, holder) \
             DO UPDATE SET held_micros = excluded.held_micros, renewed_at = excluded.renewed_at",
        )
        .bind(key.tenant_id)
        .bind(key.scope)
        .bind(key.month)
        .bind(key.holder)
        .bind(held_micros)
        .bind(now.as_millis())
    } else {
        sqlx::query(
            "DELETE FROM budget_grants \
             WHERE tenant_id = $1 AND scope = $2 AND month = $3 AND holder = $4",
        )
        .bind(key.tenant_id)
        .bind(key.scope)
        .bind(key.month)
        .bind(key.holder)
    };
    query.execute(&mut **tx).await?;
    Ok(())
}

/// Forgets holdings not renewed since `before_ms` (lapsed: see `budget_grants`).
pub async fn forget_budget_grants(db: &crate::db::Db, before_ms: i64) -> Result<u64, sqlx::Error> {
    let mut tx = db.begin_write().await?;
    let done = sqlx::query("DELETE FROM budget_grants WHERE renewed_at < $1")
        .bind(before_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(done)
}
