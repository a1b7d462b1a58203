//! SQL of heartbeats. Every statement filters by tenant; usage is written by
//! `crate::ledger`.

use crate::db::WriteTx;

/// A heartbeat row as it is kept for health scores.
#[derive(Debug)]
pub struct HeartbeatRow<'a> {
    pub id: &'a str,
    pub tenant_id: &'a str,
    pub agent_id: &'a str,
    pub status: &'a str,
    pub latency_ms: Option<i64>,
    /// A JSON object.
    pub metadata: &'a str,
    pub received_at: i64,
}

/// Sets the live agent's reported status and last heartbeat; false when the tenant has
/// no such live agent.
pub async fn set_agent_heartbeat(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
    status: &str,
    at_ms: i64,
) -> Result<bool, sqlx::Error> {
    let updated = sqlx::query(
        "UPDATE agents SET status = $3, last_heartbeat = $4 \
         WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(status)
    .bind(at_ms)
    .execute(&mut **tx)
    .await?;
    Ok(updated.rows_affected() == 1)
}

pub async fn insert_heartbeat(tx: &mut WriteTx, row: &HeartbeatRow<'_>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO heartbeats (id, tenant_id, agent_id, status, latency_ms, metadata, received_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(row.id)
    .bind(row.tenant_id)
    .bind(row.agent_id)
    .bind(row.status)
    .bind(row.latency_ms)
    .bind(row.metadata)
    .bind(row.received_at)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}
