//! Read-your-writes for enforcement: which proxies are connected now, which state version
//! each has applied, and the bounded wait a write makes for all of them.
//!
//! Every open state stream is a `proxy_streams` row, inserted when the stream opens and
//! deleted when it ends, whose lease this replica renews every [`LEASE_RENEW`] while the
//! stream lasts; the rows of a replica that died stop counting when their lease runs out
//! ([`LEASE`]). A proxy acknowledges each version it applies to whichever replica its
//! `POST /internal/v1/proxy-acks` reaches, which raises the row's `acked_version`. A
//! write waits until no row with a live lease is behind its version: it learns of
//! acknowledgements this replica received at once (a `Notify`), of those other replicas
//! received by reading the table every [`POLL`]. The wait is bounded
//! (`enforcement_wait_ms`): a proxy that is gone or stuck never holds a write hostage.
//!
//! Leases are wall-clock time, not the application's clock: they measure whether a
//! process is alive, and every replica sharing the database must read them alike.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use warden_shared::clock::Clock;
use warden_shared::ids::{new_id, IdKind};

use crate::db::Db;

/// How often a replica renews the leases of its streams.
pub const LEASE_RENEW: Duration = Duration::from_millis(250);
/// How long a stream counts as connected without its lease being renewed.
pub const LEASE: Duration = Duration::from_millis(1_000);
/// How often a waiting write reads the table for acknowledgements other replicas took.
const POLL: Duration = Duration::from_millis(10);

/// What the proxies made of a write by the end of its wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// Every proxy connected when the write committed has applied it.
    Applied,
    /// `unconfirmed` connected proxies had not acknowledged it when the wait ended.
    Pending { unconfirmed: i64 },
}

/// This replica's side of the proxies' acknowledgements. Cheap to share (`Arc`).
pub struct Confirmations {
    /// Its writes (a stream's row, acknowledgements, leases) take their turn among the
    /// writers (`Db::execute_in_turn`, `Db::begin_write`): on SQLite under load a
    /// statement outside the turns would sleep in the busy handler, and a lease renewed
    /// late lapses.
    db: Db,
    replica_id: String,
    bound: Duration,
    acked: Notify,
}

impl Confirmations {
    /// This replica's id (it also names the replica as holder of job leases).
    pub fn replica_id(&self) -> &str {
        &self.replica_id
    }

    /// Confirmations for a new replica, waiting at most `bound` for the proxies.
    pub fn new(db: Db, bound: Duration) -> Arc<Confirmations> {
        Arc::new(Confirmations {
            db,
            replica_id: new_id(IdKind::Instance, wall_clock_ms()),
            bound,
            acked: Notify::new(),
        })
    }

    /// Records that proxy `proxy_id` opened a stream, holding version `holds` (`-1`:
    /// nothing yet, it is about to load a snapshot). Returns the stream's id.
    pub async fn open_stream(&self, proxy_id: &str, holds: i64) -> Result<String, sqlx::Error> {
        let now = wall_clock_ms();
        let stream_id = new_id(IdKind::Instance, now);
        let inserted = sqlx::query(
            "INSERT INTO proxy_streams \
             (stream_id, proxy_id, replica_id, acked_version, connected_at, lease_until) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&stream_id)
        .bind(proxy_id)
        .bind(&self.replica_id)
        .bind(holds)
        .bind(now)
        .bind(now + lease_ms());
        self.db.execute_in_turn(inserted).await?;
        Ok(stream_id)
    }

    /// Forgets a stream that ended: its proxy no longer counts.
    pub async fn close_stream(&self, stream_id: &str) {
        let deleted = sqlx::query("DELETE FROM proxy_streams WHERE stream_id = $1").bind(stream_id);
        if let Err(error) = self.db.execute_in_turn(deleted).await {
            // Its lease runs out instead.
            tracing::warn!(%error, %stream_id, "cannot forget a closed proxy stream");
        }
    }

    /// Records that `proxy_id` has applied every change up to `version`.
    pub async fn acknowledge(&self, proxy_id: &str, version: i64) -> Result<bool, sqlx::Error> {
        let raise = sqlx::query(
            "UPDATE proxy_streams SET acked_version = $2 \
             WHERE proxy_id = $1 AND acked_version < $2",
        )
        .bind(proxy_id)
        .bind(version);
        let updated = self.db.execute_in_turn(raise).await?;
        self.acked.notify_waiters();
        Ok(updated.rows_affected() > 0)
    }

    /// Waits, at most the configured bound, until every connected proxy has applied
    /// `version`.
    pub async fn wait_for(&self, version: i64) -> Confirmation {
        let deadline = tokio::time::Instant::now() + self.bound;
        loop {
            // Registered before the read, so an acknowledgement landing between the
            // read and the wait still wakes it.
            let acked = self.acked.notified();
            tokio::pin!(acked);
            acked.as_mut().enable();
            let unconfirmed = match self.behind(version).await {
                Ok(0) => return Confirmation::Applied,
                Ok(behind) => behind,
                Err(error) => {
                    tracing::warn!(%error, "cannot read the proxies' acknowledgements");
                    return Confirmation::Pending { unconfirmed: 0 };
                }
            };
            if tokio::time::Instant::now() >= deadline {
                return Confirmation::Pending { unconfirmed };
            }
            tokio::select! {
                () = acked => {}
                () = tokio::time::sleep(POLL) => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Connected proxies (live lease) that have not applied `version` yet.
    async fn behind(&self, version: i64) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM proxy_streams WHERE acked_version < $1 AND lease_until > $2",
        )
        .bind(version)
        .bind(wall_clock_ms())
        .fetch_one(self.db.pool())
        .await
    }

    /// Renews this replica's leases every [`LEASE_RENEW`] until `stopping`; then forgets
    /// its streams, whose proxies reconnect elsewhere.
    pub async fn renew_leases(self: Arc<Self>, mut stopping: tokio::sync::watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(LEASE_RENEW);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for tick in 0_u64.. {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stopping.wait_for(|stop| *stop) => break,
            }
            // Renewing is every tick; forgetting dead replicas' rows can wait a while.
            let forget = tick % FORGET_EVERY_TICKS == 0;
            if let Err(error) = self.renew(forget).await {
                tracing::warn!(%error, "cannot renew the proxy streams' leases");
            }
        }
        let forgotten =
            sqlx::query("DELETE FROM proxy_streams WHERE replica_id = $1").bind(&self.replica_id);
        if let Err(error) = self.db.execute_in_turn(forgotten).await {
            tracing::warn!(%error, "cannot forget this replica's proxy streams");
        }
    }
}

impl Confirmations {
    /// Renews this replica's leases, and forgets the rows of replicas long gone.
    async fn renew(&self, forget: bool) -> Result<(), sqlx::Error> {
        let mut tx = self.db.begin_write().await?;
        // Read once the turn came: the lease runs from when it is written.
        let now = wall_clock_ms();
        sqlx::query("UPDATE proxy_streams SET lease_until = $2 WHERE replica_id = $1")
            .bind(&self.replica_id)
            .bind(now + lease_ms())
            .execute(&mut *tx)
            .await?;
        if forget {
            sqlx::query("DELETE FROM proxy_streams WHERE lease_until < $1")
                .bind(now - FORGET_AFTER_MS)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }
}

/// Rows whose lease ran out this long ago (their replica died) are deleted.
const FORGET_AFTER_MS: i64 = 60_000;
/// Renewals between two deletions of dead replicas' rows (every 10 s).
const FORGET_EVERY_TICKS: u64 = 40;

fn lease_ms() -> i64 {
    i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX)
}

/// Leases are wall-clock time whatever clock the application runs on.
fn wall_clock_ms() -> i64 {
    Clock::system().now().as_millis()
}
