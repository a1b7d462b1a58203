//! Open and closed days of the per-agent daily rollup (`usage_daily`).
//!
//! Each tenant has a first open day (`usage_days_closed.open_from`). Days before it are
//! closed: `usage_daily` holds their complete sums, and a late record for one of them is
//! added to its row there. Days from it on are open: batches add to their rows in
//! `usage_daily_open`, a table of a day or two that stays in a few hot pages.
//! [`close_days`] closes a day by moving its rows into `usage_daily` with one insert, so
//! a day's rows there are written once and lie together, instead of being rewritten by
//! every batch of the day (which left PostgreSQL a month of them scattered over tens of
//! thousands of sparse pages). The move and the new `open_from` commit together.
//!
//! Closing must not miss a batch that is still writing the day's hours. On PostgreSQL a
//! batch holds a share lock on its tenants' rows here from its start to its commit, and
//! a close takes the row's update lock, so the two never overlap; SQLite runs one write
//! transaction at a time anyway.

use std::collections::HashMap;

use sqlx::Row;
use warden_shared::timestamp::Timestamp;

use super::{is_postgres, placeholders, rows_per_statement, start_of_day, DAY_MS};
use crate::clock::Clock;
use crate::db::{Db, WriteTx};

/// How long after midnight a day stays open: usage the proxies and agents still hold
/// for it arrives in the meantime and costs no late update of a daily row.
pub const CLOSE_GRACE_MS: i64 = 15 * 60 * 1000;
/// Days closed per tenant in one call, so a long backlog never holds one caller for long.
const MAX_DAYS_PER_CALL: usize = 400;

/// The first open day of each of `tenants`, locked until `tx` ends so that no close
/// overlaps the batch. `tenants` must be sorted (a fixed lock order rules out
/// deadlocks between batches). A tenant without a row keeps every day closed: its
/// daily rows are maintained by each batch, as before days were closed.
pub(super) async fn lock_open_days(
    tx: &mut WriteTx,
    tenants: &[&str],
) -> Result<HashMap<String, i64>, sqlx::Error> {
    let lock = if is_postgres(tx) { " FOR SHARE" } else { "" };
    let mut open: HashMap<String, i64> = tenants
        .iter()
        .map(|tenant_id| ((*tenant_id).to_owned(), i64::MAX))
        .collect();
    for chunk in tenants.chunks(rows_per_statement(tx, 1)) {
        // PostgreSQL locks the rows as the sorted result emits them: in tenant order.
        let sql = format!(
            "SELECT tenant_id, open_from FROM usage_days_closed WHERE tenant_id IN {} \
             ORDER BY tenant_id{lock}",
            placeholders(1, chunk.len(), 1)
        );
        let mut query = sqlx::query(&sql);
        for tenant_id in chunk {
            query = query.bind(*tenant_id);
        }
        for row in query.fetch_all(&mut **tx).await? {
            open.insert(row.try_get("tenant_id")?, row.try_get("open_from")?);
        }
    }
    Ok(open)
}

/// Starts a new tenant's days open from the day it was created.
pub async fn open_for_new_tenant(
    tx: &mut WriteTx,
    tenant_id: &str,
    now: Timestamp,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO usage_days_closed (tenant_id, open_from) VALUES ($1, $2)")
        .bind(tenant_id)
        .bind(start_of_day(now.as_millis()))
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

/// Closes every tenant's days that ended at least [`CLOSE_GRACE_MS`] before `now`;
/// returns how many tenant-days it moved into `usage_daily`. Safe to run from several
/// control planes at once: each day is closed in its own transaction, under the lock.
pub async fn close_days(db: &Db, now: Timestamp) -> Result<usize, sqlx::Error> {
    let until = start_of_day(now.as_millis() - CLOSE_GRACE_MS);
    let tenants: Vec<String> =
        sqlx::query_scalar("SELECT tenant_id FROM usage_days_closed WHERE open_from < $1")
            .bind(until)
            .fetch_all(db.pool())
            .await?;
    let mut closed = 0;
    for tenant_id in &tenants {
        for _ in 0..MAX_DAYS_PER_CALL {
            match close_next_day(db, tenant_id, until).await? {
                Step::Closed => closed += 1,
                Step::Skipped => {}
                Step::UpToDate => break,
            }
        }
    }
    Ok(closed)
}

/// Runs [`close_days`] now and every `interval` until `stopping` turns true (or its
/// sender is gone). Failures are logged and retried on the next round.
pub async fn close_days_every(
    interval: std::time::Duration,
    db: Db,
    clock: Clock,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            changed = stopping.changed() => {
                if changed.is_err() || *stopping.borrow() {
                    return;
                }
                continue;
            }
        }
        match close_days(&db, clock.now()).await {
            Ok(0) => {}
            Ok(days) => tracing::info!(days, "closed days of the daily cost rollup"),
            Err(error) => tracing::warn!(%error, "cannot close days of the daily cost rollup"),
        }
    }
}

enum Step {
    /// A day with usage was summed into `usage_daily`.
    Closed,
    /// Days without usage were closed without writing anything.
    Skipped,
    UpToDate,
}

/// Closes the tenant's first open day before `until` (moves its rows from
/// `usage_daily_open` to `usage_daily`), or all the empty days before its next day with
/// usage.
async fn close_next_day(db: &Db, tenant_id: &str, until: i64) -> Result<Step, sqlx::Error> {
    let mut tx = db.begin_write().await?;
    let sql = if is_postgres(&mut tx) {
        "SELECT open_from FROM usage_days_closed WHERE tenant_id = $1 FOR UPDATE"
    } else {
        "SELECT open_from FROM usage_days_closed WHERE tenant_id = $1"
    };
    let open_from: Option<i64> = sqlx::query_scalar(sql)
        .bind(tenant_id)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(open_from) = open_from.filter(|open_from| *open_from < until) else {
        return Ok(Step::UpToDate);
    };
    // The open days' table is keyed by tenant and day, so this is one index probe.
    let first_day: Option<i64> = sqlx::query(
        "SELECT MIN(day) AS first FROM usage_daily_open \
         WHERE tenant_id = $1 AND day >= $2 AND day < $3",
    )
    .bind(tenant_id)
    .bind(open_from)
    .bind(until)
    .fetch_one(&mut *tx)
    .await?
    .try_get("first")?;
    let (step, open_from) = match first_day {
        Some(day) if day > open_from => (Step::Skipped, day),
        Some(day) => {
            sqlx::query(
                "INSERT INTO usage_daily (tenant_id, day, agent_id, team_id, requests, \
                 input_tokens, output_tokens, cost_micros) \
                 SELECT tenant_id, day, agent_id, team_id, requests, input_tokens, \
                 output_tokens, cost_micros FROM usage_daily_open \
                 WHERE tenant_id = $1 AND day = $2",
            )
            .bind(tenant_id)
            .bind(day)
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM usage_daily_open WHERE tenant_id = $1 AND day = $2")
                .bind(tenant_id)
                .bind(day)
                .execute(&mut *tx)
                .await?;
            (Step::Closed, day + DAY_MS)
        }
        None => (Step::Skipped, until),
    };
    sqlx::query("UPDATE usage_days_closed SET open_from = $2 WHERE tenant_id = $1")
        .bind(tenant_id)
        .bind(open_from)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(step)
}
