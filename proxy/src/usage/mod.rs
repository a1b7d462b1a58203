//! Usage capture: what each request consumed, read from the provider's answer
//! (`extract`, `sse`, `json_keys`, `template`), queued in memory and sent to the ledger
//! in batches (`sink`), never on the request path.

pub mod extract;
pub(crate) mod json_keys;
pub mod sink;
pub mod spool;
pub mod sse;
mod template;
mod wire;

use std::sync::Arc;

use bytes::Bytes;
use warden_shared::registry::Provider;
use warden_shared::snapshot::ProxyKeyState;
use warden_shared::timestamp::Timestamp;

use crate::budget::BudgetHold;
use crate::capture::Capture;
use crate::decisions::{ApprovalAsk, DecisionReport, EvaluationReport, PolicyResults, ResultLists};

/// One request's usage, as the control plane's internal batch endpoint takes it. The
/// key comes along as the shared state it was admitted with (a reference count, not
/// copies of its ids); the wire form is written when the batch is serialized
/// ([`batch_body`]).
#[derive(Debug)]
pub struct UsageRecord {
    /// Unique within the tenant, so a batch sent twice counts once.
    pub record_id: String,
    /// The proxy key the request came with: its tenant, agent and id are recorded.
    pub key: Arc<ProxyKeyState>,
    pub model_provider: Provider,
    pub model_name: String,
    pub request_type: &'static str,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Written as RFC 3339.
    pub recorded_at: Timestamp,
    /// The budgets this record's cost is pending in until the ledger has it; not sent.
    pub budget: Option<BudgetHold>,
    /// The policies' decision on the request, when the tenant has enabled policies.
    pub evaluation: Option<RecordEvaluation>,
    /// The request's body, for a tenant with payload capture (`crate::capture`):
    /// redacted as the batch is written, and dropped then.
    pub capture: Option<Capture>,
    /// An MCP tool call's record (`crate::mcp`): the control plane keeps it with the
    /// tenant's tool calls, not in the cost ledger. Its `model_name` is the prefixed tool
    /// name, its provider `mcp`, its tokens zero.
    pub tool_call: Option<Box<ToolCallRecord>>,
}

/// What the gateway records of a tool call, allowed or refused.
#[derive(Debug, Clone)]
pub struct ToolCallRecord {
    /// The registered server's id; empty when the name matched no server.
    pub server_id: String,
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    /// `ok`, `tool_error` (the tool answered with an error), `upstream_error` (the
    /// server could not be reached or failed) or `refused` (by Warden).
    pub outcome: &'static str,
    /// `allowed`, or the refusal's code (`approval_required`, `policy_violation`, ...).
    pub decision: &'static str,
    /// The policy that refused or held the call.
    pub policy_id: Option<i64>,
    /// From the call's arrival to its answer, milliseconds.
    pub latency_ms: i64,
}

/// The decision of the policies on a forwarded request, carried to the control plane by
/// its usage record (`crate::policy_gate`): the record's id is the decision's request id.
#[derive(Debug)]
pub struct RecordEvaluation {
    /// The model as the agent asked for it (the record names the provider's).
    pub model: String,
    pub evaluated_at: Timestamp,
    pub policy_results: PolicyResults,
}

impl RecordEvaluation {
    /// The decision reported on its own (`crate::decisions`), when no usage record
    /// carries it: the request of `key` to `provider`, under `request_id`.
    pub fn into_report(
        self,
        request_id: String,
        key: &ProxyKeyState,
        provider: Provider,
        approval: Option<ApprovalAsk>,
    ) -> DecisionReport {
        DecisionReport {
            tenant_id: key.tenant_id.clone(),
            evaluation: EvaluationReport {
                request_id,
                agent_id: key.agent_id.clone(),
                provider,
                model: self.model,
                evaluated_at: self.evaluated_at,
                policy_results: self.policy_results,
            },
            approval,
        }
    }
}

/// The body of `POST /internal/v1/usage-batches` for `records`: their results lists
/// once each under `result_lists` (when any record carries a decision), and the records,
/// a decision naming its list by index. `None` only if serializing fails (it cannot).
///
/// The records are written by hand ([`wire`]) rather than through serde's derive: at one
/// record per request, serializing was a tenth of the proxy's own instructions, most of
/// it escaping the field names and the ids (which never need it) byte by byte and
/// formatting timestamps.
pub fn batch_body(batch_id: &str, records: &[UsageRecord]) -> Option<Bytes> {
    let (result_lists, list_indexes) = ResultLists::of(
        records
            .iter()
            .map(|r| r.evaluation.as_ref().map(|e| &e.policy_results)),
    );
    let mut out = Vec::with_capacity(64 + records.len() * wire::RECORD_BYTES);
    out.extend_from_slice(b"{\"batch_id\":");
    wire::string(&mut out, batch_id);
    if !result_lists.is_empty() {
        out.extend_from_slice(b",\"result_lists\":");
        serde_json::to_writer(&mut out, &result_lists).ok()?;
    }
    out.extend_from_slice(b",\"records\":[");
    for (index, (record, list)) in records.iter().zip(&list_indexes).enumerate() {
        if index > 0 {
            out.push(b',');
        }
        wire::record(&mut out, record, *list);
    }
    out.extend_from_slice(b"]}");
    Some(Bytes::from(out))
}
