//! The audit trail's rows, appended through `changes::record` only.
//!
//! A change and its audit record commit or roll back together, so the trail never shows
//! a change that did not happen nor misses one that did. Each row is a link of its
//! tenant's hash chain (`super::chain`).

use serde_json::Value;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::timestamp::Timestamp;

use super::chain;
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

/// Appends `event` to `tenant_id`'s trail inside `tx`, as the next link of its chain;
/// returns the event's id.
pub(super) async fn record(
    tx: &mut WriteTx,
    tenant_id: &str,
    actor: &str,
    at: Timestamp,
    event: &AuditEvent<'_>,
) -> Result<String, sqlx::Error> {
    let id = new_id(IdKind::AuditEvent, at.as_millis());
    // serde_json's maps keep their keys sorted: this text is the details' one encoding.
    let details = event.details.to_string();
    let new = chain::NewEvent {
        id: &id,
        tenant_id,
        event_type: event.event_type,
        actor,
        target_type: event.target_type,
        target_id: event.target_id,
        details: &details,
        occurred_at: at.as_millis(),
    };
    chain::append(tx, &new).await?;
    Ok(id)
}
