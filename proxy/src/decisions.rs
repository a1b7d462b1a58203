//! Policy decisions reported to the control plane after the fact: each request's
//! per-policy results (evaluation records) and, when a `require_approval` policy held it,
//! the approval to queue. Like usage, the request path only `try_send`s into a bounded
//! queue; a task posts batches to `/internal/v1/policy-decisions` and retries a batch
//! until it is acknowledged (evaluation ids and the pending-approval dedupe make a resent
//! batch harmless). A full queue drops reports, counted, never blocking a request.

use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::mpsc;
use warden_shared::ids::{new_id, IdKind};

use warden_shared::policy::{Outcome, Policy, PolicyResult, PolicyType};
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::flush::{next_batch, now_ms, post_until_answered, Batch, FlushTarget};
use crate::metrics::ProxyMetrics;

/// One request's decision, as the internal endpoint takes it.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionReport {
    pub tenant_id: String,
    pub evaluation: EvaluationReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalAsk>,
}

/// One request's evaluation. The policies come along as the shared list they were
/// evaluated from (one reference count, not a copy of every name), and the names are
/// written only when the flusher serializes the report, off the request path.
#[derive(Debug, Clone)]
pub struct EvaluationReport {
    pub request_id: String,
    pub agent_id: String,
    pub provider: Provider,
    pub model: String,
    /// Written as RFC 3339 when the batch is serialized, off the request path.
    pub evaluated_at: Timestamp,
    /// What was evaluated; `results[i]` is `policies[i]`'s.
    pub policies: Arc<Vec<Policy>>,
    pub results: Vec<PolicyResult>,
}

impl Serialize for EvaluationReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Named<'a> {
            policy_id: i64,
            policy_name: &'a str,
            policy_type: PolicyType,
            result: Outcome,
            reason: Option<&'a str>,
        }
        /// The results with their policies' names, written as they are read.
        struct Results<'a>(&'a EvaluationReport);
        impl Serialize for Results<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let report = self.0;
                serializer.collect_seq(report.policies.iter().zip(&report.results).map(
                    |(policy, result)| Named {
                        policy_id: result.policy_id,
                        policy_name: &policy.name,
                        policy_type: result.policy_type,
                        result: result.result,
                        reason: result.reason.as_deref(),
                    },
                ))
            }
        }
        #[derive(Serialize)]
        struct Wire<'a> {
            request_id: &'a str,
            agent_id: &'a str,
            provider: Provider,
            model: &'a str,
            evaluated_at: Timestamp,
            results: Results<'a>,
        }
        Wire {
            request_id: &self.request_id,
            agent_id: &self.agent_id,
            provider: self.provider,
            model: &self.model,
            evaluated_at: self.evaluated_at,
            results: Results(self),
        }
        .serialize(serializer)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ApprovalAsk {
    pub policy_id: i64,
    pub request_context: Value,
}

/// The request path's handle on the queue.
#[derive(Clone)]
pub struct DecisionSink {
    queue: mpsc::Sender<DecisionReport>,
    metrics: ProxyMetrics,
}

impl DecisionSink {
    pub fn report(&self, report: DecisionReport) {
        if self.queue.try_send(report).is_err() {
            self.metrics.decisions_dropped.inc();
        }
    }
}

pub fn channel(
    capacity: usize,
    metrics: ProxyMetrics,
) -> (DecisionSink, mpsc::Receiver<DecisionReport>) {
    let (queue, receiver) = mpsc::channel(capacity.max(1));
    (DecisionSink { queue, metrics }, receiver)
}

/// Sends batches until every sender is gone and the queue is empty.
pub async fn flush_forever(
    mut receiver: mpsc::Receiver<DecisionReport>,
    target: FlushTarget,
    client: reqwest::Client,
    metrics: ProxyMetrics,
) {
    let mut batch = Vec::with_capacity(target.batch_size);
    while next_batch(&mut receiver, &mut batch, &target).await {
        let batch_id = new_id(IdKind::Usage, now_ms());
        let body = Batch {
            batch_id: &batch_id,
            field: "decisions",
            items: &batch,
        }
        .to_body();
        let answered: Option<serde::de::IgnoredAny> = match body {
            Some(body) => {
                post_until_answered(
                    &client,
                    &target,
                    &batch_id,
                    body,
                    "policy decisions",
                    &metrics.decisions_flush_failures,
                )
                .await
            }
            None => None,
        };
        if answered.is_none() {
            metrics.decisions_dropped.inc_by(batch.len() as u64);
        }
    }
}
