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
//! A lease that lapsed while the database was out of reach proves nothing: its replica
//! could not renew it, and its proxies may have stayed connected throughout. So while
//! this replica's own renewals are overdue, and for [`TRUST_AFTER`] once they succeed
//! again (time for every live replica to renew), a stream whose lease was live when the
//! renewals stopped still counts ([`Reachability`]). A write the moment the database
//! returns then waits for the proxies that stayed connected, and answers `pending` when
//! they do not confirm in time. Each renewal has a time limit, so a connection attempt
//! begun during the outage never holds the next one back. Streams that hung up are
//! deleted at once, or at the next renewal when the database was out of reach then.
//!
//! Leases are wall-clock time, not the application's clock: they measure whether a
//! process is alive, and every replica sharing the database must read them alike.

use std::sync::{Arc, Mutex};
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
    reachability: Mutex<Reachability>,
    /// Streams that ended while their row could not be deleted: deleted at the next
    /// renewal, so that this replica stops renewing them.
    ended: Mutex<Vec<String>>,
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
            reachability: Mutex::new(Reachability::new(wall_clock_ms())),
            ended: Mutex::new(Vec::new()),
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
            tracing::warn!(%error, %stream_id, "cannot forget a closed proxy stream yet");
            if let Ok(mut ended) = self.ended.lock() {
                ended.push(stream_id.to_owned());
            }
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

    /// Connected proxies that have not applied `version` yet: streams with a live lease,
    /// and those whose lapse does not prove them ended (the module's documentation).
    async fn behind(&self, version: i64) -> Result<i64, sqlx::Error> {
        let now = wall_clock_ms();
        let live_at = self
            .reachability
            .lock()
            .map_or(Some(i64::MIN), |seen| seen.outage_began(now));
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM proxy_streams WHERE acked_version < $1 \
             AND (lease_until > $2 OR lease_until > $3)",
        )
        .bind(version)
        .bind(now)
        .bind(live_at.unwrap_or(i64::MAX))
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
            match tokio::time::timeout(RENEW_LIMIT, self.renew(forget)).await {
                Err(_) => tracing::warn!("renewing the proxy streams' leases timed out"),
                Ok(Err(error)) => tracing::warn!(%error, "cannot renew the proxy streams' leases"),
                Ok(Ok(renewed_at)) => {
                    if let Ok(mut seen) = self.reachability.lock() {
                        seen.renewed(renewed_at);
                    }
                }
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
    /// Renews this replica's leases, and forgets its streams that ended and the rows of
    /// replicas long gone; returns when the renewal was written.
    async fn renew(&self, forget: bool) -> Result<i64, sqlx::Error> {
        let ended: Vec<String> = self
            .ended
            .lock()
            .map(|ended| ended.clone())
            .unwrap_or_default();
        let mut tx = self.db.begin_write().await?;
        // Read once the turn came: the lease runs from when it is written.
        let now = wall_clock_ms();
        for stream_id in &ended {
            sqlx::query("DELETE FROM proxy_streams WHERE stream_id = $1")
                .bind(stream_id)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("UPDATE proxy_streams SET lease_until = $2 WHERE replica_id = $1")
            .bind(&self.replica_id)
            .bind(now + lease_ms())
            .execute(&mut *tx)
            .await?;
        // Not while lapses are not to be trusted: other replicas renew first.
        let trusted = self
            .reachability
            .lock()
            .is_ok_and(|seen| seen.outage_began(now).is_none());
        if forget && trusted {
            sqlx::query("DELETE FROM proxy_streams WHERE lease_until < $1")
                .bind(now - FORGET_AFTER_MS)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        if let Ok(mut waiting) = self.ended.lock() {
            waiting.retain(|stream_id| !ended.contains(stream_id));
        }
        Ok(now)
    }
}

/// The longest one renewal may take: a renewal still waiting for a connection begun
/// during an outage is dropped, and the next one starts afresh (a busy database's slow
/// renewal finishes well within it).
const RENEW_LIMIT: Duration = LEASE.saturating_mul(2);

/// How long after its renewals resume this replica keeps counting the streams that
/// were live when they stopped: longer than a live replica takes to renew its own
/// leases once the database is back (one renewal period, and a fresh connection).
pub const TRUST_AFTER: Duration = Duration::from_secs(3);

/// What this replica saw of the database through its own lease renewals (see the
/// module's documentation).
#[derive(Debug, Clone, Copy)]
struct Reachability {
    /// When the last renewal was written (wall-clock ms).
    renewed_at: i64,
    /// The last gap in the renewals: when they stopped, and when they resumed.
    outage: Option<(i64, i64)>,
}

/// Renewals further apart than this mean the database was out of reach between them
/// (closer ones let no lease lapse, however slow a busy database made them).
const GAP: Duration = LEASE;

impl Reachability {
    fn new(now: i64) -> Reachability {
        Reachability {
            renewed_at: now,
            outage: None,
        }
    }

    /// A renewal was written at `at`.
    fn renewed(&mut self, at: i64) {
        if at - self.renewed_at > millis(GAP) {
            // An outage right after another dates from the first.
            let began = self
                .outage_began(at)
                .map_or(self.renewed_at, |earlier| earlier.min(self.renewed_at));
            self.outage = Some((began, at));
        }
        self.renewed_at = at;
    }

    /// While lapses are not to be trusted (renewals overdue, or resumed less than
    /// [`TRUST_AFTER`] ago), when the renewals stopped: a stream whose lease ran past
    /// then still counts. `None` when lapses are to be trusted.
    fn outage_began(&self, now: i64) -> Option<i64> {
        let recent = self
            .outage
            .filter(|(_, resumed)| now < resumed + millis(TRUST_AFTER));
        if now - self.renewed_at > millis(GAP) {
            return Some(recent.map_or(self.renewed_at, |(began, _)| began.min(self.renewed_at)));
        }
        recent.map(|(began, _)| began)
    }
}

/// Rows whose lease ran out this long ago (their replica died) are deleted.
const FORGET_AFTER_MS: i64 = 60_000;
/// Renewals between two deletions of dead replicas' rows (every 10 s).
const FORGET_EVERY_TICKS: u64 = 40;

fn lease_ms() -> i64 {
    millis(LEASE)
}

/// Leases are wall-clock time whatever clock the application runs on.
fn wall_clock_ms() -> i64 {
    Clock::system().now().as_millis()
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lapses_count_as_connections_through_an_outage_and_a_while_after() {
        let mut seen = Reachability::new(0);
        for at in (250..=2_000).step_by(250) {
            seen.renewed(at);
            assert_eq!(seen.outage_began(at + 100), None, "steady at {at}");
        }
        // The database out of reach from 2,000 to 7,000: overdue renewals say so.
        assert_eq!(seen.outage_began(2_900), None);
        assert_eq!(seen.outage_began(3_100), Some(2_000));
        assert_eq!(seen.outage_began(6_900), Some(2_000));
        // Back: leases that lapsed meanwhile still count for a while.
        let mut at = 7_000;
        seen.renewed(at);
        while at + 250 < 7_000 + millis(TRUST_AFTER) {
            at += 250;
            seen.renewed(at);
            assert_eq!(seen.outage_began(at), Some(2_000), "at {at}");
        }
        seen.renewed(at + 250);
        assert_eq!(seen.outage_began(at + 250), None);
    }

    #[test]
    fn an_outage_right_after_another_dates_from_the_first() {
        let mut seen = Reachability::new(0);
        seen.renewed(250);
        seen.renewed(3_000);
        seen.renewed(3_250);
        // Out again before the first outage's lapses were trusted.
        seen.renewed(4_500);
        assert_eq!(seen.outage_began(4_550), Some(250));
    }
}
