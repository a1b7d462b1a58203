//! The proxies' view of enforcement state: the change outbox (`outbox`, written in the
//! transaction of each change), the loader of snapshots and deltas (`load`), and the
//! publisher that turns new outbox rows into deltas for every connected proxy.
//!
//! The publisher polls the outbox's version counter every `POLL_INTERVAL`, so a change
//! made through any control-plane replica sharing the database reaches the proxies
//! connected to every replica, with no extra messaging system; a poll is one indexed
//! single-row read. Deltas go out through a broadcast channel; a stream that falls too
//! far behind it (or a proxy reconnecting after the outbox was pruned) gets a full
//! snapshot instead. A write on this replica nudges the publisher so its delta goes out
//! at once, without waiting for the next poll; `confirm` tracks which connected proxies
//! have applied it.

pub mod confirm;
pub mod load;
pub mod spend;

use std::sync::Arc;
use std::time::Duration;

use sqlx::AnyPool;
use tokio::sync::{broadcast, Notify};
use warden_shared::clock::Clock;
use warden_shared::snapshot::{Delta, ScopeSpend};

use crate::db::Db;

/// How often the publisher looks for new changes when not nudged: bounds how long a
/// change made through another replica takes to reach this replica's proxies.
pub const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// Outbox rows older than this are pruned; proxies further behind get a full snapshot.
const RETENTION_MS: i64 = 24 * 3_600_000;
/// Deltas a slow stream may fall behind before it is sent a full snapshot instead.
const CHANNEL_CAPACITY: usize = 256;
/// How often changed spend is sent to the proxies: with the usage flush interval, how
/// stale a proxy's view of other proxies' spend can be.
pub const SPEND_INTERVAL: Duration = Duration::from_secs(1);
/// Spend rows are found by their writer's `updated_at`; a batch committed late or on a
/// replica whose clock lags is still found when the look-back covers it. Rows are sent
/// whole, so sending one again is harmless.
const SPEND_LOOK_BACK_MS: i64 = 5_000;

/// Hands each new delta to every connected proxy stream. Polling stops when the last
/// clone is dropped.
#[derive(Clone)]
pub struct Publisher {
    deltas: broadcast::Sender<Arc<Delta>>,
    spend: broadcast::Sender<Arc<Vec<ScopeSpend>>>,
    clock: Clock,
    nudge: Arc<Notify>,
    _poller: Arc<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Publisher {
    /// Starts polling `db` from the current version, on the current runtime.
    pub async fn start(db: Db, clock: Clock) -> Result<Publisher, sqlx::Error> {
        let (deltas, _) = broadcast::channel(CHANNEL_CAPACITY);
        let (spend, _) = broadcast::channel(CHANNEL_CAPACITY);
        let from = load::current_version(db.pool()).await?;
        let nudge = Arc::new(Notify::new());
        let poller = tokio::spawn(poll(
            db,
            clock.clone(),
            Channels {
                deltas: deltas.clone(),
                spend: spend.clone(),
                nudge: nudge.clone(),
            },
            from,
        ));
        Ok(Publisher {
            deltas,
            spend,
            clock,
            nudge,
            _poller: Arc::new(AbortOnDrop(poller.abort_handle())),
        })
    }

    /// Looks for new changes now: a write committed one the proxies must learn of.
    pub fn nudge(&self) {
        self.nudge.notify_one();
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Delta>> {
        self.deltas.subscribe()
    }

    pub fn subscribe_spend(&self) -> broadcast::Receiver<Arc<Vec<ScopeSpend>>> {
        self.spend.subscribe()
    }

    /// The month budgets are counting now.
    pub fn current_month(&self) -> i64 {
        self.clock.now().month_start()
    }

    /// The clock's time, for what expires (approval grants).
    pub fn now_ms(&self) -> i64 {
        self.clock.now().as_millis()
    }
}

struct Channels {
    deltas: broadcast::Sender<Arc<Delta>>,
    spend: broadcast::Sender<Arc<Vec<ScopeSpend>>>,
    nudge: Arc<Notify>,
}

async fn poll(db: Db, clock: Clock, channels: Channels, mut at: i64) {
    let pool = db.pool().clone();
    let mut ticker = tokio::time::interval(POLL_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_prune: Option<i64> = None;
    let mut last_spend = tokio::time::Instant::now();
    let mut spend_since = clock.now().as_millis();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = channels.nudge.notified() => {}
        }
        match publish_new(&pool, &channels.deltas, at, clock.now().as_millis()).await {
            Ok(version) => at = version,
            Err(error) => tracing::warn!(%error, "cannot read the proxy change outbox"),
        }
        if last_spend.elapsed() >= SPEND_INTERVAL {
            last_spend = tokio::time::Instant::now();
            let now = clock.now();
            match spend::since(&pool, now.month_start(), spend_since - SPEND_LOOK_BACK_MS).await {
                Ok(changed) => {
                    spend_since = now.as_millis();
                    if !changed.is_empty() {
                        let _ = channels.spend.send(Arc::new(changed));
                    }
                }
                Err(error) => tracing::warn!(%error, "cannot read spend for the proxies"),
            }
        }
        let now = clock.now().as_millis();
        if last_prune.is_none_or(|last| now.saturating_sub(last) > 600_000) {
            last_prune = Some(now);
            if let Err(error) = prune(&db, now - RETENTION_MS).await {
                tracing::warn!(%error, "cannot prune the proxy change outbox");
            }
        }
    }
}

/// Sends every delta after `at`; returns the version reached.
async fn publish_new(
    pool: &AnyPool,
    deltas: &broadcast::Sender<Arc<Delta>>,
    mut at: i64,
    now_ms: i64,
) -> Result<i64, sqlx::Error> {
    if load::current_version(pool).await? <= at {
        return Ok(at);
    }
    while let Some(delta) = load::delta_since(pool, at, now_ms).await? {
        at = delta.version;
        // No receiver is fine: nobody is connected right now.
        let _ = deltas.send(Arc::new(delta));
    }
    Ok(at)
}

/// Deletes the outbox's rows older than `before_ms`, in its turn among the writers.
async fn prune(db: &Db, before_ms: i64) -> Result<(), sqlx::Error> {
    let mut tx = db.begin_write().await?;
    sqlx::query("DELETE FROM proxy_changes WHERE changed_at < $1")
        .bind(before_ms)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}
