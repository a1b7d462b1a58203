//! Promises tried as an attacker would, through the real proxy: a secret used as a member
//! name, members sent twice, a private key under `redact`, formats the detectors name,
//! one huge string against the scan's time limit, an approval carried to another
//! endpoint, and text that is not Unicode. Tool calls' side is in
//! `mcp_gateway::guardrails`; the database's return in `database_outage`.

use serde_json::{json, Value};

use super::guardrails::guardrail;
use super::{eventually, MockProvider, TestProxy};
use crate::helpers::{create_policy, expect_status, TestApp};

/// A made-up OpenAI key (not a live credential).
const OPENAI_KEY: &str = "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12T3BlbkFJMn34Op56Qr78St90Uv12";
/// A made-up AWS access key id.
const AWS_KEY: &str = "AKIAQYLPMN5HHHFPZAM2";
/// A private key's body lines, which must never reach a provider under `redact`.
const PEM_BODY: [&str; 2] = [
    "MIIEowIBAAKCAQEAv1bXq9L3kTzWc8pYfR2nJ5sE0dHgUiOaBmC4xNvQeT7rKwPy",
    "Z9qk3Lw8Hs2Vd6Fj0Ng4Ra1Tb5Mc7Xe9Yp3Uo2Iq6Wz8Ks1Ld4Ve7Nf0Gh5Jm2=",
];

/// The OpenAI SDK's `chat.completions.create` with `arguments`: the header or the error.
async fn openai_chat(proxy: &TestProxy, key: &str, arguments: Value) -> Value {
    let base = format!("{}/v1", proxy.base);
    let arguments = arguments.to_string();
    let args = [base.as_str(), key, "chat", arguments.as_str()];
    super::sdk::run("openai-sdk", "openai==1.*", "openai_sdk.py", &args).await
}

/// The Anthropic SDK's `messages.create` with `arguments`.
async fn anthropic_create(proxy: &TestProxy, key: &str, arguments: Value) -> Value {
    let arguments = arguments.to_string();
    let args = [proxy.base.as_str(), key, "create", arguments.as_str()];
    super::sdk::run("anthropic-sdk", "anthropic", "anthropic_sdk.py", &args).await
}

/// `body`, bytes as they are, to `path`: the status and the error's code and message.
async fn raw(proxy: &TestProxy, key: &str, path: &str, body: Vec<u8>) -> (u16, String, String) {
    let request = proxy
        .client
        .post(format!("{}{path}", proxy.base))
        .header("content-type", "application/json");
    let request = if path.starts_with("/v1/messages") {
        request
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
    } else {
        request.bearer_auth(key)
    };
    let response = request.body(body).send().await.unwrap();
    let status = response.status().as_u16();
    let answer: Value = response.json().await.unwrap_or_default();
    let text = |field: &str| {
        answer["error"][field]
            .as_str()
            .or(answer["error"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    (status, text("code"), text("message"))
}

/// What the tenant's records say of its requests: decisions and the audit trail.
async fn records(app: &TestApp, admin: &str) -> String {
    let evaluations = expect_status(app.get("/policy-evaluations?limit=100", admin).await, 200);
    let audit = expect_status(app.get("/audit-trail?limit=100", admin).await, 200);
    format!("{} {}", evaluations.await, audit.await)
}

db_test!(
    a_secret_used_as_a_member_name_is_caught_and_never_echoed,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        for action in ["block", "redact"] {
            let (tenant, key, _) = proxy
                .tenant_with_key(
                    &app,
                    json!({ "developer_label": format!("names-{action}") }),
                )
                .await;
            create_policy(&app, &tenant.admin_key, guardrail(action)).await;
            let sent = provider.requests().len();
            let answer = openai_chat(
                &proxy,
                &key,
                json!({ "model": "gpt-4o-mini", "store": true,
                        "messages": [{ "role": "user", "content": "hello" }],
                        "metadata": { OPENAI_KEY: "on", "team": "core" } }),
            )
            .await;
            let shown = answer.to_string();
            assert!(!shown.contains(OPENAI_KEY), "{action}: {shown}");
            let found = "openai_key in the name of metadata.*";
            if action == "block" {
                assert_eq!(answer["status"], json!(403), "{answer}");
                assert_eq!(answer["code"], json!("guardrail_violation"));
                assert!(shown.contains(found), "{shown}");
                assert_eq!(provider.requests().len(), sent, "sent anyway");
            } else {
                assert_eq!(answer["status"], json!(200), "{answer}");
                assert_eq!(answer["guardrail"], json!(format!("redacted {found}")));
                let forwarded: Value = serde_json::from_slice(&provider.last().body).unwrap();
                assert_eq!(
                    forwarded["metadata"],
                    json!({ "[REDACTED:openai_key]": "on", "team": "core" })
                );
            }
            // Nor in what the tenant's records keep of the decision.
            let records = eventually(std::time::Duration::from_secs(20), || async {
                let records = records(&app, &tenant.admin_key).await;
                records.contains("openai_key").then_some(records)
            })
            .await;
            assert!(!records.contains(OPENAI_KEY), "{action}: {records}");
        }
    }
);

db_test!(a_member_sent_twice_is_refused_under_a_guardrail, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let user = |text: &str| format!(r#"[{{"role":"user","content":"{text}"}}]"#);
    let bodies = [
        (
            "/v1/chat/completions",
            format!(
                r#"{{"model":"gpt-4o-mini","messages":{},"messages":{}}}"#,
                user(AWS_KEY),
                user("hi")
            ),
        ),
        (
            "/v1/chat/completions",
            format!(
                r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"{AWS_KEY}","content":"hi"}}]}}"#
            ),
        ),
        (
            "/v1/responses",
            format!(r#"{{"model":"gpt-4o-mini","input":"{AWS_KEY}","input":"hi"}}"#),
        ),
        (
            "/v1/embeddings",
            format!(r#"{{"model":"text-embedding-3-small","input":["{AWS_KEY}"],"input":["hi"]}}"#),
        ),
        (
            "/v1/messages",
            format!(
                r#"{{"model":"claude-sonnet-4-5","max_tokens":16,"messages":{},"messages":{}}}"#,
                user(AWS_KEY),
                user("hi")
            ),
        ),
    ];
    for action in ["block", "redact", "flag"] {
        let (tenant, key, _) = proxy
            .tenant_with_key(
                &app,
                json!({ "developer_label": format!("twice-{action}") }),
            )
            .await;
        create_policy(&app, &tenant.admin_key, guardrail(action)).await;
        for (path, body) in &bodies {
            let sent = provider.requests().len();
            let (status, code, message) = raw(&proxy, &key, path, body.clone().into_bytes()).await;
            let case = format!("{action} {path} {body}");
            assert_eq!(
                (status, code.as_str()),
                (400, "invalid_request"),
                "{case}: {message}"
            );
            assert!(
                message.contains("names a member twice"),
                "{case}: {message}"
            );
            assert!(!message.contains(AWS_KEY), "{case}: {message}");
            assert_eq!(provider.requests().len(), sent, "{case}: sent");
        }
    }
});

db_test!(redact_replaces_a_private_key_whole, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "pem" }))
        .await;
    create_policy(&app, &tenant.admin_key, guardrail("redact")).await;
    let pem = format!(
        "-----BEGIN RSA PRIVATE KEY-----\n{}\n{}\n-----END RSA PRIVATE KEY-----",
        PEM_BODY[0], PEM_BODY[1]
    );
    let answer = anthropic_create(
        &proxy,
        &key,
        json!({ "model": "claude-sonnet-4-5", "max_tokens": 16,
                "messages": [{ "role": "user", "content": format!("Deploy with\n{pem}\nthanks") }] }),
    )
    .await;
    assert_eq!(answer["status"], json!(200), "{answer}");
    assert_eq!(
        answer["guardrail"],
        json!("redacted private_key at messages[0].content")
    );
    let forwarded: Value = serde_json::from_slice(&provider.last().body).unwrap();
    assert_eq!(
        forwarded["messages"][0]["content"],
        json!("Deploy with\n[REDACTED:private_key]\nthanks")
    );
});

db_test!(formats_the_detectors_name_are_caught, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "formats" }))
        .await;
    create_policy(&app, &tenant.admin_key, guardrail("block")).await;
    for (detector, text) in [
        (
            "slack_token",
            "use xapp-1-A0123BCDE45-4567890123456-0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d",
        ),
        ("phone", "call me at 415-555-0132 tomorrow"),
    ] {
        let answer = openai_chat(
            &proxy,
            &key,
            json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": text }] }),
        )
        .await;
        assert_eq!(answer["status"], json!(403), "{text}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("{detector} at messages[0].content")),
            "{message}"
        );
    }
});

db_test!(the_time_limit_holds_inside_one_long_string, |app| {
    let provider = MockProvider::start().await;
    let proxy =
        TestProxy::start_with(&app, &provider, |config| config.guardrail_timeout_ms = 2).await;
    let (tenant, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "long" }))
        .await;
    create_policy(&app, &tenant.admin_key, guardrail("flag")).await;
    // One string of 16 MiB.
    let text = "the quarterly numbers look fine ".repeat(1 << 19);
    let body = json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": text }] });
    let (status, code, message) = raw(
        &proxy,
        &key,
        "/v1/chat/completions",
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(
        (status, code.as_str()),
        (503, "guardrail_unavailable"),
        "{message}"
    );
    assert!(provider.requests().is_empty(), "sent unscanned");
});

db_test!(an_approved_token_count_releases_no_generation, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "counter" }))
        .await;
    let admin = tenant.admin_key.clone();
    create_policy(
        &app,
        &admin,
        json!({ "name": "each claude request", "policy_type": "require_approval",
                "config": { "models": ["claude-*"], "releases": "action" } }),
    )
    .await;
    let body = json!({ "model": "claude-sonnet-4-5", "max_tokens": 64,
                       "messages": [{ "role": "user", "content": "Drop the staging database" }] });
    let body = serde_json::to_vec(&body).unwrap();
    let send = |path: &'static str| raw(&proxy, &key, path, body.clone());
    let count = "/v1/messages/count_tokens";
    assert_eq!(send(count).await.0, 403);
    let page = expect_status(app.get("/approvals?status=pending", &admin).await, 200).await;
    let approval = page["data"][0]["id"].clone();
    expect_status(
        app.post(
            &format!("/approvals/{approval}/decide"),
            &admin,
            json!({ "reviewer_id": "oncall", "decision": "approved" }),
        )
        .await,
        204,
    )
    .await;
    // The same bytes to the endpoint that generates: another action, held on its own.
    assert_eq!(send("/v1/messages").await.0, 403);
    assert!(provider.requests().is_empty(), "a generation was released");
    // The approved action passes, once.
    assert_eq!(send(count).await.0, 200);
    assert_eq!(send(count).await.0, 403);
});

db_test!(text_that_is_not_unicode_is_the_requests_fault, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "bytes" }))
        .await;
    create_policy(&app, &tenant.admin_key, guardrail("flag")).await;
    let lone_surrogate =
        br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a\ud800b"}]}"#;
    let not_utf8 = b"{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfeb\"}]}";
    for body in [&lone_surrogate[..], &not_utf8[..]] {
        let (status, code, message) =
            raw(&proxy, &key, "/v1/chat/completions", body.to_vec()).await;
        assert_eq!(
            (status, code.as_str()),
            (400, "invalid_request"),
            "{message}"
        );
    }
    assert!(provider.requests().is_empty());
});
