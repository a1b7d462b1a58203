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

const INSERT_AUDIT_EVENT: &str = "INSERT INTO audit_events \
     (id, tenant_id, event_type, actor, target_id, target_type, details, occurred_at, \
      seq, prev_hash, hash) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

/// Appends `event` to `tenant_id`'s trail inside `tx`, as the next link of its chain;
/// returns the event's id.
pub(super) async fn record(
    tx: &mut WriteTx,
    tenant_id: &str,
    actor: &str,
    at: Timestamp,
    event: AuditEvent<'_>,
) -> Result<String, sqlx::Error> {
    let id = new_id(IdKind::AuditEvent, at.as_millis());
    // serde_json's maps keep their keys sorted: this text is the details' one encoding.
    let details = event.details.to_string();
    let (seq, prev_hash) = chain::next_link(tx, tenant_id).await?;
    let hash = chain::Link {
        seq,
        id: &id,
        tenant_id,
        event_type: event.event_type,
        actor,
        target_type: event.target_type,
        target_id: event.target_id,
        details: &details,
        occurred_at: at.as_millis(),
        prev_hash: &prev_hash,
    }
    .hash();
    sqlx::query(INSERT_AUDIT_EVENT)
        .bind(&id)
        .bind(tenant_id)
        .bind(event.event_type)
        .bind(actor)
        .bind(event.target_id)
        .bind(event.target_type)
        .bind(&details)
        .bind(at.as_millis())
        .bind(seq)
        .bind(&prev_hash)
        .bind(&hash)
        .execute(&mut **tx)
        .await?;
    chain::set_head(tx, tenant_id, &hash).await?;
    Ok(id)
}
