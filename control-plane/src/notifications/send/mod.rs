//! Sending one message to one channel, in the channel type's own format: Slack's Block
//! Kit, PagerDuty's Events API v2, Standard Webhooks, email. Every connection goes through
//! the outbound guard, at every send, not only when the channel was created.

mod email;
mod pagerduty;
mod slack;
mod webhook;

use std::time::Duration;

use serde_json::Value;

use super::channel::ChannelConfig;
use super::events::{self, Severity};
use crate::outbound::http::PostError;
use crate::outbound::Guard;

pub use webhook::{new_signing_secret, sign};

/// A channel as the senders need it.
#[derive(Debug, Clone)]
pub struct Channel {
    pub id: String,
    pub tenant_id: String,
    pub config: ChannelConfig,
    /// A webhook channel's `whsec_` secret.
    pub signing_secret: Option<String>,
}

/// One message to send: a delivery of the outbox or a test message.
#[derive(Debug)]
pub struct Message<'a> {
    /// The delivery id; receivers deduplicate on it.
    pub id: &'a str,
    /// The payload `{type, timestamp, data}` (see `outbox::payload_of`) as sent to
    /// webhooks, byte for byte what is signed.
    pub body: &'a str,
    pub payload: &'a Value,
}

impl Message<'_> {
    fn event_type(&self) -> &str {
        self.payload["type"].as_str().unwrap_or("")
    }

    fn data(&self, key: &str) -> &str {
        self.payload["data"][key].as_str().unwrap_or("")
    }

    fn summary(&self) -> &str {
        self.data("summary")
    }

    fn title(&self) -> &'static str {
        events::named(self.event_type()).map_or("Test notification from Warden", |kind| kind.title)
    }

    fn severity(&self) -> Severity {
        events::named(self.event_type()).map_or(Severity::Info, |kind| kind.severity)
    }
}

/// How an attempt went: the receiver's status when it answered.
#[derive(Debug)]
pub struct Outcome {
    pub status: Option<u16>,
    pub message: String,
}

/// Sends with the guard and a time limit per attempt.
#[derive(Debug, Clone)]
pub struct Sender {
    pub guard: Guard,
    pub timeout: Duration,
    /// PEM of extra certificate authorities trusted for SMTP servers.
    pub smtp_roots: Option<std::sync::Arc<[u8]>>,
}

impl Sender {
    /// A sender; `smtp_roots` must hold PEM certificates (checked here, at start).
    pub fn new(
        guard: Guard,
        timeout: Duration,
        smtp_roots: Option<Vec<u8>>,
    ) -> Result<Sender, String> {
        if let Some(pem) = &smtp_roots {
            email::roots(pem)?;
        }
        Ok(Sender {
            guard,
            timeout,
            smtp_roots: smtp_roots.map(std::sync::Arc::from),
        })
    }
}

impl Sender {
    /// Sends `message` to `channel`: `Ok` when the receiver accepted it.
    pub async fn send(&self, channel: &Channel, message: &Message<'_>) -> Result<Outcome, Outcome> {
        match &channel.config {
            ChannelConfig::Slack(config) => slack::send(self, config, message).await,
            ChannelConfig::Pagerduty(config) => {
                pagerduty::send(self, &channel.tenant_id, config, message).await
            }
            ChannelConfig::Webhook(config) => {
                webhook::send(self, config, channel.signing_secret.as_deref(), message).await
            }
            ChannelConfig::Email(config) => email::send(self, config, message).await,
        }
    }
}

/// The outcome of a guarded POST.
fn posted(result: Result<crate::outbound::http::Answer, PostError>) -> Result<Outcome, Outcome> {
    match result {
        Ok(answer) => Ok(Outcome {
            status: Some(answer.status),
            message: format!("delivered: the receiver answered {}", answer.status),
        }),
        Err(error) => Err(Outcome {
            status: error.status(),
            message: error.to_string(),
        }),
    }
}
