//! `guardrail` policies on every surface: the matrix of request shapes (chat
//! completions, Responses, Messages, each streamed and not, and embeddings; tool calls
//! in `mcp_gateway`) times ten kinds of secret or personal data, each blocked, redacted
//! or flagged as the policy says; look-alikes let through; a scan that fails refuses.

use serde_json::{json, Value};

use super::{eventually, MockProvider, TestProxy};
use crate::helpers::{create_policy, expect_status, TestApp};

/// Ten kinds, each in a sentence: the detector that must name it, the text, and the
/// secret itself (never to appear in a refusal, nor in a redacted body).
pub const KINDS: [(&str, &str, &str); 10] = [
    (
        "aws_access_key",
        "the key is AKIAQYLPMN5HHHFPZAM2 ok",
        "AKIAQYLPMN5HHHFPZAM2",
    ),
    (
        "github_token",
        "push with ghp_4f8Gz0aQ2wE7rT9yU1iO3pL5kJ6hG8fD2sA0",
        "ghp_4f8Gz0aQ2wE7rT9yU1iO3pL5kJ6hG8fD2sA0",
    ),
    (
        "private_key",
        "-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXk",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
    ),
    (
        "stripe_key",
        "charge via sk_live_51HxQ2rKl3mN8pQ4sT6uV",
        "sk_live_51HxQ2rKl3mN8pQ4sT6uV",
    ),
    (
        "generic_secret",
        "set db_password = Zx8Kq2LmV9pR4tYw7Hn3 now",
        "Zx8Kq2LmV9pR4tYw7Hn3",
    ),
    (
        "card_number",
        "card 4111 1111 1111 1111 exp 12/29",
        "4111 1111 1111 1111",
    ),
    (
        "iban",
        "wire to DE89 3704 0044 0532 0130 00",
        "DE89 3704 0044 0532 0130 00",
    ),
    (
        "email",
        "write to ana.lopez@example.com",
        "ana.lopez@example.com",
    ),
    ("phone", "call +44 20 7946 0958 at noon", "+44 20 7946 0958"),
    ("employee_id", "ask EMP-004211 about it", "EMP-004211"),
];

/// What the matrix sends: endpoint, a body around the text, and whether it streams.
fn shapes(text: &str) -> Vec<(&'static str, Value)> {
    let chat = |stream: bool| {
        json!({ "model": "gpt-4o", "stream": stream,
                "messages": [{ "role": "user", "content": text }] })
    };
    let responses = |stream: bool| json!({ "model": "gpt-4o", "stream": stream, "input": text });
    let messages = |stream: bool| {
        json!({ "model": "claude-sonnet-4-5", "max_tokens": 16, "stream": stream,
                "messages": [{ "role": "user", "content": text }] })
    };
    vec![
        ("/v1/chat/completions", chat(false)),
        ("/v1/chat/completions", chat(true)),
        ("/v1/responses", responses(false)),
        ("/v1/responses", responses(true)),
        ("/v1/messages", messages(false)),
        ("/v1/messages", messages(true)),
        (
            "/v1/embeddings",
            json!({ "model": "text-embedding-3-small", "input": [text] }),
        ),
    ]
}

/// A guardrail policy with every detector and the tenant's `employee_id` pattern.
pub fn guardrail(action: &str) -> Value {
    json!({ "name": format!("guardrail {action}"), "policy_type": "guardrail",
            "config": { "action": action,
                        "patterns": [{ "id": "employee_id", "pattern": "EMP-[0-9]{6}" }] } })
}

async fn post(proxy: &TestProxy, key: &str, path: &str, body: &Value) -> (u16, String, String) {
    let response = proxy
        .client
        .post(format!("{}{path}", proxy.base))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let header = response
        .headers()
        .get("x-warden-guardrail")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, header, response.text().await.unwrap_or_default())
}

db_test!(
    guardrails_block_redact_or_flag_every_kind_on_every_shape,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let mut checked = 0;
        for action in ["block", "redact", "flag"] {
            let (tenant, key, _) = proxy
                .tenant_with_key(
                    &app,
                    json!({ "developer_label": format!("agent-{action}") }),
                )
                .await;
            let policy = create_policy(&app, &tenant.admin_key, guardrail(action)).await;
            for (detector, text, secret) in KINDS {
                for (path, body) in shapes(text) {
                    let before = provider.requests().len();
                    let (status, header, answer) = post(&proxy, &key, path, &body).await;
                    let case = format!("{action} {detector} {path} {}", body["stream"]);
                    let sent = provider.requests();
                    match action {
                        "block" => {
                            assert_eq!(status, 403, "{case}: {answer}");
                            let answer: Value = serde_json::from_str(&answer).unwrap();
                            assert_eq!(
                                answer["error"]["code"],
                                json!("guardrail_violation"),
                                "{case}"
                            );
                            let message = answer["error"]["message"].as_str().unwrap();
                            assert!(message.contains(detector), "{case}: {message}");
                            assert!(!message.contains(secret), "{case}: the secret in {message}");
                            assert_eq!(sent.len(), before, "{case}: sent anyway");
                        }
                        "redact" => {
                            assert_eq!(status, 200, "{case}: {answer}");
                            assert!(header.contains(detector), "{case}: header {header:?}");
                            let forwarded =
                                String::from_utf8_lossy(&sent.last().unwrap().body).into_owned();
                            assert!(!forwarded.contains(secret), "{case}: {forwarded}");
                            assert!(
                                forwarded.contains(&format!("[REDACTED:{detector}]")),
                                "{case}: {forwarded}"
                            );
                        }
                        _ => {
                            assert_eq!(status, 200, "{case}: {answer}");
                            assert!(header.is_empty(), "{case}: header {header:?}");
                            let forwarded =
                                String::from_utf8_lossy(&sent.last().unwrap().body).into_owned();
                            assert!(forwarded.contains(secret), "{case}: {forwarded}");
                        }
                    }
                    checked += 1;
                }
            }
            // Every decision recorded, with what was found (detector and field, no text).
            let expected = KINDS.len() * shapes("").len();
            let evaluations = eventually(std::time::Duration::from_secs(20), || async {
                let page = expect_status(
                    app.get(
                        &format!("/policy-evaluations?policy_id={}&limit=100", policy["id"]),
                        &tenant.admin_key,
                    )
                    .await,
                    200,
                )
                .await;
                (page["meta"]["total"] == json!(expected)).then_some(page)
            })
            .await;
            for evaluation in evaluations["data"].as_array().unwrap() {
                let reason = evaluation["reason"].as_str().unwrap_or_default();
                let word = match action {
                    "block" => "",
                    "redact" => "redacted ",
                    _ => "flagged ",
                };
                assert!(
                    reason.starts_with(word) && reason.contains(" at "),
                    "{reason}"
                );
                for (_, _, secret) in KINDS {
                    assert!(!reason.contains(secret), "{reason}");
                }
            }
        }
        assert_eq!(checked, 3 * 10 * 7);
    }
);

db_test!(look_alikes_pass_a_blocking_guardrail_untouched, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "innocent" }))
        .await;
    create_policy(&app, &tenant.admin_key, guardrail("block")).await;
    for text in [
        "order 4111 1111 1111 1112 shipped on 2026-11-27",
        "version 1.2.3 of the build, total 1234567890123",
        "password = \"changeme\"; token: aaaaaaaaaaaaaaaaaaaaaaaa",
        "see https://example.com/ana and DE89 3704 0044 0532 0130 01",
        "AKIA is how an AWS key id starts; EMP-12 is short",
    ] {
        for (path, body) in shapes(text) {
            let (status, header, answer) = post(&proxy, &key, path, &body).await;
            assert_eq!(status, 200, "{text} {path}: {answer}");
            assert!(header.is_empty());
            let mut forwarded: Value = serde_json::from_slice(&provider.last().body).unwrap();
            // Streamed chat completions ask for usage; nothing else may change.
            if let Some(fields) = forwarded.as_object_mut() {
                fields.remove("stream_options");
            }
            assert_eq!(forwarded, body, "{text} {path}: changed");
        }
    }
});

db_test!(a_guardrail_that_cannot_scan_refuses_the_request, |app| {
    let provider = MockProvider::start().await;
    // No time at all to scan: every scan fails, and fails closed.
    let proxy =
        TestProxy::start_with(&app, &provider, |config| config.guardrail_timeout_ms = 0).await;
    let (tenant, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "unscannable" }))
        .await;
    let policy = create_policy(&app, &tenant.admin_key, guardrail("flag")).await;
    for (path, body) in shapes("nothing to find here") {
        let before = provider.requests().len();
        let (status, _, answer) = post(&proxy, &key, path, &body).await;
        assert_eq!(status, 503, "{path}: {answer}");
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(answer["error"]["code"], json!("guardrail_unavailable"));
        assert_eq!(provider.requests().len(), before, "{path}: sent unscanned");
    }
    let metrics = proxy.metrics().await;
    assert!(
        metrics.contains("warden_proxy_guardrail_failures_total 7"),
        "{metrics}"
    );
    // Audited as the guardrail policy's violation.
    eventually(std::time::Duration::from_secs(20), || async {
        let events = app
            .audit_events(&tenant.id, &policy["id"].to_string())
            .await;
        events.contains(&"policy.violated".to_owned()).then_some(())
    })
    .await;
});

/// The guardrail's verdict in the dry run, on content the caller gives.
async fn dry_run(app: &TestApp, key: &str, agent_id: &str, content: Value) -> Value {
    let body = json!({ "agent_id": agent_id, "provider": "openai", "model": "gpt-4o",
                       "content": content });
    let results = expect_status(app.post("/policies/evaluate", key, body).await, 200).await;
    results["data"][0].clone()
}

db_test!(the_dry_run_scans_the_content_it_is_given, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app.register_agent(key, json!({ "name": "dry" })).await;
    let agent_id = agent["id"].as_str().unwrap();
    create_policy(&app, key, guardrail("block")).await;
    let found = dry_run(
        &app,
        key,
        agent_id,
        json!({ "input": "mail ana@example.com" }),
    )
    .await;
    assert_eq!(found["result"], json!("fail"), "{found}");
    assert_eq!(found["reason"], json!("email at input"));
    let clean = dry_run(&app, key, agent_id, json!({ "input": "hello" })).await;
    assert_eq!(clean["result"], json!("pass"));
    let body = json!({ "agent_id": agent_id, "provider": "openai", "model": "gpt-4o" });
    let skipped = expect_status(app.post("/policies/evaluate", key, body).await, 200).await;
    assert_eq!(skipped["data"][0]["result"], json!("skip"));
});

db_test!(
    the_openai_sdk_meets_a_blocking_and_a_redacting_guardrail,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let base = format!("{}/v1", proxy.base);
        let mut answers = Vec::new();
        for action in ["block", "redact"] {
            let (tenant, key, _) = proxy
                .tenant_with_key(&app, json!({ "developer_label": format!("sdk-{action}") }))
                .await;
            create_policy(&app, &tenant.admin_key, guardrail(action)).await;
            let args = [base.as_str(), key.as_str(), "guarded"];
            answers.push(
                crate::proxy::sdk::run("openai-sdk", "openai==1.*", "openai_sdk.py", &args).await,
            );
        }
        assert_eq!(
            answers[0],
            json!({ "error": "PermissionDeniedError", "status": 403, "code": "guardrail_violation" })
        );
        assert_eq!(
            answers[1]["guardrail"],
            json!("redacted email at messages[0].content"),
            "{}",
            answers[1]
        );
        let forwarded = String::from_utf8_lossy(&provider.last().body).into_owned();
        assert!(
            forwarded.contains("Mail the report to [REDACTED:email]"),
            "{forwarded}"
        );
    }
);
