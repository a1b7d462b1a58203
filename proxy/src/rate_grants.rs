//! Rate limits shared by every proxy (see `crate::rate_limit`): before a request is
//! evaluated, each requests-per-minute `rate_limit` policy that covers it has an
//! allowance on this proxy for the request's bucket and minute, asked from the control
//! plane (`POST /internal/v1/rate-grants`) when there is none or it is spent. The
//! control plane never grants past the limit, whatever the number of proxies.
//!
//! Asks are batched and shared: one task sends them, every bucket whose allowance ran
//! out while the previous batch was on its way in the next, and the requests of a
//! bucket that already has an ask queued or on its way wait for that one. At the start
//! of a minute every bucket asks again; with per-key limits that is thousands of
//! buckets at once, and an ask each, a write transaction each, stalled every request
//! behind them for up to half a second.
//!
//! A bucket's requests wait only for its first ask of a minute, and not even then when it
//! was used the minute before: from the 45th second of a minute, the buckets that were
//! granted and used in it ask ahead for the next, so that a minute's start does not stop
//! every busy bucket at once. Asks ahead go after the requests' asks, a few dozen a
//! batch: thousands of them in batches of hundreds kept a busy bucket's request (an
//! agent-wide limit's, say: every request's) waiting behind them for half a second. A
//! bucket falling idle holds an allowance it does not use for one minute at most.
//!
//! When the control plane does not answer within a second, the buckets of the batch are
//! counted by this proxy alone for the minute (up to the whole limit here) and counted in
//! `warden_proxy_rate_grant_failures_total`.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use prometheus::IntCounter;
use tokio::sync::{oneshot, Notify};
use tokio::time::MissedTickBehavior;
use warden_shared::clock::Clock;
use warden_shared::policy::{rate_bucket_id, Policy, PolicyConfig, RequestFacts};
use warden_shared::wire::{self, paths, RateAsk, RateGrantRequest};

use crate::flush::ask_for_data;
use crate::rate_limit::{lock, minute_of, Limiter, RateWindows};

/// How long the control plane has to answer a batch before its buckets are counted
/// locally.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a request waits for its ask at most: the batch on its way, then its own.
const WAIT_LIMIT: Duration = Duration::from_secs(2);
/// Most asks in one batch (the control plane's limit).
const MAX_ASKS: usize = 500;
/// Most requests one ask wants (the control plane's limit).
const MAX_WANT: i64 = 10_000;
/// From this millisecond of a minute on, the buckets used in it ask ahead for the next.
const AHEAD_FROM_MS: i64 = 45_000;
/// Most asks ahead in one batch: a request's ask that comes while a batch is on its
/// way waits for it, and a batch of 500 asks is a write transaction of tens of
/// milliseconds under load. 10,000 buckets ask ahead in about a second this way.
const AHEAD_PER_BATCH: usize = 50;

#[derive(Clone)]
pub struct RateGrants {
    inner: Arc<Asker>,
}

/// What the metrics count about the asks.
pub struct RateGrantCounters {
    /// Asks the control plane did not answer.
    pub failures: IntCounter,
    /// Asks sent, one per bucket and minute whose allowance ran out.
    pub asks: IntCounter,
    /// Batches sent.
    pub batches: IntCounter,
}

struct Asker {
    client: reqwest::Client,
    url: String,
    service_token: String,
    rates: Arc<RateWindows>,
    counters: RateGrantCounters,
    clock: Clock,
    pending: Mutex<Pending>,
    /// Wakes the sending task for a newly queued ask.
    queued: Notify,
}

#[derive(Default)]
struct Pending {
    /// Asks a request waits for, not sent yet, in the order they came.
    queue: Vec<Ask>,
    /// Asks ahead not sent yet: they go after the requests' asks, a few at a time.
    ahead: Vec<Ask>,
    /// Every ask queued or on its way, with the requests waiting for it.
    waiting: HashMap<Ask, Waiting>,
    /// The asks granted something, by minute and bucket (the last of each): the
    /// buckets that may ask ahead for the minute after.
    granted: HashMap<i64, HashMap<(i64, String), Ask>>,
    /// The minute whose buckets asked ahead for the next.
    ahead_of: i64,
}

/// An ask queued or on its way.
#[derive(Default)]
struct Waiting {
    /// The requests waiting for its answer (none for an ask ahead no request joined).
    requests: Vec<oneshot::Sender<()>>,
    /// In `Pending::queue` (a request waits for it), not only in `Pending::ahead`.
    in_queue: bool,
    /// In a batch on its way.
    sent: bool,
}

impl Pending {
    /// Queues a request's `ask` unless the same is queued or on its way: its waiters,
    /// and whether it was not queued for a request before. An ask ahead a request
    /// joins before it is sent moves to the requests' queue.
    fn queue(&mut self, ask: Ask) -> (&mut Vec<oneshot::Sender<()>>, bool) {
        match self.waiting.entry(ask) {
            Entry::Occupied(entry) => {
                let (ask, waiting) = (entry.key().clone(), entry.into_mut());
                let promoted = !waiting.in_queue && !waiting.sent;
                if promoted {
                    waiting.in_queue = true;
                    self.queue.push(ask);
                }
                (&mut waiting.requests, promoted)
            }
            Entry::Vacant(entry) => {
                self.queue.push(entry.key().clone());
                let waiting = entry.insert(Waiting {
                    in_queue: true,
                    ..Waiting::default()
                });
                (&mut waiting.requests, true)
            }
        }
    }

    /// Queues an ask ahead, unless the same is queued or on its way.
    fn queue_ahead(&mut self, ask: Ask) {
        if let Entry::Vacant(entry) = self.waiting.entry(ask) {
            self.ahead.push(entry.key().clone());
            entry.insert(Waiting::default());
        }
    }

    /// The next batch: the requests' asks first (up to [`MAX_ASKS`]), then, while no
    /// request's ask fills it, up to [`AHEAD_PER_BATCH`] asks ahead. Each ask goes once.
    fn next_batch(&mut self) -> Vec<Ask> {
        let mut batch = Vec::new();
        let requests = self.queue.len().min(MAX_ASKS);
        for ask in self.queue.drain(..requests) {
            if let Some(waiting) = self.waiting.get_mut(&ask) {
                waiting.sent = true;
                batch.push(ask);
            }
        }
        let room = (MAX_ASKS - batch.len()).min(AHEAD_PER_BATCH);
        let mut taken = 0;
        while taken < room {
            let Some(ask) = self.ahead.pop() else { break };
            // A request joined it and it went with the requests' asks.
            let Some(waiting) = self.waiting.get_mut(&ask).filter(|w| !w.sent) else {
                continue;
            };
            waiting.sent = true;
            batch.push(ask);
            taken += 1;
        }
        batch
    }
}

/// More of one limit for one bucket and minute, the limiter a policy's id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Ask {
    tenant_id: String,
    limiter: i64,
    bucket: String,
    minute: i64,
    limit: i64,
    want: i64,
}

impl Ask {
    fn limiter(&self) -> Limiter {
        Limiter::Policy(self.limiter)
    }

    /// The ask as the control plane reads it.
    fn to_wire(&self) -> RateAsk {
        RateAsk {
            tenant_id: self.tenant_id.clone(),
            limiter: wire::policy_limiter(self.limiter),
            bucket: self.bucket.clone(),
            minute: self.minute,
            limit: self.limit,
            want: self.want,
        }
    }
}

impl RateGrants {
    pub fn new(
        client: reqwest::Client,
        control_plane: &str,
        service_token: &str,
        rates: Arc<RateWindows>,
        counters: RateGrantCounters,
        clock: Clock,
    ) -> RateGrants {
        RateGrants {
            inner: Arc::new(Asker {
                client,
                url: format!("{control_plane}{}", paths::RATE_GRANTS),
                service_token: service_token.to_owned(),
                rates,
                counters,
                clock,
                pending: Mutex::default(),
                queued: Notify::new(),
            }),
        }
    }

    /// Gives every shared limit covering `request` an allowance for it where it has
    /// none left (see the module documentation): its asks go out together and are
    /// waited for together.
    pub async fn ensure(&self, policies: &[Policy], request: &RequestFacts<'_>, now_ms: i64) {
        let mut waits = Vec::new();
        for policy in policies {
            let PolicyConfig::RateLimit {
                requests_per_minute: Some(limit),
                per,
                tools,
                ..
            } = &policy.config
            else {
                continue;
            };
            let covers =
                policy
                    .scope
                    .covers_agent(request.agent_id, request.team_id, request.environment);
            if !tools.is_empty() || !covers {
                continue;
            }
            let bucket = rate_bucket_id(*per, request);
            let limiter = Limiter::Policy(policy.id);
            let Some(minute) = self.inner.rates.needs_grant(limiter, bucket, now_ms) else {
                continue;
            };
            let ask = Ask {
                tenant_id: request.tenant_id.to_owned(),
                limiter: policy.id,
                bucket: bucket.to_owned(),
                minute,
                limit: *limit,
                want: (*limit).min(MAX_WANT),
            };
            waits.push(self.inner.enqueue(ask));
        }
        if !waits.is_empty() {
            join_all(waits).await;
        }
    }

    /// Sends the queued asks, a batch at a time, and the asks ahead at the end of each
    /// minute, for as long as the proxy runs.
    pub async fn ask_forever(self) {
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            self.inner.ask_ahead();
            let batch = self.inner.next_batch();
            if batch.is_empty() {
                tokio::select! {
                    () = self.inner.queued.notified() => {}
                    _ = ticker.tick() => {}
                }
                continue;
            }
            self.inner.send(&batch).await;
            self.inner.answered(&batch);
        }
    }
}

impl Asker {
    /// Queues `ask` unless the same is queued or on its way, and waits for the answer.
    /// A request never waits past [`WAIT_LIMIT`]: the bucket's minute is then counted
    /// here alone, as when the control plane does not answer.
    async fn enqueue(&self, ask: Ask) {
        let (done, answered) = oneshot::channel();
        let (limiter, bucket, minute) = (ask.limiter(), ask.bucket.clone(), ask.minute);
        {
            let mut pending = lock(&self.pending);
            // The request saw the bucket short before taking this lock; the ask it would
            // have joined may have been answered since (its grant is added before its
            // waiters are let go), and then there is nothing to ask.
            let in_flight = pending.waiting.contains_key(&ask);
            if !in_flight && !self.rates.still_needs_grant(limiter, &bucket, minute) {
                return;
            }
            let (waiters, queued) = pending.queue(ask);
            waiters.push(done);
            if queued {
                self.queued.notify_one();
            }
        }
        if !matches!(tokio::time::timeout(WAIT_LIMIT, answered).await, Ok(Ok(()))) {
            self.rates.unshare(limiter, &bucket, minute);
        }
    }

    /// From [`AHEAD_FROM_MS`] of a minute, once: queues an ask for the next minute of
    /// every bucket granted something this minute that admitted requests in it.
    fn ask_ahead(&self) {
        let now = self.clock.now_ms();
        let minute = minute_of(now);
        let candidates = {
            let mut pending = lock(&self.pending);
            pending.granted.retain(|m, _| *m >= minute);
            if now.rem_euclid(60_000) < AHEAD_FROM_MS || pending.ahead_of >= minute {
                return;
            }
            pending.ahead_of = minute;
            pending.granted.remove(&minute).unwrap_or_default()
        };
        let ahead: Vec<Ask> = candidates
            .into_values()
            .filter(|ask| self.rates.used_in(ask.limiter(), &ask.bucket, minute))
            .map(|ask| Ask {
                minute: minute + 1,
                ..ask
            })
            .collect();
        let mut pending = lock(&self.pending);
        for ask in ahead {
            pending.queue_ahead(ask);
        }
    }

    fn next_batch(&self) -> Vec<Ask> {
        lock(&self.pending).next_batch()
    }

    /// Asks for `batch` and adds what was granted to the windows (or counts the buckets
    /// alone when the control plane did not answer).
    async fn send(&self, batch: &[Ask]) {
        self.counters.batches.inc();
        self.counters.asks.inc_by(batch.len() as u64);
        match self.ask(batch).await {
            Ok(grants) => {
                for (ask, &granted) in batch.iter().zip(&grants) {
                    self.rates.add_grant(
                        ask.limiter(),
                        &ask.bucket,
                        ask.minute,
                        ask.limit,
                        granted,
                    );
                }
                let mut pending = lock(&self.pending);
                for (ask, granted) in batch.iter().zip(grants) {
                    if granted > 0 {
                        let bucket = (ask.limiter, ask.bucket.clone());
                        let minute = pending.granted.entry(ask.minute).or_default();
                        minute.insert(bucket, ask.clone());
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, asks = batch.len(), "cannot ask the control plane for rate limits' allowances; counting these buckets' minute here alone");
                self.counters.failures.inc_by(batch.len() as u64);
                for ask in batch {
                    self.rates.unshare(ask.limiter(), &ask.bucket, ask.minute);
                }
            }
        }
    }

    /// The control plane's grants for `batch`, in its order.
    async fn ask(&self, batch: &[Ask]) -> Result<Vec<i64>, String> {
        let body = RateGrantRequest {
            asks: batch.iter().map(Ask::to_wire).collect(),
        };
        let answer: wire::RateGrants = ask_for_data(
            &self.client,
            &self.url,
            &self.service_token,
            &body,
            ASK_TIMEOUT,
        )
        .await?;
        if answer.grants.len() != batch.len() {
            return Err(format!(
                "the control plane answered {} grants for {} asks",
                answer.grants.len(),
                batch.len()
            ));
        }
        Ok(answer.grants.into_iter().map(|g| g.granted).collect())
    }

    /// Lets the requests waiting for `batch` go on.
    fn answered(&self, batch: &[Ask]) {
        let mut pending = lock(&self.pending);
        for ask in batch {
            let requests = pending.waiting.remove(ask).map(|w| w.requests);
            for waiter in requests.into_iter().flatten() {
                let _ = waiter.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(bucket: usize, minute: i64) -> Ask {
        Ask {
            tenant_id: "ten_1".to_owned(),
            limiter: 1,
            bucket: format!("key:{bucket}"),
            minute,
            limit: 1_000,
            want: 1_000,
        }
    }

    /// Pending asks ahead for minute 2 of buckets 0 to `buckets - 1`.
    fn asking_ahead(buckets: usize) -> Pending {
        let mut pending = Pending::default();
        for bucket in 0..buckets {
            pending.queue_ahead(ask(bucket, 2));
        }
        pending
    }

    #[test]
    fn a_requests_ask_goes_before_asks_ahead_which_go_a_few_a_batch() {
        let mut pending = asking_ahead(120);
        let (_, queued) = pending.queue(ask(500, 1));
        assert!(queued);
        let first = pending.next_batch();
        assert_eq!(first[0], ask(500, 1));
        assert_eq!(first.len(), 1 + AHEAD_PER_BATCH);
        // Each ask goes once: 120 ahead in three batches.
        let rest: usize = (0..3).map(|_| pending.next_batch().len()).sum();
        assert_eq!(rest, 120 - AHEAD_PER_BATCH);
        assert!(pending.next_batch().is_empty());
    }

    #[test]
    fn a_request_joining_an_ask_ahead_not_sent_moves_it_first() {
        let mut pending = asking_ahead(120);
        // The first ask ahead queued is the last to go: a request needs it now.
        let (waiters, promoted) = pending.queue(ask(0, 2));
        assert!(promoted && waiters.is_empty());
        let first = pending.next_batch();
        assert_eq!(first[0], ask(0, 2));
        // Joined again while on its way: nothing more to send.
        assert!(!pending.queue(ask(0, 2)).1);
        let mut sent: Vec<Ask> = first;
        loop {
            let batch = pending.next_batch();
            if batch.is_empty() {
                break;
            }
            sent.extend(batch);
        }
        assert_eq!(sent.len(), 120);
        assert_eq!(sent.iter().filter(|a| **a == ask(0, 2)).count(), 1);
    }
}
