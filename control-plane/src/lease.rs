//! Leases for background jobs that must run on one replica at a time when several control
//! planes share a PostgreSQL database (the notification delivery worker).
//!
//! A replica runs a job's round only while it holds the job's lease, taking or renewing
//! it at the start of each round. A lease not renewed for `ttl` lapses and any replica may
//! take it, so a replica that dies hands the job over within `ttl`. Leases use wall-clock
//! time, like the proxy-stream leases: they are about processes, not about the business
//! time a test's manual clock moves.

use crate::db::Db;
use warden_shared::clock::Clock;

/// Takes or renews `job`'s lease for `holder` until `ttl_ms` from now; true when the
/// holder has it.
pub async fn hold(db: &Db, job: &str, holder: &str, ttl_ms: i64) -> Result<bool, sqlx::Error> {
    let now = Clock::system().now().as_millis();
    let mut tx = db.begin_write().await?;
    let taken = sqlx::query(
        "INSERT INTO worker_leases (job, holder, lease_until) VALUES ($1, $2, $3) \
         ON CONFLICT (job) DO UPDATE SET holder = excluded.holder, \
         lease_until = excluded.lease_until \
         WHERE worker_leases.holder = excluded.holder OR worker_leases.lease_until < $4",
    )
    .bind(job)
    .bind(holder)
    .bind(now + ttl_ms)
    .bind(now)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        > 0;
    tx.commit().await?;
    Ok(taken)
}

/// Gives the lease up (on shutdown), so another replica takes the job at once.
pub async fn release(db: &Db, job: &str, holder: &str) -> Result<(), sqlx::Error> {
    let mut tx = db.begin_write().await?;
    sqlx::query("DELETE FROM worker_leases WHERE job = $1 AND holder = $2")
        .bind(job)
        .bind(holder)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

/// Runs `round` every `period` (see `periodic::every`) on this replica only while it
/// holds `job`'s lease, taken or renewed before each round for `ttl`, and gives the
/// lease up when the app stops.
pub async fn every_while_held<F, Fut>(
    db: &Db,
    job: &'static str,
    holder: &str,
    period: std::time::Duration,
    ttl: std::time::Duration,
    stopping: tokio::sync::watch::Receiver<bool>,
    mut round: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    crate::periodic::every(job, period, period, stopping, || {
        // Futures do nothing until polled: the round starts only once the lease is held.
        let work = round();
        async move {
            match hold(db, job, holder, ttl_ms).await {
                Ok(true) => work.await,
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, job, "cannot take the job's lease"),
            }
        }
    })
    .await;
    let _ = release(db, job, holder).await;
}
