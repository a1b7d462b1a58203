//! A proxy key's own `rate_limit_override`, enforced by the running proxy per key and
//! UTC minute, apart from the tenant's other keys.

use serde_json::{json, Value};

use super::mock::{COMPLETION_TOKENS, PROMPT_TOKENS};
use super::{simple_chat, MockProvider, TestProxy};
use crate::helpers::TestApp;

/// Moves the clock both planes read to `second` seconds into the next UTC minute: a
/// new rate window, in which the counts the requests meet are exact.
fn into_next_minute(app: &TestApp, second: i64) {
    let now = app.clock.now_ms();
    app.clock
        .advance(60_000 - now.rem_euclid(60_000) + second * 1000);
}

/// Status, `Retry-After` and body of a chat request.
async fn attempt(proxy: &TestProxy, key: &str) -> (u16, Option<u64>, Value) {
    let response = proxy.chat(key, simple_chat("gpt-4o-mini")).await;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    (
        status,
        retry_after,
        response.json().await.unwrap_or_default(),
    )
}

db_test!(
    a_keys_rate_limit_override_is_enforced_per_key_and_minute,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, limited, created) = proxy
            .tenant_with_key(
                &app,
                json!({ "developer_label": "limited",
                        "rate_limit_override": { "requests_per_minute": 2 } }),
            )
            .await;
        let admin = tenant.admin_key.clone();
        let agent = created["agent_id"].as_str().unwrap().to_owned();
        // Same agent, no limits of its own.
        let (free, _) = proxy
            .new_key(
                &app,
                &admin,
                json!({ "developer_label": "free", "agent_id": agent }),
            )
            .await;
        // A tokens-per-minute limit that one answer uses up.
        let tokens_per_minute = PROMPT_TOKENS + COMPLETION_TOKENS;
        let (thrifty, _) = proxy
            .new_key(
                &app,
                &admin,
                json!({ "developer_label": "thrifty", "agent_id": agent,
                        "rate_limit_override": { "tokens_per_minute": tokens_per_minute } }),
            )
            .await;

        into_next_minute(&app, 15);
        assert_eq!(attempt(&proxy, &limited).await.0, 200);
        assert_eq!(attempt(&proxy, &limited).await.0, 200);
        let (status, retry_after, body) = attempt(&proxy, &limited).await;
        assert_eq!(status, 429, "{body}");
        // The window turns at the end of the minute, 45 s away.
        assert_eq!(retry_after, Some(45));
        assert_eq!(body["error"]["code"], json!("rate_limit_exceeded"));
        assert_eq!(body["error"]["type"], json!("rate_limit_error"));
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("rate_limit_override"),
            "{body}"
        );
        // Refused requests are not counted, and other keys of the agent are not held.
        assert_eq!(attempt(&proxy, &limited).await.0, 429);
        for _ in 0..4 {
            assert_eq!(attempt(&proxy, &free).await.0, 200);
        }

        // The first answer's tokens reach the limit; the next request waits for the minute.
        assert_eq!(attempt(&proxy, &thrifty).await.0, 200);
        let (status, _, body) = attempt(&proxy, &thrifty).await;
        assert_eq!(status, 429, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("tokens per minute"),
            "{body}"
        );

        // What was refused never reached the provider: 2 + 4 + 1 forwarded requests.
        assert_eq!(provider.requests().len(), 7);

        // A new minute, new windows: both limited keys are let through again.
        into_next_minute(&app, 0);
        assert_eq!(attempt(&proxy, &limited).await.0, 200);
        assert_eq!(attempt(&proxy, &thrifty).await.0, 200);
        assert_eq!(provider.requests().len(), 9);
    }
);
