//! `policy.violated` in the audit trail, deduplicated so that a runaway agent cannot flood
//! it: per agent, policy and minute, the first refusal is audited at once (`count` 1)
//! and the others of that minute are counted in `policy_violation_minutes`, then audited
//! together as one more `policy.violated` event (`count` = how many) once the minute is
//! over ([`summarize_violations`], a background round). Every refusal is counted in the
//! trail; a minute costs an agent and policy two events at most (and one more per
//! decision batch arriving after its minute was summarized).

use serde_json::{json, Value};
use warden_shared::policy::Outcome;
use warden_shared::timestamp::Timestamp;

use super::store;
use super::{DecisionRow, ReportedResult};
use crate::changes::{self, AuditEvent, Author, Proxies};
use crate::db::{Db, WriteTx};

const MINUTE_MS: i64 = 60_000;
/// How long after its end a minute's repeats wait for late decision batches.
const SUMMARY_GRACE_MS: i64 = 10_000;

/// Audits the failures among the results of `decisions`, just written; returns how many
/// results they hold. Tenants are taken in order, so concurrent batches lock their
/// trails' heads in the same order.
pub async fn audit_violations(
    tx: &mut WriteTx,
    decisions: &[DecisionRow<'_>],
) -> Result<usize, sqlx::Error> {
    let mut failures: Vec<(&DecisionRow<'_>, &ReportedResult)> = decisions
        .iter()
        .flat_map(|row| {
            row.list
                .results
                .iter()
                .filter(|r| r.result == Outcome::Fail)
                .map(move |result| (row, result))
        })
        .collect();
    failures.sort_by_key(|(row, _)| row.tenant_id);
    for (row, result) in failures {
        audit_violation(tx, row, result).await?;
    }
    Ok(decisions.iter().map(|row| row.list.results.len()).sum())
}

/// What the trail says of one refusal.
fn details(row: &DecisionRow<'_>, result: &ReportedResult) -> Value {
    json!({
        "policy_name": result.policy_name,
        "policy_type": result.policy_type.as_str(),
        "reason": result.reason,
        "agent_id": row.agent_id,
        "provider": row.provider.as_str(),
        "model": row.model,
        "request_id": row.request_id,
    })
}

async fn audit_violation(
    tx: &mut WriteTx,
    row: &DecisionRow<'_>,
    result: &ReportedResult,
) -> Result<(), sqlx::Error> {
    let at = row.evaluated_at.as_millis();
    let minute = at - at.rem_euclid(MINUTE_MS);
    let mut details = details(row, result);
    let text = details.to_string();
    let first = store::open_violation_minute(
        tx,
        row.tenant_id,
        row.agent_id,
        result.policy_id,
        minute,
        &text,
    )
    .await?;
    if !first {
        // A repeat within the minute: counted now, audited with the others later.
        store::count_violation_repeat(
            tx,
            row.tenant_id,
            row.agent_id,
            result.policy_id,
            minute,
            &text,
        )
        .await?;
        return Ok(());
    }
    details["count"] = json!(1);
    details["minute"] = json!(Timestamp::from_millis(minute));
    record(
        tx,
        row.tenant_id,
        result.policy_id,
        row.evaluated_at,
        details,
    )
    .await
}

async fn record(
    tx: &mut WriteTx,
    tenant_id: &str,
    policy_id: i64,
    at: Timestamp,
    details: Value,
) -> Result<(), sqlx::Error> {
    changes::record(
        tx,
        Author::proxy(tenant_id),
        at,
        AuditEvent {
            event_type: "policy.violated",
            target_type: "policy",
            target_id: &policy_id.to_string(),
            details,
        },
        Proxies::Unaffected,
    )
    .await
    .map(|_| ())
}

/// Audits the repeats of every minute over (by `now_ms`, after a grace for late
/// batches) as one `policy.violated` event each, and forgets those minutes: of every
/// tenant, or of `tenant_id` alone. Rows are taken with the delete that removes them, so
/// replicas running this at once never audit a minute twice. Returns how many events
/// were written.
pub async fn summarize_violations(
    db: &Db,
    now_ms: i64,
    tenant_id: Option<&str>,
) -> Result<usize, sqlx::Error> {
    let before = now_ms - MINUTE_MS - SUMMARY_GRACE_MS;
    let mut tx = db.begin_write().await?;
    let mut taken = store::take_violation_minutes(&mut tx, before, tenant_id).await?;
    taken.sort_by(|a, b| a.tenant_id.cmp(&b.tenant_id));
    let mut written = 0;
    for row in taken {
        if row.repeats == 0 {
            continue;
        }
        let mut details: Value = serde_json::from_str(&row.last_details).unwrap_or_default();
        details["count"] = json!(row.repeats);
        details["minute"] = json!(Timestamp::from_millis(row.minute));
        let at = Timestamp::from_millis(row.minute + MINUTE_MS);
        record(&mut tx, &row.tenant_id, row.policy_id, at, details).await?;
        written += 1;
    }
    tx.commit().await?;
    Ok(written)
}
