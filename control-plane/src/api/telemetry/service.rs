//! The rules of telemetry: batch sizes, the numeric ranges serde cannot express, the
//! status a heartbeat sets, and each request's one write transaction.

use crate::api::provider_names;
use warden_shared::catalog::ProviderCatalog;
use warden_shared::ids::{is_valid_id, new_id, IdKind};
use warden_shared::pricing;
use warden_shared::registry::AgentStatus;
use warden_shared::timestamp::Timestamp;

use super::store;
use super::{
    item_error, BatchInput, BatchRecorded, HeartbeatInput, HeartbeatRecorded, ItemError,
    StoredUsage, UsageBatchInput, UsageBatchResult, UsageInput,
};
use crate::api::billing::{not_recorded, recorded_agent};
use crate::api::extract::parse_raw;
use crate::auth::Caller;
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult};
use crate::ledger::{self, Outcome, UsageEntry, UsageSource};
use crate::state::AppState;

/// The largest batch `/telemetry/heartbeats` accepts (spec 8).
pub const MAX_HEARTBEAT_BATCH: usize = 100;
/// The largest batch `/telemetry/usages` accepts (spec 8).
pub const MAX_USAGE_BATCH: usize = 100;
const MAX_LATENCY_MS: i64 = 3_600_000;
/// Tokens per event above this are not a real request.
const MAX_TOKENS: i64 = 100_000_000;
/// A reported cost above this (USD) is not a real request.
const MAX_COST_USD: f64 = 1_000_000.0;

/// Records one heartbeat; the agent becomes `healthy` whatever status was sent.
pub async fn record_heartbeat(
    state: &AppState,
    caller: &Caller,
    input: HeartbeatInput,
) -> ApiResult<HeartbeatRecorded> {
    check_latency("latency_ms", input.latency_ms)?;
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    if let Some(slot) = recorded_agent(&mut tx, &caller.tenant_id).await? {
        if slot != input.agent_id {
            return Err(not_recorded(&input.agent_id, &slot));
        }
    }
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
    Ok(HeartbeatRecorded {
        agent_id: input.agent_id,
        status: AgentStatus::Healthy.as_str(),
        last_heartbeat: now,
    })
}

/// Records the batch's heartbeats of known agents in one transaction, each with the
/// status it carries, and lists the ids of the others.
pub async fn record_heartbeats(
    state: &AppState,
    caller: &Caller,
    input: BatchInput,
) -> ApiResult<BatchRecorded> {
    if input.heartbeats.len() > MAX_HEARTBEAT_BATCH {
        return Err(ApiError::validation(
            "heartbeats",
            format!("heartbeats: at most {MAX_HEARTBEAT_BATCH} per batch"),
        ));
    }
    for (index, item) in input.heartbeats.iter().enumerate() {
        check_latency(&format!("heartbeats[{index}].latency_ms"), item.latency_ms)?;
    }
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let mut recorded = 0;
    let mut unknown_agent_ids = Vec::new();
    let mut unrecorded_agent_ids = Vec::new();
    let slot = recorded_agent(&mut tx, &caller.tenant_id).await?;
    for item in &input.heartbeats {
        if slot.as_ref().is_some_and(|slot| *slot != item.agent_id) {
            unrecorded_agent_ids.push(item.agent_id.clone());
            continue;
        }
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
    Ok(BatchRecorded {
        recorded,
        unknown_agent_ids,
        unrecorded_agent_ids,
    })
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
    if !store::set_agent_heartbeat(tx, tenant_id, agent_id, status.as_str(), now.as_millis())
        .await?
    {
        return Ok(false);
    }
    let metadata = metadata.map_or_else(
        || "{}".to_owned(),
        |m| serde_json::Value::Object(m.clone()).to_string(),
    );
    store::insert_heartbeat(
        tx,
        &store::HeartbeatRow {
            id: &new_id(IdKind::Heartbeat, now.as_millis()),
            tenant_id,
            agent_id,
            status: status.as_str(),
            latency_ms,
            metadata: &metadata,
            received_at: now.as_millis(),
        },
    )
    .await?;
    Ok(true)
}

/// Records one usage event in the ledger; 404 when the tenant has no such agent.
pub async fn record_usage(
    state: &AppState,
    caller: &Caller,
    input: UsageInput,
) -> ApiResult<StoredUsage> {
    let now = state.clock.now();
    provider_names::require_known(&state.providers, "model_provider", [&input.model_provider])?;
    let entry = usage_entry(
        &state.providers,
        &caller.tenant_id,
        &input,
        now,
        UsageSource::Telemetry,
        None,
    )?;
    let mut tx = state.db.begin_write().await?;
    if let Some(slot) = recorded_agent(&mut tx, &caller.tenant_id).await? {
        if slot != input.agent_id {
            return Err(not_recorded(&input.agent_id, &slot));
        }
    }
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
    Ok(StoredUsage {
        id,
        agent_id: input.agent_id.clone(),
        model_provider: input.model_provider.to_string(),
        model_name: input.model_name.as_str().to_owned(),
        input_tokens: input.input_tokens,
        output_tokens: input.output_tokens,
        cost_usd: pricing::micros_to_usd(cost_micros),
        priced,
        recorded_at: now,
    })
}

/// Records the batch's valid usage events in one transaction; the invalid ones, and
/// those of unknown agents, are reported by index.
pub async fn record_usages(
    state: &AppState,
    caller: &Caller,
    input: UsageBatchInput,
) -> ApiResult<UsageBatchResult> {
    if input.usages.len() > MAX_USAGE_BATCH {
        return Err(ApiError::validation(
            "usages",
            format!("usages: at most {MAX_USAGE_BATCH} per batch"),
        ));
    }
    let now = state.clock.now();
    let mut errors = Vec::new();
    let mut valid = Vec::new();
    for (index, raw) in input.usages.into_iter().enumerate() {
        let parsed = parse_raw::<UsageInput>(&raw).and_then(|item| {
            provider_names::require_known(
                &state.providers,
                "model_provider",
                [&item.model_provider],
            )
            .map(|()| item)
        });
        match parsed {
            Ok(item) => valid.push((index, item)),
            Err(error) => errors.push(item_error(index, error)),
        }
    }
    let mut tx = state.db.begin_write().await?;
    let slot = recorded_agent(&mut tx, &caller.tenant_id).await?;
    let mut entries = Vec::with_capacity(valid.len());
    let mut indexes = Vec::with_capacity(valid.len());
    for (index, item) in &valid {
        if let Some(slot) = slot.as_ref().filter(|slot| **slot != item.agent_id) {
            errors.push(ItemError {
                index: *index,
                field: Some("agent_id".to_owned()),
                message: not_recorded(&item.agent_id, slot).message,
            });
            continue;
        }
        match usage_entry(
            &state.providers,
            &caller.tenant_id,
            item,
            now,
            UsageSource::Telemetry,
            None,
        ) {
            Ok(entry) => {
                entries.push(entry);
                indexes.push(*index);
            }
            Err(error) => errors.push(item_error(*index, error)),
        }
    }
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
    Ok(UsageBatchResult {
        accepted,
        rejected: i64::try_from(errors.len()).unwrap_or(i64::MAX),
        errors,
    })
}

/// Applies the numeric rules serde cannot express and builds the ledger entry, priced
/// from the built-in table or the provider's declaration when no `cost_usd` is given.
pub fn usage_entry<'a>(
    providers: &ProviderCatalog,
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
        None => providers
            .find_price(input.model_provider, input.model_name.as_str())
            .map(|price| pricing::cost_micros(price, input.input_tokens, input.output_tokens)),
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
