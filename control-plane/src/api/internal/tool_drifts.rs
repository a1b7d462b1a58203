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
    let server =
        super::store::mcp_server_name(&mut tx, tenant_id, report.server_id.as_str()).await?;
    // A server deleted since the proxy listed it: nothing left to report on.
    let Some(server) = server else {
        return Ok(false);
    };
    let new = super::store::insert_tool_drift(
        &mut tx,
        tenant_id,
        report.server_id.as_str(),
        report.tool.as_str(),
        report.fingerprint.as_str(),
        report.pinned_fingerprint.as_ref().map(|f| f.as_str()),
        now,
    )
    .await?;
    if !new {
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
