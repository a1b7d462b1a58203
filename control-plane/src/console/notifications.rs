//! Notification channels: each with its events, masked settings and latest deliveries,
//! and a test button that sends a test message now and shows how it went (in place with
//! htmx; as the page again without script).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::de::IgnoredAny;

use super::form::Posted;
use super::page::{self, Layout, PageError};
use super::session::Signed;
use crate::api::envelope::Page;
use crate::api::notification_channels::service as channels;
use crate::api::notification_channels::{Delivery, NotificationChannel, TestResult};
use crate::auth::require;
use crate::state::AppState;

/// Channels the page lists (the API's largest page).
const LISTED: i64 = 100;
/// Latest deliveries shown per channel.
const DELIVERIES: i64 = 5;

#[derive(Template)]
#[template(path = "notifications.html")]
struct NotificationsPage {
    layout: Layout,
    channels: Vec<Listed>,
    total: i64,
}

struct Listed {
    channel: NotificationChannel,
    settings: String,
    deliveries: Vec<Delivery>,
    /// The outcome of a test just sent to it (without script).
    tested: Option<TestResult>,
}

/// A test's outcome, swapped into the channel's row.
#[derive(Template)]
#[template(path = "notification_test.html")]
struct Tested {
    result: TestResult,
}

async fn render(
    state: &AppState,
    signed: &Signed<require::Admin>,
    tested: Option<(String, TestResult)>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let (found, total) = channels::list_channels(
        state,
        caller,
        Page {
            page: 1,
            limit: LISTED,
        },
    )
    .await?;
    let mut tested = tested;
    let mut listed = Vec::with_capacity(found.len());
    for channel in found {
        let recent = Page {
            page: 1,
            limit: DELIVERIES,
        };
        let (deliveries, _) = channels::list_deliveries(state, caller, &channel.id, recent).await?;
        let result = match &tested {
            Some((id, _)) if *id == channel.id => tested.take().map(|(_, result)| result),
            _ => None,
        };
        listed.push(Listed {
            settings: serde_json::to_string_pretty(&channel.config).unwrap_or_default(),
            channel,
            deliveries,
            tested: result,
        });
    }
    let page = NotificationsPage {
        layout: signed.layout(state, "notifications").await?,
        channels: listed,
        total,
    };
    Ok(page::render(&page))
}

/// `GET /console/notifications`.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::Admin>,
) -> Result<Response, PageError> {
    render(&state, &signed, None).await
}

/// `POST /console/notifications/{id}/test`.
pub async fn test(
    State(state): State<AppState>,
    signed: Signed<require::Admin>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Posted(_): Posted<IgnoredAny>,
) -> Result<Response, PageError> {
    let result = channels::test_channel(&state, &signed.caller, &id).await?;
    if headers.contains_key("hx-request") {
        return Ok(page::render(&Tested { result }));
    }
    render(&state, &signed, Some((id, result))).await
}
