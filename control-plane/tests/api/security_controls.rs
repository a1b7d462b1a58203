//! Security controls (spec 4.3): lifecycle (expiry the proxy enforces, review schedule,
//! sponsor) with the expired and due-review lists, owners, the relationship graph of
//! agents that went through the proxy, and the posture that follows the tenant's state.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, TestApp, TestTenant};
use crate::proxy::{eventually, simple_chat, MockProvider, TestProxy};

const DAY_MS: i64 = 86_400_000;

async fn new_agent(app: &TestApp, tenant: &TestTenant, name: &str) -> String {
    app.register_agent(&tenant.admin_key, json!({ "name": name }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn lifecycle(app: &TestApp, key: &str, agent: &str, body: Value) -> reqwest::Response {
    app.patch(&format!("/agents/{agent}/lifecycle"), key, body)
        .await
}

fn ids(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect()
}

db_test!(lifecycle_sets_expiry_review_and_sponsor, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = new_agent(&app, &tenant, "scheduled").await;
    let other = new_agent(&app, &tenant, "unscheduled").await;
    let now = app.clock.now().as_millis();
    let expiry = warden_shared::timestamp::Timestamp::from_millis(now + 10 * DAY_MS).to_string();
    let set = lifecycle(
        &app,
        key,
        &agent,
        json!({ "expires_at": expiry, "review_frequency": "monthly",
        "sponsor_id": "cto@acme.example" }),
    )
    .await;
    assert_eq!(set.status(), 204);
    let shown =
        expect_status(app.get(&format!("/agents/{agent}"), key).await, 200).await["data"].clone();
    assert_eq!(shown["expires_at"], expiry.as_str());
    assert_eq!(shown["review_frequency"], "monthly");
    assert_eq!(shown["sponsor_id"], "cto@acme.example");
    let review = warden_shared::timestamp::Timestamp::from_millis(now + 30 * DAY_MS).to_string();
    assert_eq!(shown["review_date"], review.as_str());
    assert!(app
        .audit_events(&tenant.id, &agent)
        .await
        .contains(&"agent.lifecycle_updated".to_owned()));

    let expired = || app.get("/agents/expired", key);
    let due = || app.get("/agents/due-review", key);
    assert!(ids(&expect_status(expired().await, 200).await).is_empty());
    app.clock.advance(11 * DAY_MS);
    assert_eq!(
        ids(&expect_status(expired().await, 200).await),
        std::slice::from_ref(&agent)
    );
    assert!(ids(&expect_status(due().await, 200).await).is_empty());
    app.clock.advance(20 * DAY_MS);
    assert_eq!(
        ids(&expect_status(due().await, 200).await),
        std::slice::from_ref(&agent)
    );
    // Sending the frequency again records a review: not due any more.
    assert_eq!(
        lifecycle(&app, key, &agent, json!({ "review_frequency": "monthly" }))
            .await
            .status(),
        204
    );
    assert!(ids(&expect_status(due().await, 200).await).is_empty());
    // null clears; absent fields stay.
    assert_eq!(
        lifecycle(&app, key, &agent, json!({ "expires_at": null }))
            .await
            .status(),
        204
    );
    let cleared =
        expect_status(app.get(&format!("/agents/{agent}"), key).await, 200).await["data"].clone();
    assert_eq!(cleared["expires_at"], Value::Null);
    assert_eq!(cleared["sponsor_id"], "cto@acme.example");
    assert!(ids(&expect_status(expired().await, 200).await).is_empty());

    for body in [
        json!({ "expires_at": "next week" }),
        json!({ "review_frequency": "daily" }),
        json!({ "sponsor_id": "" }),
        json!({ "owner": "x" }),
    ] {
        expect_error(
            lifecycle(&app, key, &other, body).await,
            422,
            "validation_failed",
        )
        .await;
    }
    let untouched =
        expect_status(app.get(&format!("/agents/{other}"), key).await, 200).await["data"].clone();
    assert_eq!(untouched["review_frequency"], Value::Null);
    let stranger = app.new_tenant("starter").await;
    expect_error(
        lifecycle(
            &app,
            &stranger.admin_key,
            &agent,
            json!({ "sponsor_id": "x" }),
        )
        .await,
        404,
        "not_found",
    )
    .await;
    assert!(
        ids(&expect_status(app.get("/agents/expired", &stranger.admin_key).await, 200).await)
            .is_empty()
    );
});

db_test!(the_proxy_refuses_an_agent_whose_lifecycle_expired, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, key, created) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "short-lived" }))
        .await;
    let agent = created["agent_id"].as_str().unwrap();
    // An expiry two seconds from now, by the clock both planes read.
    let soon = warden_shared::timestamp::Timestamp::from_millis(app.clock.now_ms() + 2_000);
    let set = lifecycle(
        &app,
        &tenant.admin_key,
        agent,
        json!({ "expires_at": soon.to_string() }),
    )
    .await;
    assert_eq!(set.headers()["warden-enforcement"], "applied");
    assert_eq!(
        proxy.chat(&key, simple_chat("gpt-4o-mini")).await.status(),
        200
    );
    // The moment it passes, the proxy refuses the agent: nothing to wait for.
    app.clock.advance(2_000);
    let refused = proxy.chat(&key, simple_chat("gpt-4o-mini")).await;
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "agent_expired", "{body}");
    // An expiry already past (an inventory synced late): accepted, the agent is expired
    // at once, listed so, refused by the proxy, and audited as expired.
    let (other_key, other) = proxy
        .new_key(
            &app,
            &tenant.admin_key,
            json!({ "developer_label": "already gone" }),
        )
        .await;
    let other_agent = other["agent_id"].as_str().unwrap();
    let set = lifecycle(
        &app,
        &tenant.admin_key,
        other_agent,
        json!({ "expires_at": "2001-01-01T00:00:00Z" }),
    )
    .await;
    assert_eq!(set.status(), 204);
    assert_eq!(set.headers()["warden-enforcement"], "applied");
    let refused = proxy.chat(&other_key, simple_chat("gpt-4o-mini")).await;
    assert_eq!(refused.status(), 403);
    let expired = expect_status(app.get("/agents/expired", &tenant.admin_key).await, 200).await;
    assert!(
        expired["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == other_agent),
        "{expired}"
    );
    let trail = expect_status(
        app.get(
            "/audit-trail?event_type=agent.lifecycle_updated",
            &tenant.admin_key,
        )
        .await,
        200,
    )
    .await;
    let event = trail["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["target_id"] == other_agent)
        .cloned()
        .unwrap();
    assert_eq!(event["details"]["expired"], json!(true), "{event}");

    // Extended: served again at once.
    let later = warden_shared::timestamp::Timestamp::from_millis(crate::helpers::now_ms() + DAY_MS);
    lifecycle(
        &app,
        &tenant.admin_key,
        agent,
        json!({ "expires_at": later.to_string() }),
    )
    .await;
    assert_eq!(
        proxy.chat(&key, simple_chat("gpt-4o-mini")).await.status(),
        200
    );
});

db_test!(owners_are_added_listed_and_removed, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = new_agent(&app, &tenant, "owned").await;
    let second = new_agent(&app, &tenant, "also-owned").await;
    let add = |agent: String, body: Value| {
        let app = &app;
        async move {
            app.post(&format!("/agents/{agent}/owners"), key, body)
                .await
        }
    };
    let ana = expect_status(
        add(
            agent.clone(),
            json!({ "owner_type": "user", "owner_id": "ana@acme.example",
        "owner_name": "Ana" }),
        )
        .await,
        201,
    )
    .await["data"]
        .clone();
    assert!(ana["id"].is_i64(), "{ana}");
    assert_eq!(
        ana["permissions"],
        json!({ "can_invoke": true, "can_configure": false, "can_delete": false })
    );
    let team = expect_status(
        add(
            agent.clone(),
            json!({ "owner_type": "team", "owner_id": "payments",
        "owner_name": "Payments", "permissions": { "can_configure": true } }),
        )
        .await,
        201,
    )
    .await["data"]
        .clone();
    assert_eq!(team["permissions"]["can_configure"], true);
    expect_status(
        add(
            second.clone(),
            json!({ "owner_type": "user", "owner_id": "ana@acme.example",
        "owner_name": "Ana" }),
        )
        .await,
        201,
    )
    .await;
    let again = add(
        agent.clone(),
        json!({ "owner_type": "user", "owner_id": "ana@acme.example", "owner_name": "A" }),
    )
    .await;
    expect_error(again, 409, "owner_exists").await;
    for body in [
        json!({ "owner_type": "robot", "owner_id": "x", "owner_name": "x" }),
        json!({ "owner_type": "user", "owner_id": "", "owner_name": "x" }),
        json!({ "owner_type": "user", "owner_id": "x" }),
        json!({ "owner_type": "user", "owner_id": "x", "owner_name": "x", "permissions": { "can_fly": true } }),
    ] {
        expect_error(add(agent.clone(), body).await, 422, "validation_failed").await;
    }

    let reader = app.key_with_scopes(&tenant, &["registry:read"]).await;
    let owners = expect_status(
        app.get(&format!("/agents/{agent}/owners"), &reader).await,
        200,
    )
    .await;
    let names: Vec<&str> = owners["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["owner_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Ana", "Payments"]);
    let owned = expect_status(
        app.get("/owners/ana@acme.example/agents", &reader).await,
        200,
    )
    .await;
    assert_eq!(ids(&owned), [agent.clone(), second.clone()]);
    expect_error(
        app.post(
            &format!("/agents/{agent}/owners"),
            &reader,
            json!({ "owner_type": "user", "owner_id": "b", "owner_name": "B" }),
        )
        .await,
        403,
        "insufficient_scope",
    )
    .await;

    let record = ana["id"].as_i64().unwrap();
    assert_eq!(
        app.delete(&format!("/agents/{agent}/owners/{record}"), key)
            .await
            .status(),
        204
    );
    expect_error(
        app.delete(&format!("/agents/{agent}/owners/{record}"), key)
            .await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.delete(&format!("/agents/{agent}/owners/ana"), key)
            .await,
        404,
        "not_found",
    )
    .await;
    let team_record = team["id"].as_i64().unwrap();
    // A record of this agent, named under another agent: not found there.
    expect_error(
        app.delete(&format!("/agents/{second}/owners/{team_record}"), key)
            .await,
        404,
        "not_found",
    )
    .await;
    let stranger = app.new_tenant("starter").await;
    expect_error(
        app.delete(
            &format!("/agents/{agent}/owners/{team_record}"),
            &stranger.admin_key,
        )
        .await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.get(&format!("/agents/{agent}/owners"), &stranger.admin_key)
            .await,
        404,
        "not_found",
    )
    .await;
    assert!(ids(&expect_status(
        app.get("/owners/payments/agents", &stranger.admin_key)
            .await,
        200
    )
    .await)
    .is_empty());
    let events = app.audit_events(&tenant.id, &agent).await;
    assert_eq!(
        events.iter().filter(|e| *e == "agent.owner_added").count(),
        2
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| *e == "agent.owner_removed")
            .count(),
        1
    );
});

db_test!(
    the_graph_shows_what_agents_called_through_the_proxy,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, key, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "caller" }))
            .await;
        let agent = created["agent_id"].as_str().unwrap().to_owned();
        let idle = new_agent(&app, &tenant, "idle").await;
        for model in ["gpt-4o-mini", "gpt-4o-mini", "gpt-4o"] {
            assert_eq!(proxy.chat(&key, simple_chat(model)).await.status(), 200);
        }
        let blocked = app
            .post(
                &format!("/agents/{idle}/block"),
                &tenant.admin_key,
                json!({}),
            )
            .await;
        assert_eq!(blocked.status(), 204);
        let graph = eventually(Duration::from_secs(10), || async {
            let graph = expect_status(
                app.get("/relationships/graph", &tenant.admin_key).await,
                200,
            )
            .await["data"]
                .clone();
            (graph["edges"].as_array().unwrap().len() == 4).then_some(graph)
        })
        .await;
        let node = |id: &str| {
            graph["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|n| n["id"] == id)
                .cloned()
                .unwrap()
        };
        assert_eq!(node(&agent)["type"], "agent");
        assert_eq!(node(&idle)["blocked"], true);
        assert_eq!(node("model:gpt-4o-mini")["type"], "model");
        assert_eq!(node("provider:openai")["type"], "provider");
        let edge = |source: &str, target: &str| {
            graph["edges"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["source"] == source && e["target"] == target)
                .cloned()
                .unwrap()
        };
        assert_eq!(edge(&agent, "model:gpt-4o-mini")["request_count"], 2);
        assert_eq!(edge(&agent, "model:gpt-4o-mini")["type"], "calls_model");
        assert_eq!(edge("model:gpt-4o", "provider:openai")["type"], "served_by");

        let mine = expect_status(
            app.get(&format!("/agents/{agent}/relationships"), &tenant.admin_key)
                .await,
            200,
        )
        .await["data"]
            .clone();
        assert_eq!(
            mine["models"][0],
            json!({ "provider": "openai", "model": "gpt-4o-mini", "request_count": 2 })
        );
        assert_eq!(
            mine["providers"],
            json!([{ "provider": "openai", "request_count": 3 }])
        );
        assert_eq!(mine["tools"], json!([]));
        let stranger = app.new_tenant("starter").await;
        let theirs = expect_status(
            app.get("/relationships/graph", &stranger.admin_key).await,
            200,
        )
        .await["data"]
            .clone();
        assert_eq!(theirs, json!({ "nodes": [], "edges": [] }));
        expect_error(
            app.get(
                &format!("/agents/{agent}/relationships"),
                &stranger.admin_key,
            )
            .await,
            404,
            "not_found",
        )
        .await;
    }
);

db_test!(the_posture_follows_the_tenants_state, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let posture = || async {
        let body =
            expect_status(app.get("/security/posture", key).await, 200).await["data"].clone();
        let scores: Vec<(String, i64)> = body["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_owned(),
                    c["score"].as_i64().unwrap(),
                )
            })
            .collect();
        (body, scores)
    };
    let (empty, _) = posture().await;
    assert_eq!(empty["score"], 100);
    assert_eq!(empty["max_score"], 100);

    let first = new_agent(&app, &tenant, "first").await;
    let second = new_agent(&app, &tenant, "second").await;
    let (bare, scores) = posture().await;
    assert_eq!(
        scores,
        [
            ("Agent Ownership".into(), 0),
            ("Agent Expiry".into(), 0),
            ("Access Reviews".into(), 0),
            ("Quarantine Status".into(), 15),
            ("Kill Switch Status".into(), 15),
            ("Risk Classification".into(), 0)
        ]
    );
    assert_eq!(bare["score"], 30);
    let ownership = &bare["components"][0]["detail"];
    assert!(
        ownership
            .as_str()
            .unwrap()
            .contains("2 of 2 agents have no owner"),
        "{ownership}"
    );

    expect_status(
        app.post(
            &format!("/agents/{first}/owners"),
            key,
            json!({ "owner_type": "user", "owner_id": "ana", "owner_name": "Ana" }),
        )
        .await,
        201,
    )
    .await;
    let expiry =
        warden_shared::timestamp::Timestamp::from_millis(app.clock.now().as_millis() + DAY_MS)
            .to_string();
    lifecycle(
        &app,
        key,
        &first,
        json!({ "expires_at": expiry, "review_frequency": "weekly" }),
    )
    .await;
    expect_status(
        app.post(
            &format!("/agents/{first}/risk-classification"),
            key,
            json!({ "risk_level": "minimal", "justification": "batch job" }),
        )
        .await,
        201,
    )
    .await;
    let quarantined = app
        .post(
            &format!("/agents/{second}/quarantine"),
            key,
            json!({ "reason": "odd" }),
        )
        .await;
    assert_eq!(quarantined.status(), 204);
    let (better, scores) = posture().await;
    assert_eq!(
        scores,
        [
            ("Agent Ownership".into(), 10),
            ("Agent Expiry".into(), 8),
            ("Access Reviews".into(), 8),
            ("Quarantine Status".into(), 8),
            ("Kill Switch Status".into(), 15),
            ("Risk Classification".into(), 10)
        ]
    );
    assert_eq!(better["score"], 59);
    assert!(better["components"][3]["detail"]
        .as_str()
        .unwrap()
        .contains(&second));
    let reader = app.key_with_scopes(&tenant, &["registry:read"]).await;
    expect_error(
        app.get("/security/posture", &reader).await,
        403,
        "insufficient_scope",
    )
    .await;
});
