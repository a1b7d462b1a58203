//! An incident's evidence pack (spec 2.20, 4.8): what a regulator or auditor needs about
//! the incident, gathered from the records as they stand, for the `window_hours` before
//! it was reported.
//!
//! The pack carries the head of the tenant's audit chain when it was made (`seq`,
//! `hash`) and each audit event with its chain hash, so that anyone can later check with
//! `GET /audit-trail/verify` that the events it quotes are still the chain's; and
//! `pack_sha256`, the SHA-256 of the pack's JSON without that field (keys sorted, no
//! white space), so that a copy can be checked against itself.

use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use warden_shared::pricing::micros_to_decimal;
use warden_shared::timestamp::Timestamp;

use super::service::get;
use super::store;
use super::EvidenceQuery;
use crate::api::agents::get_agent_for;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

const HOUR_MS: i64 = 3_600_000;
/// The most audit events and approvals a pack quotes (newest kept).
const MAX_ITEMS: i64 = 5_000;

#[derive(Debug, Serialize, ToSchema)]
pub struct EvidencePack {
    #[schema(value_type = Object)]
    pub incident: Value,
    /// The agent's registry record (null when it was deleted since).
    #[schema(value_type = Option<Object>)]
    pub agent: Value,
    /// Its current EU AI Act classification, or null.
    #[schema(value_type = Option<Object>)]
    pub risk_classification: Value,
    /// Its newest impact assessment, or null.
    #[schema(value_type = Option<Object>)]
    pub fria: Value,
    #[schema(value_type = Object)]
    pub window: Value,
    /// The audit events of the window about the agent, and every event about the
    /// incident (the operator responses), oldest first, each with its chain `seq` and
    /// `hash`.
    #[schema(value_type = Vec<Object>)]
    pub audit_events: Vec<Value>,
    /// The policy refusals in the window (`policy.violated` events, with counts).
    #[schema(value_type = Vec<Object>)]
    pub policy_violations: Vec<Value>,
    /// Approvals the agent's requests raised in the window, with their decisions.
    #[schema(value_type = Vec<Object>)]
    pub approvals: Vec<Value>,
    /// The agent's anomalies detected or seen in the window.
    #[schema(value_type = Vec<Object>)]
    pub anomalies: Vec<Value>,
    /// The agent's usage in the window.
    #[schema(value_type = Object)]
    pub usage: Value,
    /// The incident's reporting deadline and where it stands.
    #[schema(value_type = Object)]
    pub reporting: Value,
    /// The tenant's audit chain head when the pack was made: `{seq, hash}`.
    #[schema(value_type = Object)]
    pub audit_chain: Value,
    #[schema(value_type = String, format = DateTime)]
    pub generated_at: Timestamp,
    pub pack_sha256: String,
}

pub async fn pack(
    state: &AppState,
    caller: &Caller,
    incident_id: &str,
    query: &EvidenceQuery,
) -> ApiResult<EvidencePack> {
    let hours = query.window_hours.unwrap_or(24);
    if !(1..=168).contains(&hours) {
        return Err(ApiError::validation(
            "window_hours",
            "window_hours: 1 to 168",
        ));
    }
    let incident = get(state, caller, incident_id).await?;
    let tenant = caller.tenant_id.as_str();
    let agent_id = incident.agent_id.as_str();
    let to = incident.reported_at.as_millis();
    let from = to - hours * HOUR_MS;
    let pool = state.db.pool();

    let agent = match get_agent_for(state, caller, agent_id).await {
        Ok(agent) => serde_json::to_value(agent).unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };
    let risk_classification = store::current_classification(pool, tenant, agent_id)
        .await?
        .map_or(Value::Null, |row| {
            json!({
                "risk_level": row.risk_level,
                "justification": row.justification,
                "assessed_by": row.assessed_by,
                "assessed_at": row.assessed_at,
            })
        });
    let fria = crate::api::fria::newest_of(state.db.pool(), tenant, agent_id)
        .await?
        .map_or(Value::Null, |fria| {
            serde_json::to_value(fria).unwrap_or(Value::Null)
        });

    let audit_events = audit_events(state, tenant, agent_id, incident_id, from, to).await?;
    let policy_violations = audit_events
        .iter()
        .filter(|event| event["event_type"] == "policy.violated")
        .cloned()
        .collect();
    let approvals = approvals(state, tenant, agent_id, from, to).await?;
    let usage = usage(state, tenant, agent_id, from, to).await?;
    let anomalies = anomalies(state, tenant, agent_id, from, to).await?;
    let head = store::audit_chain_head(pool, tenant).await?.map_or(
        Value::Null,
        |head| json!({ "seq": head.seq, "hash": head.hash }),
    );

    let reporting = serde_json::to_value(&incident.reporting).unwrap_or(Value::Null);
    let mut pack = EvidencePack {
        incident: serde_json::to_value(&incident).unwrap_or(Value::Null),
        agent,
        risk_classification,
        fria,
        window: json!({
            "hours": hours,
            "from": Timestamp::from_millis(from),
            "to": Timestamp::from_millis(to),
        }),
        audit_events,
        policy_violations,
        approvals,
        anomalies,
        usage,
        reporting,
        audit_chain: head,
        generated_at: state.clock.now(),
        pack_sha256: String::new(),
    };
    pack.pack_sha256 = digest(&pack);
    Ok(pack)
}

/// The SHA-256 of the pack's JSON with `pack_sha256` left out (serde_json's maps keep
/// keys sorted, so the text is canonical).
pub fn digest(pack: &EvidencePack) -> String {
    let mut value = serde_json::to_value(pack).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.remove("pack_sha256");
    }
    warden_shared::keys::hex(&Sha256::digest(value.to_string().as_bytes()))
}

/// The audit events of the window about the agent and every event about the incident,
/// oldest first: the newest [`MAX_ITEMS`] of them.
async fn audit_events(
    state: &AppState,
    tenant: &str,
    agent_id: &str,
    incident_id: &str,
    from: i64,
    to: i64,
) -> ApiResult<Vec<Value>> {
    let rows = store::audit_events_about(
        state.db.pool(),
        tenant,
        agent_id,
        incident_id,
        from,
        to,
        MAX_ITEMS,
    )
    .await?;
    let mut events: Vec<Value> = rows
        .into_iter()
        .map(|row| {
            json!({
                "id": row.id,
                "seq": row.seq,
                "hash": row.hash,
                "event_type": row.event_type,
                "actor": row.actor,
                "target_type": row.target_type,
                "target_id": row.target_id,
                "details": row.details,
                "occurred_at": row.occurred_at,
            })
        })
        .collect();
    events.reverse();
    Ok(events)
}

/// The approvals of the window, a pending one past its expiry shown as `expired`.
async fn approvals(
    state: &AppState,
    tenant: &str,
    agent_id: &str,
    from: i64,
    to: i64,
) -> ApiResult<Vec<Value>> {
    let rows =
        store::approvals_raised(state.db.pool(), tenant, agent_id, from, to, MAX_ITEMS).await?;
    let now = state.clock.now().as_millis();
    Ok(rows
        .into_iter()
        .map(|row| {
            let status = if row.status == "pending" && row.expires_at.as_millis() <= now {
                "expired".to_owned()
            } else {
                row.status
            };
            json!({
                "id": row.id,
                "policy_id": row.policy_id,
                "provider": row.provider,
                "model": row.model,
                "status": status,
                "reviewer_id": row.reviewer_id,
                "reason": row.reason,
                "created_at": row.created_at,
                "resolved_at": row.resolved_at,
            })
        })
        .collect())
}

async fn anomalies(
    state: &AppState,
    tenant: &str,
    agent_id: &str,
    from: i64,
    to: i64,
) -> ApiResult<Vec<Value>> {
    let rows =
        store::anomalies_seen(state.db.pool(), tenant, agent_id, from, to, MAX_ITEMS).await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            json!({
                "id": row.id,
                "anomaly_type": row.anomaly_type,
                "severity": row.severity,
                "status": row.status,
                "description": row.description,
                "details": row.details,
                "detected_at": row.detected_at,
                "last_seen_at": row.last_seen_at,
            })
        })
        .collect())
}

async fn usage(
    state: &AppState,
    tenant: &str,
    agent_id: &str,
    from: i64,
    to: i64,
) -> ApiResult<Value> {
    let totals = store::usage_totals(state.db.pool(), tenant, agent_id, from, to).await?;
    Ok(json!({
        "requests": totals.requests,
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "cost_usd": micros_to_decimal(totals.cost_micros),
    }))
}
