//! Billing (spec 2.20, 3.5, 4.10, 6.1): the tenant's plan and period, checkout, the free
//! slot (all `admin`), and the payment provider's signed webhook (no API key).
//!
//! Plans and their features are `crate::plans`. Periods are calendar months (UTC). An
//! upgrade (`POST /billing/checkout` to a higher plan) answers a checkout URL and the
//! price difference for the rest of the period (`period.rs`); the plan changes when the
//! provider's `checkout.completed` event arrives. A downgrade waits for the end of the
//! period (a background round applies it) and is refused (409
//! `too_many_agents_for_plan`) while more agents are active than the lower plan allows.
//! `enterprise_plus` is sold by contract, not through checkout. The webhook is
//! documented in `webhook.rs`.

mod period;
pub(crate) mod service;
mod store;
mod webhook;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::{ApiJson, JsonBytes};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::plans::Features;
use crate::state::AppState;

pub use service::{apply_due_plan_changes, not_recorded, recorded_agent};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_billing))
        .routes(routes!(set_free_slot))
        .routes(routes!(checkout))
        .routes(routes!(payment_webhook))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Billing {
    pub plan: String,
    pub active_agents: i64,
    pub agent_limit: i64,
    #[schema(value_type = String, format = DateTime)]
    pub billing_period_start: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub billing_period_end: Timestamp,
    /// The plan's list price, a plain decimal.
    #[serde(serialize_with = "crate::api::money::plain")]
    pub monthly_cost_usd: f64,
    pub features: Features,
    /// `{type, last_four, expiry}` as the provider reported it, or null.
    #[schema(value_type = Option<Object>)]
    pub payment_method: Value,
    /// `current`, `past_due` (a payment failed; the plan stays) or `canceled`.
    pub payment_status: String,
    /// A change waiting for the end of the period: `{plan, effective_date}`, or null.
    #[schema(value_type = Option<Object>)]
    pub pending_change: Value,
    /// On the free plan, the one agent whose telemetry is recorded.
    pub free_agent_id: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FreeSlotInput {
    pub agent_id: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FreeSlot {
    pub free_agent_id: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckoutInput {
    /// `starter`, `professional` or `enterprise`.
    #[schema(pattern = "^(starter|professional|enterprise)$")]
    pub plan: String,
}

/// An upgrade (`checkout_url` to pay at) or a downgrade (`effective_date`, `message`).
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckoutOutcome {
    /// `upgrade` or `downgrade`.
    pub action: &'static str,
    pub from_plan: String,
    pub to_plan: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prorated_amount_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkout_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub effective_date: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[utoipa::path(get, path = "/billing", tag = "billing", security(("bearer" = ["admin"])),
    responses((status = 200, description = "Plan, period, agents, features, payment method", body = Envelope<Billing>)))]
async fn get_billing(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    Ok(envelope::ok(service::billing(&state, &caller).await?))
}

#[utoipa::path(patch, path = "/billing/free-slot", tag = "billing", request_body = FreeSlotInput,
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "The agent now recorded", body = Envelope<FreeSlot>),
        (status = 409, description = "Not on the free plan (`not_on_free_plan`)")))]
async fn set_free_slot(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<FreeSlotInput>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::set_free_slot(&state, &caller, &input.agent_id).await?,
    ))
}

#[utoipa::path(post, path = "/billing/checkout", tag = "billing", request_body = CheckoutInput,
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "An upgrade to pay for, or a downgrade scheduled", body = Envelope<CheckoutOutcome>),
        (status = 409, description = "Already on the plan (`plan_unchanged`), or too many active agents for it (`too_many_agents_for_plan`)")))]
async fn checkout(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CheckoutInput>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::checkout(&state, &caller, &input.plan).await?,
    ))
}

#[utoipa::path(post, path = "/billing/webhook", tag = "billing",
    request_body(content = Object, description = "`{id?, event, tenant_id, plan, amount_usd, timestamp, payment_method?}`, signed in `Warden-Signature`"),
    responses((status = 200, description = "Applied, or a replay of an event applied before"),
        (status = 401, description = "Bad or stale signature (`invalid_signature`)")))]
async fn payment_webhook(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBytes(body): JsonBytes,
) -> ApiResult<Response> {
    webhook::receive(&state, &headers, &body).await?;
    Ok(envelope::ok(serde_json::json!({ "received": true })))
}
