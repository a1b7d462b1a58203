//! Policies and templates through the API: validation, order, audit, isolation (the
//! dry run and approvals are in `approvals.rs`, decision reports in `policy_decisions.rs`,
//! the proxy's side in `proxy/policies.rs`).

use serde_json::json;

use crate::helpers::{create_policy, expect_error, expect_status};

db_test!(policies_are_validated_ordered_and_audited, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app
        .register_agent(key, json!({ "name": "pol-agent" }))
        .await;
    let agent_id = agent["id"].as_str().unwrap();

    let allowlist = create_policy(
        &app,
        key,
        json!({
            "name": "models", "policy_type": "model_allowlist",
            "config": { "allowed_models": ["gpt-4o*"] }, "priority": 5,
        }),
    )
    .await;
    assert_eq!(allowlist["enabled"], json!(true));
    assert_eq!(allowlist["scope"], json!("global"));
    let budget = create_policy(&app, key, json!({
        "name": "agent budget", "policy_type": "budget_limit",
        "config": { "monthly_limit_usd": 50 }, "scope": format!("agent:{agent_id}"), "priority": 9,
    }))
    .await;
    assert_eq!(
        budget["config"],
        json!({ "monthly_limit_usd": 50.0, "warn_threshold_pct": 80, "block_threshold_pct": 100 })
    );
    for (policy_type, config) in [
        ("block_provider", json!({ "providers": ["nvidia"] })),
        (
            "require_approval",
            json!({ "environments": ["production"] }),
        ),
        (
            "rate_limit",
            json!({ "requests_per_minute": 10, "per": "team" }),
        ),
        ("require_human_review", json!({ "models": ["o1*"] })),
    ] {
        create_policy(&app, key, json!({ "name": policy_type, "policy_type": policy_type, "config": config, "enabled": false })).await;
    }
    let listed = expect_status(app.get("/policies", key).await, 200).await;
    let names: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names[..2],
        ["agent budget", "models"],
        "priority descending first"
    );
    assert_eq!(names.len(), 6);

    // Bad input: clear errors, nothing written.
    let before = app.count_rows("policies", &tenant.id).await;
    for (body, field) in [
        (
            json!({ "name": "x", "policy_type": "model_allowlist", "config": { "allowed_models": [] } }),
            "config.allowed_models",
        ),
        (
            json!({ "name": "x", "policy_type": "model_allowlist", "config": { "models": ["a"] } }),
            "config",
        ),
        (
            json!({ "name": "x", "policy_type": "teleport", "config": {} }),
            "policy_type",
        ),
        (
            json!({ "name": "x", "policy_type": "block_provider", "config": { "providers": ["nvidia"] }, "scope": "team:team_missing" }),
            "scope",
        ),
        (
            json!({ "name": "x", "policy_type": "block_provider", "config": { "providers": ["nvidia"] }, "scope": "environment:moon" }),
            "scope",
        ),
        (
            json!({ "name": "x", "policy_type": "budget_limit", "config": { "monthly_limit_usd": 5 }, "scope": "environment:production" }),
            "scope",
        ),
        (
            json!({ "name": "x", "policy_type": "budget_limit", "config": { "monthly_limit_usd": 1000000 } }),
            "config.monthly_limit_usd",
        ),
        (
            json!({ "name": "x", "policy_type": "rate_limit", "config": { "per": "agent" } }),
            "config",
        ),
        (
            json!({ "name": "x", "policy_type": "block_provider", "config": { "providers": ["nvidia"] }, "priority": 10001 }),
            "priority",
        ),
        (
            json!({ "name": "", "policy_type": "block_provider", "config": { "providers": ["nvidia"] } }),
            "name",
        ),
    ] {
        let error = expect_error(
            app.post("/policies", key, body.clone()).await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(
            error["error"]["details"]["field"],
            json!(field),
            "{body} -> {error}"
        );
    }
    assert_eq!(app.count_rows("policies", &tenant.id).await, before);

    // Update: any field; a new type needs its config; bad config changes nothing.
    let id = allowlist["id"].as_i64().unwrap();
    let path = format!("/policies/{id}");
    let updated = expect_status(
        app.patch(&path, key, json!({ "enabled": false, "priority": 1 }))
            .await,
        200,
    )
    .await;
    assert_eq!(
        (
            updated["data"]["enabled"].clone(),
            updated["data"]["priority"].clone()
        ),
        (json!(false), json!(1))
    );
    expect_error(
        app.patch(&path, key, json!({ "policy_type": "block_provider" }))
            .await,
        422,
        "validation_failed",
    )
    .await;
    expect_error(
        app.patch(
            &path,
            key,
            json!({ "config": { "allowed_models": ["a*b"] } }),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
    let fetched = expect_status(app.get(&path, key).await, 200).await;
    assert_eq!(
        fetched["data"]["config"],
        json!({ "allowed_models": ["gpt-4o*"] })
    );
    expect_status(app.delete(&path, key).await, 204).await;
    expect_error(app.get(&path, key).await, 404, "not_found").await;
    expect_error(
        app.get("/policies/not-a-number", key).await,
        404,
        "not_found",
    )
    .await;
    assert_eq!(
        app.audit_events(&tenant.id, &id.to_string()).await,
        ["policy.created", "policy.updated", "policy.deleted"]
    );

    // Another tenant sees none of it.
    let other = app.new_tenant("starter").await;
    let budget_path = format!("/policies/{}", budget["id"]);
    expect_error(
        app.get(&budget_path, &other.admin_key).await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.patch(&budget_path, &other.admin_key, json!({ "enabled": false }))
            .await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.delete(&budget_path, &other.admin_key).await,
        404,
        "not_found",
    )
    .await;
    let theirs = expect_status(app.get("/policies", &other.admin_key).await, 200).await;
    assert_eq!(theirs["data"], json!([]));
});

db_test!(templates_create_disabled_policies, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let templates = expect_status(app.get("/policy-templates", key).await, 200).await;
    let templates = templates["data"].as_array().unwrap().clone();
    assert!(templates.len() >= 5);
    for template in &templates {
        let id = template["id"].as_str().unwrap();
        let policy = expect_status(
            app.post(&format!("/policies/from-template/{id}"), key, json!({}))
                .await,
            201,
        )
        .await;
        assert_eq!(policy["data"]["enabled"], json!(false), "{id}");
        assert_eq!(policy["data"]["policy_type"], template["policy_type"]);
        assert_eq!(policy["data"]["template_id"], json!(id));
    }
    let named = expect_status(
        app.post(
            "/policies/from-template/monthly-cost-guard",
            key,
            json!({ "name": "Q4 guard", "priority": 7 }),
        )
        .await,
        201,
    )
    .await;
    assert_eq!(
        (
            named["data"]["name"].clone(),
            named["data"]["priority"].clone()
        ),
        (json!("Q4 guard"), json!(7))
    );
    // No body at all works too.
    let response = app
        .request(
            reqwest::Method::POST,
            "/policies/from-template/block-provider",
            Some(key),
        )
        .send()
        .await
        .unwrap();
    expect_status(response, 201).await;
    expect_error(
        app.post("/policies/from-template/nope", key, json!({}))
            .await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.post(
            "/policies/from-template/block-provider",
            key,
            json!({ "priority": -20000 }),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
});
