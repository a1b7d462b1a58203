//! A `require_approval` policy on models that releases the `action`: the approval lets
//! the very request that was held (the same body) through once, and no other prompt.

use serde_json::{json, Value};

use super::{MockProvider, TestProxy};
use crate::helpers::{create_policy, expect_status};

db_test!(
    an_approved_model_request_passes_once_with_its_own_body_only,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "deployer" }))
            .await;
        let admin = tenant.admin_key.clone();
        let policy = create_policy(
            &app,
            &admin,
            json!({ "name": "each deploy prompt", "policy_type": "require_approval",
                "config": { "models": ["gpt-4o"], "releases": "action" } }),
        )
        .await;
        let prompt = |text: &str| json!({ "model": "gpt-4o", "messages": [{ "role": "user", "content": text }] });
        let status = |body: Value| {
            let (proxy, raw) = (&proxy, raw.clone());
            async move { proxy.chat(&raw, body).await.status().as_u16() }
        };
        assert_eq!(status(prompt("Deploy build 41")).await, 403);
        let page = expect_status(app.get("/approvals?status=pending", &admin).await, 200).await;
        let approval = page["data"][0].clone();
        assert_eq!(approval["policy_id"], policy["id"]);
        assert_eq!(approval["releases"], json!("action"));
        expect_status(
            app.post(
                &format!("/approvals/{}/decide", approval["id"]),
                &admin,
                json!({ "reviewer_id": "oncall", "decision": "approved" }),
            )
            .await,
            204,
        )
        .await;
        // Another prompt to the same model is another action; the approved one passes once.
        assert_eq!(status(prompt("Deploy build 42")).await, 403);
        assert_eq!(status(prompt("Deploy build 41")).await, 200);
        assert_eq!(status(prompt("Deploy build 41")).await, 403);
    }
);
