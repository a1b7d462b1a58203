//! Human approvals (spec 2.7, 3.2, 4.8).
//!
//! The proxy answers a request that matches a `require_approval` policy with 403
//! `approval_required` and reports it; the control plane queues one pending approval per
//! agent, policy, provider and model (a unique index on a dedupe key held while
//! pending, so concurrent proxies queue one). A pending approval expires 24 hours after
//! creation and reads as `expired` from that instant. A reviewer's decision is audited;
//! an approval lets the agent's requests under that policy to that provider and model
//! through for [`GRANT_TTL_MS`] (one hour) after the decision, published to the proxies
//! like any enforcement change. A denial keeps the requests blocked, and for
//! [`DENIAL_HOLD_MS`] (24 hours) no new approval is queued for them, so a retrying agent
//! cannot flood the reviewers. Requests held while a grant is in force (reported before
//! it reached the proxy) queue nothing either. A new approval is audited as
//! `approval.requested` (actor `proxy`); one that lapses undecided is marked `expired` by
//! a background sweep (`approval_expiry_interval_secs`) and audited as
//! `approval.expired` (actor `system`), so channels hear of both.

pub(crate) mod service;
pub mod store;

pub use service::{expire_lapsed, record_lapsed, record_requested, use_approval};

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, Page, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

/// A pending approval's lifetime (spec 8: 24 hours, no per-policy override).
pub const APPROVAL_TTL_MS: i64 = 24 * 3_600_000;
/// How long an approval lets the agent's matching requests through.
pub const GRANT_TTL_MS: i64 = 3_600_000;
/// How long a denial stops new approvals for the same agent, policy, provider and model.
pub const DENIAL_HOLD_MS: i64 = 24 * 3_600_000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_approvals))
        .routes(routes!(pending_count))
        .routes(routes!(get_approval))
        .routes(routes!(decide_approval))
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Approval {
    pub id: i64,
    pub policy_id: i64,
    /// The policy's name (null once the policy is deleted).
    pub policy_name: Option<String>,
    pub agent_id: String,
    /// The agent's name, for people (null if the agent is gone).
    pub agent_name: Option<String>,
    pub team_id: Option<String>,
    /// What was asked: `provider`, `model`, `environment`, `request_type`, `api_key_id`.
    #[schema(value_type = Object)]
    pub request_context: Value,
    /// `pending`, `approved`, `denied` or `expired`.
    pub status: String,
    pub reviewer_id: Option<String>,
    pub reason: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: Timestamp,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub resolved_at: Option<Timestamp>,
    /// Approved: the agent's matching requests pass until then.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub granted_until: Option<Timestamp>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// What an approval lets through: `action` (the very action that was held, once),
    /// `action_repeatable` (that action until `granted_until`) or `scope` (the agent's
    /// requests to that provider and model, or that tool, until `granted_until`).
    pub releases: String,
    /// The held action's digest (SHA-256, hex; `warden_shared::action`): what an
    /// approval bound to the action lets through, and nothing else.
    pub action_digest: Option<String>,
    /// A single-use approval: when the agent's retry used it (it releases nothing after).
    #[schema(value_type = Option<String>, format = DateTime)]
    pub consumed_at: Option<Timestamp>,
    /// What approving it lets through, in words, for people.
    pub covers: String,
}

/// What approving an approval that `releases` lets through, in words.
pub fn covers(releases: &str) -> &'static str {
    match releases {
        "action" => "this exact action (the same arguments or request body), once",
        "action_repeatable" => "this exact action (the same arguments or request body), for an hour",
        _ => "the agent's requests under this policy to this provider and model (or this tool), whatever they carry, for an hour",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    Expired,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ApprovalQuery {
    pub status: Option<ApprovalStatus>,
    pub agent_id: Option<Text<1, 100>>,
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

#[utoipa::path(get, path = "/approvals", tag = "governance", params(ApprovalQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "One page of approvals, newest first", body = Paged<Approval>)))]
async fn list_approvals(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ApprovalQuery>,
) -> ApiResult<Response> {
    let page: Page = PageQuery {
        page: query.page,
        limit: query.limit,
    }
    .try_into()?;
    let (approvals, total) = service::list_approvals(&state, &caller, &query, page).await?;
    Ok(envelope::paged(approvals, page, total))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PendingCount {
    pub count: i64,
}

#[utoipa::path(get, path = "/approvals/pending/count", tag = "governance",
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "Approvals waiting for a reviewer", body = Envelope<PendingCount>)))]
async fn pending_count(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    let count = service::pending_count(&state, &caller).await?;
    Ok(envelope::ok(PendingCount { count }))
}

#[utoipa::path(get, path = "/approvals/{request_id}", tag = "governance",
    params(("request_id" = i64, Path)), security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The approval", body = Envelope<Approval>)))]
async fn get_approval(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::get_approval(&state, &caller, id).await?,
    ))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Approved,
    Denied,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideInput {
    /// Who decided: 1 to 100 characters.
    pub reviewer_id: Text<1, 100>,
    pub decision: Verdict,
    #[serde(default)]
    pub reason: Option<Text<0, 1000>>,
}

#[utoipa::path(post, path = "/approvals/{approval_id}/decide", tag = "governance",
    params(("approval_id" = i64, Path)), request_body = DecideInput,
    security(("bearer" = ["governance:write"])),
    responses((status = 204, description = "Decided; every connected proxy holds the decision when this answers (`Warden-Enforcement`)"),
        (status = 409, description = "The approval is no longer pending (`approval_not_pending`)")))]
async fn decide_approval(
    caller: Authorized<require::GovernanceWrite>,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(input): ApiJson<DecideInput>,
) -> ApiResult<Response> {
    service::decide_approval(&state, &caller, id, input).await?;
    Ok(envelope::no_content())
}
