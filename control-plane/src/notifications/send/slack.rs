//! Slack incoming webhooks: a Block Kit message (header, summary with fields, context)
//! with `text` as the fallback notifications and old clients show.

use serde_json::{json, Value};

use super::{posted, Message, Outcome, Sender};
use crate::notifications::channel::SlackConfig;
use crate::outbound::http::post_json;

pub async fn send(
    sender: &Sender,
    config: &SlackConfig,
    message: &Message<'_>,
) -> Result<Outcome, Outcome> {
    let body = blocks(message).to_string().into_bytes();
    posted(
        post_json(
            &sender.guard,
            &config.webhook_url,
            &[],
            body,
            sender.timeout,
        )
        .await,
    )
}

/// The message as Block Kit; Slack limits a header to 150 characters and a text object
/// to 3,000.
pub fn blocks(message: &Message<'_>) -> Value {
    let summary = escape(message.summary());
    let target = format!(
        "{} `{}`",
        message.data("target_type"),
        message.data("target_id")
    );
    json!({
        "text": clip(message.summary(), 3_000),
        "blocks": [
            {
                "type": "header",
                "text": { "type": "plain_text", "text": clip(message.title(), 150), "emoji": false }
            },
            {
                "type": "section",
                "text": { "type": "mrkdwn", "text": clip(&summary, 3_000) },
                "fields": [
                    { "type": "mrkdwn", "text": format!("*Severity*\n{}", message.severity().as_str()) },
                    { "type": "mrkdwn", "text": clip(&format!("*Target*\n{}", escape(&target)), 2_000) }
                ]
            },
            {
                "type": "context",
                "elements": [{
                    "type": "mrkdwn",
                    "text": clip(&escape(&format!(
                        "Warden · {} · tenant {} · {}",
                        message.event_type(),
                        message.data("tenant_id"),
                        message.id
                    )), 3_000)
                }]
            }
        ]
    })
}

/// Slack's mrkdwn reserves `&`, `<` and `>`.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn clip(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut clipped: String = text.chars().take(max_chars - 1).collect();
    clipped.push('…');
    clipped
}
