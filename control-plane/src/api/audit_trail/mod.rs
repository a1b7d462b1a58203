//! The audit trail (spec 2.9, 4.8): every change made in a tenant, newest first, as a
//! tamper-evident hash chain (`crate::changes::chain`): listed with filters, exported
//! whole as CSV or JSON (streamed), and verified.
//!
//! Events are written only by `crate::changes::record`, in the transaction of the change
//! they record. They are kept as long as the tenant exists: no retention purge removes
//! them (a plan's `audit_trail_retention_days` is a floor, and keeping everything meets
//! every floor while a purge would cut the chain).

pub(crate) mod service;
mod store;

use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, Page, PageQuery, Paged};
use crate::api::extract::ApiQuery;
use crate::auth::{require, Authorized, Caller};
use crate::changes::chain::Verification;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::validate::Text;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_audit_events))
        .routes(routes!(export_audit_trail))
        .routes(routes!(verify_audit_trail))
}

/// One event of the trail.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEventView {
    pub id: String,
    /// e.g. `agent.registered`, `agent.blocked`, `policy.violated`.
    pub event_type: String,
    /// `api_key:<key id>`, `user:<user id>`, `proxy` or `system`.
    pub actor: String,
    /// `api_key`, `user`, `proxy` or `system`.
    pub actor_type: String,
    pub target_type: String,
    pub target_id: String,
    pub tenant_id: String,
    /// What changed; never a secret.
    #[schema(value_type = Object)]
    pub details: Value,
    #[schema(value_type = String, format = DateTime)]
    pub timestamp: Timestamp,
    /// Position in the tenant's chain, from 1.
    pub seq: i64,
    /// The hash of the event before it (64 zeros for the first).
    pub prev_hash: String,
    /// SHA-256 over this event's fields and `prev_hash`.
    pub hash: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    pub event_type: Option<Text<1, 100>>,
    pub target_id: Option<Text<1, 200>>,
    /// Who acted, as events name them: `api_key:<key id>`, `user:<user id>`, `proxy` or
    /// `system` (an extension of the spec's filters).
    pub actor: Option<Text<1, 200>>,
    /// From this date (midnight UTC) or date-time, inclusive.
    #[param(value_type = Option<String>, format = DateTime)]
    pub from: Option<String>,
    /// Up to this date (its end) or date-time, exclusive.
    #[param(value_type = Option<String>, format = DateTime)]
    pub to: Option<String>,
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExportFormat {
    Csv,
    Json,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExportQuery {
    /// `csv` (RFC 4180, the default) or `json` (an array of events).
    pub format: Option<ExportFormat>,
    pub event_type: Option<Text<1, 100>>,
    pub target_id: Option<Text<1, 200>>,
    /// As the list's `actor`.
    pub actor: Option<Text<1, 200>>,
    #[param(value_type = Option<String>, format = DateTime)]
    pub from: Option<String>,
    #[param(value_type = Option<String>, format = DateTime)]
    pub to: Option<String>,
}

#[utoipa::path(get, path = "/audit-trail", tag = "governance", params(AuditQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "One page of the tenant's audit events, newest first (by time, then seq). A filtered list counts at most 10,000 matches: beyond, `meta.total` is 10,000 and `meta.total_is_lower_bound` is true", body = Paged<AuditEventView>)))]
async fn list_audit_events(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> ApiResult<Response> {
    let page: Page = PageQuery {
        page: query.page,
        limit: query.limit,
    }
    .try_into()?;
    let criteria = service::Criteria::of(&query)?;
    let (events, total, lower_bound) =
        service::list_events(&state, &caller, &criteria, page).await?;
    Ok(envelope::paged_counted(events, page, total, lower_bound))
}

#[utoipa::path(get, path = "/audit-trail/export", tag = "governance", params(ExportQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The tenant's events oldest first, streamed as a CSV or JSON file (`Content-Disposition` names it)",
        content((String = "text/csv"), (Vec<AuditEventView> = "application/json")))))]
async fn export_audit_trail(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ExportQuery>,
) -> ApiResult<Response> {
    let format = query.format.unwrap_or(ExportFormat::Csv);
    let criteria = service::Criteria::of(&AuditQuery {
        event_type: query.event_type,
        target_id: query.target_id,
        actor: query.actor,
        from: query.from,
        to: query.to,
        page: None,
        limit: None,
    })?;
    export_file(&state, &caller, criteria, format).await
}

/// The caller's trail under `criteria` as a file download, streamed (the API's export
/// and the console's).
pub async fn export_file(
    state: &AppState,
    caller: &Caller,
    criteria: service::Criteria,
    format: ExportFormat,
) -> ApiResult<Response> {
    let stream = service::export(state, caller, criteria, format).await?;
    let (content_type, extension) = match format {
        ExportFormat::Csv => ("text/csv; charset=utf-8", "csv"),
        ExportFormat::Json => ("application/json", "json"),
    };
    let today = state.clock.now().to_string();
    let date = today.get(..10).unwrap_or("export");
    let filename = format!("audit-trail-{}-{date}.{extension}", caller.tenant_id);
    Response::builder()
        .header(CONTENT_TYPE, content_type)
        .header(
            CONTENT_DISPOSITION,
            format!("attachment; filename=\"{filename}\""),
        )
        .header("cache-control", "no-store")
        .body(Body::from_stream(stream))
        .map_err(ApiError::internal)
}

#[utoipa::path(get, path = "/audit-trail/verify", tag = "governance",
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "Whether the tenant's chain is intact from its first event to its head, and its first broken link if not", body = Envelope<Verification>)))]
async fn verify_audit_trail(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    let verification = service::verify_chain(&state, &caller).await?;
    Ok(envelope::ok(verification))
}
