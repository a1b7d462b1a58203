//! The internal API between the planes, under `/internal/v1`: its paths, the bodies of
//! the exchanges that share limits and approvals (rate grants, budget grants, approval
//! uses, state acknowledgements), and the acknowledgements of usage and decision
//! batches, declared once. The control plane reads these
//! requests (checking each field's limits itself) and writes these answers; the proxy
//! writes and reads the same types, so a field renamed here is renamed on both sides or
//! fails to compile.
//!
//! With the `openapi` feature each type is also a `utoipa` schema, for the control
//! plane's OpenAPI document.

use serde::{Deserialize, Serialize};

use crate::snapshot::ScopeSpend;

/// Every internal path, from the control plane's base URL.
pub mod paths {
    /// `POST`: a batch of usage records (idempotent by `batch_id`).
    pub const USAGE_BATCHES: &str = "/internal/v1/usage-batches";
    /// `POST`: a batch of policy decisions that forwarded nothing.
    pub const POLICY_DECISIONS: &str = "/internal/v1/policy-decisions";
    /// `POST` [`super::RateGrantRequest`]: allowances of shared rate limits.
    pub const RATE_GRANTS: &str = "/internal/v1/rate-grants";
    /// `POST` [`super::BudgetGrantRequest`]: money of shared budgets.
    pub const BUDGET_GRANTS: &str = "/internal/v1/budget-grants";
    /// `POST` [`super::ApprovalUse`]: a single-use approval claimed.
    pub const APPROVAL_USES: &str = "/internal/v1/approval-uses";
    /// `POST`: an MCP tool definition that changed since its approval.
    pub const MCP_TOOL_DRIFTS: &str = "/internal/v1/mcp-tool-drifts";
    /// `GET`: the enforcement state stream.
    pub const PROXY_STATE: &str = "/internal/v1/proxy-state";
    /// `POST` [`super::ProxyAck`]: a state version applied.
    pub const PROXY_ACKS: &str = "/internal/v1/proxy-acks";
}

/// A proxy's asks for more of limits, one per bucket and minute.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", schema(example = json!({ "asks": [{
    "tenant_id": "ten_01M8EJ57PHZ3VJ9QF03X3YBQ1X", "limiter": "policy:12",
    "bucket": "agt_01M8EJ57PHZ3VJ9QF03X3YBQ1X", "minute": 29_891_520,
    "limit": 600, "want": 600 }] })))]
pub struct RateGrantRequest {
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 500))]
    pub asks: Vec<RateAsk>,
}

/// More of one limit in one bucket and minute.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RateAsk {
    #[cfg_attr(feature = "openapi", schema(max_length = 200))]
    pub tenant_id: String,
    /// `policy:<id>` for a `rate_limit` policy ([`policy_limiter`]).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub limiter: String,
    /// The agent, team or key id the limit counts per; empty for the tenant.
    #[cfg_attr(feature = "openapi", schema(max_length = 200))]
    pub bucket: String,
    /// The Unix minute (ms / 60,000).
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub minute: i64,
    /// The limit's requests per minute, as the proxy's state has it.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1_000_000_000))]
    pub limit: i64,
    /// How many requests the proxy would like.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10_000))]
    pub want: i64,
}

/// The limiter name of `rate_limit` policy `policy_id`.
pub fn policy_limiter(policy_id: i64) -> String {
    format!("policy:{policy_id}")
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RateGrants {
    /// One per ask, in the request's order.
    pub grants: Vec<RateGrant>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RateGrant {
    /// Requests granted (0: the limit is reached this minute, or the tenant is gone).
    pub granted: i64,
}

/// A proxy's request for money in budget scopes, and what it gives back.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", schema(example = json!({
    "holder": "ins_01M8EJ57PHZ3VJ9QF03X3YBQ1X", "month": 1_793_491_200_000_i64,
    "scopes": [{ "tenant_id": "ten_01M8EJ57PHZ3VJ9QF03X3YBQ1X", "scope": "tenant",
                 "block_micros": 1_000_000, "need_micros": 1_000, "release_micros": 0 }] })))]
pub struct BudgetGrantRequest {
    /// The proxy instance asking (new at every start of a proxy).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub holder: String,
    /// The month the money is for: any instant in it, in Unix milliseconds (UTC); the
    /// proxies send its first.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub month: i64,
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 500))]
    pub scopes: Vec<ScopeGrantRequest>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ScopeGrantRequest {
    #[cfg_attr(feature = "openapi", schema(max_length = 200))]
    pub tenant_id: String,
    /// `tenant`, `team:<id>`, `agent:<id>` or `key:<api_key_id>` (`crate::budget`).
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^(tenant|(team|agent|key):.+)$"
        )
    )]
    pub scope: String,
    /// The budget's block threshold in micro-dollars, as the proxy's state has it (the
    /// lowest of the budgets on the scope).
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)
    )]
    pub block_micros: i64,
    /// What the proxy needs more than it holds to admit the request it is serving (0:
    /// a renewal, or a release only).
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)
    )]
    pub need_micros: i64,
    /// What the proxy gives back (acknowledged by the ledger, or unused); applied before
    /// the grant.
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)
    )]
    pub release_micros: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BudgetGrants {
    /// One per requested scope, in the request's order.
    pub scopes: Vec<ScopeGrant>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScopeGrant {
    pub tenant_id: String,
    pub scope: String,
    /// Added to the proxy's holding: at least `need_micros`, or 0 when that does not fit.
    pub granted_micros: i64,
    /// What the proxy holds now.
    pub held_micros: i64,
    /// The ledger's month-to-date spend plus every live holding, this one included.
    pub committed_micros: i64,
}

/// A proxy's claim of a single-use approval for the retry of the action it approved.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", schema(example = json!({
    "tenant_id": "ten_01M8EJ57PHZ3VJ9QF03X3YBQ1X", "approval_id": 1,
    "action_digest": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" })))]
pub struct ApprovalUse {
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub tenant_id: String,
    pub approval_id: i64,
    /// The retried action's digest (64 hex digits): only the approved action's matches.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 64, max_length = 64, pattern = "^[0-9a-fA-F]{64}$")
    )]
    pub action_digest: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalUsed {
    /// True for the one claim that used the approval; false when it was used already,
    /// has expired, or is not an approval of this action.
    pub used: bool,
}

/// A proxy has applied every change up to `version`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProxyAck {
    pub proxy: String,
    pub version: i64,
}

/// One item of a batch that was refused (the others were taken): its index in the
/// batch, the field at fault when one is, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemError {
    pub index: usize,
    pub field: Option<String>,
    pub message: String,
}

/// The ledger's answer to a usage batch.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchAck {
    pub batch_id: String,
    pub accepted: i64,
    pub duplicates: i64,
    pub rejected: i64,
    /// Records of tenants deleted while the records were on their way: dropped, never
    /// an error (nothing a resend could change).
    pub dropped: i64,
    pub errors: Vec<ItemError>,
    /// Month-to-date spend of the budget scopes this batch added to, after it.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub spend: Vec<ScopeSpend>,
}

/// The answer to a batch of policy decisions.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DecisionAck {
    pub batch_id: String,
    pub evaluations_written: usize,
    pub approvals_created: usize,
    /// The pending approval each held decision of a new batch waits on (created now or
    /// already pending), by the decision's index: a proxy names it in the held
    /// request's trace.
    pub approvals: Vec<QueuedApproval>,
    pub rejected: usize,
    /// Decisions of tenants deleted meanwhile: dropped.
    pub dropped: usize,
    pub errors: Vec<ItemError>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueuedApproval {
    /// The decision's index in the batch.
    pub index: usize,
    pub approval_id: i64,
}
