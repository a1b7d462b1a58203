//! `POST /internal/v1/approval-uses`: a proxy claims a single-use approval (`releases`
//! `action`) for the agent's retry of the very action that was held. Exactly one claim
//! wins, whichever proxy or replica it reaches (`approvals::use_approval`); the others,
//! and any claim after a restart, find it used, and their proxies hold the retry again.

use warden_shared::wire::{ApprovalUse, ApprovalUsed};

use crate::api::approvals::use_approval;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub async fn claim(state: &AppState, claim: ApprovalUse) -> ApiResult<ApprovalUsed> {
    if claim.tenant_id.is_empty() || claim.tenant_id.chars().count() > 200 {
        return Err(ApiError::validation(
            "tenant_id",
            "tenant_id: 1 to 200 characters",
        ));
    }
    let digest = &claim.action_digest;
    if !warden_shared::action::is_digest(digest) {
        return Err(ApiError::validation(
            "action_digest",
            "action_digest: 64 hex digits",
        ));
    }
    let used = use_approval(
        &state.db,
        &claim.tenant_id,
        claim.approval_id,
        digest,
        state.clock.now(),
    )
    .await?;
    Ok(ApprovalUsed { used })
}
