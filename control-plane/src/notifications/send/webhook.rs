//! Generic webhooks signed per the Standard Webhooks specification, so receivers verify
//! them with an existing library: `webhook-id` (the delivery id, the same on every retry),
//! `webhook-timestamp` (seconds, the attempt's wall-clock time) and `webhook-signature`
//! (`v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` keyed with the secret's
//! bytes).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use super::{posted, Message, Outcome, Sender};
use crate::notifications::channel::WebhookConfig;
use crate::outbound::http::post_json;
use warden_shared::clock::Clock;

const SECRET_PREFIX: &str = "whsec_";

/// A new signing secret: `whsec_` and 32 random bytes in base64.
pub fn new_signing_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
}

/// The `webhook-signature` value for a message.
pub fn sign(secret: &str, id: &str, timestamp_secs: i64, body: &str) -> Option<String> {
    let key = STANDARD
        .decode(secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret))
        .ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(format!("{id}.{timestamp_secs}.").as_bytes());
    mac.update(body.as_bytes());
    Some(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

pub async fn send(
    sender: &Sender,
    config: &WebhookConfig,
    secret: Option<&str>,
    message: &Message<'_>,
) -> Result<Outcome, Outcome> {
    // Receivers refuse timestamps far from their own clock (five minutes in the
    // reference libraries): this is the attempt's real time, whatever the event's.
    let timestamp = Clock::system().now().as_millis() / 1000;
    let signature = secret
        .and_then(|secret| sign(secret, message.id, timestamp, message.body))
        .ok_or_else(|| Outcome {
            status: None,
            message: "the channel has no valid signing secret".to_owned(),
        })?;
    let headers = [
        ("webhook-id", message.id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", signature),
    ];
    let body = message.body.as_bytes().to_vec();
    posted(post_json(&sender.guard, &config.url, &headers, body, sender.timeout).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_the_specifications_example() {
        // The example of the Standard Webhooks specification's reference libraries.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let signature = sign(
            secret,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(
            signature.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
    }

    #[test]
    fn new_secrets_are_whsec_and_32_bytes() {
        let secret = new_signing_secret();
        let bytes = STANDARD
            .decode(secret.strip_prefix("whsec_").unwrap())
            .unwrap();
        assert_eq!(bytes.len(), 32);
    }
}
