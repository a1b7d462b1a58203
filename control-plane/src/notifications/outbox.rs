//! The delivery outbox: for an audit event that raises a notification event, one row per
//! subscribed, enabled channel of the tenant, written in the change's own transaction.

use serde_json::{json, Value};
use sqlx::Row;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::timestamp::Timestamp;

use super::events::{self, EventKind};
use crate::db::{json_column, WriteTx};

/// What was recorded, as the notification payload describes it: the audit event
/// (`crate::changes` records both) and who made it when.
pub struct Raised<'a> {
    pub tenant_id: &'a str,
    pub actor: &'a str,
    pub at: Timestamp,
    pub audit_event_id: &'a str,
    pub event: Happened<'a>,
}

/// The audit event a notification reports.
#[derive(Clone, Copy)]
pub struct Happened<'a> {
    pub event_type: &'a str,
    pub target_type: &'a str,
    pub target_id: &'a str,
    pub details: &'a Value,
}

/// Queues the notification `raised` means, if any, for every channel that wants it;
/// returns how many deliveries were queued.
pub async fn enqueue(tx: &mut WriteTx, raised: &Raised<'_>) -> Result<usize, sqlx::Error> {
    let Some(kind) = events::raised_by(raised.event.event_type) else {
        return Ok(0);
    };
    let channels = sqlx::query(
        "SELECT id, events FROM notification_channels WHERE tenant_id = $1 AND enabled = 1",
    )
    .bind(raised.tenant_id)
    .fetch_all(&mut **tx)
    .await?;
    let mut targets = Vec::new();
    for channel in channels {
        let events_json: String = channel.try_get("events")?;
        let subscribed: Vec<String> = serde_json::from_str(&events_json).unwrap_or_default();
        if events::delivers(&subscribed, kind) {
            targets.push(channel.try_get::<String, _>("id")?);
        }
    }
    for rule_id in anomaly_rule_webhooks(tx, kind, raised).await? {
        targets.push(format!("{ANOMALY_RULE_PREFIX}{rule_id}"));
    }
    if targets.is_empty() {
        return Ok(0);
    }
    let body = payload_of(kind, raised).to_string();
    for channel_id in &targets {
        sqlx::query(
            "INSERT INTO notification_deliveries (id, tenant_id, channel_id, event_type, \
             payload, status, attempts, next_attempt_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $6)",
        )
        .bind(new_id(IdKind::NotificationDelivery, raised.at.as_millis()))
        .bind(raised.tenant_id)
        .bind(channel_id)
        .bind(kind.name)
        .bind(&body)
        .bind(raised.at.as_millis())
        .execute(&mut **tx)
        .await?;
    }
    Ok(targets.len())
}

/// Deliveries to an anomaly rule's webhook use this prefix and the rule's id as their
/// channel.
pub const ANOMALY_RULE_PREFIX: &str = "anomaly_rule:";

/// The enabled anomaly rules with a webhook for an anomaly event's type.
async fn anomaly_rule_webhooks(
    tx: &mut WriteTx,
    kind: &EventKind,
    raised: &Raised<'_>,
) -> Result<Vec<i64>, sqlx::Error> {
    if !matches!(kind.name, "anomaly.detected" | "anomaly.resolved") {
        return Ok(Vec::new());
    }
    let Some(anomaly_type) = raised
        .event
        .details
        .get("anomaly_type")
        .and_then(Value::as_str)
    else {
        return Ok(Vec::new());
    };
    let rules: Vec<(i64, String)> = sqlx::query_as(
        "SELECT id, notification_config FROM anomaly_rules WHERE tenant_id = $1 \
         AND anomaly_type = $2 AND enabled = 1",
    )
    .bind(raised.tenant_id)
    .bind(anomaly_type)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rules
        .into_iter()
        .filter(|(_, config)| json_column::<Value>(config).get("webhook_url").is_some())
        .map(|(id, _)| id)
        .collect())
}

/// The payload every channel type is built from, and the body a webhook receives: the
/// Standard Webhooks shape `{type, timestamp, data}`.
pub fn payload_of(kind: &EventKind, raised: &Raised<'_>) -> Value {
    let event = &raised.event;
    json!({
        "type": kind.name,
        "timestamp": raised.at,
        "data": {
            "tenant_id": raised.tenant_id,
            "audit_event_id": raised.audit_event_id,
            "audit_event_type": event.event_type,
            "actor": raised.actor,
            "target_type": event.target_type,
            "target_id": event.target_id,
            "severity": kind.severity.as_str(),
            "summary": summary(kind, event),
            "details": event.details,
        }
    })
}

/// One line a person reads: the event's title, its target, and the reason when the
/// change gave one.
fn summary(kind: &EventKind, event: &Happened<'_>) -> String {
    let mut line = format!("{}: {} {}", kind.title, event.target_type, event.target_id);
    if let Some(name) = event.details.get("name").and_then(Value::as_str) {
        line.push_str(&format!(" ({name})"));
    }
    if let Some(reason) = event.details.get("reason").and_then(Value::as_str) {
        line.push_str(&format!(": {reason}"));
    }
    line
}
