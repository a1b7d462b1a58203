//! Heartbeats, one or a batch of up to 100.
//!
//! A single heartbeat makes its agent `healthy`; a batch item sets the status it carries
//! (spec 3.1). Every heartbeat is also kept as a row for health scores. A batch records
//! the items of known agents and lists the unknown ids instead of failing as a whole.

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use warden_shared::ids::{is_valid_id, new_id, IdKind};
use warden_shared::registry::AgentStatus;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::ApiJson;
use crate::auth::{require, Authorized};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The largest batch `/telemetry/heartbeats` accepts (spec 8).
pub const MAX_BATCH: usize = 100;
const MAX_LATENCY_MS: i64 = 3_600_000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatInput {
    pub agent_id: String,
    /// Accepted so the heartbeat object of spec 2.12 can be sent as it is (`healthy`,
    /// `degraded`, `down` or `unknown`), but a single heartbeat always makes the agent
    /// `healthy` (spec 3.1); send a batch to report another status.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    #[allow(dead_code, reason = "validated when parsed, then not used: see above")]
    pub status: Option<AgentStatus>,
    /// 0 to 3,600,000.
    #[serde(default)]
    pub latency_ms: Option<i64>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HeartbeatRecorded {
    pub agent_id: String,
    pub status: &'static str,
    #[schema(value_type = String, format = DateTime)]
    pub last_heartbeat: Timestamp,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchItem {
    pub agent_id: String,
    /// `healthy`, `degraded`, `down` or `unknown`; taken as sent.
    #[schema(value_type = String)]
    pub status: AgentStatus,
    #[serde(default)]
    pub latency_ms: Option<i64>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchInput {
    pub heartbeats: Vec<BatchItem>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchRecorded {
    pub recorded: i64,
    /// Ids in the batch that name no agent of the tenant; their items were skipped.
    pub unknown_agent_ids: Vec<String>,
}

/// Records one heartbeat; the agent becomes `healthy`.
#[utoipa::path(post, path = "/telemetry/heartbeat", tag = "telemetry", request_body = HeartbeatInput,
    security(("bearer" = ["telemetry:write"])),
    responses((status = 200, description = "The agent's new status", body = Envelope<HeartbeatRecorded>),
        (status = 404, description = "No such agent in the tenant")))]
pub async fn record_heartbeat(
    caller: Authorized<require::TelemetryWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<HeartbeatInput>,
) -> ApiResult<Response> {
    check_latency("latency_ms", input.latency_ms)?;
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let recorded = record(
        &mut tx,
        &caller.tenant_id,
        &input.agent_id,
        AgentStatus::Healthy,
        input.latency_ms,
        input.metadata.as_ref(),
        now,
    )
    .await?;
    if !recorded {
        return Err(ApiError::not_found("agent"));
    }
    tx.commit().await?;
    Ok(envelope::ok(HeartbeatRecorded {
        agent_id: input.agent_id,
        status: AgentStatus::Healthy.as_str(),
        last_heartbeat: now,
    }))
}

/// Records up to 100 heartbeats in one transaction, each with the status it carries.
#[utoipa::path(post, path = "/telemetry/heartbeats", tag = "telemetry", request_body = BatchInput,
    security(("bearer" = ["telemetry:write"])),
    responses((status = 200, description = "How many were recorded", body = Envelope<BatchRecorded>)))]
pub async fn record_heartbeats(
    caller: Authorized<require::TelemetryWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<BatchInput>,
) -> ApiResult<Response> {
    if input.heartbeats.len() > MAX_BATCH {
        return Err(ApiError::validation(
            "heartbeats",
            format!("heartbeats: at most {MAX_BATCH} per batch"),
        ));
    }
    for (index, item) in input.heartbeats.iter().enumerate() {
        check_latency(&format!("heartbeats[{index}].latency_ms"), item.latency_ms)?;
    }
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let mut recorded = 0;
    let mut unknown_agent_ids = Vec::new();
    for item in &input.heartbeats {
        let known = record(
            &mut tx,
            &caller.tenant_id,
            &item.agent_id,
            item.status,
            item.latency_ms,
            item.metadata.as_ref(),
            now,
        )
        .await?;
        if known {
            recorded += 1;
        } else {
            unknown_agent_ids.push(item.agent_id.clone());
        }
    }
    tx.commit().await?;
    Ok(envelope::ok(BatchRecorded {
        recorded,
        unknown_agent_ids,
    }))
}

fn check_latency(field: &str, latency_ms: Option<i64>) -> ApiResult<()> {
    match latency_ms {
        Some(ms) if !(0..=MAX_LATENCY_MS).contains(&ms) => Err(ApiError::validation(
            field,
            format!("{field}: must be 0 to {MAX_LATENCY_MS}"),
        )),
        _ => Ok(()),
    }
}

/// Sets the agent's reported status and last heartbeat and keeps the heartbeat row;
/// false when the tenant has no such (live) agent.
async fn record(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
    status: AgentStatus,
    latency_ms: Option<i64>,
    metadata: Option<&serde_json::Map<String, serde_json::Value>>,
    now: Timestamp,
) -> Result<bool, sqlx::Error> {
    if !is_valid_id(IdKind::Agent, agent_id) {
        return Ok(false);
    }
    let updated = sqlx::query(
        "UPDATE agents SET status = $3, last_heartbeat = $4 \
         WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(status.as_str())
    .bind(now.as_millis())
    .execute(&mut **tx)
    .await?;
    if updated.rows_affected() != 1 {
        return Ok(false);
    }
    let metadata = metadata.map_or_else(
        || "{}".to_owned(),
        |m| serde_json::Value::Object(m.clone()).to_string(),
    );
    sqlx::query(
        "INSERT INTO heartbeats (id, tenant_id, agent_id, status, latency_ms, metadata, received_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(new_id(IdKind::Heartbeat, now.as_millis()))
    .bind(tenant_id)
    .bind(agent_id)
    .bind(status.as_str())
    .bind(latency_ms)
    .bind(metadata)
    .bind(now.as_millis())
    .execute(&mut **tx)
    .await?;
    Ok(true)
}
