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
use sqlx::Row;
use utoipa::ToSchema;
use warden_shared::pricing::micros_to_decimal;
use warden_shared::timestamp::Timestamp;

use super::service::get;
use super::EvidenceQuery;
use crate::api::agents::get_agent_for;
use crate::auth::Caller;
use crate::db::json_column;
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
    let risk_classification = sqlx::query(
        "SELECT risk_level, justification, assessed_by, assessed_at FROM risk_classifications \
         WHERE tenant_id = $1 AND agent_id = $2 ORDER BY assessed_at DESC, id DESC LIMIT 1",
    )
    .bind(tenant)
    .bind(agent_id)
    .fetch_optional(pool)
    .await?
    .map(|row| -> Result<Value, sqlx::Error> {
        Ok(json!({
            "risk_level": row.try_get::<String, _>("risk_level")?,
            "justification": row.try_get::<String, _>("justification")?,
            "assessed_by": row.try_get::<String, _>("assessed_by")?,
            "assessed_at": Timestamp::from_millis(row.try_get("assessed_at")?),
        }))
    })
    .transpose()?
    .unwrap_or(Value::Null);
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
    let head = sqlx::query("SELECT seq, hash FROM audit_heads WHERE tenant_id = $1")
        .bind(tenant)
        .fetch_optional(pool)
        .await?
        .map(|row| -> Result<Value, sqlx::Error> {
            Ok(json!({ "seq": row.try_get::<i64, _>("seq")?, "hash": row.try_get::<String, _>("hash")? }))
        })
        .transpose()?
        .unwrap_or(Value::Null);

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
    let digest = Sha256::digest(value.to_string().as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

async fn audit_events(
    state: &AppState,
    tenant: &str,
    agent_id: &str,
    incident_id: &str,
    from: i64,
    to: i64,
) -> ApiResult<Vec<Value>> {
    let rows = sqlx::query(
        "SELECT id, seq, hash, event_type, actor, target_type, target_id, details, occurred_at \
         FROM audit_events WHERE tenant_id = $1 AND ((target_id = $2 AND occurred_at >= $3 \
         AND occurred_at <= $4) OR target_id = $5) ORDER BY occurred_at DESC, seq DESC LIMIT $6",
    )
    .bind(tenant)
    .bind(agent_id)
    .bind(from)
    .bind(to)
    .bind(incident_id)
    .bind(MAX_ITEMS)
    .fetch_all(state.db.pool())
    .await?;
    let mut events = rows
        .iter()
        .map(|row| -> Result<Value, sqlx::Error> {
            let details: String = row.try_get("details")?;
            Ok(json!({
                "id": row.try_get::<String, _>("id")?,
                "seq": row.try_get::<Option<i64>, _>("seq")?,
                "hash": row.try_get::<Option<String>, _>("hash")?,
                "event_type": row.try_get::<String, _>("event_type")?,
                "actor": row.try_get::<String, _>("actor")?,
                "target_type": row.try_get::<String, _>("target_type")?,
                "target_id": row.try_get::<String, _>("target_id")?,
                "details": json_column::<Value>(&details),
                "occurred_at": Timestamp::from_millis(row.try_get("occurred_at")?),
            }))
        })
        .collect::<Result<Vec<_>, _>>()?;
    events.reverse();
    Ok(events)
}

async fn approvals(
    state: &AppState,
    tenant: &str,
    agent_id: &str,
    from: i64,
    to: i64,
) -> ApiResult<Vec<Value>> {
    let rows = sqlx::query(
        "SELECT id, policy_id, provider, model, status, reviewer_id, reason, created_at, \
         resolved_at, expires_at FROM approvals WHERE tenant_id = $1 AND agent_id = $2 \
         AND created_at >= $3 AND created_at <= $4 ORDER BY id LIMIT $5",
    )
    .bind(tenant)
    .bind(agent_id)
    .bind(from)
    .bind(to)
    .bind(MAX_ITEMS)
    .fetch_all(state.db.pool())
    .await?;
    let now = state.clock.now().as_millis();
    Ok(rows
        .iter()
        .map(|row| -> Result<Value, sqlx::Error> {
            let status: String = row.try_get("status")?;
            let expires_at: i64 = row.try_get("expires_at")?;
            let status = if status == "pending" && expires_at <= now {
                "expired".to_owned()
            } else {
                status
            };
            Ok(json!({
                "id": row.try_get::<i64, _>("id")?,
                "policy_id": row.try_get::<i64, _>("policy_id")?,
                "provider": row.try_get::<String, _>("provider")?,
                "model": row.try_get::<String, _>("model")?,
                "status": status,
                "reviewer_id": row.try_get::<Option<String>, _>("reviewer_id")?,
                "reason": row.try_get::<Option<String>, _>("reason")?,
                "created_at": Timestamp::from_millis(row.try_get("created_at")?),
                "resolved_at": row.try_get::<Option<i64>, _>("resolved_at")?.map(Timestamp::from_millis),
            }))
        })
        .collect::<Result<Vec<_>, _>>()?)
}

async fn anomalies(
    state: &AppState,
    tenant: &str,
    agent_id: &str,
    from: i64,
    to: i64,
) -> ApiResult<Vec<Value>> {
    let rows = sqlx::query(
        "SELECT id, anomaly_type, severity, status, description, details, detected_at, last_seen_at \
         FROM anomalies WHERE tenant_id = $1 AND agent_id = $2 AND detected_at <= $4 \
         AND last_seen_at >= $3 ORDER BY detected_at LIMIT $5",
    )
    .bind(tenant)
    .bind(agent_id)
    .bind(from)
    .bind(to)
    .bind(MAX_ITEMS)
    .fetch_all(state.db.pool())
    .await?;
    Ok(rows
        .iter()
        .map(|row| -> Result<Value, sqlx::Error> {
            let details: String = row.try_get("details")?;
            Ok(json!({
                "id": row.try_get::<String, _>("id")?,
                "anomaly_type": row.try_get::<String, _>("anomaly_type")?,
                "severity": row.try_get::<String, _>("severity")?,
                "status": row.try_get::<String, _>("status")?,
                "description": row.try_get::<String, _>("description")?,
                "details": json_column::<Value>(&details),
                "detected_at": Timestamp::from_millis(row.try_get("detected_at")?),
                "last_seen_at": Timestamp::from_millis(row.try_get("last_seen_at")?),
            }))
        })
        .collect::<Result<Vec<_>, _>>()?)
}

async fn usage(
    state: &AppState,
    tenant: &str,
    agent_id: &str,
    from: i64,
    to: i64,
) -> ApiResult<Value> {
    let row = sqlx::query(
        // PostgreSQL sums BIGINTs as NUMERIC: cast back.
        "SELECT COUNT(*) AS requests, CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT) AS input_tokens, \
         CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT) AS output_tokens, \
         CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) AS cost \
         FROM usage_records WHERE tenant_id = $1 AND agent_id = $2 AND recorded_at >= $3 \
         AND recorded_at <= $4",
    )
    .bind(tenant)
    .bind(agent_id)
    .bind(from)
    .bind(to)
    .fetch_one(state.db.pool())
    .await?;
    let cost: i64 = row.try_get("cost")?;
    Ok(json!({
        "requests": row.try_get::<i64, _>("requests")?,
        "input_tokens": row.try_get::<i64, _>("input_tokens")?,
        "output_tokens": row.try_get::<i64, _>("output_tokens")?,
        "cost_usd": micros_to_decimal(cost),
    }))
}
