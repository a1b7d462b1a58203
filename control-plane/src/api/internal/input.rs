//! The bodies and query of the internal endpoints, as the proxies send them.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::api::extract::{parse_json, parse_raw};
use crate::api::payload_capture::RecordCapture;
use crate::api::policies::EvaluationReport;
use crate::error::ApiResult;
use crate::validate::Text;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageBatch {
    pub batch_id: Text<1, 100>,
    /// Results lists the records' decisions share: an `evaluation.results` is the index
    /// of its list here (or the list itself). A batch's requests mostly came out alike.
    /// Each is a list of `ReportedResult`, read when a record names it: a malformed list
    /// refuses the records naming it (in `errors`), never the batch; one no record names
    /// is not read.
    #[serde(default)]
    #[schema(value_type = Vec<Value>)]
    pub result_lists: Vec<Box<RawValue>>,
    /// Each a `ProxyUsageRecord`, checked alone: a malformed record is reported by its
    /// index in `errors` and the others land (a proxy's batch never fails whole).
    #[schema(value_type = Vec<Value>)]
    pub records: Vec<Box<RawValue>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProxyUsageRecord {
    /// Unique within the tenant; the idempotency key.
    pub record_id: Text<1, 100>,
    pub tenant_id: String,
    pub agent_id: String,
    #[schema(schema_with = crate::api::openapi_enums::provider)]
    pub model_provider: Provider,
    pub model_name: Text<1, 200>,
    #[serde(default)]
    pub request_type: Option<Text<1, 64>>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[schema(value_type = String, format = DateTime)]
    pub recorded_at: Timestamp,
    /// The proxy key the request came with; its budget counts the record.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub api_key_id: Option<Text<1, 100>>,
    /// The policies' decision on the request, when its tenant has enabled policies: it
    /// is written with the record, once, as the evaluation records of request
    /// `record_id`.
    #[serde(default)]
    pub evaluation: Option<RecordEvaluation>,
    /// The request's body, redacted, for a tenant with payload capture enabled.
    #[serde(default)]
    pub capture: Option<RecordCapture>,
    /// An MCP tool call's record: kept with the tenant's tool calls, not in the ledger.
    #[serde(default)]
    pub tool_call: Option<ToolCallInput>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordEvaluation {
    /// The model as the agent asked for it (`model_name` is the provider's).
    pub model: Text<1, 200>,
    #[schema(value_type = String, format = DateTime)]
    pub evaluated_at: Timestamp,
    /// The results in the policies' order, or the index of their list in the batch's
    /// `result_lists`.
    #[schema(value_type = Object)]
    pub results: Box<RawValue>,
}

/// A [`UsageBatch`] whose records all parse, in one pass: the proxy's batches, nearly
/// always. Scanning each record into a `RawValue` first, to parse it on its own, cost as
/// much again; that path is taken only when this one fails, to report the bad records
/// by index while the rest land.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TypedBatch {
    batch_id: Text<1, 100>,
    #[serde(default)]
    result_lists: Vec<Box<RawValue>>,
    records: Vec<ProxyUsageRecord>,
}

/// A batch with each record parsed, or the reason it does not parse.
pub struct ParsedBatch {
    pub batch_id: Text<1, 100>,
    pub result_lists: Vec<Box<RawValue>>,
    pub records: Vec<ApiResult<ProxyUsageRecord>>,
}

impl ParsedBatch {
    pub fn parse(body: &[u8]) -> ApiResult<ParsedBatch> {
        crate::api::extract::ensure_object(body, "body", "the body must be a JSON object")?;
        if let Ok(typed) = serde_json::from_slice::<TypedBatch>(body) {
            return Ok(ParsedBatch {
                batch_id: typed.batch_id,
                result_lists: typed.result_lists,
                records: typed.records.into_iter().map(Ok).collect(),
            });
        }
        let batch: UsageBatch = parse_json(body)?;
        Ok(ParsedBatch {
            batch_id: batch.batch_id,
            result_lists: batch.result_lists,
            records: batch.records.iter().map(|raw| parse_raw(raw)).collect(),
        })
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionBatch {
    /// The idempotency key: a batch id seen before writes nothing.
    pub batch_id: Text<1, 100>,
    /// Results lists the decisions share: a decision's `evaluation.results` may be the
    /// index of its list here instead of the list itself. A batch's decisions mostly
    /// came out alike, so the proxy sends each distinct list once. Each is a list of
    /// `ReportedResult`, read when a decision names it: a malformed list refuses the
    /// decisions naming it (in `errors`), never the batch.
    #[serde(default)]
    #[schema(value_type = Vec<Value>)]
    pub result_lists: Vec<Box<RawValue>>,
    /// Each a `ProxyDecision`, checked alone: a malformed decision is reported by its
    /// index in `errors` and the others are written.
    #[schema(value_type = Vec<Value>)]
    pub decisions: Vec<Box<RawValue>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProxyDecision {
    pub tenant_id: Text<1, 100>,
    pub evaluation: EvaluationReport,
    /// Set when a `require_approval` policy held the request.
    #[serde(default)]
    pub approval: Option<ApprovalAsk>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAsk {
    pub policy_id: i64,
    /// Includes `provider` and `model`.
    #[schema(value_type = Object)]
    pub request_context: Value,
    /// What an approval lets through (the policy's `releases`); omitted: `scope`.
    #[serde(default)]
    #[schema(schema_with = crate::api::openapi_enums::optional_releases)]
    pub releases: Option<warden_shared::policy::Releases>,
    /// The held action's digest (64 hex digits, `warden_shared::action`); required when
    /// the approval releases the action.
    #[serde(default)]
    pub action_digest: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// The version the proxy already holds; omitted: start with a full snapshot.
    pub since: Option<i64>,
    /// The proxy's instance id, under which it acknowledges the versions it applies
    /// (`POST /internal/v1/proxy-acks`). Omitted: writes do not wait for this stream.
    pub proxy: Option<String>,
}

/// What the gateway records of a tool call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallInput {
    /// The registered server's id; empty when the name matched no server.
    pub server_id: Text<0, 100>,
    pub server: Text<0, 200>,
    pub tool: Text<1, 200>,
    /// `ok`, `tool_error`, `upstream_error` or `refused`.
    pub outcome: Text<1, 32>,
    /// `allowed` or the refusal's code.
    pub decision: Text<1, 64>,
    #[serde(default)]
    pub policy_id: Option<i64>,
    pub latency_ms: i64,
}
