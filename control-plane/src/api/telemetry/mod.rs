//! Telemetry (spec 2.12, 3.1, 4.4): heartbeats that drive agent status, and usage that
//! feeds the cost ledger.
//!
//! Heartbeats come one at a time or in a batch of up to 100. A single heartbeat makes its
//! agent `healthy`; a batch item sets the status it carries (spec 3.1). Every heartbeat
//! is also kept as a row for health scores. A batch records the items of known agents
//! and lists the unknown ids instead of failing as a whole.
//!
//! Usage events come one at a time or in a batch of up to 100 (spec 2.12, 4.4). A batch
//! validates each item on its own: invalid items are reported in `errors` with their
//! index and never keep the valid ones from being recorded.

mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::registry::{AgentStatus, Provider};
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::ApiJson;
use crate::auth::{require, Authorized};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::validate::Text;

pub use service::usage_entry;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(record_heartbeat))
        .routes(routes!(record_heartbeats))
        .routes(routes!(record_usage))
        .routes(routes!(record_usages))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatInput {
    pub agent_id: String,
    /// Accepted so the heartbeat object of spec 2.12 can be sent as it is (`healthy`,
    /// `degraded`, `down` or `unknown`), but a single heartbeat always makes the agent
    /// `healthy` (spec 3.1); send a batch to report another status.
    #[serde(default)]
    #[schema(schema_with = crate::api::openapi_enums::agent_status)]
    #[allow(dead_code, reason = "validated when parsed, then not used: see above")]
    pub status: Option<AgentStatus>,
    /// 0 to 3,600,000.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 3_600_000)]
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
    #[schema(schema_with = crate::api::openapi_enums::agent_status)]
    pub status: AgentStatus,
    /// 0 to 3,600,000.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 3_600_000)]
    pub latency_ms: Option<i64>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchInput {
    #[serde(deserialize_with = "crate::api::extract::objects")]
    pub heartbeats: Vec<BatchItem>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchRecorded {
    pub recorded: i64,
    /// Ids in the batch that name no agent of the tenant; their items were skipped.
    pub unknown_agent_ids: Vec<String>,
    /// On the free plan, ids of agents other than the recorded one (the free slot);
    /// their items were skipped.
    pub unrecorded_agent_ids: Vec<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageInput {
    pub agent_id: String,
    /// `openai`, `anthropic`, `google`, `nvidia`, `bedrock`, or a provider the deployment
    /// declares (`providers.custom`).
    #[schema(schema_with = crate::api::openapi_enums::provider)]
    pub model_provider: Provider,
    pub model_name: Text<1, 200>,
    /// 0 to 100,000,000.
    #[schema(minimum = 0, maximum = 100_000_000)]
    pub input_tokens: i64,
    /// 0 to 100,000,000.
    #[schema(minimum = 0, maximum = 100_000_000)]
    pub output_tokens: i64,
    /// e.g. `chat.completions` (default), `embeddings`.
    #[serde(default)]
    pub request_type: Option<Text<1, 64>>,
    /// 0 to 1,000,000; computed from the price table when omitted.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1_000_000)]
    pub cost_usd: Option<f64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StoredUsage {
    pub id: String,
    pub agent_id: String,
    pub model_provider: String,
    pub model_name: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    #[serde(serialize_with = "crate::api::money::plain")]
    pub cost_usd: f64,
    /// False when the model has no list price and no `cost_usd` was sent (cost 0).
    pub priced: bool,
    #[schema(value_type = String, format = DateTime)]
    pub recorded_at: Timestamp,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageBatchInput {
    /// Each a `UsageInput`, checked alone: one that is not valid is reported in `errors`
    /// (by index) and the others are recorded.
    #[schema(value_type = Vec<Value>)]
    pub usages: Vec<Box<RawValue>>,
}

pub use warden_shared::wire::ItemError;

/// The per-item form of a validation error.
pub fn item_error(index: usize, error: ApiError) -> ItemError {
    ItemError {
        index,
        field: error.details["field"].as_str().map(str::to_owned),
        message: error.message,
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UsageBatchResult {
    pub accepted: i64,
    pub rejected: i64,
    pub errors: Vec<ItemError>,
}

/// Records one heartbeat; the agent becomes `healthy`.
#[utoipa::path(post, path = "/telemetry/heartbeat", tag = "telemetry", request_body = HeartbeatInput,
    security(("bearer" = ["telemetry:write"])),
    responses((status = 200, description = "The agent's new status", body = Envelope<HeartbeatRecorded>),
        (status = 404, description = "No such agent in the tenant")))]
async fn record_heartbeat(
    caller: Authorized<require::TelemetryWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<HeartbeatInput>,
) -> ApiResult<Response> {
    let recorded = service::record_heartbeat(&state, &caller, input).await?;
    Ok(envelope::ok(recorded))
}

/// Records up to 100 heartbeats in one transaction, each with the status it carries.
#[utoipa::path(post, path = "/telemetry/heartbeats", tag = "telemetry", request_body = BatchInput,
    security(("bearer" = ["telemetry:write"])),
    responses((status = 200, description = "How many were recorded", body = Envelope<BatchRecorded>)))]
async fn record_heartbeats(
    caller: Authorized<require::TelemetryWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<BatchInput>,
) -> ApiResult<Response> {
    let recorded = service::record_heartbeats(&state, &caller, input).await?;
    Ok(envelope::ok(recorded))
}

/// Records one usage event.
#[utoipa::path(post, path = "/telemetry/usage", tag = "telemetry", request_body = UsageInput,
    security(("bearer" = ["telemetry:write"])),
    responses((status = 201, description = "The stored usage", body = Envelope<StoredUsage>),
        (status = 404, description = "No such agent in the tenant")))]
async fn record_usage(
    caller: Authorized<require::TelemetryWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<UsageInput>,
) -> ApiResult<Response> {
    let stored = service::record_usage(&state, &caller, input).await?;
    Ok(envelope::created(stored))
}

/// Records up to 100 usage events; invalid items are reported, valid ones recorded.
#[utoipa::path(post, path = "/telemetry/usages", tag = "telemetry", request_body = UsageBatchInput,
    security(("bearer" = ["telemetry:write"])),
    responses((status = 200, description = "Accepted and rejected counts, per-item errors", body = Envelope<UsageBatchResult>)))]
async fn record_usages(
    caller: Authorized<require::TelemetryWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<UsageBatchInput>,
) -> ApiResult<Response> {
    let result = service::record_usages(&state, &caller, input).await?;
    Ok(envelope::ok(result))
}
