//! Rolled hours, open and closed days of the per-agent daily rollup.
//!
//! Each tenant has two marks in `usage_days_closed`:
//! - `rolled_until`, an hour boundary: the daily tables hold every hour before it; the
//!   hours from it on are only in `usage_hourly` (views read them from there). Batches
//!   add to the daily tables only their late records, of hours before the mark.
//!   [`close_days`] first rolls each finished hour into `usage_daily_open` with one
//!   insert, so a batch costs no daily upsert (that upsert cost ingest a quarter of its
//!   throughput) and views read at most an hour or two of hourly rows past the mark.
//! - `open_from`, a day boundary no later than `rolled_until`'s day: days before it are
//!   closed, `usage_daily` holds their complete sums. Days from it on are open, in
//!   `usage_daily_open`, a table of a day or two that stays in a few hot pages. Closing
//!   moves a day's rows into `usage_daily` with one insert (and adds them to the month's
//!   rows in `usage_monthly`), so they are written once and lie together, instead of
//!   being rewritten all day (which left PostgreSQL a month of them scattered over tens
//!   of thousands of sparse pages).
//!
//! A roll or a close and the mark it advances commit together, and neither may miss a
//! batch still writing: on PostgreSQL a batch holds a share lock on its tenants' rows
//! here from its start to its commit, and rolls and closes take the row's update lock,
//! so they never overlap; SQLite runs one write transaction at a time anyway.

use std::collections::HashMap;

use sqlx::Row;
use warden_shared::timestamp::Timestamp;

use super::{start_of_day, DAY_MS, HOUR_MS};
use crate::db::bulk::{for_backend, is_postgres, placeholders, rows_per_statement};
use crate::db::{Db, WriteTx};

/// How long after midnight a day stays open: usage the proxies and agents still hold
/// for it arrives in the meantime and costs no late update of a daily row.
pub const CLOSE_GRACE_MS: i64 = 15 * 60 * 1000;
/// How long after its end an hour is rolled into the daily rows; a record for it that
/// arrives later is added to its daily row by the batch itself.
pub const ROLL_GRACE_MS: i64 = 2 * 60 * 1000;
/// Hours rolled per tenant in one call.
const MAX_HOURS_PER_CALL: usize = 24 * 45;
/// Days closed per tenant in one call, so a long backlog never holds one caller for long.
const MAX_DAYS_PER_CALL: usize = 400;

/// A tenant's marks (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Marks {
    pub open_from: i64,
    pub rolled_until: i64,
}

impl Marks {
    /// A tenant without a row: every day closed and every hour rolled, so each batch
    /// maintains its daily rows itself (as before days were closed).
    pub const NONE: Marks = Marks {
        open_from: i64::MAX,
        rolled_until: i64::MAX,
    };
}

/// The marks of each of `tenants`, locked until `tx` ends so that no roll or close
/// overlaps the batch. `tenants` must be sorted (a fixed lock order rules out deadlocks
/// between batches).
pub(super) async fn lock_marks_for_batch(
    tx: &mut WriteTx,
    tenants: &[&str],
) -> Result<HashMap<String, Marks>, sqlx::Error> {
    let lock = if is_postgres(tx) { " FOR SHARE" } else { "" };
    let mut marks: HashMap<String, Marks> = tenants
        .iter()
        .map(|tenant_id| ((*tenant_id).to_owned(), Marks::NONE))
        .collect();
    for chunk in tenants.chunks(rows_per_statement(tx, 1)) {
        // PostgreSQL locks the rows as the sorted result emits them: in tenant order.
        let values = placeholders(tx, 1, chunk.len(), 1);
        let sql = for_backend(
            tx,
            format!(
                "SELECT tenant_id, open_from, rolled_until FROM usage_days_closed \
                 WHERE tenant_id IN {} ORDER BY tenant_id{lock}",
                values
            ),
        );
        let mut query = sqlx::query(&sql);
        for tenant_id in chunk {
            query = query.bind(*tenant_id);
        }
        for row in query.fetch_all(&mut **tx).await? {
            marks.insert(
                row.try_get("tenant_id")?,
                Marks {
                    open_from: row.try_get("open_from")?,
                    rolled_until: row.try_get("rolled_until")?,
                },
            );
        }
    }
    Ok(marks)
}

/// Starts a new tenant's days open from the day it was created, rolled to its hour.
pub async fn open_for_new_tenant(
    tx: &mut WriteTx,
    tenant_id: &str,
    now: Timestamp,
) -> Result<(), sqlx::Error> {
    let now = now.as_millis();
    sqlx::query(
        "INSERT INTO usage_days_closed (tenant_id, open_from, rolled_until) VALUES ($1, $2, $3)",
    )
    .bind(tenant_id)
    .bind(start_of_day(now))
    .bind(now - now.rem_euclid(HOUR_MS))
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// Rolls every tenant's hours that ended at least [`ROLL_GRACE_MS`] before `now` into
/// the daily rows, then closes the days that ended at least [`CLOSE_GRACE_MS`] before
/// `now`; returns how many tenant-days it moved into `usage_daily`. Safe to run from
/// several control planes at once: each step is its own transaction, under the lock.
pub async fn close_days(db: &Db, now: Timestamp) -> Result<usize, sqlx::Error> {
    roll_hours(db, now).await?;
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
                Step::Moved => closed += 1,
                Step::Skipped => {}
                Step::UpToDate => break,
            }
        }
    }
    Ok(closed)
}

enum Step {
    /// An hour or a day with usage was summed into the next daily table.
    Moved,
    /// Days without usage were closed without writing anything.
    Skipped,
    UpToDate,
}

/// Closes the tenant's first open day before `until` (moves its rows from
/// `usage_daily_open` to `usage_daily` and adds them to its month's `usage_monthly`
/// rows), or all the empty days before its next day with
/// usage.
async fn close_next_day(db: &Db, tenant_id: &str, until: i64) -> Result<Step, sqlx::Error> {
    let mut tx = db.begin_write().await?;
    let Some(marks) = lock_marks(&mut tx, tenant_id).await? else {
        return Ok(Step::UpToDate);
    };
    // A day closes only once all its hours are rolled.
    let until = until.min(start_of_day(marks.rolled_until));
    let open_from = marks.open_from;
    if open_from >= until {
        return Ok(Step::UpToDate);
    }
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
            sqlx::query(
                "INSERT INTO usage_monthly (tenant_id, month, agent_id, team_id, requests, \
                 input_tokens, output_tokens, cost_micros) \
                 SELECT tenant_id, $3, agent_id, team_id, requests, input_tokens, \
                 output_tokens, cost_micros FROM usage_daily_open \
                 WHERE tenant_id = $1 AND day = $2 \
                 ON CONFLICT (tenant_id, month, agent_id, team_id) DO UPDATE SET \
                 requests = usage_monthly.requests + excluded.requests, \
                 input_tokens = usage_monthly.input_tokens + excluded.input_tokens, \
                 output_tokens = usage_monthly.output_tokens + excluded.output_tokens, \
                 cost_micros = usage_monthly.cost_micros + excluded.cost_micros",
            )
            .bind(tenant_id)
            .bind(day)
            .bind(Timestamp::from_millis(day).month_start())
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM usage_daily_open WHERE tenant_id = $1 AND day = $2")
                .bind(tenant_id)
                .bind(day)
                .execute(&mut *tx)
                .await?;
            (Step::Moved, day + DAY_MS)
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

/// The tenant's marks, locked for update until `tx` ends; `None` without a row.
pub(super) async fn lock_marks(
    tx: &mut WriteTx,
    tenant_id: &str,
) -> Result<Option<Marks>, sqlx::Error> {
    let sql = if is_postgres(tx) {
        "SELECT open_from, rolled_until FROM usage_days_closed WHERE tenant_id = $1 FOR UPDATE"
    } else {
        "SELECT open_from, rolled_until FROM usage_days_closed WHERE tenant_id = $1"
    };
    let row = sqlx::query(sql)
        .bind(tenant_id)
        .fetch_optional(&mut **tx)
        .await?;
    row.map(|row| {
        Ok(Marks {
            open_from: row.try_get("open_from")?,
            rolled_until: row.try_get("rolled_until")?,
        })
    })
    .transpose()
}

/// Rolls every tenant's finished hours (see [`close_days`]); returns how many
/// tenant-hours with usage it summed into `usage_daily_open`.
async fn roll_hours(db: &Db, now: Timestamp) -> Result<usize, sqlx::Error> {
    let until = {
        let at = now.as_millis() - ROLL_GRACE_MS;
        at - at.rem_euclid(HOUR_MS)
    };
    let tenants: Vec<String> =
        sqlx::query_scalar("SELECT tenant_id FROM usage_days_closed WHERE rolled_until < $1")
            .bind(until)
            .fetch_all(db.pool())
            .await?;
    let mut rolled = 0;
    for tenant_id in &tenants {
        for _ in 0..MAX_HOURS_PER_CALL {
            match roll_next_hour(db, tenant_id, until).await? {
                Step::Moved => rolled += 1,
                Step::Skipped => {}
                Step::UpToDate => break,
            }
        }
    }
    Ok(rolled)
}

/// Sums the tenant's first unrolled hour before `until` into its day's open rows, or
/// skips the empty hours before its next hour with usage.
async fn roll_next_hour(db: &Db, tenant_id: &str, until: i64) -> Result<Step, sqlx::Error> {
    let mut tx = db.begin_write().await?;
    let Some(marks) = lock_marks(&mut tx, tenant_id).await? else {
        return Ok(Step::UpToDate);
    };
    let from = marks.rolled_until;
    if from >= until {
        return Ok(Step::UpToDate);
    }
    let first_hour: Option<i64> = sqlx::query(
        "SELECT MIN(hour) AS first FROM usage_hourly \
         WHERE tenant_id = $1 AND hour >= $2 AND hour < $3",
    )
    .bind(tenant_id)
    .bind(from)
    .bind(until)
    .fetch_one(&mut *tx)
    .await?
    .try_get("first")?;
    let (step, rolled_until) = match first_hour {
        Some(hour) if hour > from => (Step::Skipped, hour),
        Some(hour) => {
            // The hour's day is open: `open_from` never passes `rolled_until`'s day.
            sqlx::query(
                "INSERT INTO usage_daily_open (tenant_id, day, agent_id, team_id, requests, \
                 input_tokens, output_tokens, cost_micros) \
                 SELECT tenant_id, $3, agent_id, team_id, SUM(requests), SUM(input_tokens), \
                 SUM(output_tokens), SUM(cost_micros) FROM usage_hourly \
                 WHERE tenant_id = $1 AND hour = $2 GROUP BY tenant_id, agent_id, team_id \
                 ON CONFLICT (tenant_id, day, agent_id, team_id) DO UPDATE SET \
                 requests = usage_daily_open.requests + excluded.requests, \
                 input_tokens = usage_daily_open.input_tokens + excluded.input_tokens, \
                 output_tokens = usage_daily_open.output_tokens + excluded.output_tokens, \
                 cost_micros = usage_daily_open.cost_micros + excluded.cost_micros",
            )
            .bind(tenant_id)
            .bind(hour)
            .bind(start_of_day(hour))
            .execute(&mut *tx)
            .await?;
            (Step::Moved, hour + HOUR_MS)
        }
        None => (Step::Skipped, until),
    };
    sqlx::query("UPDATE usage_days_closed SET rolled_until = $2 WHERE tenant_id = $1")
        .bind(tenant_id)
        .bind(rolled_until)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(step)
}
