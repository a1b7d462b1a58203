//! The rules of notification channels: config per type, the guard on every host a
//! channel calls, the limit per tenant, audited writes, and the test send.

use serde_json::json;
use warden_shared::ids::{is_valid_id, new_id, IdKind};
use warden_shared::timestamp::Timestamp;

use super::input::checked_events;
use super::store::{self, ChannelRow};
use super::{CreateChannelInput, Delivery, NotificationChannel, TestResult, UpdateChannelInput};
use crate::api::envelope::Page;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, Proxies};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::notifications::channel::{
    masked, merged, url_not_allowed, ChannelConfig, ChannelType, Target,
};
use crate::notifications::events::TEST_EVENT;
use crate::notifications::send::{new_signing_secret, Channel, Message};
use crate::outbound::Refusal;
use crate::state::AppState;

/// Channels one tenant may have.
pub const MAX_CHANNELS: i64 = 50;

pub async fn create_channel(
    state: &AppState,
    caller: &Caller,
    input: CreateChannelInput,
) -> ApiResult<NotificationChannel> {
    let config = ChannelConfig::parse(input.channel_type, &input.config)?;
    let events = checked_events(&input.events)?;
    // Resolved before the write transaction: DNS can be slow.
    guard_targets(state, &config).await?;
    let now = state.clock.now();
    let row = ChannelRow {
        id: new_id(IdKind::NotificationChannel, now.as_millis()),
        name: input.name.into_inner(),
        channel_type: input.channel_type,
        config: config.to_value(),
        signing_secret: (input.channel_type == ChannelType::Webhook).then(new_signing_secret),
        enabled: input.enabled.unwrap_or(true),
        events,
        created_at: now,
        updated_at: now,
    };
    let mut tx = state.db.begin_write().await?;
    if store::count(&mut *tx, &caller.tenant_id).await? >= MAX_CHANNELS {
        return Err(ApiError::new(
            ErrorCode::ChannelLimitReached,
            format!("a tenant has at most {MAX_CHANNELS} notification channels"),
        ));
    }
    store::insert(&mut tx, &caller.tenant_id, &row).await?;
    record(&mut tx, caller, &row, "notification_channel.created", now).await?;
    tx.commit().await?;
    let mut shown = shown(&row);
    shown.signing_secret = row.signing_secret.clone();
    Ok(shown)
}

pub async fn list_channels(
    state: &AppState,
    caller: &Caller,
    page: Page,
) -> ApiResult<(Vec<NotificationChannel>, i64)> {
    let rows = store::list(state.db.pool(), &caller.tenant_id, page).await?;
    let total = store::count(state.db.pool(), &caller.tenant_id).await?;
    Ok((rows.iter().map(shown).collect(), total))
}

pub async fn get_channel(
    state: &AppState,
    caller: &Caller,
    channel_id: &str,
) -> ApiResult<NotificationChannel> {
    Ok(shown(&find(state, caller, channel_id).await?))
}

pub async fn update_channel(
    state: &AppState,
    caller: &Caller,
    channel_id: &str,
    input: UpdateChannelInput,
) -> ApiResult<NotificationChannel> {
    if input.channel_type.is_some() {
        return Err(ApiError::validation(
            "channel_type",
            "channel_type: a channel's type cannot change; create a new channel",
        ));
    }
    let events = input.events.as_deref().map(checked_events).transpose()?;
    let current = find(state, caller, channel_id).await?;
    let mut next = current.clone();
    if let Some(patch) = &input.config {
        let config = ChannelConfig::parse(
            current.channel_type,
            &merged(current.channel_type, &current.config, patch),
        )?;
        guard_targets(state, &config).await?;
        next.config = config.to_value();
    }
    if let Some(name) = input.name {
        next.name = name.into_inner();
    }
    if let Some(enabled) = input.enabled {
        next.enabled = enabled;
    }
    if let Some(events) = events {
        next.events = events;
    }
    next.updated_at = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    // Read again under the write lock: a concurrent delete wins, and is a 404 here.
    if store::get(&mut *tx, &caller.tenant_id, channel_id)
        .await?
        .is_none()
    {
        return Err(ApiError::not_found("notification_channel"));
    }
    store::update(&mut tx, &caller.tenant_id, &next).await?;
    record(
        &mut tx,
        caller,
        &next,
        "notification_channel.updated",
        next.updated_at,
    )
    .await?;
    tx.commit().await?;
    Ok(shown(&next))
}

pub async fn delete_channel(state: &AppState, caller: &Caller, channel_id: &str) -> ApiResult<()> {
    if !is_valid_id(IdKind::NotificationChannel, channel_id) {
        return Err(ApiError::not_found("notification_channel"));
    }
    let mut tx = state.db.begin_write().await?;
    let Some(row) = store::get(&mut *tx, &caller.tenant_id, channel_id).await? else {
        return Err(ApiError::not_found("notification_channel"));
    };
    store::delete(&mut tx, &caller.tenant_id, channel_id).await?;
    record(
        &mut tx,
        caller,
        &row,
        "notification_channel.deleted",
        state.clock.now(),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Sends a `notification.test` message now, through the same sender and guard as
/// deliveries; the outcome is the answer, not an HTTP error.
pub async fn test_channel(
    state: &AppState,
    caller: &Caller,
    channel_id: &str,
) -> ApiResult<TestResult> {
    let row = find(state, caller, channel_id).await?;
    let config = ChannelConfig::parse(row.channel_type, &row.config)?;
    let now = state.clock.now();
    let id = new_id(IdKind::NotificationDelivery, now.as_millis());
    let payload = json!({
        "type": TEST_EVENT,
        "timestamp": now,
        "data": {
            "tenant_id": caller.tenant_id,
            "actor": caller.actor,
            "target_type": "notification_channel",
            "target_id": row.id,
            "severity": "info",
            "summary": format!("Test notification from Warden for channel `{}`", row.name),
            "details": {},
        }
    });
    let body = payload.to_string();
    let channel = Channel {
        id: row.id.clone(),
        tenant_id: caller.tenant_id.clone(),
        config,
        signing_secret: row.signing_secret.clone(),
    };
    let message = Message {
        id: &id,
        body: &body,
        payload: &payload,
    };
    let (success, outcome) = match state.notification_sender.send(&channel, &message).await {
        Ok(outcome) => (true, outcome),
        Err(outcome) => (false, outcome),
    };
    Ok(TestResult {
        success,
        message: outcome.message,
    })
}

pub async fn list_deliveries(
    state: &AppState,
    caller: &Caller,
    channel_id: &str,
    page: Page,
) -> ApiResult<(Vec<Delivery>, i64)> {
    find(state, caller, channel_id).await?;
    Ok(store::deliveries(state.db.pool(), &caller.tenant_id, channel_id, page).await?)
}

async fn find(state: &AppState, caller: &Caller, channel_id: &str) -> ApiResult<ChannelRow> {
    if !is_valid_id(IdKind::NotificationChannel, channel_id) {
        return Err(ApiError::not_found("notification_channel"));
    }
    store::get(state.db.pool(), &caller.tenant_id, channel_id)
        .await?
        .ok_or_else(|| ApiError::not_found("notification_channel"))
}

/// Checks every URL and host the channel calls with the outbound guard. A name that does
/// not resolve now is accepted: it cannot lead inward today, and a DNS blip or a private
/// resolver must not block setup. Each send resolves and checks again (the real
/// defence), and reports a name that still does not resolve as its failure.
async fn guard_targets(state: &AppState, config: &ChannelConfig) -> ApiResult<()> {
    let guard = &state.notification_sender.guard;
    for target in config.targets() {
        let (field, result) = match target {
            Target::Url(field, url) => (field, guard.check_url(url).await.map(|_| ())),
            Target::Host(field, host, port) => {
                (field, guard.check_host(host, port).await.map(|_| ()))
            }
        };
        match result {
            Ok(()) | Err(Refusal::Unresolvable { .. }) => {}
            Err(refusal) => return Err(url_not_allowed(field, &refusal)),
        }
    }
    Ok(())
}

async fn record(
    tx: &mut crate::db::WriteTx,
    caller: &Caller,
    row: &ChannelRow,
    event_type: &str,
    at: Timestamp,
) -> Result<(), sqlx::Error> {
    changes::record(
        tx,
        caller.author(),
        at,
        AuditEvent {
            event_type,
            target_type: "notification_channel",
            target_id: &row.id,
            // Names and subscriptions only: never the config, whose values may be secret.
            details: json!({
                "name": row.name,
                "channel_type": row.channel_type.as_str(),
                "enabled": row.enabled,
                "events": row.events,
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    Ok(())
}

fn shown(row: &ChannelRow) -> NotificationChannel {
    NotificationChannel {
        id: row.id.clone(),
        name: row.name.clone(),
        channel_type: row.channel_type,
        config: masked(row.channel_type, &row.config),
        enabled: row.enabled,
        events: row.events.clone(),
        signing_secret: None,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }
}
