//! PagerDuty Events API v2: an event that opens a condition triggers an alert, the event
//! that ends it resolves the same alert through their shared `dedup_key`
//! (`warden/<tenant>/<opening event>/<target id>`).

use serde_json::{json, Value};

use super::{posted, Message, Outcome, Sender};
use crate::notifications::channel::{PagerdutyConfig, PAGERDUTY_EVENTS_URL};
use crate::notifications::events;
use crate::outbound::http::post_json;

pub async fn send(
    sender: &Sender,
    tenant_id: &str,
    config: &PagerdutyConfig,
    message: &Message<'_>,
) -> Result<Outcome, Outcome> {
    let url = config.events_url.as_deref().unwrap_or(PAGERDUTY_EVENTS_URL);
    let body = event(tenant_id, &config.routing_key, message)
        .to_string()
        .into_bytes();
    posted(post_json(&sender.guard, url, &[], body, sender.timeout).await)
}

/// The Events API v2 body for `message`.
pub fn event(tenant_id: &str, routing_key: &str, message: &Message<'_>) -> Value {
    let kind = events::named(message.event_type());
    let opening = kind
        .and_then(|kind| kind.resolves)
        .unwrap_or(message.event_type());
    let dedup_key = format!("warden/{tenant_id}/{opening}/{}", message.data("target_id"));
    if kind.is_some_and(|kind| kind.resolves.is_some()) {
        return json!({
            "routing_key": routing_key,
            "event_action": "resolve",
            "dedup_key": dedup_key,
        });
    }
    let summary: String = message.summary().chars().take(1_024).collect();
    json!({
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "payload": {
            "summary": summary,
            "source": "warden",
            // PagerDuty's severities are ours by the same names.
            "severity": message.severity().as_str(),
            "timestamp": message.payload["timestamp"],
            "component": message.data("target_type"),
            "group": tenant_id,
            "class": message.event_type(),
            "custom_details": message.payload["data"],
        },
    })
}
