//! The rules of approvals: the queue as reviewers read it, and a decision that grants
//! the agent for a while, audited and published to the proxies in its transaction.

use serde_json::json;

use warden_shared::timestamp::Timestamp;

use super::store::Selection;
use super::{
    store, Approval, ApprovalQuery, ApprovalStatus, DecideInput, Verdict, APPROVAL_TTL_MS,
    GRANT_TTL_MS,
};
use crate::api::envelope::Page;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, Author, ChangeKind, Proxies};
use crate::db::{Db, WriteTx};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::state::AppState;
use crate::validate::Text;

pub async fn list_approvals(
    state: &AppState,
    caller: &Caller,
    query: &ApprovalQuery,
    page: Page,
) -> ApiResult<(Vec<Approval>, i64)> {
    let selection = Selection {
        status: query.status.map(ApprovalStatus::as_str),
        agent_id: query.agent_id.as_ref().map(Text::as_str),
        decided: false,
    };
    select(state, caller, selection, page).await
}

/// The approvals no longer waiting (decided or expired), newest first, optionally of
/// one status and one agent: the reviewers' history.
pub async fn decided(
    state: &AppState,
    caller: &Caller,
    status: Option<ApprovalStatus>,
    agent_id: Option<&str>,
    page: Page,
) -> ApiResult<(Vec<Approval>, i64)> {
    let selection = Selection {
        status: status.map(ApprovalStatus::as_str),
        agent_id,
        decided: true,
    };
    select(state, caller, selection, page).await
}

async fn select(
    state: &AppState,
    caller: &Caller,
    selection: Selection<'_>,
    page: Page,
) -> ApiResult<(Vec<Approval>, i64)> {
    let now = state.clock.now();
    let pool = state.db.pool();
    let approvals = store::list(pool, &caller.tenant_id, selection, page, now).await?;
    let total = store::count(pool, &caller.tenant_id, selection, now).await?;
    Ok((approvals, total))
}

const PENDING: Selection<'static> = Selection {
    status: Some("pending"),
    agent_id: None,
    decided: false,
};

/// Approvals waiting for a reviewer.
pub async fn pending_count(state: &AppState, caller: &Caller) -> ApiResult<i64> {
    let now = state.clock.now();
    Ok(store::count(state.db.pool(), &caller.tenant_id, PENDING, now).await?)
}

/// How many approvals wait for a reviewer, and the `limit` that waited longest, oldest
/// first.
pub async fn oldest_pending(
    state: &AppState,
    caller: &Caller,
    limit: i64,
) -> ApiResult<(i64, Vec<Approval>)> {
    let now = state.clock.now();
    let pool = state.db.pool();
    let oldest = store::oldest_pending(pool, &caller.tenant_id, limit, now).await?;
    let total = store::count(pool, &caller.tenant_id, PENDING, now).await?;
    Ok((total, oldest))
}

pub async fn get_approval(state: &AppState, caller: &Caller, id: i64) -> ApiResult<Approval> {
    store::get(state.db.pool(), &caller.tenant_id, id, state.clock.now())
        .await?
        .ok_or_else(|| ApiError::not_found("approval"))
}

pub async fn decide_approval(
    state: &AppState,
    caller: &Caller,
    id: i64,
    input: DecideInput,
) -> ApiResult<()> {
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(approval) = store::get(&mut *tx, &caller.tenant_id, id, now).await? else {
        return Err(ApiError::not_found("approval"));
    };
    let (status, grant_until) = match input.decision {
        Verdict::Approved => ("approved", Some(now.as_millis() + GRANT_TTL_MS)),
        Verdict::Denied => ("denied", None),
    };
    let decision = store::Decision {
        status,
        reviewer_id: input.reviewer_id.as_str(),
        reason: input.reason.as_ref().map(Text::as_str),
        grant_until,
    };
    if !store::decide(&mut tx, &caller.tenant_id, id, &decision, now).await? {
        return Err(ApiError::new(
            ErrorCode::ApprovalNotPending,
            format!(
                "approval {id} is {} and can no longer be decided",
                approval.status
            ),
        )
        .with_details(json!({ "status": approval.status })));
    }
    let target_id = id.to_string();
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: if grant_until.is_some() {
                "approval.approved"
            } else {
                "approval.denied"
            },
            target_type: "approval",
            target_id: &target_id,
            details: json!({
                "reviewer_id": decision.reviewer_id,
                "reason": decision.reason,
                "policy_id": approval.policy_id,
                "agent_id": approval.agent_id,
                "request_context": approval.request_context,
            }),
        },
        Proxies::Reload(ChangeKind::Approval),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// A proxy claims a single-use approval of `digest` for the agent's retry: true for the
/// one claim that finds it in force and unused (on any replica: the update is the
/// arbiter). The use is audited, and published so every proxy drops the grant.
pub async fn use_approval(
    db: &Db,
    tenant_id: &str,
    id: i64,
    digest: &str,
    now: Timestamp,
) -> Result<bool, sqlx::Error> {
    let mut tx = db.begin_write().await?;
    if !store::consume(&mut tx, tenant_id, id, digest, now).await? {
        return Ok(false);
    }
    let target_id = id.to_string();
    changes::record(
        &mut tx,
        Author::proxy(tenant_id),
        now,
        AuditEvent {
            event_type: "approval.used",
            target_type: "approval",
            target_id: &target_id,
            details: json!({ "action_digest": digest }),
        },
        Proxies::Reload(ChangeKind::Approval),
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Approvals one sweep expires at most; the next sweep takes the rest.
const EXPIRY_BATCH: i64 = 500;

/// Audits `approval.requested` for an approval the proxies asked for, as `proxy`.
pub async fn record_requested(
    tx: &mut WriteTx,
    request: &store::Request<'_>,
    id: i64,
    now: Timestamp,
) -> Result<(), sqlx::Error> {
    let target_id = id.to_string();
    changes::record(
        tx,
        Author::proxy(request.tenant_id),
        now,
        AuditEvent {
            event_type: "approval.requested",
            target_type: "approval",
            target_id: &target_id,
            details: json!({
                "policy_id": request.policy_id,
                "agent_id": request.agent_id,
                "provider": request.provider,
                "model": request.model,
                "expires_at": Timestamp::from_millis(now.as_millis() + APPROVAL_TTL_MS),
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    Ok(())
}

/// Audits `approval.expired` for approvals that lapsed undecided, as `system`.
pub async fn record_lapsed(
    tx: &mut WriteTx,
    lapsed: &[store::Lapsed],
    now: Timestamp,
) -> Result<(), sqlx::Error> {
    for approval in lapsed {
        let target_id = approval.id.to_string();
        changes::record(
            tx,
            Author {
                tenant_id: &approval.tenant_id,
                actor: "system",
            },
            now,
            AuditEvent {
                event_type: "approval.expired",
                target_type: "approval",
                target_id: &target_id,
                details: json!({
                    "policy_id": approval.policy_id,
                    "agent_id": approval.agent_id,
                }),
            },
            Proxies::Unaffected,
        )
        .await?;
    }
    Ok(())
}

/// Marks the approvals whose 24 hours ran out undecided `expired`, audited (and so
/// announced as `approval.expired`); returns how many.
pub async fn expire_lapsed(db: &Db, now: Timestamp) -> Result<usize, sqlx::Error> {
    let mut total = 0;
    loop {
        let mut tx = db.begin_write().await?;
        let lapsed = store::expire_lapsed(&mut tx, now, EXPIRY_BATCH).await?;
        record_lapsed(&mut tx, &lapsed, now).await?;
        tx.commit().await?;
        total += lapsed.len();
        if i64::try_from(lapsed.len()).unwrap_or(i64::MAX) < EXPIRY_BATCH {
            return Ok(total);
        }
    }
}
