//! `POST /internal/v1/usage-batches`: the proxy's usage, idempotent by record id.
//!
//! The proxy retries a batch until it is acknowledged, so the same records may arrive
//! more than once. Each record carries an id that is unique within its tenant; a record
//! whose id was ingested before is counted as a duplicate and changes nothing. The whole
//! batch is one transaction: either every new record lands with its rollup or none does.

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use super::ServiceCaller;
use crate::api::envelope::{self, Envelope};
use crate::api::extract::{parse_value, ApiJson};
use crate::api::telemetry::{usage_entry, ItemError, UsageInput};
use crate::api::validate::Text;
use crate::error::{ApiError, ApiResult};
use crate::ledger;
use crate::state::AppState;

/// The largest batch the proxy may send.
pub const MAX_RECORDS: usize = 1000;
/// How far in the future a record's time may be (clock skew between machines).
const MAX_SKEW_MS: i64 = 300_000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageBatch {
    pub batch_id: Text<1, 100>,
    #[schema(value_type = Vec<ProxyUsageRecord>)]
    pub records: Vec<Value>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProxyUsageRecord {
    /// Unique within the tenant; the idempotency key.
    pub record_id: Text<1, 100>,
    pub tenant_id: String,
    pub agent_id: String,
    #[schema(value_type = String)]
    pub model_provider: Provider,
    pub model_name: Text<1, 200>,
    #[serde(default)]
    pub request_type: Option<Text<1, 64>>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[schema(value_type = String, format = DateTime)]
    pub recorded_at: Timestamp,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchAck {
    pub batch_id: String,
    pub accepted: i64,
    pub duplicates: i64,
    pub rejected: i64,
    pub errors: Vec<ItemError>,
}

#[utoipa::path(post, path = "/internal/v1/usage-batches", tag = "internal", request_body = UsageBatch,
    security(("service_token" = [])),
    responses((status = 200, description = "What was new, what was seen before, what was refused", body = Envelope<BatchAck>)))]
pub async fn ingest_usage_batch(
    _service: ServiceCaller,
    State(state): State<AppState>,
    ApiJson(batch): ApiJson<UsageBatch>,
) -> ApiResult<Response> {
    if batch.records.len() > MAX_RECORDS {
        return Err(ApiError::validation(
            "records",
            format!("records: at most {MAX_RECORDS} per batch"),
        ));
    }
    let now = state.clock.now();
    let mut ack = BatchAck {
        batch_id: batch.batch_id.as_str().to_owned(),
        accepted: 0,
        duplicates: 0,
        rejected: 0,
        errors: Vec::new(),
    };
    let mut tx = state.db.begin_write().await?;
    for (index, raw) in batch.records.into_iter().enumerate() {
        let record = match parse_value::<ProxyUsageRecord>(raw).and_then(|r| check_time(r, now)) {
            Ok(record) => record,
            Err(error) => {
                ack.errors.push(ItemError::from_api_error(index, error));
                continue;
            }
        };
        let seen: Option<String> = sqlx::query_scalar(
            "SELECT record_id FROM usage_ingest_keys WHERE tenant_id = $1 AND record_id = $2",
        )
        .bind(&record.tenant_id)
        .bind(record.record_id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        if seen.is_some() {
            ack.duplicates += 1;
            continue;
        }
        let input = UsageInput {
            agent_id: record.agent_id.clone(),
            model_provider: record.model_provider,
            model_name: record.model_name.clone(),
            input_tokens: record.input_tokens,
            output_tokens: record.output_tokens,
            request_type: record.request_type.clone(),
            cost_usd: record.cost_usd,
        };
        let entry = match usage_entry(&input, record.recorded_at, true) {
            Ok(entry) => entry,
            Err(error) => {
                ack.errors.push(ItemError::from_api_error(index, error));
                continue;
            }
        };
        if ledger::record_usage(&mut tx, &record.tenant_id, &entry)
            .await?
            .is_none()
        {
            ack.errors.push(ItemError {
                index,
                field: Some("agent_id".to_owned()),
                message: "agent_id: no such agent in that tenant".to_owned(),
            });
            continue;
        }
        sqlx::query(
            "INSERT INTO usage_ingest_keys (tenant_id, record_id, batch_id, received_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(&record.tenant_id)
        .bind(record.record_id.as_str())
        .bind(batch.batch_id.as_str())
        .bind(now.as_millis())
        .execute(&mut *tx)
        .await?;
        ack.accepted += 1;
    }
    tx.commit().await?;
    ack.rejected = i64::try_from(ack.errors.len()).unwrap_or(i64::MAX);
    Ok(envelope::ok(ack))
}

fn check_time(record: ProxyUsageRecord, now: Timestamp) -> ApiResult<ProxyUsageRecord> {
    if record.recorded_at.as_millis() > now.as_millis() + MAX_SKEW_MS {
        return Err(ApiError::validation(
            "recorded_at",
            "recorded_at: lies more than five minutes in the future",
        ));
    }
    Ok(record)
}
