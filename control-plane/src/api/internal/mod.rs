//! Internal endpoints for Warden's own services, under `/internal/v1`, authenticated by
//! the service token and never by tenant keys.
//!
//! Each operation's rules live in a file of its own: `usage_batches.rs` (the proxy's
//! idempotent usage ingest), `policy_decisions.rs` (the proxies' other policy decisions)
//! `proxy_state.rs` (the state stream and the proxies' acknowledgements of what
//! they applied), `tool_calls.rs` (the MCP gateway's tool-call records, which arrive in
//! usage batches), `tool_drifts.rs` (MCP tool definitions that changed since their
//! approval), `rate_grants.rs` (rate limits' allowances shared by the proxies) and
//! `budget_grants.rs` (budgets' money allowances shared by the proxies) and
//! `approval_uses.rs` (single-use approvals claimed by the proxy that retries the action). `store.rs` holds the SQL of their own rows;
//! usage goes through `crate::ledger`, and the stream reads `crate::proxy_state::load`.

mod approval_uses;
mod budget_grants;
mod input;
mod policy_decisions;
mod proxy_state;
mod rate_grants;
mod store;
mod tool_calls;
mod tool_drifts;
mod usage_batches;

use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::extract::{FromRequestParts, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::keys;

use warden_shared::wire::{
    paths, ApprovalUse, ApprovalUsed, BudgetGrantRequest, BudgetGrants, ProxyAck, RateGrantRequest,
    RateGrants,
};
pub use warden_shared::wire::{BatchAck, DecisionAck, QueuedApproval};

use self::input::{DecisionBatch, ParsedBatch, StreamQuery, UsageBatch};
use crate::api::envelope::{self, Envelope};
use crate::api::extract::{ApiJson, ApiQuery, JsonBytes};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::state::AppState;

pub use budget_grants::LAPSE_MS as BUDGET_GRANT_LAPSE_MS;
pub use policy_decisions::{forget_batches_before, BATCH_ID_RETENTION_MS};
pub use store::{forget_budget_grants, forget_rate_grants};

/// A refused field of an internal request: its name, then what it must be.
fn invalid<T>(name: &str, message: &str) -> ApiResult<T> {
    Err(ApiError::validation(name, format!("{name}: {message}")))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(ingest_usage_batch))
        // Records carry captured payloads (a proxy cuts its batches at a few MiB of
        // them): more than any management body, from the service token only.
        .layer(DefaultBodyLimit::max(usage_batches::MAX_BATCH_BYTES))
        .merge(OpenApiRouter::new().routes(routes!(ingest_policy_decisions)))
        .routes(routes!(report_tool_drift))
        .routes(routes!(grant_rate))
        .routes(routes!(grant_budget))
        .routes(routes!(use_approval))
        .routes(routes!(stream_proxy_state))
        .routes(routes!(acknowledge_proxy_state))
}

/// Proof that the caller presented the service token.
#[derive(Debug)]
pub struct ServiceCaller;

impl FromRequestParts<AppState> for ServiceCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::MissingCredentials,
                    "send `Authorization: Bearer <service token>`",
                )
            })?;
        // Compared as hashes in constant time: no early exit reveals a matching prefix.
        if keys::verify_credential(token, &state.service_token_hash) {
            Ok(ServiceCaller)
        } else {
            Err(ApiError::new(
                ErrorCode::InvalidCredentials,
                "internal endpoints accept only the service token",
            ))
        }
    }
}

#[utoipa::path(post, path = paths::USAGE_BATCHES, tag = "internal", request_body = UsageBatch,
    security(("service_token" = [])),
    responses((status = 200, description = "What was new, what was seen before, what was refused", body = Envelope<BatchAck>)))]
async fn ingest_usage_batch(
    _service: ServiceCaller,
    State(state): State<AppState>,
    JsonBytes(body): JsonBytes,
) -> ApiResult<Response> {
    let batch = ParsedBatch::parse(&body)?;
    let ack = usage_batches::ingest_usage_batch(&state, batch).await?;
    Ok(envelope::ok(ack))
}

#[utoipa::path(post, path = paths::POLICY_DECISIONS, tag = "internal", request_body = DecisionBatch,
    security(("service_token" = [])),
    responses((status = 200, description = "What was written and what was refused", body = Envelope<DecisionAck>)))]
async fn ingest_policy_decisions(
    _service: ServiceCaller,
    State(state): State<AppState>,
    ApiJson(batch): ApiJson<DecisionBatch>,
) -> ApiResult<Response> {
    let ack = policy_decisions::ingest_policy_decisions(&state, batch).await?;
    Ok(envelope::ok(ack))
}

#[utoipa::path(post, path = paths::RATE_GRANTS, tag = "internal", request_body = RateGrantRequest,
    security(("service_token" = [])),
    responses((status = 200, description = "What was granted for each ask, in order", body = Envelope<RateGrants>)))]
async fn grant_rate(
    _service: ServiceCaller,
    State(state): State<AppState>,
    ApiJson(request): ApiJson<RateGrantRequest>,
) -> ApiResult<Response> {
    let granted = rate_grants::grant(&state, request).await?;
    Ok(envelope::ok(granted))
}

#[utoipa::path(post, path = paths::BUDGET_GRANTS, tag = "internal", request_body = BudgetGrantRequest,
    security(("service_token" = [])),
    responses((status = 200, description = "What each scope was granted and holds", body = Envelope<BudgetGrants>)))]
async fn grant_budget(
    _service: ServiceCaller,
    State(state): State<AppState>,
    ApiJson(request): ApiJson<BudgetGrantRequest>,
) -> ApiResult<Response> {
    let grants = budget_grants::grant(&state, request).await?;
    Ok(envelope::ok(grants))
}

#[utoipa::path(post, path = paths::APPROVAL_USES, tag = "internal", request_body = ApprovalUse,
    security(("service_token" = [])),
    responses((status = 200, description = "Whether this claim used the approval", body = Envelope<ApprovalUsed>)))]
async fn use_approval(
    _service: ServiceCaller,
    State(state): State<AppState>,
    ApiJson(claim): ApiJson<ApprovalUse>,
) -> ApiResult<Response> {
    let used = approval_uses::claim(&state, claim).await?;
    Ok(envelope::ok(used))
}

#[utoipa::path(post, path = paths::MCP_TOOL_DRIFTS, tag = "internal", request_body = tool_drifts::DriftReport,
    security(("service_token" = [])),
    responses((status = 204, description = "Recorded (audited and notified the first time)")))]
async fn report_tool_drift(
    _service: ServiceCaller,
    State(state): State<AppState>,
    ApiJson(report): ApiJson<tool_drifts::DriftReport>,
) -> ApiResult<Response> {
    tool_drifts::record_drift(&state, report).await?;
    Ok(envelope::no_content())
}

#[utoipa::path(get, path = paths::PROXY_STATE, tag = "internal", params(StreamQuery),
    security(("service_token" = [])),
    responses((status = 200, description = "Newline-delimited JSON: a snapshot or the missed deltas, then deltas and heartbeats", content_type = "application/x-ndjson")))]
async fn stream_proxy_state(
    _service: ServiceCaller,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<StreamQuery>,
) -> ApiResult<Response> {
    let stream =
        proxy_state::stream_proxy_state(&state, query.since, query.proxy.as_deref()).await?;
    Response::builder()
        .header(CONTENT_TYPE, "application/x-ndjson")
        .header("cache-control", "no-store")
        .body(Body::from_stream(stream))
        .map_err(ApiError::internal)
}

#[utoipa::path(post, path = paths::PROXY_ACKS, tag = "internal", request_body = ProxyAck,
    security(("service_token" = [])),
    responses((status = 204, description = "Recorded; writes waiting for this version are released")))]
async fn acknowledge_proxy_state(
    _service: ServiceCaller,
    State(state): State<AppState>,
    ApiJson(ack): ApiJson<ProxyAck>,
) -> ApiResult<Response> {
    state
        .confirmations
        .acknowledge(&ack.proxy, ack.version)
        .await?;
    Ok(envelope::no_content())
}
