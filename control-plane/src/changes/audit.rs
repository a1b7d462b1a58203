//! The audit trail's rows, appended through `changes::record` only.
//!
//! A change and its audit record commit or roll back together, so the trail never shows
//! a change that did not happen nor misses one that did.

use serde_json::Value;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::timestamp::Timestamp;

use crate::db::WriteTx;

/// One entry of the audit trail.
#[derive(Debug)]
pub struct AuditEvent<'a> {
    /// e.g. `agent.registered`, `team.deleted`, `api_key.created`.
    pub event_type: &'a str,
    pub target_type: &'a str,
    pub target_id: &'a str,
    pub details: Value,
}

const INSERT_AUDIT_EVENT: &str = "INSERT INTO audit_events \
     (id, tenant_id, event_type, actor, target_id, target_type, details, occurred_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// Appends `event` to `tenant_id`'s trail inside `tx`.
pub(super) async fn record(
    tx: &mut WriteTx,
    tenant_id: &str,
    actor: &str,
    at: Timestamp,
    event: AuditEvent<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query(INSERT_AUDIT_EVENT)
        .bind(new_id(IdKind::AuditEvent, at.as_millis()))
        .bind(tenant_id)
        .bind(event.event_type)
        .bind(actor)
        .bind(event.target_id)
        .bind(event.target_type)
        .bind(event.details.to_string())
        .bind(at.as_millis())
        .execute(&mut **tx)
        .await
        .map(|_| ())
}
