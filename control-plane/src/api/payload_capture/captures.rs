//! Captured payloads (spec 4.12): written with their usage records by the ledger's
//! ingest, read by no endpoint, deleted after the tenant's retention.

use std::collections::HashMap;

use super::store::{self, CaptureRow};
use super::RecordCapture;
use crate::db::{Db, WriteTx};
use crate::ledger::{Outcome, UsageEntry};
use crate::plans::Plan;
use warden_shared::timestamp::Timestamp;

const DAY_MS: i64 = 86_400_000;

/// Stores the captures of the entries new to the ledger (a resent record's capture was
/// stored the first time), in the ingest's transaction. A capture arriving after its
/// tenant disabled capture is not stored: disabling stops storing at once, whatever a
/// proxy's spool still holds. Returns how many were stored.
pub async fn record_captures(
    tx: &mut WriteTx,
    entries: &[UsageEntry<'_>],
    captures: &[Option<&RecordCapture>],
    outcomes: &[Outcome],
) -> Result<usize, sqlx::Error> {
    let mut enabled: HashMap<&str, bool> = HashMap::new();
    let mut rows = Vec::new();
    for ((entry, capture), outcome) in entries.iter().zip(captures).zip(outcomes) {
        let (Some(capture), Outcome::Recorded { .. }, Some(record_id)) =
            (capture, outcome, entry.idempotency_key)
        else {
            continue;
        };
        let on = match enabled.get(entry.tenant_id) {
            Some(on) => *on,
            None => {
                let on = store::capture_enabled(tx, entry.tenant_id).await?;
                enabled.insert(entry.tenant_id, on);
                on
            }
        };
        if on {
            rows.push(CaptureRow {
                tenant_id: entry.tenant_id,
                record_id,
                agent_id: entry.agent_id,
                api_key_id: entry.api_key_id,
                request_type: entry.request_type,
                provider: entry.provider.as_str(),
                model: entry.model_name,
                config_version: capture.config_version,
                body_bytes: capture.bytes,
                redactions: capture.redactions,
                body: capture.body.as_deref().map(|body| body.get()),
                omitted: capture.omitted.as_ref().map(|o| o.as_str()),
                captured_at: entry.recorded_at,
            });
        }
    }
    store::insert_captures(tx, &rows).await?;
    Ok(rows.len())
}

/// Deletes every tenant's captures older than its retention: its configured
/// `retention_days`, or its plan's telemetry retention when that is lower (after a
/// downgrade). Returns how many were deleted.
pub async fn purge_expired(db: &Db, now: Timestamp) -> Result<u64, sqlx::Error> {
    let tenants = store::retentions(&mut *db.pool().acquire().await?).await?;
    let mut deleted = 0;
    for (tenant_id, retention_days, plan) in tenants {
        let plan_days = Plan::of_tenant(&plan).telemetry_retention_days();
        let days = retention_days.min(plan_days);
        let before = Timestamp::from_millis(now.as_millis().saturating_sub(days * DAY_MS));
        let mut tx = db.begin_write().await?;
        deleted += store::delete_captured_before(&mut tx, &tenant_id, before).await?;
        tx.commit().await?;
    }
    Ok(deleted)
}
