//! Notification channels (spec 2.19, 4.13, 6.3): where a tenant's events are delivered
//! (Slack, PagerDuty, signed webhooks, email), with a test send and each channel's
//! delivery history. All routes need `admin`.
//!
//! `channel_type` is fixed at creation. Sensitive config values (routing keys, webhook
//! URLs, passwords) are masked in every response; a webhook channel's signing secret is
//! shown once, at creation. Every URL and SMTP host is checked against the outbound guard
//! when written (422 `url_not_allowed`) and again at every send. PATCH `config` changes
//! the keys it names (null removes an optional key; a masked value sent back unchanged
//! keeps the secret). A tenant has at most 50 channels.

mod input;
pub(crate) mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::notifications::channel::ChannelType;
use crate::state::AppState;

pub use input::{CreateChannelInput, UpdateChannelInput};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_channels, create_channel))
        .routes(routes!(get_channel, update_channel, delete_channel))
        .routes(routes!(test_channel))
        .routes(routes!(list_deliveries))
}

/// A channel as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationChannel {
    pub id: String,
    pub name: String,
    pub channel_type: ChannelType,
    /// The channel's settings with sensitive values masked.
    #[schema(value_type = Object)]
    pub config: Value,
    pub enabled: bool,
    /// The events delivered to it (and the events that resolve them).
    pub events: Vec<String>,
    /// A webhook channel's `whsec_` signing secret, in the creation response only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

/// The result of a test send; a failed delivery is not an HTTP error.
#[derive(Debug, Serialize, ToSchema)]
pub struct TestResult {
    pub success: bool,
    pub message: String,
}

/// One event's delivery to the channel.
#[derive(Debug, Serialize, ToSchema)]
pub struct Delivery {
    /// The message id receivers deduplicate on (`webhook-id`).
    pub id: String,
    pub event_type: String,
    /// `pending` (waiting or retrying), `delivered` or `dead`.
    pub status: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When a pending delivery is tried next.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_attempt_at: Option<Timestamp>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<Timestamp>,
}

#[utoipa::path(get, path = "/notifications/channels", tag = "notifications", params(PageQuery),
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "The tenant's channels, newest first, sensitive config masked", body = Paged<NotificationChannel>)))]
async fn list_channels(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page = query.try_into()?;
    let (channels, total) = service::list_channels(&state, &caller, page).await?;
    Ok(envelope::paged(channels, page, total))
}

#[utoipa::path(post, path = "/notifications/channels", tag = "notifications",
    request_body = CreateChannelInput, security(("bearer" = ["admin"])),
    responses((status = 201, description = "The channel; a webhook channel's `signing_secret` is shown this once", body = Envelope<NotificationChannel>),
        (status = 409, description = "The tenant has 50 channels (`channel_limit_reached`)")))]
async fn create_channel(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateChannelInput>,
) -> ApiResult<Response> {
    let channel = service::create_channel(&state, &caller, input).await?;
    Ok(envelope::created(channel))
}

#[utoipa::path(get, path = "/notifications/channels/{channel_id}", tag = "notifications",
    params(("channel_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 200, description = "The channel, sensitive config masked", body = Envelope<NotificationChannel>)))]
async fn get_channel(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(channel_id): ApiPath<String>,
) -> ApiResult<Response> {
    let channel = service::get_channel(&state, &caller, &channel_id).await?;
    Ok(envelope::ok(channel))
}

#[utoipa::path(patch, path = "/notifications/channels/{channel_id}", tag = "notifications",
    params(("channel_id" = String, Path)), request_body = UpdateChannelInput,
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "The updated channel", body = Envelope<NotificationChannel>)))]
async fn update_channel(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(channel_id): ApiPath<String>,
    ApiJson(input): ApiJson<UpdateChannelInput>,
) -> ApiResult<Response> {
    let channel = service::update_channel(&state, &caller, &channel_id, input).await?;
    Ok(envelope::ok(channel))
}

#[utoipa::path(delete, path = "/notifications/channels/{channel_id}", tag = "notifications",
    params(("channel_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 204, description = "Deleted, with its deliveries and their history")))]
async fn delete_channel(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(channel_id): ApiPath<String>,
) -> ApiResult<Response> {
    service::delete_channel(&state, &caller, &channel_id).await?;
    Ok(envelope::no_content())
}

#[utoipa::path(post, path = "/notifications/channels/{channel_id}/test", tag = "notifications",
    params(("channel_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 200, description = "Whether a test message was delivered now, and why not", body = TestResult)))]
async fn test_channel(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(channel_id): ApiPath<String>,
) -> ApiResult<Response> {
    let result = service::test_channel(&state, &caller, &channel_id).await?;
    Ok(axum::response::IntoResponse::into_response(axum::Json(
        result,
    )))
}

#[utoipa::path(get, path = "/notifications/channels/{channel_id}/deliveries", tag = "notifications",
    params(("channel_id" = String, Path), PageQuery), security(("bearer" = ["admin"])),
    responses((status = 200, description = "The channel's deliveries, newest first", body = Paged<Delivery>)))]
async fn list_deliveries(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(channel_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page = query.try_into()?;
    let (deliveries, total) = service::list_deliveries(&state, &caller, &channel_id, page).await?;
    Ok(envelope::paged(deliveries, page, total))
}
