//! Policy decisions reported to the control plane after the fact: each request's
//! per-policy results (evaluation records) and, when a `require_approval` policy held it,
//! the approval to queue. Like usage, the request path only `try_send`s into a bounded
//! queue; a task posts batches to `/internal/v1/policy-decisions` and retries a batch
//! until it is acknowledged (evaluation ids and the pending-approval dedupe make a resent
//! batch harmless). A full queue drops reports, counted, never blocking a request.

use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::policy::PolicyResult;
use warden_shared::registry::Provider;

use crate::metrics::ProxyMetrics;
use crate::usage::sink::{now_ms, FlushTarget};

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
    loop {
        batch.clear();
        let Some(first) = receiver.recv().await else {
            return;
        };
        batch.push(first);
        let deadline = tokio::time::Instant::now() + target.interval;
        while batch.len() < target.batch_size {
            match tokio::time::timeout_at(deadline, receiver.recv()).await {
                Ok(Some(report)) => batch.push(report),
                Ok(None) | Err(_) => break,
            }
        }
        let body = json!({ "batch_id": new_id(IdKind::Usage, now_ms()), "decisions": batch });
        let mut backoff = Duration::from_millis(250);
        loop {
            let sent = client
                .post(&target.url)
                .bearer_auth(&target.service_token)
                .json(&body)
                .timeout(Duration::from_secs(30))
                .send()
                .await;
            match sent {
                Ok(response) if response.status().is_success() => break,
                Ok(response)
                    if response.status().is_client_error()
                        && response.status() != 401
                        && response.status() != 429 =>
                {
                    metrics.decisions_dropped.inc_by(batch.len() as u64);
                    tracing::error!(status = %response.status(), "control plane refused a batch of policy decisions; dropped");
                    break;
                }
                Ok(response) => {
                    metrics.decisions_flush_failures.inc();
                    tracing::warn!(status = %response.status(), retry_in = ?backoff, "policy decisions not accepted; retrying");
                }
                Err(error) => {
                    metrics.decisions_flush_failures.inc();
                    tracing::warn!(%error, retry_in = ?backoff, "cannot reach the control plane for policy decisions; retrying");
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(15));
        }
    }
}
