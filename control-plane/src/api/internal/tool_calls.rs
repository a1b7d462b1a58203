//! Tool-call records in the proxies' usage batches (the MCP gateway's): stored in
//! `tool_calls`, idempotent by record id like usage, and never in the cost ledger. A
//! call refused by Warden itself (kill switch, quarantine, an unapproved or unknown
//! tool) is audited as `tool_call.refused`, once per agent, server, tool and refusal in
//! a batch; refusals by policies are audited as `policy.violated` by the decisions they
//! came with, and held calls queue approvals.

use std::collections::BTreeMap;

use serde_json::json;
use warden_shared::timestamp::Timestamp;

use super::input::ProxyUsageRecord;
use super::store;
use crate::changes::{self, AuditEvent, Author, Proxies};
use crate::db::WriteTx;

/// Tenant, agent, server, tool and refusal: what one `tool_call.refused` event counts.
type RefusalKey<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str);

/// Stores the records new to `tool_calls`; returns how many were new (the rest were
/// seen before).
pub async fn record_tool_calls(
    tx: &mut WriteTx,
    records: &[&ProxyUsageRecord],
) -> Result<i64, sqlx::Error> {
    let mut new = 0;
    let mut refusals: BTreeMap<RefusalKey<'_>, (i64, Timestamp)> = BTreeMap::new();
    for record in records {
        let Some(call) = &record.tool_call else {
            continue;
        };
        if !store::insert_tool_call(tx, record, call).await? {
            continue;
        }
        new += 1;
        if call.outcome.as_str() == "refused" && call.policy_id.is_none() {
            let entry = refusals
                .entry((
                    record.tenant_id.as_str(),
                    record.agent_id.as_str(),
                    call.server.as_str(),
                    call.tool.as_str(),
                    call.decision.as_str(),
                ))
                .or_insert((0, record.recorded_at));
            entry.0 += 1;
        }
    }
    for ((tenant_id, agent_id, server, tool, decision), (count, at)) in refusals {
        changes::record(
            tx,
            Author::proxy(tenant_id),
            at,
            AuditEvent {
                event_type: "tool_call.refused",
                target_type: "agent",
                target_id: agent_id,
                details: json!({
                    "server": server,
                    "tool": tool,
                    "decision": decision,
                    "count": count,
                }),
            },
            Proxies::Unaffected,
        )
        .await?;
    }
    Ok(new)
}
