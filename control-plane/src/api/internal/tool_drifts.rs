//! `POST /internal/v1/mcp-tool-drifts`: a proxy listed an approved MCP server's tool
//! with a definition that differs from the approved one (or a tool added since). Each
//! definition is recorded once (however many proxies report it) and, the first time,
//! audited as `mcp_server.tool_changed`, which notifies subscribed channels
//! (`mcp_tool.changed`). The proxy has already withheld the tool.

use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::changes::{self, AuditEvent, Author, Proxies};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DriftReport {
    pub tenant_id: Text<1, 100>,
    pub server_id: Text<1, 100>,
    pub tool: Text<1, 200>,
    /// The fingerprint listed now.
    pub fingerprint: Text<64, 64>,
    /// The approved one; none: the tool was added after the approval.
    #[serde(default)]
    pub pinned_fingerprint: Option<Text<64, 64>>,
}

/// Records the report; whether it was new (and so audited).
pub async fn record_drift(state: &AppState, report: DriftReport) -> ApiResult<bool> {
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    // Held until the end, so the tenant cannot be deleted under the report.
    let tenant_id = report.tenant_id.as_str();
    if super::store::live_tenants(&mut tx, [tenant_id])
        .await?
        .is_empty()
    {
        let gone = [tenant_id.to_owned()];
        super::usage_batches::report_dropped(state, "-", "tool_drift", &gone);
        return Ok(false);
    }
    let server: Option<String> =
        sqlx::query_scalar("SELECT name FROM mcp_servers WHERE tenant_id = $1 AND id = $2")
            .bind(report.tenant_id.as_str())
            .bind(report.server_id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
    // A server deleted since the proxy listed it: nothing left to report on.
    let Some(server) = server else {
        return Ok(false);
    };
    let done = sqlx::query(
        "INSERT INTO mcp_tool_drifts (tenant_id, server_id, tool, fingerprint, \
         pinned_fingerprint, first_seen_at) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (server_id, tool, fingerprint) DO NOTHING",
    )
    .bind(report.tenant_id.as_str())
    .bind(report.server_id.as_str())
    .bind(report.tool.as_str())
    .bind(report.fingerprint.as_str())
    .bind(report.pinned_fingerprint.as_ref().map(|f| f.as_str()))
    .bind(now.as_millis())
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    changes::record(
        &mut tx,
        Author::proxy(report.tenant_id.as_str()),
        now,
        AuditEvent {
            event_type: "mcp_server.tool_changed",
            target_type: "mcp_server",
            target_id: report.server_id.as_str(),
            details: json!({
                "server": server,
                "tool": report.tool.as_str(),
                "fingerprint": report.fingerprint.as_str(),
                "approved_fingerprint": report.pinned_fingerprint.as_ref().map(|f| f.as_str()),
                "change": if report.pinned_fingerprint.is_some() { "definition_changed" } else { "tool_added" },
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}
