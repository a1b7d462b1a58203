//! Payload capture configuration (spec 2.18, 4.12, 8): read with `payload:read`,
//! replaced with `payload:write`.
//!
//! `retention_days` 1 to 30 and not above the plan's telemetry retention (free 7,
//! starter 14, others 30); `processing_purpose` 10 to 500 characters; up to 25
//! `redaction_rules`, each with a unique `id` (1–100 characters), a `field_path` of
//! dot-separated field names (letters, digits, `_`, `-`; array selectors such as `[*]`
//! are refused) and an optional `pattern`, a regular expression of at most 500
//! characters compiled with a linear-time engine under size limits (refused when it
//! does not compile within them). Each PUT increments `config_version` and is audited
//! as one `payload_capture.configured` event. No endpoint reads, exports or deletes
//! captured records.
//!
//! Capture itself (`captures.rs`): while a tenant has it enabled, each proxy keeps the
//! body of each request it forwards, redacted by these rules in the proxy, and sends it
//! with the request's usage record; the ledger's ingest stores it in `payload_captures`
//! (only while the tenant's capture is still enabled), where a background round deletes
//! it after `retention_days` (or the plan's telemetry retention, if lower).

mod captures;
mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::ApiJson;
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

pub use captures::{purge_expired, record_captures};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_config, put_config))
}

/// The notice every answer carries.
pub const LEGAL_BASIS_NOTICE: &str = "Captured payloads may contain personal data. The \
    tenant, as controller, must have a lawful basis under GDPR Art. 6 (and Art. 9 for \
    special categories) for the processing purpose it states, must inform the people \
    concerned, and answers their requests itself: Warden offers no self-service access to \
    captured records.";

/// The longest retention any plan allows.
pub const MAXIMUM_RETENTION_DAYS: i64 = 30;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedactionRule {
    pub id: Text<1, 100>,
    /// Dot-separated field names (letters, digits, `_`, `-`), e.g. `messages.content`;
    /// at most 500 characters.
    #[schema(max_length = 500, pattern = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")]
    pub field_path: String,
    /// A regular expression of at most 500 characters; omitted: the whole field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 500)]
    pub pattern: Option<String>,
}

/// A captured request body, as a proxy sends it on the request's usage record.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordCapture {
    /// The configuration version whose rules redacted it.
    pub config_version: i64,
    /// The size of the body the agent sent, in bytes.
    pub bytes: i64,
    /// How many values the redaction rules changed.
    #[serde(default)]
    pub redactions: i64,
    /// The redacted body; absent when omitted.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub body: Option<Box<serde_json::value::RawValue>>,
    /// Why the body is absent: `too_large`, `buffer_full` or `unreadable`.
    #[serde(default)]
    pub omitted: Option<Text<1, 32>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureInput {
    pub enabled: bool,
    /// 1 to 30, and not above the plan's telemetry retention.
    #[schema(minimum = 1, maximum = 30)]
    pub retention_days: i64,
    pub processing_purpose: Text<10, 500>,
    #[serde(default, deserialize_with = "crate::api::extract::objects")]
    pub redaction_rules: Vec<RedactionRule>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CaptureConfig {
    pub enabled: bool,
    /// False until the tenant first configures capture.
    pub configured: bool,
    pub retention_days: Option<i64>,
    pub processing_purpose: Option<String>,
    pub redaction_rules: Vec<RedactionRule>,
    pub config_version: i64,
    pub updated_by: Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub created_at: Option<Timestamp>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub updated_at: Option<Timestamp>,
    pub maximum_retention_days: i64,
    pub legal_basis_notice: &'static str,
}

#[utoipa::path(get, path = "/payload-capture/config", tag = "payload",
    security(("bearer" = ["payload:read"])),
    responses((status = 200, description = "The configuration; an unconfigured tenant's has `configured` false", body = Envelope<CaptureConfig>)))]
async fn get_config(
    caller: Authorized<require::PayloadRead>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    Ok(envelope::ok(service::get(&state, &caller).await?))
}

#[utoipa::path(put, path = "/payload-capture/config", tag = "payload", request_body = CaptureInput,
    security(("bearer" = ["payload:write"])),
    responses((status = 200, description = "The whole configuration, its version incremented", body = Envelope<CaptureConfig>)))]
async fn put_config(
    caller: Authorized<require::PayloadWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CaptureInput>,
) -> ApiResult<Response> {
    Ok(envelope::ok(service::put(&state, &caller, input).await?))
}
