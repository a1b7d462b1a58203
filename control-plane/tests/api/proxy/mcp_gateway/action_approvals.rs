//! An approval of a held tool call releases that very call (its server, tool, arguments
//! and approved definition), not an hour of anything alike: by default once, claimed by
//! exactly one of the proxies that race its retry, remembered across a proxy's start;
//! `action_repeatable` lets the same call through until it expires; other arguments wait
//! for approvals of their own.

use serde_json::{json, Value};

use super::{call, register, Upstream};
use crate::helpers::{create_policy, expect_status, TestApp};
use crate::proxy::{MockProvider, TestProxy};

async fn pending(app: &TestApp, admin: &str) -> Vec<Value> {
    let page = expect_status(app.get("/approvals?status=pending", admin).await, 200).await;
    page["data"].as_array().unwrap().clone()
}

async fn approve(app: &TestApp, admin: &str, id: &Value) {
    expect_status(
        app.post(
            &format!("/approvals/{id}/decide"),
            admin,
            json!({ "reviewer_id": "oncall", "decision": "approved" }),
        )
        .await,
        204,
    )
    .await;
}

fn code(answer: &Value) -> &Value {
    &answer["error"]["data"]["code"]
}

db_test!(
    an_approval_releases_the_approved_call_once_and_nothing_else,
    |config| config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()],
    |app| {
        let upstream = Upstream::start().await;
        let provider = MockProvider::start().await;
        let first = TestProxy::start(&app, &provider).await;
        let second = TestProxy::start(&app, &provider).await;
        let (tenant, key, _) = first
            .tenant_with_key(&app, json!({ "developer_label": "cleaner" }))
            .await;
        let admin = tenant.admin_key.clone();
        register(&app, &admin, &upstream).await;
        let policy = create_policy(
            &app,
            &admin,
            json!({ "name": "issues need a human", "policy_type": "require_approval",
                    "config": { "tools": ["docs__create_issue"] } }),
        )
        .await;
        assert_eq!(policy["config"]["releases"], json!("action"));
        let (one, two) = (
            format!("{}/mcp", first.base),
            format!("{}/mcp", second.base),
        );
        let safe = json!({ "title": "feature-x", "body": "close it" });
        let other = json!({ "title": "main", "body": "close it" });

        // Two calls with other arguments are two approvals, each showing what it covers.
        let held = call(&one, &key, "docs__create_issue", safe.clone()).await;
        assert_eq!(code(&held), &json!("approval_required"), "{held}");
        let held = call(&one, &key, "docs__create_issue", other.clone()).await;
        assert_eq!(code(&held), &json!("approval_required"), "{held}");
        let asked = pending(&app, &admin).await;
        assert_eq!(asked.len(), 2, "{asked:?}");
        let of = |title: &str| {
            asked
                .iter()
                .find(|a| a["request_context"]["arguments"]["title"] == json!(title))
                .cloned()
                .unwrap()
        };
        let (approved, waiting) = (of("feature-x"), of("main"));
        assert_eq!(approved["releases"], json!("action"));
        assert!(approved["covers"].as_str().unwrap().contains("once"));
        assert_eq!(approved["action_digest"].as_str().unwrap().len(), 64);
        assert_ne!(approved["action_digest"], waiting["action_digest"]);
        approve(&app, &admin, &approved["id"]).await;

        // The approval for `feature-x` never releases `main`.
        let refused = call(&one, &key, "docs__create_issue", other.clone()).await;
        assert_eq!(code(&refused), &json!("approval_required"), "{refused}");

        // Both proxies race the approved retry: exactly one call goes through.
        let (a, b) = tokio::join!(
            call(&one, &key, "docs__create_issue", safe.clone()),
            call(&two, &key, "docs__create_issue", safe.clone()),
        );
        let passed = [&a, &b]
            .iter()
            .filter(|answer| answer["text"] == json!("opened: feature-x"))
            .count();
        assert_eq!(passed, 1, "one of the racing retries passes: {a} / {b}");
        let loser = if a["text"].is_string() { &b } else { &a };
        assert_eq!(code(loser), &json!("approval_required"), "{loser}");
        let used = expect_status(
            app.get(&format!("/approvals/{}", approved["id"]), &admin)
                .await,
            200,
        )
        .await;
        assert!(used["data"]["consumed_at"].is_string(), "{used}");
        assert!(app
            .audit_events(&tenant.id, &approved["id"].to_string())
            .await
            .contains(&"approval.used".to_owned()));

        // Used up: the same call asks for an approval again. Approved, it is honoured by
        // a proxy started afterwards (state from the control plane), once.
        let again = call(&one, &key, "docs__create_issue", safe.clone()).await;
        assert_eq!(code(&again), &json!("approval_required"), "{again}");
        let renewed = pending(&app, &admin)
            .await
            .into_iter()
            .find(|a| a["action_digest"] == approved["action_digest"])
            .expect("a new approval of the same action");
        approve(&app, &admin, &renewed["id"]).await;
        let third = TestProxy::start(&app, &provider).await;
        let three = format!("{}/mcp", third.base);
        let opened = call(&three, &key, "docs__create_issue", safe.clone()).await;
        assert_eq!(opened["text"], json!("opened: feature-x"), "{opened}");
        let after = call(&two, &key, "docs__create_issue", safe.clone()).await;
        assert_eq!(code(&after), &json!("approval_required"), "{after}");

        // `action_repeatable`: the same call until the approval expires, no other.
        create_policy(
            &app,
            &admin,
            json!({ "name": "sums need a human", "policy_type": "require_approval",
                    "config": { "tools": ["docs__add"], "releases": "action_repeatable" } }),
        )
        .await;
        let sum = json!({ "a": 2, "b": 3 });
        let held = call(&one, &key, "docs__add", sum.clone()).await;
        assert_eq!(code(&held), &json!("approval_required"), "{held}");
        let asked = pending(&app, &admin).await;
        let repeatable = asked
            .iter()
            .find(|a| a["releases"] == json!("action_repeatable"))
            .unwrap();
        approve(&app, &admin, &repeatable["id"]).await;
        for url in [&one, &two, &one] {
            assert_eq!(
                call(url, &key, "docs__add", sum.clone()).await["text"],
                json!("5")
            );
        }
        let refused = call(&one, &key, "docs__add", json!({ "a": 3, "b": 3 })).await;
        assert_eq!(code(&refused), &json!("approval_required"), "{refused}");
    }
);
