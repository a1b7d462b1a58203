//! Policy decisions reported to the control plane after the fact: each request's
//! per-policy results (evaluation records) and, when a `require_approval` policy held it,
//! the approval to queue. Like usage, the request path only `try_send`s into a bounded
//! queue; a task posts batches to `/internal/v1/policy-decisions` and retries a batch
//! until it is acknowledged (evaluation ids and the pending-approval dedupe make a resent
//! batch harmless). A full queue drops reports, counted, never blocking a request.

use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::policy::PolicyResult;
use warden_shared::registry::Provider;

use crate::flush::{next_batch, now_ms, post_until_answered, FlushTarget};
use crate::metrics::ProxyMetrics;

/// One request's decision, as the internal endpoint takes it.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionReport {
    pub tenant_id: String,
    pub evaluation: EvaluationReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalAsk>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EvaluationReport {
    pub request_id: String,
    pub agent_id: String,
    pub provider: Provider,
    pub model: String,
    /// RFC 3339.
    pub evaluated_at: String,
    pub results: Vec<PolicyResult>,
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
        let body = json!({ "batch_id": new_id(IdKind::Usage, now_ms()), "decisions": batch });
        let answered = post_until_answered(
            &client,
            &target,
            &body,
            "policy decisions",
            &metrics.decisions_flush_failures,
        )
        .await;
        if answered.is_none() {
            metrics.decisions_dropped.inc_by(batch.len() as u64);
        }
    }
}
