//! The bounded queue of usage records and the task that sends them to the ledger.
//!
//! The request path only `try_send`s into a bounded channel and never waits. The flusher
//! takes up to `usage_batch_size` records at least every `usage_flush_interval_ms`, gives
//! the batch an id and posts it to `/internal/v1/usage-batches` until the control plane
//! acknowledges it, retrying the very same batch (same record ids) with backoff: the
//! ledger counts a record id once, so a retry after a lost acknowledgement never counts
//! twice, and an outage of the control plane loses nothing while the queue has room.
//! When the queue is full, new records are dropped and counted, never blocking a request.

use std::sync::Arc;

use tokio::sync::mpsc;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::snapshot::ScopeSpend;

use super::UsageRecord;
use crate::budget::{Budgets, FigureSource};
use crate::flush::{next_batch, now_ms, post_until_answered, FlushTarget};
use crate::metrics::ProxyMetrics;

/// The request path's handle on the queue.
#[derive(Clone)]
pub struct UsageSink {
    queue: mpsc::Sender<UsageRecord>,
    metrics: ProxyMetrics,
}

impl UsageSink {
    /// Queues `record`; drops it (counted and logged) when the queue is full.
    pub fn record(&self, record: UsageRecord) {
        match self.queue.try_send(record) {
            Ok(()) => self.metrics.usage_queued.inc(),
            Err(mpsc::error::TrySendError::Full(record)) => {
                self.metrics.usage_dropped.inc();
                finished(&record);
                tracing::error!(
                    tenant_id = %record.key.tenant_id,
                    "usage queue full (control plane unreachable for long?); record dropped"
                );
            }
            Err(mpsc::error::TrySendError::Closed(record)) => {
                self.metrics.usage_dropped.inc();
                finished(&record);
            }
        }
    }
}

/// Tells the record's budgets that the ledger has it, or will never have it.
fn finished(record: &UsageRecord) {
    if let Some(hold) = &record.budget {
        hold.release();
    }
}

/// Creates the queue and returns its handle and the flusher to spawn.
pub fn channel(capacity: usize, metrics: ProxyMetrics) -> (UsageSink, mpsc::Receiver<UsageRecord>) {
    let (queue, receiver) = mpsc::channel(capacity.max(1));
    (UsageSink { queue, metrics }, receiver)
}

/// Sends batches until every sender is gone and the queue is empty.
pub async fn flush_forever(
    mut receiver: mpsc::Receiver<UsageRecord>,
    target: FlushTarget,
    client: reqwest::Client,
    metrics: ProxyMetrics,
    budgets: Arc<Budgets>,
) {
    let mut batch = Vec::with_capacity(target.batch_size);
    while next_batch(&mut receiver, &mut batch, &target).await {
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
