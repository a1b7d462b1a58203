//! SQL of the capture configuration and of the captured payloads, always filtered by
//! tenant.

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use warden_shared::timestamp::Timestamp;

use super::CaptureInput;
use crate::db::bulk::{for_backend, placeholders, rows_per_statement};
use crate::db::WriteTx;

const CAPTURE_COLUMNS: usize = 13;

pub async fn read_config(
    conn: &mut AnyConnection,
    tenant_id: &str,
) -> Result<Option<AnyRow>, sqlx::Error> {
    sqlx::query(
        "SELECT enabled, retention_days, processing_purpose, redaction_rules, config_version, \
         updated_by, created_at, updated_at FROM payload_capture_configs WHERE tenant_id = $1",
    )
    .bind(tenant_id)
    .fetch_optional(&mut *conn)
    .await
}

/// Writes the tenant's configuration (`rules` as JSON); returns its new version.
pub async fn upsert_config(
    tx: &mut WriteTx,
    tenant_id: &str,
    input: &CaptureInput,
    rules: &str,
    actor: &str,
    now: Timestamp,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO payload_capture_configs (tenant_id, enabled, retention_days, \
         processing_purpose, redaction_rules, config_version, updated_by, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $7) \
         ON CONFLICT (tenant_id) DO UPDATE SET enabled = excluded.enabled, \
         retention_days = excluded.retention_days, processing_purpose = excluded.processing_purpose, \
         redaction_rules = excluded.redaction_rules, \
         config_version = payload_capture_configs.config_version + 1, \
         updated_by = excluded.updated_by, updated_at = excluded.updated_at \
         RETURNING config_version",
    )
    .bind(tenant_id)
    .bind(i64::from(input.enabled))
    .bind(input.retention_days)
    .bind(input.processing_purpose.as_str())
    .bind(rules)
    .bind(actor)
    .bind(now.as_millis())
    .fetch_one(&mut **tx)
    .await
}

/// Whether the tenant's capture is enabled now.
pub async fn capture_enabled(tx: &mut WriteTx, tenant_id: &str) -> Result<bool, sqlx::Error> {
    let enabled: Option<i64> =
        sqlx::query_scalar("SELECT enabled FROM payload_capture_configs WHERE tenant_id = $1")
            .bind(tenant_id)
            .fetch_optional(&mut **tx)
            .await?;
    Ok(enabled == Some(1))
}

/// One captured payload, as stored.
pub struct CaptureRow<'a> {
    pub tenant_id: &'a str,
    pub record_id: &'a str,
    pub agent_id: &'a str,
    pub api_key_id: Option<&'a str>,
    pub request_type: &'a str,
    pub provider: &'a str,
    pub model: &'a str,
    pub config_version: i64,
    pub body_bytes: i64,
    pub redactions: i64,
    /// The redacted body as JSON text; `None` when it was omitted.
    pub body: Option<&'a str>,
    pub omitted: Option<&'a str>,
    pub captured_at: Timestamp,
}

/// Inserts `rows` (the captures of records new to the ledger), in multi-row statements:
/// their bodies are in memory already, bounded by the batch's size.
pub async fn insert_captures(tx: &mut WriteTx, rows: &[CaptureRow<'_>]) -> Result<(), sqlx::Error> {
    let per_statement = rows_per_statement(tx, CAPTURE_COLUMNS);
    for chunk in rows.chunks(per_statement) {
        let values = placeholders(tx, chunk.len(), CAPTURE_COLUMNS, 1);
        let sql = for_backend(
            tx,
            format!(
                "INSERT INTO payload_captures (tenant_id, record_id, agent_id, api_key_id, \
                 request_type, provider, model, config_version, body_bytes, redactions, body, \
                 omitted, captured_at) VALUES {values}"
            ),
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.tenant_id)
                .bind(row.record_id)
                .bind(row.agent_id)
                .bind(row.api_key_id)
                .bind(row.request_type)
                .bind(row.provider)
                .bind(row.model)
                .bind(row.config_version)
                .bind(row.body_bytes)
                .bind(row.redactions)
                .bind(row.body)
                .bind(row.omitted)
                .bind(row.captured_at.as_millis());
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Every tenant with a capture configuration: its retention and plan.
pub async fn retentions(
    conn: &mut AnyConnection,
) -> Result<Vec<(String, i64, String)>, sqlx::Error> {
    sqlx::query(
        "SELECT c.tenant_id, c.retention_days, t.plan FROM payload_capture_configs c \
         JOIN tenants t ON t.id = c.tenant_id ORDER BY c.tenant_id",
    )
    .fetch_all(&mut *conn)
    .await?
    .iter()
    .map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
    .collect()
}

/// Deletes the tenant's captures from before `before`; returns how many.
pub async fn delete_captured_before(
    conn: &mut AnyConnection,
    tenant_id: &str,
    before: Timestamp,
) -> Result<u64, sqlx::Error> {
    Ok(
        sqlx::query("DELETE FROM payload_captures WHERE tenant_id = $1 AND captured_at < $2")
            .bind(tenant_id)
            .bind(before.as_millis())
            .execute(&mut *conn)
            .await?
            .rows_affected(),
    )
}
