//! The bounded queue of usage records and the task that sends them to the ledger.
//!
//! The request path only `try_send`s into a bounded channel and never waits. The flusher
//! takes up to `usage_batch_size` records at least every `usage_flush_interval_ms`, gives
//! the batch an id and posts it to `/internal/v1/usage-batches` until the control plane
//! acknowledges it, retrying the very same batch (same record ids) with backoff: the
//! ledger counts a record id once, so a retry after a lost acknowledgement never counts
//! twice, and an outage of the control plane loses nothing while the queue has room.
//! When the queue is full, new records are dropped and counted, never blocking a request;
//! a dropped record's policy decision is reported on its own (`crate::decisions`), so it
//! is still recorded once.

use std::sync::Arc;

use tokio::sync::mpsc;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::snapshot::ScopeSpend;

use super::UsageRecord;
use crate::batch_queue::{batch_queue, BatchReceiver, BatchSender};
use crate::budget::{Budgets, FigureSource};
use crate::clock::now_ms;
use crate::decisions::DecisionSink;
use crate::flush::{post_until_answered, FlushTarget};
use crate::log_throttle::{LogThrottle, LOG_INTERVAL};
use crate::metrics::ProxyMetrics;

/// The request path's handle on the queue.
#[derive(Clone)]
pub struct UsageSink {
    queue: BatchSender<UsageRecord>,
    metrics: ProxyMetrics,
    /// Where a dropped record's decision goes instead.
    decisions: DecisionSink,
}

impl UsageSink {
    /// Queues `record`; drops it (counted and logged) when the queue is full.
    pub fn record(&self, record: UsageRecord) {
        match self.queue.try_send(record) {
            Ok(()) => self.metrics.usage_queued.inc(),
            Err(mpsc::error::TrySendError::Full(record)) => {
                // An overloaded proxy can drop thousands of records a second.
                static DROPS: LogThrottle = LogThrottle::new(LOG_INTERVAL);
                if let Some(dropped) = DROPS.hit() {
                    tracing::error!(
                        dropped,
                        tenant_id = %record.key.tenant_id,
                        "usage queue full: the control plane is unreachable or not keeping up; \
                         records dropped (counted in warden_proxy_usage_dropped_total)"
                    );
                }
                self.dropped(record);
            }
            Err(mpsc::error::TrySendError::Closed(record)) => self.dropped(record),
        }
    }

    fn dropped(&self, mut record: UsageRecord) {
        self.metrics.usage_dropped.inc();
        finished(&record);
        if let Some(evaluation) = record.evaluation.take() {
            let report =
                evaluation.into_report(record.record_id, &record.key, record.model_provider, None);
            self.decisions.report(report);
        }
    }
}

/// Tells the record's budgets that the ledger has it, or will never have it.
fn finished(record: &UsageRecord) {
    if let Some(hold) = &record.budget {
        hold.release();
    }
}

/// Creates the queue (`capacity` records, sent in batches of at most `batch_size`) and
/// returns its handle and the receiver the flusher takes.
pub fn channel(
    capacity: usize,
    batch_size: usize,
    metrics: ProxyMetrics,
    decisions: DecisionSink,
) -> (UsageSink, BatchReceiver<UsageRecord>) {
    let (queue, receiver) = batch_queue(capacity, batch_size);
    let sink = UsageSink {
        queue,
        metrics,
        decisions,
    };
    (sink, receiver)
}

/// Sends batches until every sender is gone and the queue is empty.
pub async fn flush_forever(
    mut receiver: BatchReceiver<UsageRecord>,
    target: FlushTarget,
    client: reqwest::Client,
    metrics: ProxyMetrics,
    budgets: Arc<Budgets>,
) {
    let mut batch = Vec::with_capacity(receiver.batch_size());
    while receiver.next_batch(&mut batch, target.interval).await {
        metrics.usage_queued.sub(batch.len() as i64);
        for hold in batch.iter_mut().filter_map(|record| record.budget.as_mut()) {
            hold.sending();
        }
        if let Some(spend) = send_until_acknowledged(&client, &target, &batch, &metrics).await {
            // The ledger's new totals include this batch: take them before the batch's
            // costs leave `pending`, so they are never missing from a scope's spend.
            budgets.apply_ledger(&spend, FigureSource::Acknowledgement);
        }
        for record in &batch {
            finished(record);
        }
    }
}

/// The parts of the ledger's acknowledgement the proxy reads.
#[derive(Default, serde::Deserialize)]
struct UsageAck {
    #[serde(default)]
    rejected: i64,
    #[serde(default)]
    errors: serde_json::Value,
    #[serde(default)]
    spend: Vec<ScopeSpend>,
}

/// Sends `batch` until the ledger answers for it; returns the budget scopes' new totals
/// it acknowledged with (`None`: the batch was refused whole).
async fn send_until_acknowledged(
    client: &reqwest::Client,
    target: &FlushTarget,
    batch: &[UsageRecord],
    metrics: &ProxyMetrics,
) -> Option<Vec<ScopeSpend>> {
    let batch_id = new_id(IdKind::Usage, now_ms());
    let body = super::batch_body(&batch_id, batch)?;
    metrics.usage_in_flight.set(batch.len() as i64);
    let ack: Option<UsageAck> = post_until_answered(
        client,
        target,
        &batch_id,
        body,
        "usage",
        &metrics.usage_flush_failures,
    )
    .await;
    metrics.usage_in_flight.set(0);
    let Some(ack) = ack else {
        metrics.usage_dropped.inc_by(batch.len() as u64);
        return None;
    };
    if ack.rejected > 0 {
        // Refused records (an agent deleted meanwhile, say) would be refused again: log
        // them instead of retrying forever.
        tracing::warn!(%batch_id, rejected = ack.rejected, errors = %ack.errors, "ledger refused usage records");
    }
    metrics.usage_flushed.inc_by(batch.len() as u64);
    Some(ack.spend)
}

#[cfg(test)]
mod tests {
    use warden_shared::policy::Outcome;
    use warden_shared::registry::Provider;
    use warden_shared::snapshot::ProxyKeyState;
    use warden_shared::timestamp::Timestamp;

    use super::*;
    use crate::decisions::{self, results};
    use crate::test_fixtures::{key, no_nvidia};
    use crate::usage::RecordEvaluation;

    fn record(record_id: &str, key: &Arc<ProxyKeyState>) -> UsageRecord {
        UsageRecord {
            record_id: record_id.into(),
            key: key.clone(),
            model_provider: Provider::Openai,
            model_name: "gpt-4o".into(),
            request_type: "chat.completions",
            input_tokens: 10,
            output_tokens: 20,
            recorded_at: Timestamp::from_millis(2_000),
            budget: None,
            evaluation: Some(RecordEvaluation {
                model: "openai/gpt-4o".into(),
                evaluated_at: Timestamp::from_millis(1_000),
                policy_results: results(&no_nvidia(), Outcome::Pass),
            }),
        }
    }

    #[test]
    fn a_dropped_records_decision_is_reported_on_its_own() {
        let key = key("ak_1", "ten_1", "agt_1");
        let metrics = ProxyMetrics::new().expect("metrics");
        let (decision_sink, mut reports) = decisions::channel(4, 10, &metrics);
        let (usage, _queue) = channel(1, 10, metrics.clone(), decision_sink);
        usage.record(record("usg_kept", &key));
        assert!(
            reports.try_recv().is_err(),
            "a queued record keeps its decision"
        );
        usage.record(record("usg_dropped", &key));
        assert_eq!(metrics.usage_dropped.get(), 1);
        let report = reports.try_recv().expect("the dropped record's decision");
        assert_eq!(report.tenant_id, "ten_1");
        let evaluation = report.evaluation;
        assert_eq!(evaluation.request_id, "usg_dropped");
        assert_eq!(evaluation.agent_id, "agt_1");
        assert_eq!(evaluation.model, "openai/gpt-4o");
        assert_eq!(evaluation.evaluated_at, Timestamp::from_millis(1_000));
        assert_eq!(evaluation.policy_results.results.len(), 1);
        assert!(reports.try_recv().is_err(), "reported once");
    }
}
