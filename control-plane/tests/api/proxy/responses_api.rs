//! The OpenAI Responses API through the proxy, driven by the official OpenAI Python SDK
//! (`openai` from PyPI, `openai_sdk.py`): plain and streamed responses, usage in the
//! ledger to the token, refusals as the SDK's typed errors, and the same body limits as
//! chat completions.

use std::time::Duration;

use serde_json::{json, Value};

use super::mock::RESPONSE_TOKENS;
use super::{eventually, MockProvider, TestProxy, UPSTREAM_KEY};
use crate::helpers::{expect_status, TestApp};

/// Runs `openai_sdk.py` against `proxy` with `key`; its printed JSON.
async fn sdk(proxy: &TestProxy, key: &str, scenario: &str) -> Value {
    let base = format!("{}/v1", proxy.base);
    super::sdk::run(
        "openai-sdk",
        "openai==1.*",
        "openai_sdk.py",
        &[&base, key, scenario],
    )
    .await
}

/// The tenant's recorded tokens of `request_type` once `count` records are in.
pub(super) async fn recorded(
    app: &TestApp,
    tenant_id: &str,
    request_type: &str,
    count: i64,
) -> (i64, i64) {
    eventually(Duration::from_secs(10), || async {
        let (records, input, output): (i64, Option<i64>, Option<i64>) = sqlx::query_as(
            "SELECT COUNT(*), CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT) \
             FROM usage_records WHERE tenant_id = $1 AND request_type = $2",
        )
        .bind(tenant_id)
        .bind(request_type)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
        (records == count).then(|| (input.unwrap_or(0), output.unwrap_or(0)))
    })
    .await
}

db_test!(the_openai_sdks_responses_are_forwarded_and_costed, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, key, created) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "responses" }))
        .await;
    let (input, cached, output, reasoning) = RESPONSE_TOKENS;
    let usage = json!({ "input_tokens": input, "cached_tokens": cached,
                        "output_tokens": output, "reasoning_tokens": reasoning });
    let answer = sdk(&proxy, &key, "responses").await;
    assert_eq!(answer["plain_text"], "Hello from the mock");
    assert_eq!(answer["plain_usage"], usage);
    assert_eq!(answer["stream_text"], "Hello from the mock");
    assert_eq!(answer["stream_usage"], usage);
    assert_eq!(
        answer["stream_types"],
        json!([
            "response.created",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.completed"
        ])
    );
    // The provider got the agent's body under its own credential, unchanged: no
    // `stream_options` (the Responses API reports usage by itself).
    let seen = provider.last();
    assert_eq!(seen.path, "/v1/responses");
    assert_eq!(
        seen.headers["authorization"],
        format!("Bearer {UPSTREAM_KEY}")
    );
    let body: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(body["stream"], true);
    assert!(body.get("stream_options").is_none(), "{body}");

    // Costed to the token, cached and reasoning tokens inside the input and output.
    assert_eq!(
        recorded(&app, &tenant.id, "responses", 2).await,
        (2 * input, 2 * output)
    );
    let by_agent = expect_status(app.get("/cost/by-agent", &tenant.admin_key).await, 200).await;
    assert!(
        by_agent
            .to_string()
            .contains(&format!("\"input_tokens\":{}", 2 * input)),
        "{by_agent}"
    );

    // Refusals reach the SDK as its typed errors, with Warden's code.
    let agent_id = created["agent_id"].as_str().unwrap();
    let blocked = app
        .post(
            &format!("/agents/{agent_id}/block"),
            &tenant.admin_key,
            json!({}),
        )
        .await;
    assert_eq!(blocked.status().as_u16(), 204);
    assert_eq!(
        sdk(&proxy, &key, "refused").await,
        json!({ "error": "PermissionDeniedError", "status": 403, "code": "agent_blocked" })
    );
    let (_, other, _) = proxy
        .tenant_with_key(
            &app,
            json!({ "developer_label": "narrow", "allowed_models": ["gpt-4o"] }),
        )
        .await;
    assert_eq!(
        sdk(&proxy, &other, "refused").await,
        json!({ "error": "PermissionDeniedError", "status": 403, "code": "model_not_allowed" })
    );
    assert_eq!(
        sdk(&proxy, &other, "models").await,
        json!({ "ids": ["gpt-4o"] })
    );
    // A budget with little room refuses the request's estimate: 402, which the SDK
    // raises as its status error.
    let (_, budgeted, _) = proxy
        .tenant_with_key(
            &app,
            json!({ "developer_label": "budgeted", "budget_limit_usd": 0.001 }),
        )
        .await;
    assert_eq!(
        sdk(&proxy, &budgeted, "refused").await,
        json!({ "error": "APIStatusError", "status": 402, "code": "budget_exceeded" })
    );
});

db_test!(responses_bodies_are_checked_like_chat_bodies, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (_, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "sizes" }))
        .await;
    let post = |body: Vec<u8>| {
        proxy
            .client
            .post(format!("{}/v1/responses", proxy.base))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // 1 KiB, 65 KiB and 10 MiB reach the provider whole (the limit is 32 MiB).
    for size in [1024, 65 * 1024, 10 * 1024 * 1024] {
        let body =
            serde_json::to_vec(&json!({ "model": "gpt-4o-mini", "input": "x".repeat(size) }))
                .unwrap();
        let response = post(body.clone()).await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{size} bytes");
        assert_eq!(provider.last().body.len(), body.len(), "{size} bytes");
    }
    let array = post(b"[\"gpt-4o-mini\"]".to_vec()).await.unwrap();
    assert_eq!(array.status().as_u16(), 400);
    // The legacy completions endpoint is not served: a 404 naming what is.
    let legacy = proxy
        .client
        .post(format!("{}/v1/completions", proxy.base))
        .bearer_auth(&key)
        .json(&json!({ "model": "gpt-3.5-turbo-instruct", "prompt": "hi" }))
        .send()
        .await
        .unwrap();
    assert_eq!(legacy.status().as_u16(), 404);
    let error: Value = legacy.json().await.unwrap();
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/v1/responses"));
});

db_test!(
    an_openai_agents_sdk_agent_is_governed_like_a_chat_agent,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, key, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "agents-sdk" }))
            .await;
        let base = format!("{}/v1", proxy.base);
        let run = |key: &str| {
            let args = [base.clone(), key.to_owned()];
            async move {
                let args = [args[0].as_str(), args[1].as_str(), "agent"];
                crate::proxy::sdk::run("openai-agents", "openai-agents", "openai_sdk.py", &args)
                    .await
            }
        };
        // On its defaults the Agents SDK calls the Responses API.
        assert_eq!(
            run(&key).await,
            json!({ "final_output": "Hello from the mock" })
        );
        assert_eq!(provider.last().path, "/v1/responses");
        let (input, _, output, _) = RESPONSE_TOKENS;
        assert_eq!(
            recorded(&app, &tenant.id, "responses", 1).await,
            (input, output)
        );
        // Held for a human, as a chat agent is, and through once approved. (A held request's
        // body is the spec's `{"error": "approval_required", ...}`: the SDK finds no code.)
        let admin = tenant.admin_key.clone();
        let policy = crate::helpers::create_policy(
            &app,
            &admin,
            json!({ "name": "approve mini", "policy_type": "require_approval",
                    "config": { "models": ["gpt-4o-mini"] } }),
        )
        .await;
        assert_eq!(
            run(&key).await,
            json!({ "error": "PermissionDeniedError", "status": 403, "code": null })
        );
        let pending = expect_status(app.get("/approvals?status=pending", &admin).await, 200).await;
        assert_eq!(pending["data"][0]["policy_id"], policy["id"]);
        let approval = pending["data"][0]["id"].clone();
        let decided = app
            .post(
                &format!("/approvals/{approval}/decide"),
                &admin,
                json!({ "reviewer_id": "ana", "decision": "approved" }),
            )
            .await;
        assert_eq!(decided.status().as_u16(), 204);
        assert_eq!(
            run(&key).await,
            json!({ "final_output": "Hello from the mock" })
        );
        let agent_id = created["agent_id"].as_str().unwrap();
        let quarantined = app
            .post(
                &format!("/agents/{agent_id}/quarantine"),
                &tenant.admin_key,
                json!({ "reason": "investigation" }),
            )
            .await;
        assert_eq!(quarantined.status().as_u16(), 204);
        assert_eq!(
            run(&key).await,
            json!({ "error": "PermissionDeniedError", "status": 403, "code": "agent_quarantined" })
        );
    }
);
