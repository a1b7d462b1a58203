//! The bounded queue of usage records and the tasks that send them to the ledger.
//!
//! The request path only `try_send`s into a bounded channel and never waits. The flusher
//! takes up to `usage_batch_size` records at least every `usage_flush_interval_ms`, gives
//! the batch an id, writes it to the spool (`super::spool`, so it survives a restart) and
//! posts it to `/internal/v1/usage-batches` until the control plane acknowledges it,
//! retrying the very same batch (same record ids) with backoff: the ledger counts a
//! record id once, so a retry after a lost acknowledgement never counts twice, and an
//! outage of the control plane loses nothing while the queue and the spool have room.
//! Taking and sending are separate tasks, so batches keep reaching the spool while the
//! ledger is unreachable.
//! When the queue is full, new records are dropped and counted, never blocking a request;
//! a dropped record's policy decision is reported on its own (`crate::decisions`), so it
//! is still recorded once.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::wire::BatchAck;

use super::spool::{OpenSpool, Spool};
use super::UsageRecord;
use crate::batch_queue::{batch_queue, BatchReceiver, BatchSender};
use crate::budget::{Budgets, FigureSource};
use crate::decisions::DecisionSink;
use crate::flush::{post_until_answered, FlushTarget};
use crate::log_throttle::{LogThrottle, LOG_INTERVAL};
use crate::metrics::ProxyMetrics;
use warden_shared::clock::system_now_ms;

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

/// A batch taken from the queue, on its way to the ledger: its records keep their budget
/// holds until it is acknowledged.
struct Taken {
    batch_id: String,
    body: Bytes,
    records: Vec<UsageRecord>,
    /// Written to the spool, to be removed from it once acknowledged.
    spooled: bool,
    /// The room it takes among the batches waiting to be sent.
    _room: OwnedSemaphorePermit,
}

/// The flusher's two tasks: [`take_batches`] takes batches from the queue and spools
/// them, [`send_batches`] sends them to the ledger in order. Split so that a ledger that
/// is unreachable never keeps batches from reaching the spool.
pub struct Flusher {
    pub taker: JoinHandle<()>,
    pub sender: JoinHandle<()>,
}

/// Where the flusher's batches go: the ledger, and the spool before it when there is one
/// (with the ids of the batches an earlier run left in it, sent first).
pub struct Outlet {
    pub target: FlushTarget,
    pub client: reqwest::Client,
    pub spool: Option<OpenSpool>,
}

/// Starts the flusher: both tasks end once every sender of the queue is gone and each
/// batch is acknowledged (or, with a spool, left in it for the next start).
pub fn start(
    receiver: BatchReceiver<UsageRecord>,
    outlet: Outlet,
    metrics: ProxyMetrics,
    budgets: Arc<Budgets>,
    capacity: usize,
) -> Flusher {
    let (spool, left) = match outlet.spool {
        Some(OpenSpool { spool, left }) => (Some(spool), left),
        None => (None, Vec::new()),
    };
    let (batches, waiting) = mpsc::unbounded_channel();
    // Batches waiting to be sent hold at most `capacity` records, as the queue does:
    // with the ledger unreachable the proxy holds twice its queue at most.
    let room = Arc::new(Semaphore::new(capacity.clamp(1, Semaphore::MAX_PERMITS)));
    let interval = outlet.target.interval;
    let taker = tokio::spawn(take_batches(
        receiver,
        interval,
        spool.clone(),
        room,
        batches,
        metrics.clone(),
    ));
    let sender = tokio::spawn(send_batches(
        waiting,
        Sending {
            target: outlet.target,
            client: outlet.client,
            spool,
            left,
            metrics,
            budgets,
        },
    ));
    Flusher { taker, sender }
}

/// The most a batch's captured payloads may carry, in bytes: a batch of records with
/// captures is cut into several (the control plane takes up to 16 MiB per batch, and
/// one capture is at most `payload_capture_max_bytes`).
const MAX_CAPTURE_BYTES_PER_BATCH: usize = 4 << 20;

/// Takes each batch from the queue, writes it to the spool and hands it to the sender,
/// until every sender of the queue is gone and the queue is empty.
async fn take_batches(
    mut receiver: BatchReceiver<UsageRecord>,
    interval: std::time::Duration,
    spool: Option<Arc<Spool>>,
    room: Arc<Semaphore>,
    batches: mpsc::UnboundedSender<Taken>,
    metrics: ProxyMetrics,
) {
    let mut batch = Vec::with_capacity(receiver.batch_size());
    while receiver.next_batch(&mut batch, interval).await {
        metrics.usage_queued.sub(batch.len() as i64);
        for hold in batch.iter_mut().filter_map(|record| record.budget.as_mut()) {
            hold.sending();
        }
        let taken = std::mem::replace(&mut batch, Vec::with_capacity(receiver.batch_size()));
        for records in split_by_captures(taken) {
            match take(records, spool.as_ref(), &room, &metrics).await {
                Took::Batch(taken) => {
                    if batches.send(taken).is_err() {
                        return;
                    }
                }
                Took::Unwritable => {}
                Took::Stopped => return,
            }
        }
    }
}

/// `records` in batches whose captures carry at most [`MAX_CAPTURE_BYTES_PER_BATCH`]
/// (a record whose capture alone is larger goes alone); one batch when none has one.
fn split_by_captures(records: Vec<UsageRecord>) -> Vec<Vec<UsageRecord>> {
    if records.iter().all(|record| record.capture.is_none()) {
        return vec![records];
    }
    let mut batches = vec![Vec::new()];
    let mut bytes = 0;
    for record in records {
        let size = record.capture.as_ref().map_or(0, |c| c.wire_bytes());
        let current = batches.last().map_or(0, Vec::len);
        if current > 0 && bytes + size > MAX_CAPTURE_BYTES_PER_BATCH {
            batches.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        if let Some(batch) = batches.last_mut() {
            batch.push(record);
        }
    }
    batches
}

enum Took {
    Batch(Taken),
    /// The batch could not be serialized (it cannot happen); its records are dropped.
    Unwritable,
    /// The sender is gone.
    Stopped,
}

/// Gives `records` a batch id and their body, writes it to the spool and waits for room
/// among the batches waiting to be sent. The records' captures are dropped once
/// written: the batch body holds them, redacted.
async fn take(
    mut records: Vec<UsageRecord>,
    spool: Option<&Arc<Spool>>,
    room: &Arc<Semaphore>,
    metrics: &ProxyMetrics,
) -> Took {
    let batch_id = new_id(IdKind::Usage, system_now_ms());
    let body = super::batch_body(&batch_id, &records);
    for record in &mut records {
        record.capture = None;
    }
    let Some(body) = body else {
        metrics.usage_dropped.inc_by(records.len() as u64);
        records.iter().for_each(finished);
        return Took::Unwritable;
    };
    let spooled = match spool {
        Some(spool) => spool.write(&batch_id, &body).await,
        None => false,
    };
    if spool.is_some() && !spooled {
        metrics.usage_unspooled.inc_by(records.len() as u64);
    }
    let wanted = u32::try_from(records.len().max(1)).unwrap_or(u32::MAX);
    let Ok(room) = room.clone().acquire_many_owned(wanted).await else {
        return Took::Stopped;
    };
    Took::Batch(Taken {
        batch_id,
        body,
        records,
        spooled,
        _room: room,
    })
}

/// What the sender needs besides its batches.
struct Sending {
    target: FlushTarget,
    client: reqwest::Client,
    spool: Option<Arc<Spool>>,
    /// Batches an earlier run left in the spool, oldest first: sent before the others.
    left: Vec<String>,
    metrics: ProxyMetrics,
    budgets: Arc<Budgets>,
}

/// Sends the batches an earlier run left, then each batch taken, in order, each until
/// the ledger answers for it.
async fn send_batches(mut waiting: mpsc::UnboundedReceiver<Taken>, sending: Sending) {
    let Sending {
        target,
        client,
        spool,
        left,
        metrics,
        budgets,
    } = sending;
    if let Some(spool) = &spool {
        if !left.is_empty() {
            tracing::info!(
                batches = left.len(),
                "sending the usage batches a previous run left in the spool"
            );
        }
        for batch_id in left {
            match spool.read(&batch_id).await {
                Ok(body) => {
                    let ack = send_until_acknowledged(
                        &client,
                        &target,
                        &batch_id,
                        body.clone(),
                        0,
                        &metrics,
                    )
                    .await;
                    if let Some(ack) = ack {
                        metrics
                            .usage_flushed
                            .inc_by(u64::try_from(ack.accepted + ack.duplicates).unwrap_or(0));
                        budgets.apply_ledger(&ack.spend, FigureSource::Acknowledgement);
                    } else {
                        set_aside(spool, &batch_id, &body, true, None, &metrics).await;
                        continue;
                    }
                }
                Err(error) => {
                    tracing::error!(%error, %batch_id, "cannot read a spooled usage batch")
                }
            }
            spool.remove(&batch_id).await;
        }
    }
    while let Some(taken) = waiting.recv().await {
        let Taken {
            batch_id,
            body,
            records,
            spooled,
            _room,
        } = taken;
        let count = records.len();
        let ack =
            send_until_acknowledged(&client, &target, &batch_id, body.clone(), count, &metrics)
                .await;
        let mut kept = false;
        match ack {
            Some(ack) => {
                metrics.usage_flushed.inc_by(count as u64);
                // The ledger's new totals include this batch: take them before the
                // batch's costs leave `pending`, so they are never missing from a
                // scope's spend.
                budgets.apply_ledger(&ack.spend, FigureSource::Acknowledgement);
            }
            None => match &spool {
                Some(spool) => {
                    kept = set_aside(spool, &batch_id, &body, spooled, Some(count), &metrics).await;
                }
                None => metrics.usage_dropped.inc_by(count as u64),
            },
        }
        // Acknowledged or set aside: either way its costs leave what this proxy counts
        // as pending (a batch set aside reaches the ledger only when replayed).
        records.iter().for_each(finished);
        if let (Some(spool), true, false) = (&spool, spooled, kept) {
            spool.remove(&batch_id).await;
        }
    }
}

/// Sets aside a batch the ledger will not take (`count` records, when known); whether it
/// was kept. Logged once, with its id, and counted.
async fn set_aside(
    spool: &Arc<Spool>,
    batch_id: &str,
    body: &Bytes,
    spooled: bool,
    count: Option<usize>,
    metrics: &ProxyMetrics,
) -> bool {
    let kept = spool.set_aside(batch_id, body, spooled).await;
    let records = count.unwrap_or_else(|| super::spool::records_in(body).unwrap_or(0));
    if kept {
        metrics.usage_batches_set_aside.inc();
        metrics.usage_set_aside.inc_by(records as u64);
        tracing::error!(
            %batch_id,
            records,
            "usage batch set aside in the spool's set-aside folder: the ledger would not take it; \
             later batches go on (`warden spool list` shows it, `warden spool replay` sends it \
             again, the next start offers it again)"
        );
    } else {
        metrics.usage_dropped.inc_by(records as u64);
    }
    kept
}

/// Sends batch `batch_id` (`body`, of `count` records) until the ledger answers for it;
/// `None` when the batch was refused whole.
async fn send_until_acknowledged(
    client: &reqwest::Client,
    target: &FlushTarget,
    batch_id: &str,
    body: Bytes,
    count: usize,
    metrics: &ProxyMetrics,
) -> Option<BatchAck> {
    metrics.usage_in_flight.set(count as i64);
    let ack: Option<BatchAck> = post_until_answered(
        client,
        target,
        batch_id,
        body,
        "usage",
        &metrics.usage_flush_failures,
    )
    .await;
    metrics.usage_in_flight.set(0);
    let ack = ack?;
    if ack.dropped > 0 {
        tracing::warn!(%batch_id, dropped = ack.dropped, "ledger dropped usage records of deleted tenants");
    }
    if ack.rejected > 0 {
        // Refused records (an agent deleted meanwhile, say) would be refused again: log
        // them instead of retrying forever.
        tracing::warn!(%batch_id, rejected = ack.rejected, errors = ?ack.errors, "ledger refused usage records");
    }
    Some(ack)
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
            capture: None,
            tool_call: None,
        }
    }

    #[test]
    fn records_with_large_captures_go_in_several_batches() {
        let key = key("ak_1", "ten_1", "agt_1");
        let buffer = crate::capture::CaptureBuffer::new(
            64 << 20,
            2 << 20,
            crate::capture::CaptureMetrics::unregistered(),
        );
        let tenant = crate::capture::tests::tenant(vec![]);
        let body = Bytes::from(vec![b' '; 1 << 20]);
        let records = |captured: bool| -> Vec<UsageRecord> {
            (0..10)
                .map(|i| UsageRecord {
                    capture: captured.then(|| buffer.capture(tenant.clone(), &body)),
                    ..record(&format!("usg_{i}"), &key)
                })
                .collect()
        };
        let sizes =
            |batches: Vec<Vec<UsageRecord>>| batches.iter().map(Vec::len).collect::<Vec<_>>();
        // A MiB each: three fit under the 4 MiB a batch may carry.
        assert_eq!(sizes(split_by_captures(records(true))), [3, 3, 3, 1]);
        assert_eq!(sizes(split_by_captures(records(false))), [10]);
    }

    #[test]
    fn a_dropped_records_decision_is_reported_on_its_own() {
        let key = key("ak_1", "ten_1", "agt_1");
        let metrics = ProxyMetrics::new(Provider::BUILT_IN).expect("metrics");
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
