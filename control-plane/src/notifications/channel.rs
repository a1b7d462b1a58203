//! A channel's type and its typed settings: what each type needs, the rules each value
//! follows, and which values are sensitive (masked in every response).

use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::validate::Email;

/// PagerDuty's Events API v2 endpoint, used when a channel names none.
pub const PAGERDUTY_EVENTS_URL: &str = "https://events.pagerduty.com/v2/enqueue";

const MAX_URL_CHARS: usize = 2_000;
const MAX_RECIPIENTS: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChannelType {
    Pagerduty,
    Slack,
    Webhook,
    Email,
}

impl ChannelType {
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelType::Pagerduty => "pagerduty",
            ChannelType::Slack => "slack",
            ChannelType::Webhook => "webhook",
            ChannelType::Email => "email",
        }
    }

    /// The config keys whose values are secrets or capability URLs.
    fn sensitive_keys(self) -> &'static [&'static str] {
        match self {
            ChannelType::Pagerduty => &["routing_key"],
            ChannelType::Slack => &["webhook_url"],
            ChannelType::Webhook => &["url"],
            ChannelType::Email => &["password"],
        }
    }
}

impl FromStr for ChannelType {
    type Err = ();

    fn from_str(text: &str) -> Result<Self, ()> {
        match text {
            "pagerduty" => Ok(ChannelType::Pagerduty),
            "slack" => Ok(ChannelType::Slack),
            "webhook" => Ok(ChannelType::Webhook),
            "email" => Ok(ChannelType::Email),
            _ => Err(()),
        }
    }
}

/// A Slack incoming webhook.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackConfig {
    pub webhook_url: String,
}

/// A PagerDuty service's Events API v2 integration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagerdutyConfig {
    pub routing_key: String,
    /// Default [`PAGERDUTY_EVENTS_URL`]; e.g. PagerDuty's EU endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_url: Option<String>,
}

/// A generic webhook, signed per the Standard Webhooks specification.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub url: String,
}

/// How an email channel secures its SMTP connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SmtpSecurity {
    /// Plain connection upgraded with STARTTLS, which the server must offer (port 587).
    #[default]
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
    /// No encryption (port 25): for a relay on a trusted network only.
    None,
}

/// Email through an SMTP server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailConfig {
    pub to: Vec<String>,
    pub from: String,
    pub smtp_host: String,
    /// Default: 587 for `starttls`, 465 for `tls`, 25 for `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smtp_port: Option<u16>,
    #[serde(default)]
    pub security: SmtpSecurity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

impl EmailConfig {
    pub fn port(&self) -> u16 {
        self.smtp_port.unwrap_or(match self.security {
            SmtpSecurity::Starttls => 587,
            SmtpSecurity::Tls => 465,
            SmtpSecurity::None => 25,
        })
    }
}

/// A channel's settings, checked for form (the hosts are checked by the guard apart).
#[derive(Debug, Clone)]
pub enum ChannelConfig {
    Pagerduty(PagerdutyConfig),
    Slack(SlackConfig),
    Webhook(WebhookConfig),
    Email(EmailConfig),
}

impl ChannelConfig {
    /// Reads and checks `config` as the settings of a `channel_type` channel.
    pub fn parse(channel_type: ChannelType, config: &Value) -> ApiResult<ChannelConfig> {
        if !config.is_object() {
            return Err(ApiError::validation("config", "config: must be an object"));
        }
        let parsed = match channel_type {
            ChannelType::Pagerduty => ChannelConfig::Pagerduty(read(config)?),
            ChannelType::Slack => ChannelConfig::Slack(read(config)?),
            ChannelType::Webhook => ChannelConfig::Webhook(read(config)?),
            ChannelType::Email => ChannelConfig::Email(read(config)?),
        };
        parsed.check()?;
        Ok(parsed)
    }

    pub fn channel_type(&self) -> ChannelType {
        match self {
            ChannelConfig::Pagerduty(_) => ChannelType::Pagerduty,
            ChannelConfig::Slack(_) => ChannelType::Slack,
            ChannelConfig::Webhook(_) => ChannelType::Webhook,
            ChannelConfig::Email(_) => ChannelType::Email,
        }
    }

    fn check(&self) -> ApiResult<()> {
        match self {
            ChannelConfig::Pagerduty(pd) => {
                let key = pd.routing_key.as_str();
                if key.is_empty() || key.len() > 128 || !key.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err(ApiError::validation(
                        "config.routing_key",
                        "config.routing_key: 1 to 128 printable characters without spaces",
                    ));
                }
                if let Some(url) = &pd.events_url {
                    check_url_form("config.events_url", url)?;
                }
            }
            ChannelConfig::Slack(slack) => {
                check_url_form("config.webhook_url", &slack.webhook_url)?
            }
            ChannelConfig::Webhook(hook) => check_url_form("config.url", &hook.url)?,
            ChannelConfig::Email(email) => check_email(email)?,
        }
        Ok(())
    }

    /// The URLs and hosts (with ports) the channel calls, each with its config key, for
    /// the guard.
    pub fn targets(&self) -> Vec<Target<'_>> {
        match self {
            ChannelConfig::Pagerduty(pd) => vec![Target::Url(
                "config.events_url",
                pd.events_url.as_deref().unwrap_or(PAGERDUTY_EVENTS_URL),
            )],
            ChannelConfig::Slack(slack) => {
                vec![Target::Url("config.webhook_url", &slack.webhook_url)]
            }
            ChannelConfig::Webhook(hook) => vec![Target::Url("config.url", &hook.url)],
            ChannelConfig::Email(email) => {
                vec![Target::Host(
                    "config.smtp_host",
                    &email.smtp_host,
                    email.port(),
                )]
            }
        }
    }

    pub fn to_value(&self) -> Value {
        let value = match self {
            ChannelConfig::Pagerduty(config) => serde_json::to_value(config),
            ChannelConfig::Slack(config) => serde_json::to_value(config),
            ChannelConfig::Webhook(config) => serde_json::to_value(config),
            ChannelConfig::Email(config) => serde_json::to_value(config),
        };
        value.unwrap_or(Value::Null)
    }
}

/// Something a channel connects to.
pub enum Target<'a> {
    Url(&'static str, &'a str),
    Host(&'static str, &'a str, u16),
}

fn read<T: serde::de::DeserializeOwned>(config: &Value) -> ApiResult<T> {
    serde_path_to_error::deserialize(config).map_err(|error| {
        let path = error.path().to_string();
        let field = if path == "." {
            "config".to_owned()
        } else {
            format!("config.{path}")
        };
        let inner = error.into_inner().to_string();
        ApiError::validation(field.clone(), format!("{field}: {inner}"))
    })
}

/// A URL's form: http(s), a host, at most 2,000 characters (the guard checks where it
/// leads).
pub fn check_url_form(field: &str, url: &str) -> ApiResult<()> {
    if url.len() > MAX_URL_CHARS {
        return Err(ApiError::validation(
            field,
            format!("{field}: at most {MAX_URL_CHARS} characters"),
        ));
    }
    crate::outbound::guard::parse_http_url(url)
        .map_err(|refusal| url_not_allowed(field, &refusal))?;
    Ok(())
}

/// A URL Warden will call: its form ([`check_url_form`]), then where it leads through
/// the outbound guard (public addresses only, unless the operator allows them).
pub async fn check_public_url(
    guard: &crate::outbound::guard::Guard,
    field: &str,
    url: &str,
) -> ApiResult<()> {
    check_url_form(field, url)?;
    guard
        .check_url(url)
        .await
        .map(|_| ())
        .map_err(|refusal| url_not_allowed(field, &refusal))
}

/// 422 `url_not_allowed` for the config value `field`.
pub fn url_not_allowed(field: &str, refusal: &crate::outbound::Refusal) -> ApiError {
    ApiError::new(
        crate::error::ErrorCode::UrlNotAllowed,
        format!("{field}: {refusal}"),
    )
    .with_details(serde_json::json!({ "field": field, "reason": refusal.reason() }))
}

fn check_email(email: &EmailConfig) -> ApiResult<()> {
    if email.to.is_empty() || email.to.len() > MAX_RECIPIENTS {
        return Err(ApiError::validation(
            "config.to",
            format!("config.to: 1 to {MAX_RECIPIENTS} addresses"),
        ));
    }
    for (index, address) in email.to.iter().enumerate() {
        if Email::try_from(address.clone()).is_err() {
            return Err(ApiError::validation(
                format!("config.to[{index}]"),
                format!("config.to[{index}]: not an email address"),
            ));
        }
    }
    if Email::try_from(email.from.clone()).is_err() {
        return Err(ApiError::validation(
            "config.from",
            "config.from: not an email address",
        ));
    }
    let host = email.smtp_host.as_str();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    // A port goes in `smtp_port`; a colon belongs only to an IPv6 address.
    let colon_ok = !host.contains(':') || bare.parse::<std::net::Ipv6Addr>().is_ok();
    if host.is_empty() || host.len() > 253 || host.contains(['/', ' ', '@']) || !colon_ok {
        return Err(ApiError::validation(
            "config.smtp_host",
            "config.smtp_host: a host name or address",
        ));
    }
    if email.smtp_port == Some(0) {
        return Err(ApiError::validation(
            "config.smtp_port",
            "config.smtp_port: 1 to 65535",
        ));
    }
    for (field, value) in [("username", &email.username), ("password", &email.password)] {
        if value
            .as_ref()
            .is_some_and(|v| v.is_empty() || v.len() > 256)
        {
            return Err(ApiError::validation(
                format!("config.{field}"),
                format!("config.{field}: 1 to 256 characters"),
            ));
        }
    }
    if email.username.is_some() != email.password.is_some() {
        return Err(ApiError::validation(
            "config.password",
            "config.username and config.password: both or neither",
        ));
    }
    Ok(())
}

/// `config` as responses show it: every sensitive value masked.
pub fn masked(channel_type: ChannelType, config: &Value) -> Value {
    let mut shown = config.clone();
    if let Some(map) = shown.as_object_mut() {
        for key in channel_type.sensitive_keys() {
            if let Some(Value::String(secret)) = map.get(*key) {
                let mask = mask(secret);
                map.insert((*key).to_owned(), Value::String(mask));
            }
        }
    }
    shown
}

/// A URL keeps its scheme and host (so a person can tell which it is); any other secret
/// keeps its last four characters when it is long enough that they give nothing away.
pub fn mask(secret: &str) -> String {
    if let Ok(url) = url::Url::parse(secret) {
        if let Some(host) = url.host_str() {
            return format!("{}://{host}/****", url.scheme());
        }
    }
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() >= 16 {
        let tail: String = chars[chars.len() - 4..].iter().collect();
        format!("****{tail}")
    } else {
        "********".to_owned()
    }
}

/// `current` with the keys of `patch` applied: a key set to null is removed, any other
/// replaces its value, except a sensitive value sent back exactly as masked, which keeps
/// the stored secret (so a client may PATCH back the config it read).
pub fn merged(channel_type: ChannelType, current: &Value, patch: &Map<String, Value>) -> Value {
    let mut next = current.as_object().cloned().unwrap_or_default();
    for (key, value) in patch {
        if value.is_null() {
            next.remove(key);
            continue;
        }
        let sensitive = channel_type.sensitive_keys().contains(&key.as_str());
        let echoes_mask = sensitive
            && matches!((value, current.get(key)), (Value::String(sent), Some(Value::String(stored))) if *sent == mask(stored));
        if !echoes_mask {
            next.insert(key.clone(), value.clone());
        }
    }
    Value::Object(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sensitive_values_are_masked_and_a_masked_echo_keeps_the_secret() {
        let config = json!({"routing_key": "R0123456789abcdefXYZW"});
        let shown = masked(ChannelType::Pagerduty, &config);
        assert_eq!(shown["routing_key"], "****XYZW");
        let patch = shown.as_object().unwrap();
        assert_eq!(merged(ChannelType::Pagerduty, &config, patch), config);
        let hook = json!({"url": "https://example.com/hooks/secret-token"});
        assert_eq!(
            masked(ChannelType::Webhook, &hook)["url"],
            "https://example.com/****"
        );
        let mail = json!({"password": "hunter2"});
        assert_eq!(masked(ChannelType::Email, &mail)["password"], "********");
    }

    #[test]
    fn configs_are_checked_per_type() {
        assert!(ChannelConfig::parse(
            ChannelType::Slack,
            &json!({"webhook_url": "https://hooks.slack.com/x"})
        )
        .is_ok());
        assert!(
            ChannelConfig::parse(ChannelType::Slack, &json!({"webhook_url": "ftp://x/"})).is_err()
        );
        assert!(ChannelConfig::parse(ChannelType::Slack, &json!({"url": "https://x/"})).is_err());
        assert!(
            ChannelConfig::parse(ChannelType::Pagerduty, &json!({"routing_key": "has space"}))
                .is_err()
        );
        assert!(ChannelConfig::parse(
            ChannelType::Email,
            &json!({"to": [], "from": "a@b.io", "smtp_host": "mx"})
        )
        .is_err());
        assert!(ChannelConfig::parse(
            ChannelType::Email,
            &json!({"to": ["x@y.io"], "from": "a@b.io", "smtp_host": "mx", "username": "u"})
        )
        .is_err());
        assert!(ChannelConfig::parse(
            ChannelType::Email,
            &json!({"to": ["x@y.io"], "from": "a@b.io", "smtp_host": "mx"})
        )
        .is_ok());
        let host = |smtp_host: &str| {
            ChannelConfig::parse(
                ChannelType::Email,
                &json!({"to": ["x@y.io"], "from": "a@b.io", "smtp_host": smtp_host}),
            )
            .is_ok()
        };
        assert!(host("[2001:db8::1]") && host("2001:db8::1") && host("10.0.0.1"));
        assert!(!host("mx.example.com:25") && !host("a b") && !host("user@mx"));
        assert!(ChannelConfig::parse(ChannelType::Webhook, &json!([1])).is_err());
    }
}
