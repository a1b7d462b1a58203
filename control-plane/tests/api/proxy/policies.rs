//! Policies enforced by the real proxy: each type refusing and allowing, the approval
//! flow with an OpenAI client, and the dry run agreeing with the proxy.

use std::time::Duration;

use async_openai::config::OpenAIConfig;
use async_openai::types::{ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs};
use async_openai::Client;
use serde_json::{json, Value};

use super::{eventually, simple_chat, stays, MockProvider, TestProxy};
use crate::helpers::{expect_status, TestApp};

async fn policy(app: &TestApp, key: &str, body: Value) -> i64 {
    expect_status(app.post("/policies", key, body).await, 201).await["data"]["id"]
        .as_i64()
        .unwrap()
}

/// Waits until the proxy answers `model` with `status` (policies arrive within a second).
async fn until_status(proxy: &TestProxy, raw: &str, model: &str, status: u16) -> reqwest::Response {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let answer = proxy.chat(raw, simple_chat(model)).await;
        if answer.status() == status {
            return answer;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{model}: still {}",
            answer.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

db_test!(
    each_policy_type_refuses_and_allows_through_the_proxy,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "governed" }))
            .await;
        let key = &tenant.admin_key;
        let agent_id = created["agent_id"].as_str().unwrap().to_owned();

        // Allowlist: listed models pass, others are refused in the OpenAI error shape.
        let allowlist = policy(
            &app,
            key,
            json!({ "name": "mini only", "policy_type": "model_allowlist",
        "config": { "allowed_models": ["gpt-4o-mini*"] } }),
        )
        .await;
        let refused: Value = until_status(&proxy, &raw, "gpt-4o", 403)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            refused["error"]["code"],
            json!("policy_violation"),
            "{refused}"
        );
        assert!(refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("allowlist"));
        assert_eq!(
            proxy.chat(&raw, simple_chat("gpt-4o-mini")).await.status(),
            200
        );
        // Disabled, it no longer applies.
        expect_status(
            app.patch(
                &format!("/policies/{allowlist}"),
                key,
                json!({ "enabled": false }),
            )
            .await,
            200,
        )
        .await;
        until_status(&proxy, &raw, "gpt-4o", 200).await;

        // Blocked provider: by the provider the model routes to.
        let blocked = policy(
            &app,
            key,
            json!({ "name": "no anthropic", "policy_type": "block_provider",
        "config": { "providers": ["anthropic"] } }),
        )
        .await;
        until_status(&proxy, &raw, "claude-sonnet-4-5", 403).await;
        assert_eq!(proxy.chat(&raw, simple_chat("gpt-4o")).await.status(), 200);
        expect_status(app.delete(&format!("/policies/{blocked}"), key).await, 204).await;
        until_status(&proxy, &raw, "claude-sonnet-4-5", 200).await;

        // Human review: forwarded, and the evaluation says why.
        policy(
            &app,
            key,
            json!({ "name": "review o3", "policy_type": "require_human_review",
        "config": { "models": ["o3"] } }),
        )
        .await;
        // Rate limit of 3 requests a minute for this agent: a 429 with Retry-After follows
        // (more than 3 may pass only when a minute boundary falls inside the loop).
        policy(
            &app,
            key,
            json!({ "name": "slow down", "policy_type": "rate_limit",
        "config": { "requests_per_minute": 3 }, "scope": format!("agent:{agent_id}") }),
        )
        .await;
        let limited = until_status(&proxy, &raw, "o3", 429).await;
        let retry_after: u64 = limited.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&retry_after), "{retry_after}");
        let body: Value = limited.json().await.unwrap();
        assert_eq!(body["error"]["code"], json!("rate_limit_exceeded"));
        assert_eq!(body["error"]["type"], json!("rate_limit_error"));

        // The decisions reach the evaluation records, with a violation in the audit trail.
        let records = eventually(Duration::from_secs(5), || async {
            let page = expect_status(
                app.get(
                    &format!("/policy-evaluations?agent_id={agent_id}&limit=100"),
                    key,
                )
                .await,
                200,
            )
            .await;
            let rows = page["data"].as_array().unwrap().clone();
            let has = |name: &str, result: &str| {
                rows.iter()
                    .any(|r| r["policy_name"] == json!(name) && r["result"] == json!(result))
            };
            (has("mini only", "fail")
                && has("no anthropic", "fail")
                && has("slow down", "fail")
                && has("review o3", "pass"))
            .then_some(rows)
        })
        .await;
        assert!(records
            .iter()
            .any(|r| r["reason"] == json!("flagged for human review")));
        assert!(app
            .audit_events(&tenant.id, &allowlist.to_string())
            .await
            .contains(&"policy.violated".to_owned()));
    }
);

db_test!(an_agent_waits_for_approval_and_its_retry_passes, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, raw, created) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "careful" }))
        .await;
    let key = &tenant.admin_key;
    let agent_id = created["agent_id"].as_str().unwrap().to_owned();
    let policy_id = policy(
        &app,
        key,
        json!({ "name": "approve gpt-4o", "policy_type": "require_approval",
        "config": { "models": ["gpt-4o*"], "environments": ["production"] } }),
    )
    .await;

    // The exact body of the spec, and one pending approval however often the agent asks.
    let held: Value = until_status(&proxy, &raw, "gpt-4o", 403)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        held,
        json!({ "error": "approval_required", "approval_policy_id": policy_id })
    );
    let client = Client::with_config(
        OpenAIConfig::new()
            .with_api_base(format!("{}/v1", proxy.base))
            .with_api_key(&raw),
    );
    let request = CreateChatCompletionRequestArgs::default()
        .model("gpt-4o")
        .messages(vec![ChatCompletionRequestUserMessageArgs::default()
            .content("Deploy?")
            .build()
            .unwrap()
            .into()])
        .build()
        .unwrap();
    assert!(
        client.chat().create(request.clone()).await.is_err(),
        "held requests fail in the SDK"
    );
    let approval = eventually(Duration::from_secs(5), || async {
        let page = expect_status(app.get("/approvals?status=pending", key).await, 200).await;
        let first = page["data"][0].clone();
        (page["meta"]["total"] == json!(1) && first.is_object()).then_some(first)
    })
    .await;
    assert_eq!(approval["agent_id"], json!(agent_id));
    assert_eq!(approval["policy_id"], json!(policy_id));
    assert_eq!(approval["request_context"]["provider"], json!("openai"));
    assert_eq!(approval["request_context"]["model"], json!("gpt-4o"));

    // A reviewer approves from the API; the SDK's retry goes through within a second or so.
    let id = approval["id"].as_i64().unwrap();
    expect_status(
        app.post(
            &format!("/approvals/{id}/decide"),
            key,
            json!({ "reviewer_id": "oncall-ana", "decision": "approved" }),
        )
        .await,
        204,
    )
    .await;
    let answer = eventually(Duration::from_secs(5), || {
        let client = client.clone();
        let request = request.clone();
        async move { client.chat().create(request).await.ok() }
    })
    .await;
    assert_eq!(
        answer.choices[0].message.content.as_deref(),
        Some("Hello from the mock")
    );
    // The grant covers that model only: another one matching the policy waits again.
    until_status(&proxy, &raw, "gpt-4o-mini", 403).await;
    let second = eventually(Duration::from_secs(5), || async {
        let page = expect_status(app.get("/approvals?status=pending", key).await, 200).await;
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["request_context"]["model"] == json!("gpt-4o-mini"))
            .and_then(|a| a["id"].as_i64())
    })
    .await;
    // Denied: it stays blocked, and no new approval is queued for it.
    expect_status(
        app.post(
            &format!("/approvals/{second}/decide"),
            key,
            json!({ "reviewer_id": "oncall-ana", "decision": "denied", "reason": "not in prod" }),
        )
        .await,
        204,
    )
    .await;
    // The denial is in force when its call returns, and a refused request's approval
    // would be queued before its 403: nothing to wait for.
    assert_eq!(
        proxy.chat(&raw, simple_chat("gpt-4o-mini")).await.status(),
        403
    );
    let pending = expect_status(app.get("/approvals/pending/count", key).await, 200).await;
    assert_eq!(pending["data"]["count"], json!(0));
});

db_test!(the_dry_run_and_the_proxy_reach_the_same_decisions, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, raw, created) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "corpus" }))
        .await;
    let key = &tenant.admin_key;
    let agent_id = created["agent_id"].as_str().unwrap().to_owned();
    let team = expect_status(
        app.post("/teams", key, json!({ "name": "staging-team" }))
            .await,
        201,
    )
    .await;
    for body in [
        json!({ "name": "allow", "policy_type": "model_allowlist", "priority": 10,
                "config": { "allowed_models": ["gpt-4o*", "claude-sonnet-4*", "o3", "gemini-2.5-flash"] } }),
        json!({ "name": "no google", "policy_type": "block_provider", "priority": 5, "config": { "providers": ["google"] } }),
        json!({ "name": "approve o3", "policy_type": "require_approval", "config": { "models": ["o3"] } }),
        json!({ "name": "review mini", "policy_type": "require_human_review", "config": { "models": ["gpt-4o-mini"] } }),
        json!({ "name": "other team", "policy_type": "block_provider", "scope": format!("team:{}", team["data"]["id"].as_str().unwrap()),
                "config": { "providers": ["openai"] } }),
        json!({ "name": "dev only", "policy_type": "block_provider", "scope": "environment:dev", "config": { "providers": ["anthropic"] } }),
        json!({ "name": "roomy", "policy_type": "rate_limit", "config": { "requests_per_minute": 1000 } }),
    ] {
        policy(&app, key, body).await;
    }
    // Wait for the policies to arrive: the allowlist refuses gpt-4.1.
    until_status(&proxy, &raw, "gpt-4.1", 403).await;
    for (model, provider_name) in [
        ("gpt-4o", "openai"),
        ("gpt-4o-mini", "openai"),
        ("gpt-4.1", "openai"),
        ("o3", "openai"),
        ("claude-sonnet-4-5", "anthropic"),
        ("claude-opus-4-1", "anthropic"),
        ("gemini-2.5-flash", "google"),
    ] {
        let dry = expect_status(
            app.post(
                "/policies/evaluate",
                key,
                json!({ "agent_id": agent_id, "provider": provider_name, "model": model }),
            )
            .await,
            200,
        )
        .await;
        let results = dry["data"].as_array().unwrap();
        assert_eq!(results.len(), 7);
        let refused = results.iter().any(|r| r["result"] == json!("fail"));
        let status = proxy.chat(&raw, simple_chat(model)).await.status().as_u16();
        assert_eq!(
            status != 200,
            refused,
            "{model}: proxy {status}, dry run {dry}"
        );
        if refused {
            assert_eq!(status, 403, "{model}");
        }
    }
});

db_test!(every_decision_is_recorded_once_forwarded_or_not, |app| {
    // A forwarded request's decision travels with its usage record; one the policies
    // let through but a budget then refused travels on its own. Each is recorded once.
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, raw, _) = proxy
        .tenant_with_key(
            &app,
            json!({ "developer_label": "governed", "budget_limit_usd": 0.0003 }),
        )
        .await;
    let key = &tenant.admin_key;
    policy(
        &app,
        key,
        json!({ "name": "no anthropic", "policy_type": "block_provider",
                    "config": { "providers": ["anthropic"] } }),
    )
    .await;
    // Refused by the policy (once it has arrived): one decision.
    until_status(&proxy, &raw, "claude-sonnet-4-5", 403).await;
    // Let through by the policy until the key's budget refuses one.
    let mut served = 0;
    loop {
        let answer = proxy
            .chat(
                &raw,
                json!({ "model": "gpt-4o", "max_tokens": 10,
                    "messages": [{ "role": "user", "content": "Say hello" }] }),
            )
            .await;
        match answer.status().as_u16() {
            200 => served += 1,
            402 => break,
            other => panic!("unexpected status {other}"),
        }
        assert!(served < 20, "the budget never ran out");
    }
    let expected = served + 2;
    let records = || async {
        let page = expect_status(app.get("/policy-evaluations?limit=100", key).await, 200).await;
        page["meta"]["total"].as_i64().unwrap()
    };
    eventually(Duration::from_secs(5), || async {
        (records().await == expected).then_some(())
    })
    .await;
    // Both reporters flush within a second: nothing more comes.
    stays(
        Duration::from_millis(1_500),
        "the decision count",
        || async { records().await == expected },
    )
    .await;
    let passed = expect_status(
        app.get("/policy-evaluations?result=pass&limit=100", key)
            .await,
        200,
    )
    .await;
    assert_eq!(passed["meta"]["total"], json!(served + 1), "{passed}");
});
