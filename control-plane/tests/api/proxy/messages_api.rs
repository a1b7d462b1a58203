//! Anthropic's Messages API through the proxy, driven by the official Anthropic Python
//! SDK (`anthropic` from PyPI, `anthropic_sdk.py`): plain and streamed messages and the
//! token count, the proxy key as `x-api-key`, usage in the ledger to the token (cache
//! reads and writes within the input), refusals as the SDK's typed errors in Anthropic's
//! error shape, and models of other providers refused.

use serde_json::{json, Value};

use super::mock::MESSAGE_TOKENS;
use super::responses_api::recorded;
use super::{MockProvider, TestProxy, UPSTREAM_KEY};
use crate::helpers::create_policy;

/// Runs `anthropic_sdk.py` against `proxy` with `key`; its printed JSON.
async fn sdk(proxy: &TestProxy, key: &str, scenario: &str) -> Value {
    super::sdk::run(
        "anthropic-sdk",
        "anthropic",
        "anthropic_sdk.py",
        &[&proxy.base, key, scenario],
    )
    .await
}

db_test!(
    the_anthropic_sdks_messages_are_forwarded_and_costed,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "claude" }))
            .await;
        let (input, written, read, output) = MESSAGE_TOKENS;
        let answer = sdk(&proxy, &key, "messages").await;
        assert_eq!(answer["plain_text"], "Hello from the mock");
        assert_eq!(answer["stream_text"], "Hello from the mock");
        let usage = json!({ "input_tokens": input, "cache_creation_input_tokens": written,
                        "cache_read_input_tokens": read, "output_tokens": output });
        assert_eq!(answer["plain_usage"], usage);
        assert_eq!(answer["stream_usage"], usage);
        assert_eq!(answer["counted"], 42);

        // The provider got Anthropic's headers with the proxy's own credential, and the
        // agent's API version; never the proxy key.
        let seen = provider
            .requests()
            .into_iter()
            .find(|r| r.path == "/v1/messages")
            .unwrap();
        assert_eq!(seen.headers["x-api-key"], UPSTREAM_KEY);
        assert!(seen.headers.contains_key("anthropic-version"));
        assert!(!format!("{:?}", seen.headers).contains(&key));

        // Costed to the token: cache writes and reads count as input.
        let whole_input = input + written + read;
        assert_eq!(
            recorded(&app, &tenant.id, "messages", 2).await,
            (2 * whole_input, 2 * output)
        );
        assert_eq!(
            recorded(&app, &tenant.id, "messages.count_tokens", 1).await,
            (0, 0)
        );
    }
);

db_test!(the_anthropic_sdk_gets_refusals_as_its_typed_errors, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, key, created) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "refused" }))
        .await;
    let admin = tenant.admin_key.clone();
    // Held for a human: the approval is queued, the SDK sees a permission error.
    let policy = create_policy(
        &app,
        &admin,
        json!({ "name": "approve claude", "policy_type": "require_approval",
                "config": { "providers": ["anthropic"] } }),
    )
    .await;
    assert_eq!(
        sdk(&proxy, &key, "refused").await,
        json!({ "error": "PermissionDeniedError", "status": 403,
                "type": "permission_error", "code": "approval_required" })
    );
    let approvals = app.get("/approvals?status=pending", &admin).await;
    let approvals: Value = approvals.json().await.unwrap();
    assert_eq!(approvals["data"][0]["policy_id"], policy["id"]);
    let deleted = app
        .delete(&format!("/policies/{}", policy["id"]), &admin)
        .await;
    assert_eq!(deleted.status().as_u16(), 204);

    // Blocked.
    let agent_id = created["agent_id"].as_str().unwrap();
    let blocked = app
        .post(&format!("/agents/{agent_id}/block"), &admin, json!({}))
        .await;
    assert_eq!(blocked.status().as_u16(), 204);
    assert_eq!(
        sdk(&proxy, &key, "refused").await,
        json!({ "error": "PermissionDeniedError", "status": 403,
                "type": "permission_error", "code": "agent_blocked" })
    );
    // Quarantined, another agent of the tenant.
    let (quarantined_key, created) = proxy
        .new_key(&app, &admin, json!({ "developer_label": "quarantined" }))
        .await;
    let quarantined = created["agent_id"].as_str().unwrap().to_owned();
    let answer = app
        .post(
            &format!("/agents/{quarantined}/quarantine"),
            &admin,
            json!({ "reason": "investigation" }),
        )
        .await;
    assert_eq!(answer.status().as_u16(), 204);
    assert_eq!(
        sdk(&proxy, &quarantined_key, "refused").await,
        json!({ "error": "PermissionDeniedError", "status": 403,
                "type": "permission_error", "code": "agent_quarantined" })
    );
    // A budget with little room refuses the request's estimate (402, which Anthropic's
    // SDK raises as its payment error).
    let (budgeted, _) = proxy
        .new_key(
            &app,
            &admin,
            json!({ "developer_label": "budgeted", "budget_limit_usd": 0.001 }),
        )
        .await;
    assert_eq!(
        sdk(&proxy, &budgeted, "refused").await,
        json!({ "error": "PaymentRequiredError", "status": 402,
                "type": "billing_error", "code": "budget_exceeded" })
    );
    // A key that is not Warden's.
    assert_eq!(
        sdk(&proxy, "wk_not-a-key", "refused").await,
        json!({ "error": "AuthenticationError", "status": 401,
                "type": "authentication_error", "code": "invalid_api_key" })
    );

    // The models a key may use, as Anthropic's SDK lists them.
    let (other, _) = proxy
        .new_key(
            &app,
            &admin,
            json!({ "developer_label": "claude only",
                                       "allowed_models": ["claude-sonnet-4-5", "gpt-4o"] }),
        )
        .await;
    assert_eq!(
        sdk(&proxy, &other, "models").await,
        json!({ "ids": ["claude-sonnet-4-5", "gpt-4o"] })
    );
    // A model of another provider is not served by the Messages API.
    let refused = proxy
        .client
        .post(format!("{}/v1/messages", proxy.base))
        .header("x-api-key", &other)
        .header("anthropic-version", "2023-06-01")
        .json(&json!({ "model": "gpt-4o", "max_tokens": 8,
                       "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("openai"));
});

db_test!(messages_bodies_of_every_size_reach_anthropic_whole, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (_, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "sizes" }))
        .await;
    for size in [1024, 65 * 1024, 10 * 1024 * 1024] {
        let body = serde_json::to_vec(&json!({ "model": "claude-sonnet-4-5", "max_tokens": 16,
            "messages": [{ "role": "user", "content": "x".repeat(size) }] }))
        .unwrap();
        let response = proxy
            .client
            .post(format!("{}/v1/messages", proxy.base))
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{size} bytes");
        assert_eq!(provider.last().body.len(), body.len(), "{size} bytes");
    }
});
