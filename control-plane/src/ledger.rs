//! The cost ledger: append a usage record and fold it into the hourly rollup, in the
//! caller's transaction.
//!
//! Records are never updated or deleted (except with their tenant). Every cost view reads
//! `usage_hourly`, whose rows are keyed by tenant, hour, agent, team, provider and model.

use warden_shared::ids::{new_id, IdKind};
use warden_shared::pricing;
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::db::WriteTx;

/// Milliseconds in an hour, the rollups' bucket.
pub const HOUR_MS: i64 = 3_600_000;

/// One usage event to record.
#[derive(Debug, Clone)]
pub struct UsageEntry<'a> {
    pub agent_id: &'a str,
    pub provider: Provider,
    pub model_name: &'a str,
    pub request_type: &'a str,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// The cost as reported; computed from the price table when `None`.
    pub cost_micros: Option<i64>,
    pub recorded_at: Timestamp,
    /// Usage the proxy served before an agent was deleted still counts; the public
    /// telemetry endpoints accept only live agents.
    pub include_deleted_agents: bool,
}

/// What was stored.
#[derive(Debug, Clone)]
pub struct RecordedUsage {
    pub id: String,
    pub cost_micros: i64,
    /// False when the model is not in the price table and no cost was given.
    pub priced: bool,
}

/// Appends `entry` for `tenant_id`'s agent, or returns `None` when the tenant has no such
/// live agent.
pub async fn record_usage(
    tx: &mut WriteTx,
    tenant_id: &str,
    entry: &UsageEntry<'_>,
) -> Result<Option<RecordedUsage>, sqlx::Error> {
    let team: Option<Option<String>> = sqlx::query_scalar(
        "SELECT team_id FROM agents WHERE tenant_id = $1 AND id = $2 \
         AND ($3 = 1 OR deleted_at IS NULL)",
    )
    .bind(tenant_id)
    .bind(entry.agent_id)
    .bind(i64::from(entry.include_deleted_agents))
    .fetch_optional(&mut **tx)
    .await?;
    let Some(team_id) = team else {
        return Ok(None);
    };
    let price = pricing::find_price(entry.provider, entry.model_name);
    let (cost_micros, priced) = match (entry.cost_micros, price) {
        (Some(cost), _) => (cost, true),
        (None, Some(price)) => (
            pricing::cost_micros(price, entry.input_tokens, entry.output_tokens),
            true,
        ),
        (None, None) => (0, false),
    };
    let at = entry.recorded_at.as_millis();
    let id = new_id(IdKind::Usage, at);
    sqlx::query(
        "INSERT INTO usage_records (id, tenant_id, agent_id, team_id, model_provider, model_name, \
         request_type, input_tokens, output_tokens, cost_micros, priced, recorded_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(&id)
    .bind(tenant_id)
    .bind(entry.agent_id)
    .bind(&team_id)
    .bind(entry.provider.as_str())
    .bind(entry.model_name)
    .bind(entry.request_type)
    .bind(entry.input_tokens)
    .bind(entry.output_tokens)
    .bind(cost_micros)
    .bind(i64::from(priced))
    .bind(at)
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "INSERT INTO usage_hourly (tenant_id, hour, agent_id, team_id, model_provider, model_name, \
         requests, input_tokens, output_tokens, cost_micros) \
         VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8, $9) \
         ON CONFLICT (tenant_id, hour, agent_id, team_id, model_provider, model_name) DO UPDATE SET \
         requests = usage_hourly.requests + 1, \
         input_tokens = usage_hourly.input_tokens + excluded.input_tokens, \
         output_tokens = usage_hourly.output_tokens + excluded.output_tokens, \
         cost_micros = usage_hourly.cost_micros + excluded.cost_micros",
    )
    .bind(tenant_id)
    .bind(at - at.rem_euclid(HOUR_MS))
    .bind(entry.agent_id)
    .bind(team_id.unwrap_or_default())
    .bind(entry.provider.as_str())
    .bind(entry.model_name)
    .bind(entry.input_tokens)
    .bind(entry.output_tokens)
    .bind(cost_micros)
    .execute(&mut **tx)
    .await?;
    Ok(Some(RecordedUsage {
        id,
        cost_micros,
        priced,
    }))
}
