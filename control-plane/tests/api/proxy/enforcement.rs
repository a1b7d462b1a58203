//! What the control plane decides reaches a running proxy: the kill switch, quarantine
//! and key revocation; and the proxy's own refusals use the OpenAI error shape.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{eventually, simple_chat, MockProvider, TestProxy};

db_test!(
    blocks_quarantine_and_revocation_reach_a_running_proxy,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw_key, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "kill" }))
            .await;
        let agent = created["agent_id"].as_str().unwrap().to_owned();
        let admin = tenant.admin_key.clone();
        assert_eq!(proxy.chat_answer(&raw_key, "gpt-4o").await.0, 200);

        let steps: [(&str, Value, u16, Option<&str>); 4] = [
            (
                "block",
                json!({ "reason": "runaway" }),
                403,
                Some("agent_blocked"),
            ),
            ("unblock", json!({}), 200, None),
            (
                "quarantine",
                json!({ "reason": "investigation" }),
                403,
                Some("agent_quarantined"),
            ),
            ("release-quarantine", json!({}), 200, None),
        ];
        for (action, body, status, code) in steps {
            let changed = Instant::now();
            let response = app
                .post(&format!("/agents/{agent}/{action}"), &admin, body)
                .await;
            assert_eq!(response.status().as_u16(), 204);
            let answer = eventually(Duration::from_secs(3), || {
                let (proxy, key) = (&proxy, raw_key.clone());
                async move {
                    let (got, answer) = proxy.chat_answer(&key, "gpt-4o").await;
                    (got == status).then_some(answer)
                }
            })
            .await;
            eprintln!("{action} took effect in {:?}", changed.elapsed());
            if let Some(code) = code {
                assert_eq!(answer["error"]["code"], json!(code));
                assert_eq!(answer["error"]["type"], json!("permission_error"));
            }
        }

        // Revoking the key: refused from then on.
        let key_id = created["api_key_id"].as_str().unwrap();
        let revoked = Instant::now();
        let response = app.delete(&format!("/proxy-keys/{key_id}"), &admin).await;
        assert_eq!(response.status().as_u16(), 204);
        eventually(Duration::from_secs(3), || {
            let (proxy, key) = (&proxy, raw_key.clone());
            async move { (proxy.chat_answer(&key, "gpt-4o").await.0 == 401).then_some(()) }
        })
        .await;
        eprintln!("revocation took effect in {:?}", revoked.elapsed());
        let requests_before = provider.requests().len();
        assert_eq!(
            proxy.chat_answer(&raw_key, "gpt-4o").await.1["error"]["code"],
            json!("invalid_api_key")
        );
        assert_eq!(
            provider.requests().len(),
            requests_before,
            "a refused request reached the provider"
        );
    }
);

db_test!(the_proxy_refuses_bad_requests_in_the_openai_shape, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (_, raw_key, _) = proxy.tenant_with_key(&app,
        json!({ "developer_label": "picky", "allowed_models": ["gpt-4o-mini", "claude-haiku-4-5"],
                "allowed_providers": ["openai"] }),
    )
    .await;
    let url = |path: &str| format!("{}{path}", proxy.base);
    let client = &proxy.client;
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            client
                .post(url("/v1/chat/completions"))
                .json(&simple_chat("gpt-4o-mini")),
            401,
            "missing_api_key",
        ),
        (
            client
                .post(url("/v1/chat/completions"))
                .bearer_auth("wdn_nope")
                .json(&simple_chat("gpt-4o-mini")),
            401,
            "invalid_api_key",
        ),
        (
            client
                .post(url("/v1/chat/completions"))
                .bearer_auth(&raw_key)
                .body("{\"model\":")
                .header("content-type", "application/json"),
            400,
            "invalid_request",
        ),
        (
            client
                .post(url("/v1/chat/completions"))
                .bearer_auth(&raw_key)
                .json(&json!({ "messages": [] })),
            400,
            "invalid_request",
        ),
        (
            client
                .post(url("/v1/chat/completions"))
                .bearer_auth(&raw_key)
                .body("model=gpt")
                .header("content-type", "text/plain"),
            415,
            "unsupported_media_type",
        ),
        (
            client
                .post(url("/v1/chat/completions"))
                .bearer_auth(&raw_key)
                .json(&simple_chat("gpt-4o")),
            403,
            "model_not_allowed",
        ),
        (
            client
                .post(url("/v1/chat/completions"))
                .bearer_auth(&raw_key)
                .json(&simple_chat("claude-haiku-4-5")),
            403,
            "provider_not_allowed",
        ),
        (
            client
                .get(url("/v1/chat/completions"))
                .bearer_auth(&raw_key),
            405,
            "method_not_allowed",
        ),
        (
            client
                .post(url("/v1/images/generations"))
                .bearer_auth(&raw_key)
                .json(&json!({})),
            404,
            "not_found",
        ),
    ];
    for (request, status, code) in cases {
        let response = request.send().await.unwrap();
        let got = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or_default();
        assert_eq!(
            (got, body["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}"
        );
        assert!(body["error"]["message"].is_string() && body["error"]["type"].is_string());
    }
    assert!(
        provider.requests().is_empty(),
        "a refused request reached the provider"
    );

    // A provider's own error is relayed as it is, and the proxy stays usable.
    let (status, answer) = proxy.chat_answer(&raw_key, "gpt-4o-mini").await;
    assert_eq!(status, 200, "{answer}");
});
