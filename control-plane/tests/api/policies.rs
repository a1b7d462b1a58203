//! Policies, templates, the dry run, evaluation records and approvals through the API
//! (the proxy's side is in `proxy/policies.rs`).

use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, TestApp, SERVICE_TOKEN};

async fn create(app: &TestApp, key: &str, body: Value) -> Value {
    expect_status(app.post("/policies", key, body).await, 201).await["data"].clone()
}

/// Sends one decision report as a proxy would.
async fn report(app: &TestApp, tenant_id: &str, decision: Value) -> Value {
    let mut decision = decision;
    decision["tenant_id"] = json!(tenant_id);
    expect_status(
        app.client
            .post(format!("{}/internal/v1/policy-decisions", app.base))
            .bearer_auth(SERVICE_TOKEN)
            .json(&json!({ "batch_id": "b1", "decisions": [decision] }))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await["data"]
        .clone()
}

db_test!(policies_are_validated_ordered_and_audited, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app
        .register_agent(key, json!({ "name": "pol-agent" }))
        .await;
    let agent_id = agent["id"].as_str().unwrap();

    let allowlist = create(
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
    let budget = create(&app, key, json!({
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
        create(&app, key, json!({ "name": policy_type, "policy_type": policy_type, "config": config, "enabled": false })).await;
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

db_test!(approvals_queue_once_decide_once_and_expire, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app
        .register_agent(key, json!({ "name": "needs-approval" }))
        .await;
    let agent_id = agent["id"].as_str().unwrap();
    let policy = create(
        &app,
        key,
        json!({
            "name": "prod approval", "policy_type": "require_approval",
            "config": { "models": ["gpt-4o"] },
        }),
    )
    .await;
    let policy_id = policy["id"].as_i64().unwrap();

    // The dry run names the approval, without queueing one.
    let dry = json!({ "agent_id": agent_id, "provider": "openai", "model": "gpt-4o" });
    let results = expect_status(app.post("/policies/evaluate", key, dry.clone()).await, 200).await;
    assert_eq!(results["data"][0]["result"], json!("fail"), "{results}");
    assert_eq!(results["data"][0]["policy_id"], json!(policy_id));
    let other_model = json!({ "agent_id": agent_id, "provider": "openai", "model": "gpt-4o-mini" });
    let results = expect_status(app.post("/policies/evaluate", key, other_model).await, 200).await;
    assert_eq!(results["data"][0]["result"], json!("skip"));
    assert_eq!(app.count_rows("approvals", &tenant.id).await, 0);
    expect_error(
        app.post(
            "/policies/evaluate",
            key,
            json!({ "agent_id": "agt_nobody", "provider": "openai", "model": "x" }),
        )
        .await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.post(
            "/policies/evaluate",
            key,
            json!({ "agent_id": agent_id, "provider": "acme", "model": "x" }),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;

    // The proxy reports the held request twice (two retries): one pending approval, and
    // one evaluation record and violation event per request.
    let held = |request_id: &str| {
        json!({
            "evaluation": { "request_id": request_id, "agent_id": agent_id, "provider": "openai",
                "model": "gpt-4o", "evaluated_at": "2026-11-23T10:00:00Z",
                "results": [{ "policy_id": policy_id, "policy_name": "prod approval",
                    "policy_type": "require_approval", "result": "fail", "reason": "requires human approval" }] },
            "approval": { "policy_id": policy_id, "request_context": { "provider": "openai", "model": "gpt-4o" } },
        })
    };
    let ack = report(&app, &tenant.id, held("req-1")).await;
    assert_eq!(
        (
            ack["evaluations_written"].clone(),
            ack["approvals_created"].clone()
        ),
        (json!(1), json!(1)),
        "{ack}"
    );
    let ack = report(&app, &tenant.id, held("req-1")).await;
    assert_eq!(
        (
            ack["evaluations_written"].clone(),
            ack["approvals_created"].clone()
        ),
        (json!(0), json!(0)),
        "a resent report counts once"
    );
    report(&app, &tenant.id, held("req-2")).await;
    assert_eq!(app.count_rows("approvals", &tenant.id).await, 1);
    let violations = app.audit_events(&tenant.id, &policy_id.to_string()).await;
    assert_eq!(
        violations
            .iter()
            .filter(|e| *e == "policy.violated")
            .count(),
        2
    );
    let evaluations = expect_status(
        app.get(
            &format!("/policy-evaluations?policy_id={policy_id}&result=fail"),
            key,
        )
        .await,
        200,
    )
    .await;
    assert_eq!(evaluations["meta"]["total"], json!(2));
    let none = expect_status(app.get("/policy-evaluations?result=pass", key).await, 200).await;
    assert_eq!(none["meta"]["total"], json!(0));
    expect_error(
        app.get("/policy-evaluations?result=maybe", key).await,
        422,
        "validation_failed",
    )
    .await;

    let pending = expect_status(app.get("/approvals?status=pending", key).await, 200).await;
    let approval = pending["data"][0].clone();
    assert_eq!(approval["request_context"]["model"], json!("gpt-4o"));
    assert_eq!(approval["status"], json!("pending"));
    let count = expect_status(app.get("/approvals/pending/count", key).await, 200).await;
    assert_eq!(count["data"]["count"], json!(1));
    let id = approval["id"].as_i64().unwrap();

    // Deciding: reviewer rules, then once only.
    let decide = format!("/approvals/{id}/decide");
    expect_error(
        app.post(
            &decide,
            key,
            json!({ "reviewer_id": "", "decision": "approved" }),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
    expect_error(
        app.post(
            &decide,
            key,
            json!({ "reviewer_id": "x".repeat(101), "decision": "approved" }),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
    expect_error(
        app.post(
            &decide,
            key,
            json!({ "reviewer_id": "ana", "decision": "maybe" }),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
    let other = app.new_tenant("starter").await;
    expect_error(
        app.post(
            &decide,
            &other.admin_key,
            json!({ "reviewer_id": "eve", "decision": "approved" }),
        )
        .await,
        404,
        "not_found",
    )
    .await;
    expect_status(
        app.post(
            &decide,
            key,
            json!({ "reviewer_id": "ana", "decision": "approved", "reason": "ok for the demo" }),
        )
        .await,
        204,
    )
    .await;
    expect_error(
        app.post(
            &decide,
            key,
            json!({ "reviewer_id": "ana", "decision": "denied" }),
        )
        .await,
        409,
        "approval_not_pending",
    )
    .await;
    let decided = expect_status(app.get(&format!("/approvals/{id}"), key).await, 200).await;
    assert_eq!(decided["data"]["status"], json!("approved"));
    assert!(decided["data"]["granted_until"].is_string());
    let events = app.audit_events(&tenant.id, &id.to_string()).await;
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("approval."))
            .collect::<Vec<_>>(),
        ["approval.approved"]
    );
    // The grant lets the dry run pass too.
    let results = expect_status(app.post("/policies/evaluate", key, dry.clone()).await, 200).await;
    assert_eq!(results["data"][0]["result"], json!("pass"), "{results}");

    // A new request after the grant window queues a new approval, which expires unanswered.
    app.clock.advance(2 * 3_600_000);
    report(&app, &tenant.id, held("req-3")).await;
    let pending = expect_status(app.get("/approvals?status=pending", key).await, 200).await;
    let second = pending["data"][0]["id"].as_i64().unwrap();
    assert_ne!(second, id);
    app.clock.advance(24 * 3_600_000);
    let expired = expect_status(app.get(&format!("/approvals/{second}"), key).await, 200).await;
    assert_eq!(expired["data"]["status"], json!("expired"));
    let count = expect_status(app.get("/approvals/pending/count", key).await, 200).await;
    assert_eq!(count["data"]["count"], json!(0));
    let listed = expect_status(app.get("/approvals?status=expired", key).await, 200).await;
    assert_eq!(listed["meta"]["total"], json!(1));
    expect_error(
        app.post(
            &format!("/approvals/{second}/decide"),
            key,
            json!({ "reviewer_id": "ana", "decision": "approved" }),
        )
        .await,
        409,
        "approval_not_pending",
    )
    .await;

    // Denied: no new approval for the same request while the denial holds.
    report(&app, &tenant.id, held("req-4")).await;
    let pending = expect_status(app.get("/approvals?status=pending", key).await, 200).await;
    let third = pending["data"][0]["id"].as_i64().unwrap();
    expect_status(
        app.post(
            &format!("/approvals/{third}/decide"),
            key,
            json!({ "reviewer_id": "ana", "decision": "denied" }),
        )
        .await,
        204,
    )
    .await;
    let ack = report(&app, &tenant.id, held("req-5")).await;
    assert_eq!(ack["approvals_created"], json!(0));
    let results = expect_status(app.post("/policies/evaluate", key, dry).await, 200).await;
    assert_eq!(results["data"][0]["result"], json!("fail"));
    expect_error(
        app.get("/approvals?status=lost", key).await,
        422,
        "validation_failed",
    )
    .await;
    let theirs = expect_status(app.get("/approvals", &other.admin_key).await, 200).await;
    assert_eq!(theirs["meta"]["total"], json!(0));
});

db_test!(
    a_full_batch_of_decisions_is_written_once_with_item_errors,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let agent = app.register_agent(key, json!({ "name": "busy" })).await;
        let agent_id = agent["id"].as_str().unwrap();
        let results = |request: usize| {
            let outcome = if request % 100 == 0 { "fail" } else { "pass" };
            json!([
                { "policy_id": 1, "policy_name": "one", "policy_type": "model_allowlist", "result": outcome, "reason": null },
                { "policy_id": 2, "policy_name": "two", "policy_type": "rate_limit", "result": "pass", "reason": null },
                { "policy_id": 3, "policy_name": "three", "policy_type": "require_approval", "result": "skip", "reason": "the request does not match" },
            ])
        };
        // 1,000 decisions (3,000 rows, many statements on either database); every 250th names
        // no agent of the tenant and one repeats an earlier request.
        let decisions: Vec<Value> = (0..1000)
        .map(|i| {
            let agent = if i % 250 == 7 { "agt_01AAAAAAAAAAAAAAAAAAAAAAAA" } else { agent_id };
            let request = if i == 999 { 0 } else { i };
            json!({ "tenant_id": tenant.id, "evaluation": {
                "request_id": format!("req-{request}"), "agent_id": agent, "provider": "openai",
                "model": "gpt-4o", "evaluated_at": "2026-11-23T10:00:00Z", "results": results(request) } })
        })
        .collect();
        let send = || async {
            expect_status(
                app.client
                    .post(format!("{}/internal/v1/policy-decisions", app.base))
                    .bearer_auth(SERVICE_TOKEN)
                    .json(&json!({ "batch_id": "big", "decisions": decisions }))
                    .send()
                    .await
                    .unwrap(),
                200,
            )
            .await["data"]
                .clone()
        };
        let ack = send().await;
        assert_eq!(
            ack["evaluations_written"],
            json!(3 * (1000 - 4 - 1)),
            "{ack}"
        );
        assert_eq!(ack["rejected"], json!(4));
        let indexes: Vec<i64> = ack["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["index"].as_i64().unwrap())
            .collect();
        assert_eq!(indexes, [7, 257, 507, 757]);
        let fails = expect_status(app.get("/policy-evaluations?result=fail", key).await, 200).await;
        assert_eq!(fails["meta"]["total"], json!(10));
        assert_eq!(
            app.audit_events(&tenant.id, "1")
                .await
                .iter()
                .filter(|e| *e == "policy.violated")
                .count(),
            10
        );
        // The same batch again (a retried flush) writes nothing and audits nothing.
        let again = send().await;
        assert_eq!(again["evaluations_written"], json!(0), "{again}");
        let all = expect_status(app.get("/policy-evaluations", key).await, 200).await;
        assert_eq!(all["meta"]["total"], json!(3 * 995));
        assert_eq!(app.audit_events(&tenant.id, "1").await.len(), 10);
    }
);
