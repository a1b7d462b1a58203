//! Read-your-writes for enforcement: when a management call that changes what the
//! proxies enforce returns, every connected proxy already enforces it. Each request here
//! follows its write at once, with no retry loop, through every proxy; on PostgreSQL
//! also with two control-plane replicas sharing the database, each followed by its own
//! proxy.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_control_plane::config::Secret;

use super::{simple_chat, MockProvider, TestProxy};
use crate::helpers::{create_policy, expect_status, Backend, TestApp};

/// The status and error code of one chat request, sent once.
async fn attempt(proxy: &TestProxy, key: &str) -> (u16, String) {
    let response = proxy.chat(key, simple_chat("gpt-4o")).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or_default();
    // The OpenAI error shape, or `{"error": "approval_required", ...}` for a held request.
    let code = body["error"]["code"]
        .as_str()
        .or(body["error"].as_str())
        .unwrap_or_default()
        .to_owned();
    (status, code)
}

/// Every proxy answers `status` (and `code`) to the very next request.
async fn all_answer(proxies: &[&TestProxy], key: &str, status: u16, code: &str, after: &str) {
    for (index, proxy) in proxies.iter().enumerate() {
        assert_eq!(
            attempt(proxy, key).await,
            (status, code.to_owned()),
            "proxy {index}, right after {after}"
        );
    }
}

/// The write answered `expected` and said every connected proxy applied it.
async fn applied(response: reqwest::Response, expected: u16) -> Value {
    let header = response
        .headers()
        .get("warden-enforcement")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(header.as_deref(), Some("applied"), "{response:?}");
    if expected == 204 {
        assert_eq!(response.status().as_u16(), 204);
        return Value::Null;
    }
    expect_status(response, expected).await
}

/// Key creation, block, unblock, quarantine, release, a policy and revocation, each
/// followed at once by a request through each of `proxies`; `writers` take turns making
/// the changes (one control plane, or two replicas of one database).
pub(super) async fn changes_are_in_force_when_answered(
    writers: &[&TestApp],
    proxies: &[&TestProxy],
) {
    let app = writers[0];
    let tenant = app.new_tenant("starter").await;
    let admin = tenant.admin_key.clone();
    let writer = |step: usize| writers[step % writers.len()];

    let created = applied(
        writer(0)
            .post(
                "/proxy-keys",
                &admin,
                json!({ "developer_label": "read-your-writes" }),
            )
            .await,
        201,
    )
    .await;
    let key = created["data"]["raw_key"].as_str().unwrap().to_owned();
    let agent = created["data"]["agent_id"].as_str().unwrap().to_owned();
    all_answer(proxies, &key, 200, "", "the key was created").await;

    let steps = [
        ("block", 403, "agent_blocked"),
        ("unblock", 200, ""),
        ("quarantine", 403, "agent_quarantined"),
        ("release-quarantine", 200, ""),
    ];
    for (step, (action, status, code)) in steps.into_iter().enumerate() {
        let path = format!("/agents/{agent}/{action}");
        let body = json!({ "reason": "read-your-writes" });
        let body = if action.contains("block") || action == "quarantine" {
            body
        } else {
            json!({})
        };
        applied(writer(step + 1).post(&path, &admin, body).await, 204).await;
        all_answer(proxies, &key, status, code, action).await;
    }

    applied(
        writer(5)
            .post(
                "/policies",
                &admin,
                json!({ "name": "no openai", "policy_type": "block_provider",
                        "config": { "providers": ["openai"] } }),
            )
            .await,
        201,
    )
    .await;
    all_answer(
        proxies,
        &key,
        403,
        "policy_violation",
        "the policy was created",
    )
    .await;

    let key_id = created["data"]["api_key_id"].as_str().unwrap();
    applied(
        writer(6)
            .delete(&format!("/proxy-keys/{key_id}"), &admin)
            .await,
        204,
    )
    .await;
    all_answer(proxies, &key, 401, "invalid_api_key", "the key was revoked").await;
}

db_test!(two_proxies_enforce_a_change_when_its_call_returns, |app| {
    let provider = MockProvider::start().await;
    let first = TestProxy::start(&app, &provider).await;
    let second = TestProxy::start(&app, &provider).await;
    changes_are_in_force_when_answered(&[&app], &[&first, &second]).await;
});

/// Two control-plane replicas on one PostgreSQL database, each followed by a proxy of
/// its own: a write through either is in force in both proxies when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_and_two_proxies_enforce_a_change_when_its_call_returns() {
    // A database of their own: every proxy connected to it is waited for, and the
    // other tests' replicas come and go.
    let one = TestApp::spawn_alone(Backend::Postgres, |_| {}).await;
    let two = TestApp::spawn_with(Backend::Postgres, |config| {
        config.database_url = Secret::new(one.database_url());
    })
    .await;
    let provider = MockProvider::start().await;
    let first = TestProxy::start(&one, &provider).await;
    let second = TestProxy::start(&two, &provider).await;
    changes_are_in_force_when_answered(&[&one, &two], &[&first, &second]).await;
}

db_test!(an_approval_is_listed_when_its_refusal_is_answered, |app| {
    let held = crate::proxy::HeldForApproval::start(&app, "held").await;
    let (proxy, tenant, key) = (&held.proxy, &held.tenant, &held.key);
    assert_eq!(attempt(proxy, key).await, (403, "approval_required".into()));
    let pending = expect_status(
        app.get("/approvals?status=pending", &tenant.admin_key)
            .await,
        200,
    )
    .await;
    assert_eq!(pending["data"].as_array().unwrap().len(), 1, "{pending}");
    let approval = pending["data"][0]["id"].clone();
    applied(
        app.post(
            &format!("/approvals/{approval}/decide"),
            &tenant.admin_key,
            json!({ "reviewer_id": "ana", "decision": "approved" }),
        )
        .await,
        204,
    )
    .await;
    assert_eq!(attempt(proxy, key).await, (200, String::new()));
    // The refusal's decision was written once, with its approval.
    let again = expect_status(
        app.get("/approvals?status=pending", &tenant.admin_key)
            .await,
        200,
    )
    .await;
    assert_eq!(again["data"].as_array().unwrap().len(), 0, "{again}");
});

db_test!(
    moving_an_agent_to_another_team_or_environment_reaches_the_proxies,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, key, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "mover" }))
            .await;
        let admin = tenant.admin_key.clone();
        let agent = created["agent_id"].as_str().unwrap().to_owned();
        let team = expect_status(
            app.post("/teams", &admin, json!({ "name": "red" })).await,
            201,
        )
        .await["data"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        create_policy(
            &app,
            &admin,
            json!({ "name": "red team: no openai", "policy_type": "block_provider",
                    "scope": format!("team:{team}"), "config": { "providers": ["openai"] } }),
        )
        .await;
        create_policy(
            &app,
            &admin,
            json!({ "name": "staging: approve gpt-4o", "policy_type": "require_approval",
                    "scope": "environment:staging", "config": { "models": ["gpt-4o"] } }),
        )
        .await;
        assert_eq!(attempt(&proxy, &key).await, (200, String::new()));

        let moved = app
            .patch(
                &format!("/agents/{agent}"),
                &admin,
                json!({ "team": "red" }),
            )
            .await;
        applied(moved, 200).await;
        assert_eq!(
            attempt(&proxy, &key).await,
            (403, "policy_violation".into())
        );

        let back = app
            .patch(&format!("/agents/{agent}"), &admin, json!({ "team": null }))
            .await;
        applied(back, 200).await;
        assert_eq!(attempt(&proxy, &key).await, (200, String::new()));

        let staged = app
            .patch(
                &format!("/agents/{agent}"),
                &admin,
                json!({ "environment": "staging" }),
            )
            .await;
        applied(staged, 200).await;
        assert_eq!(
            attempt(&proxy, &key).await,
            (403, "approval_required".into())
        );

        // A change the proxies do not hold waits for nobody and says nothing.
        let renamed = app
            .patch(
                &format!("/agents/{agent}"),
                &admin,
                json!({ "description": "moved twice" }),
            )
            .await;
        assert!(renamed.headers().get("warden-enforcement").is_none());
        expect_status(renamed, 200).await;
    }
);

/// A proxy that is connected but never acknowledges (stuck, or gone without closing its
/// stream) delays a write by the bound at most, and the answer says it is pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_never_confirms_does_not_hold_writes_hostage() {
    let app = TestApp::spawn_with(Backend::Sqlite, |config| {
        config.enforcement_wait_ms = 300;
    })
    .await;
    // A stream opened under a proxy id that then never acknowledges anything.
    let mut stuck = app
        .client
        .get(format!(
            "{}/internal/v1/proxy-state?proxy=ins_stuck",
            app.base
        ))
        .bearer_auth(crate::helpers::SERVICE_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(stuck.status(), 200);
    assert!(
        stuck.chunk().await.unwrap().is_some(),
        "the snapshot arrives"
    );

    let tenant = app.new_tenant("starter").await;
    let started = Instant::now();
    let response = app
        .post(
            "/proxy-keys",
            &tenant.admin_key,
            json!({ "developer_label": "waits" }),
        )
        .await;
    let waited = started.elapsed();
    assert_eq!(
        response
            .headers()
            .get("warden-enforcement")
            .map(|v| v.to_str().unwrap().to_owned())
            .as_deref(),
        Some("pending; unconfirmed=1")
    );
    expect_status(response, 201).await;
    assert!(waited >= Duration::from_millis(300), "waited {waited:?}");
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");

    let metrics = app.metrics().await;
    assert!(
        metrics.contains("warden_enforcement_writes_total{outcome=\"pending\"} 1"),
        "{metrics}"
    );

    // Once the stuck proxy hangs up, writes no longer wait for it.
    drop(stuck);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let response = app
            .post(
                "/proxy-keys",
                &tenant.admin_key,
                json!({ "developer_label": "after" }),
            )
            .await;
        let header = response.headers().get("warden-enforcement").cloned();
        expect_status(response, 201).await;
        if header.is_some_and(|h| h == "applied") {
            break;
        }
        assert!(Instant::now() < deadline, "the closed stream still counts");
    }
}
