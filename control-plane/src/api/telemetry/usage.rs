//! Usage events, one or a batch of up to 100 (spec 2.12, 4.4).
//!
//! A batch validates each item on its own: invalid items are reported in `errors` with
//! their index and never keep the valid ones from being recorded.

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use warden_shared::pricing;
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::{parse_raw, ApiJson};
use crate::api::validate::Text;
use crate::auth::{require, Authorized};
use crate::error::{ApiError, ApiResult};
use crate::ledger::{self, Outcome, UsageEntry, UsageSource};
use crate::state::AppState;

/// The largest batch `/telemetry/usages` accepts (spec 8).
pub const MAX_BATCH: usize = 100;
/// Tokens per event above this are not a real request.
const MAX_TOKENS: i64 = 100_000_000;
/// A reported cost above this (USD) is not a real request.
const MAX_COST_USD: f64 = 1_000_000.0;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageInput {
    pub agent_id: String,
    /// `openai`, `anthropic`, `google`, `nvidia` or `bedrock`.
    #[schema(value_type = String)]
    pub model_provider: Provider,
    pub model_name: Text<1, 200>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// e.g. `chat.completions` (default), `embeddings`.
    #[serde(default)]
    pub request_type: Option<Text<1, 64>>,
    /// Computed from the price table when omitted.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StoredUsage {
    pub id: String,
    pub agent_id: String,
    pub model_provider: &'static str,
    pub model_name: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    /// False when the model has no list price and no `cost_usd` was sent (cost 0).
    pub priced: bool,
    #[schema(value_type = String, format = DateTime)]
    pub recorded_at: Timestamp,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageBatchInput {
    #[schema(value_type = Vec<UsageInput>)]
    pub usages: Vec<Box<RawValue>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ItemError {
    pub index: usize,
    pub field: Option<String>,
    pub message: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UsageBatchResult {
    pub accepted: i64,
    pub rejected: i64,
    pub errors: Vec<ItemError>,
}

/// Records one usage event.
#[utoipa::path(post, path = "/telemetry/usage", tag = "telemetry", request_body = UsageInput,
    security(("bearer" = ["telemetry:write"])),
    responses((status = 201, description = "The stored usage", body = Envelope<StoredUsage>),
        (status = 404, description = "No such agent in the tenant")))]
pub async fn record_usage(
    caller: Authorized<require::TelemetryWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<UsageInput>,
) -> ApiResult<Response> {
    let now = state.clock.now();
    let entry = usage_entry(&caller.tenant_id, &input, now, UsageSource::Telemetry, None)?;
    let mut tx = state.db.begin_write().await?;
    let outcomes = ledger::record_batch(&mut tx, "", &[entry], state.clock.now())
        .await?
        .outcomes;
    let Some(Outcome::Recorded {
        id,
        cost_micros,
        priced,
    }) = outcomes.into_iter().next()
    else {
        return Err(ApiError::not_found("agent"));
    };
    tx.commit().await?;
    Ok(envelope::created(StoredUsage {
        id,
        agent_id: input.agent_id.clone(),
        model_provider: input.model_provider.as_str(),
        model_name: input.model_name.as_str().to_owned(),
        input_tokens: input.input_tokens,
        output_tokens: input.output_tokens,
        cost_usd: pricing::micros_to_usd(cost_micros),
        priced,
        recorded_at: now,
    }))
}

/// Records up to 100 usage events; invalid items are reported, valid ones recorded.
#[utoipa::path(post, path = "/telemetry/usages", tag = "telemetry", request_body = UsageBatchInput,
    security(("bearer" = ["telemetry:write"])),
    responses((status = 200, description = "Accepted and rejected counts, per-item errors", body = Envelope<UsageBatchResult>)))]
pub async fn record_usages(
    caller: Authorized<require::TelemetryWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<UsageBatchInput>,
) -> ApiResult<Response> {
    if input.usages.len() > MAX_BATCH {
        return Err(ApiError::validation(
            "usages",
            format!("usages: at most {MAX_BATCH} per batch"),
        ));
    }
    let now = state.clock.now();
    let mut errors = Vec::new();
    let mut valid = Vec::new();
    for (index, raw) in input.usages.into_iter().enumerate() {
        match parse_raw::<UsageInput>(&raw) {
            Ok(item) => valid.push((index, item)),
            Err(error) => errors.push(ItemError::from_api_error(index, error)),
        }
    }
    let mut entries = Vec::with_capacity(valid.len());
    let mut indexes = Vec::with_capacity(valid.len());
    for (index, item) in &valid {
        match usage_entry(&caller.tenant_id, item, now, UsageSource::Telemetry, None) {
            Ok(entry) => {
                entries.push(entry);
                indexes.push(*index);
            }
            Err(error) => errors.push(ItemError::from_api_error(*index, error)),
        }
    }
    let mut tx = state.db.begin_write().await?;
    let outcomes = ledger::record_batch(&mut tx, "", &entries, state.clock.now())
        .await?
        .outcomes;
    let mut accepted = 0;
    for (index, outcome) in indexes.into_iter().zip(outcomes) {
        match outcome {
            Outcome::Recorded { .. } => accepted += 1,
            Outcome::Duplicate | Outcome::UnknownAgent => errors.push(ItemError {
                index,
                field: Some("agent_id".to_owned()),
                message: "agent_id: no such agent in this tenant".to_owned(),
            }),
        }
    }
    errors.sort_by_key(|error| error.index);
    tx.commit().await?;
    Ok(envelope::ok(UsageBatchResult {
        accepted,
        rejected: i64::try_from(errors.len()).unwrap_or(i64::MAX),
        errors,
    }))
}

impl ItemError {
    /// The per-item form of a validation error.
    pub fn from_api_error(index: usize, error: ApiError) -> ItemError {
        ItemError {
            index,
            field: error.details["field"].as_str().map(str::to_owned),
            message: error.message,
        }
    }
}

/// Applies the numeric rules serde cannot express and builds the ledger entry.
pub fn usage_entry<'a>(
    tenant_id: &'a str,
    input: &'a UsageInput,
    recorded_at: Timestamp,
    source: UsageSource,
    idempotency_key: Option<&'a str>,
) -> ApiResult<UsageEntry<'a>> {
    for (field, tokens) in [
        ("input_tokens", input.input_tokens),
        ("output_tokens", input.output_tokens),
    ] {
        if !(0..=MAX_TOKENS).contains(&tokens) {
            return Err(ApiError::validation(
                field,
                format!("{field}: must be 0 to {MAX_TOKENS}"),
            ));
        }
    }
    let cost_micros = match input.cost_usd {
        Some(cost) if !cost.is_finite() || !(0.0..=MAX_COST_USD).contains(&cost) => {
            return Err(ApiError::validation(
                "cost_usd",
                format!("cost_usd: must be 0 to {MAX_COST_USD}"),
            ))
        }
        Some(cost) => Some(pricing::usd_to_micros(cost)),
        None => None,
    };
    Ok(UsageEntry {
        tenant_id,
        agent_id: &input.agent_id,
        provider: input.model_provider,
        model_name: input.model_name.as_str(),
        request_type: input
            .request_type
            .as_ref()
            .map_or("chat.completions", |t| t.as_str()),
        input_tokens: input.input_tokens,
        output_tokens: input.output_tokens,
        cost_micros,
        recorded_at,
        source,
        idempotency_key,
        api_key_id: None,
        decision: None,
    })
}
