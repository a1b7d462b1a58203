//! The delivery worker: sends the outbox's due deliveries, one worker per deployment
//! (the holder of the `notifications` lease), until each is delivered or dead.
//!
//! Each round finds the channels with due deliveries and starts one task per channel,
//! which reads the channel's due deliveries, sends them in order and stops at the first
//! failure. A channel whose task is still running
//! (a receiver that hangs until the time limit) is skipped by later rounds, so it never
//! holds back another channel. A failed attempt is retried after an exponential backoff
//! with jitter (`backoff_ms`) until `retry_for` after the event; then the delivery is
//! dead. Delivery is at least once: a lease that moves between replicas mid-send can
//! repeat a message, which receivers recognise by its id.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::Value;

use super::metrics::NotificationMetrics;
use super::send::{Message, Sender};
use super::store::{self, Attempt, Next};
use crate::db::Db;
use warden_shared::clock::Clock;

/// The lease that elects the one worker.
const LEASE_JOB: &str = "notifications";
/// Channels one round serves, and the deliveries a channel's task sends at most.
const MAX_CHANNELS: i64 = 500;
const PER_CHANNEL: i64 = 50;

/// The first retry's delay and the longest.
const FIRST_RETRY_MS: i64 = 5_000;
const LONGEST_RETRY_MS: i64 = 3_600_000;

#[derive(Clone)]
pub struct Worker {
    pub db: Db,
    pub clock: Clock,
    pub sender: Sender,
    pub retry_for_ms: i64,
    /// This replica's id, the lease holder's name.
    pub replica_id: String,
    pub metrics: Arc<NotificationMetrics>,
    /// Channels whose deliveries a task is sending now.
    busy: Arc<Mutex<HashSet<String>>>,
}

impl Worker {
    pub fn new(
        db: Db,
        clock: Clock,
        sender: Sender,
        retry_for: Duration,
        replica_id: String,
        metrics: Arc<NotificationMetrics>,
    ) -> Worker {
        Worker {
            db,
            clock,
            sender,
            retry_for_ms: i64::try_from(retry_for.as_millis()).unwrap_or(i64::MAX),
            replica_id,
            metrics,
            busy: Arc::default(),
        }
    }

    /// Runs a round every `interval` until the app stops, then gives up the lease.
    pub async fn run(self, interval: Duration, stopping: tokio::sync::watch::Receiver<bool>) {
        let ttl = (interval * 10).max(Duration::from_secs(10));
        let (db, replica_id) = (self.db.clone(), self.replica_id.clone());
        crate::lease::every_while_held(
            &db,
            LEASE_JOB,
            &replica_id,
            interval,
            ttl,
            stopping,
            || {
                let worker = self.clone();
                async move {
                    if let Err(error) = worker.round().await {
                        tracing::warn!(%error, "notification delivery round failed");
                    }
                }
            },
        )
        .await;
    }

    /// One round (the lease held): hand the due deliveries to their channels' tasks,
    /// update the queue's gauges.
    async fn round(&self) -> Result<(), sqlx::Error> {
        let now = self.clock.now().as_millis();
        for (tenant_id, channel_id) in
            store::due_channels(self.db.pool(), now, MAX_CHANNELS).await?
        {
            let Some(busy) = Busy::claim(&self.busy, &channel_id) else {
                continue;
            };
            let worker = self.clone();
            tokio::spawn(async move {
                if let Err(error) = worker.send_channel(&tenant_id, &channel_id).await {
                    tracing::warn!(%error, channel_id, "notification delivery failed to record");
                }
                drop(busy);
            });
        }
        let (depth, oldest) = store::queue(self.db.pool()).await?;
        self.metrics.queue_depth.set(depth);
        let age_ms = oldest.map_or(0, |oldest| (now - oldest).max(0));
        #[allow(clippy::cast_precision_loss)] // milliseconds far below 2^52
        self.metrics
            .oldest_pending_seconds
            .set(age_ms as f64 / 1000.0);
        Ok(())
    }

    /// Sends one channel's due deliveries in order, stopping at the first failure (the
    /// rest wait for their own turn rather than pile onto a failing receiver). They are
    /// read here, while the channel is this task's alone, so that none is seen pending
    /// after an earlier task of the channel delivered it.
    async fn send_channel(&self, tenant_id: &str, channel_id: &str) -> Result<(), sqlx::Error> {
        let now = self.clock.now().as_millis();
        let deliveries =
            store::due_for_channel(self.db.pool(), tenant_id, channel_id, now, PER_CHANNEL).await?;
        let channel = store::channel(self.db.pool(), tenant_id, channel_id).await?;
        let Some((channel, true)) = channel else {
            let why = if channel.is_some() {
                "the channel was disabled before delivery"
            } else {
                "the channel was deleted before delivery"
            };
            for delivery in &deliveries {
                store::give_up(&self.db, &delivery.id, self.clock.now().as_millis(), why).await?;
            }
            return Ok(());
        };
        let channel_type = channel.config.channel_type().as_str();
        for delivery in deliveries {
            let payload: Value = serde_json::from_str(&delivery.payload).unwrap_or(Value::Null);
            let message = Message {
                id: &delivery.id,
                body: &delivery.payload,
                payload: &payload,
            };
            let started = Instant::now();
            let result = self.sender.send(&channel, &message).await;
            let at_ms = self.clock.now().as_millis();
            let number = delivery.attempts + 1;
            let (outcome, next) = match &result {
                Ok(_) => ("delivered", Next::Delivered),
                Err(_) => {
                    let retry_at = at_ms + backoff_ms(number);
                    if retry_at > delivery.created_at + self.retry_for_ms {
                        ("dead", Next::Dead)
                    } else {
                        ("failed", Next::RetryAt(retry_at))
                    }
                }
            };
            let sent = match &result {
                Ok(sent) | Err(sent) => sent,
            };
            let attempt = Attempt {
                delivery_id: &delivery.id,
                tenant_id,
                number,
                at_ms,
                duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
                status_code: sent.status,
                error: result.is_err().then_some(sent.message.as_str()),
                next,
            };
            store::record_attempt(&self.db, &attempt).await?;
            self.metrics
                .deliveries
                .with_label_values(&[channel_type, outcome])
                .inc();
            if result.is_err() {
                tracing::info!(
                    delivery_id = delivery.id,
                    channel_id,
                    attempt = number,
                    outcome,
                    error = sent.message,
                    "notification not delivered"
                );
                break;
            }
        }
        Ok(())
    }
}

/// A channel marked busy while its task runs; unmarked when dropped, however the task
/// ends.
struct Busy {
    set: Arc<Mutex<HashSet<String>>>,
    channel_id: String,
}

impl Busy {
    /// Marks `channel_id` busy, unless it is already.
    fn claim(set: &Arc<Mutex<HashSet<String>>>, channel_id: &str) -> Option<Busy> {
        let fresh = set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(channel_id.to_owned());
        fresh.then(|| Busy {
            set: Arc::clone(set),
            channel_id: channel_id.to_owned(),
        })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.channel_id);
    }
}

/// The wait before attempt `failed + 1` after `failed` failed attempts: 5 s doubling to at
/// most an hour, each scaled by a random factor in [0.5, 1] so that receivers coming
/// back are not hit by every sender at once.
pub fn backoff_ms(failed: i64) -> i64 {
    let exponent = u32::try_from((failed - 1).clamp(0, 20)).unwrap_or(20);
    let full = FIRST_RETRY_MS
        .saturating_mul(2_i64.saturating_pow(exponent))
        .min(LONGEST_RETRY_MS);
    let factor: f64 = rand::thread_rng().gen_range(0.5..=1.0);
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let jittered = (full as f64 * factor) as i64;
    jittered.max(1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_an_hour() {
        for _ in 0..100 {
            let first = backoff_ms(1);
            assert!((2_500..=5_000).contains(&first), "{first}");
            let fourth = backoff_ms(4);
            assert!((20_000..=40_000).contains(&fourth), "{fourth}");
            let late = backoff_ms(30);
            assert!((1_800_000..=3_600_000).contains(&late), "{late}");
        }
    }
}
