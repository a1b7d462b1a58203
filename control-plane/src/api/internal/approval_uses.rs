//! `POST /internal/v1/approval-uses`: a proxy claims a single-use approval (`releases`
//! `action`) for the agent's retry of the very action that was held. Exactly one claim
//! wins, whichever proxy or replica it reaches (`approvals::use_approval`); the others,
//! and any claim after a restart, find it used, and their proxies hold the retry again.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::approvals::use_approval;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({ "tenant_id": "ten_01M8EJ57PHZ3VJ9QF03X3YBQ1X", "approval_id": 1,
    "action_digest": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" }))]
pub struct ApprovalUse {
    #[schema(min_length = 1, max_length = 200)]
    pub tenant_id: String,
    pub approval_id: i64,
    /// The retried action's digest (64 hex digits): only the approved action's matches.
    #[schema(min_length = 64, max_length = 64, pattern = "^[0-9a-fA-F]{64}$")]
    pub action_digest: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalUsed {
    /// True for the one claim that used the approval; false when it was used already,
    /// has expired, or is not an approval of this action.
    pub used: bool,
}

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
