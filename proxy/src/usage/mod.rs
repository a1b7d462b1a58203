//! Usage capture: what each request consumed, read from the provider's answer
//! (`extract`, `sse`), queued in memory and sent to the ledger in batches (`sink`),
//! never on the request path.

pub mod extract;
pub mod sink;
pub mod sse;

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use warden_shared::registry::Provider;
use warden_shared::snapshot::ProxyKeyState;
use warden_shared::timestamp::Timestamp;

use crate::budget::BudgetHold;
use crate::decisions::{ApprovalAsk, DecisionReport, EvaluationReport, PolicyResults, ResultLists};

pub use extract::Tokens;

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
pub fn batch_body(batch_id: &str, records: &[UsageRecord]) -> Option<Bytes> {
    let (result_lists, list_indexes) = ResultLists::of(
        records
            .iter()
            .map(|r| r.evaluation.as_ref().map(|e| &e.policy_results)),
    );
    #[derive(Serialize)]
    struct BatchWire<'a> {
        batch_id: &'a str,
        #[serde(skip_serializing_if = "ResultLists::is_empty")]
        result_lists: ResultLists<'a>,
        records: RecordsWire<'a>,
    }
    let body = BatchWire {
        batch_id,
        result_lists,
        records: RecordsWire(records, &list_indexes),
    };
    serde_json::to_vec(&body).ok().map(Bytes::from)
}

/// The records, `list_indexes[i]` naming the results list of `records[i]`'s decision.
struct RecordsWire<'a>(&'a [UsageRecord], &'a [Option<usize>]);

impl Serialize for RecordsWire<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            record_id: &'a str,
            tenant_id: &'a str,
            agent_id: &'a str,
            model_provider: Provider,
            model_name: &'a str,
            request_type: &'static str,
            input_tokens: i64,
            output_tokens: i64,
            recorded_at: Timestamp,
            api_key_id: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            evaluation: Option<Evaluation<'a>>,
        }
        #[derive(Serialize)]
        struct Evaluation<'a> {
            model: &'a str,
            evaluated_at: Timestamp,
            results: usize,
        }
        serializer.collect_seq(self.0.iter().zip(self.1).map(|(record, list)| {
            Wire {
                record_id: &record.record_id,
                tenant_id: &record.key.tenant_id,
                agent_id: &record.key.agent_id,
                model_provider: record.model_provider,
                model_name: &record.model_name,
                request_type: record.request_type,
                input_tokens: record.input_tokens,
                output_tokens: record.output_tokens,
                recorded_at: record.recorded_at,
                api_key_id: &record.key.id,
                evaluation: record
                    .evaluation
                    .as_ref()
                    .zip(*list)
                    .map(|(evaluation, results)| Evaluation {
                        model: &evaluation.model,
                        evaluated_at: evaluation.evaluated_at,
                        results,
                    }),
            }
        }))
    }
}
