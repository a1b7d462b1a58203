//! The bodies of `POST` and `PATCH /notifications/channels` and their rules.

use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult};
use crate::notifications::channel::ChannelType;
use crate::notifications::events;
use crate::validate::Text;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "name": "security on-call", "channel_type": "webhook",
    "events": ["agent.blocked", "anomaly.detected"],
    "config": { "url": "https://hooks.example.com/warden" }
}))]
pub struct CreateChannelInput {
    pub name: Text<1, 100>,
    pub channel_type: ChannelType,
    /// Per type: `slack` {`webhook_url`}; `pagerduty` {`routing_key`, `events_url`
    /// (optional, default PagerDuty's US endpoint)}; `webhook` {`url`}; `email` {`to`
    /// (1 to 20 addresses), `from`, `smtp_host`, `smtp_port` (optional), `security`
    /// (`starttls` default, `tls` or `none`), `username` and `password` (optional,
    /// together)}.
    #[schema(value_type = Object)]
    pub config: Value,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// One or more event names (see the README's list), e.g. `agent.blocked`.
    #[schema(schema_with = crate::api::openapi_enums::event_names)]
    pub events: Vec<String>,
}

/// Any of `name`, `config`, `enabled`, `events`; `channel_type` cannot change.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateChannelInput {
    #[serde(default)]
    pub name: Option<Text<1, 100>>,
    /// The config keys to change; null removes an optional key.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub config: Option<Map<String, Value>>,
    #[serde(default)]
    pub enabled: Option<bool>,
    /// One or more event names; `null` leaves them as they are.
    #[serde(default)]
    #[schema(schema_with = crate::api::openapi_enums::optional_event_names)]
    pub events: Option<Vec<String>>,
    /// Refused: a channel's type is fixed at creation.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub channel_type: Option<Value>,
}

/// Checks `events` against the catalogue; returns them deduplicated in the catalogue's
/// order.
pub fn checked_events(names: &[String]) -> ApiResult<Vec<String>> {
    if names.is_empty() {
        return Err(ApiError::validation(
            "events",
            "events: at least one event name",
        ));
    }
    for (index, name) in names.iter().enumerate() {
        if events::named(name).is_none() {
            let known: Vec<&str> = events::EVENTS.iter().map(|kind| kind.name).collect();
            return Err(ApiError::validation(
                format!("events[{index}]"),
                format!(
                    "events[{index}]: `{name}` is not an event; one of {}",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(events::EVENTS
        .iter()
        .filter(|kind| names.iter().any(|name| name == kind.name))
        .map(|kind| kind.name.to_owned())
        .collect())
}
