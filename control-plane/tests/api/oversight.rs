//! Human oversight: an agent's scorecard and the tenant's summary follow what happened
//! (approvals requested, decided by whom and how fast, expired; refusals; blocks), over
//! a window of at most 180 days.

use serde_json::{json, Value};

use crate::helpers::{create_policy, expect_error, expect_status, report_decisions};

const HOUR_MS: i64 = 3_600_000;

db_test!(scorecards_follow_approvals_refusals_and_blocks, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let watched = app.register_agent(key, json!({ "name": "watched" })).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let loose = app
        .register_agent(key, json!({ "name": "loose", "environment": "dev" }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let policy = create_policy(
        &app,
        key,
        json!({ "name": "approve in production", "policy_type": "require_approval",
                "scope": "environment:production", "config": {} }),
    )
    .await;
    let policy_id = policy["id"].as_i64().unwrap();
    let card = |agent: String| {
        let app = &app;
        async move {
            expect_status(
                app.get(&format!("/agents/{agent}/oversight"), key).await,
                200,
            )
            .await["data"]
                .clone()
        }
    };

    // Before anything happened: covered, nothing unattended.
    let quiet = card(watched.clone()).await;
    assert_eq!(quiet["human_oversight_policies"], 1);
    assert_eq!(
        quiet["score_parts"],
        json!({ "coverage": 40, "attendance": 30, "responsiveness": 15, "review": 0 })
    );
    assert_eq!(card(loose.clone()).await["score"], 45);

    // Three held requests (three models, so three approvals), one refusal of the other.
    let now = app.clock.now().to_string();
    let decision = |request: &str, agent: &str, model: &str, approval: bool| {
        let mut decision = json!({ "tenant_id": tenant.id, "evaluation": {
            "request_id": request, "agent_id": agent, "provider": "openai", "model": model,
            "evaluated_at": now, "results": [{ "policy_id": policy_id, "policy_name": "approve in production",
                "policy_type": "require_approval", "result": "fail", "reason": "requires human approval" }] } });
        if approval {
            decision["approval"] =
                json!({ "policy_id": policy_id, "request_context": { "model": model } });
        }
        decision
    };
    let batch = format!("oversight-{}", tenant.id);
    let ack = report_decisions(
        &app,
        &batch,
        &[
            decision("held-1", &watched, "gpt-4o", true),
            decision("held-2", &watched, "gpt-4.1", true),
            decision("held-3", &watched, "o3", true),
            decision("refused-1", &loose, "gpt-4o", false),
        ],
    )
    .await;
    assert_eq!(ack["approvals_created"], 3, "{ack}");
    let pending = expect_status(app.get("/approvals?status=pending", key).await, 200).await;
    let ids: Vec<Value> = pending["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].clone())
        .collect();
    app.clock.advance(HOUR_MS / 2);
    let decide = |id: Value, reviewer: &str, decision: &str| {
        let app = &app;
        let body = json!({ "reviewer_id": reviewer, "decision": decision });
        async move {
            let response = app
                .post(&format!("/approvals/{id}/decide"), key, body)
                .await;
            assert_eq!(response.status(), 204);
        }
    };
    decide(ids[0].clone(), "ana", "approved").await;
    app.clock.advance(HOUR_MS);
    decide(ids[1].clone(), "bo", "denied").await;
    // The third is never decided: 24 hours on, it has expired.
    app.clock.advance(25 * HOUR_MS);
    let blocked = app
        .post(
            &format!("/agents/{loose}/block"),
            key,
            json!({ "reason": "loop" }),
        )
        .await;
    assert_eq!(blocked.status(), 204);

    let busy = card(watched.clone()).await;
    assert_eq!(
        busy["approvals"],
        json!({ "requested": 3, "approved": 1, "denied": 1, "expired": 1, "pending": 0 }),
        "{busy}"
    );
    assert_eq!(busy["decided_by"], json!({ "ana": 1, "bo": 1 }));
    assert_eq!(busy["policy_evaluations"], 3);
    assert_eq!(busy["policy_failures"], 3);
    assert_eq!(busy["fail_rate"], 1.0);
    assert_eq!(busy["override_rate"], 0.5);
    assert_eq!(busy["unattended_rate"], 0.333);
    assert_eq!(busy["median_decision_seconds"], 3600.0, "30 and 90 minutes");
    // 40 + 30 × 2/3 + 10 (median one hour... exactly one hour: 15) + 0.
    assert_eq!(busy["score_parts"]["attendance"], 20);
    assert_eq!(busy["score_parts"]["responsiveness"], 15);
    assert_eq!(busy["score"], 75);
    let other = card(loose.clone()).await;
    assert_eq!(other["blocks"], 1);
    assert_eq!(other["policy_failures"], 1);
    assert_eq!(other["human_oversight_policies"], 0);

    let summary =
        expect_status(app.get("/oversight/summary", key).await, 200).await["data"].clone();
    assert_eq!(summary["agents_evaluated"], 2);
    assert_eq!(summary["agents_with_human_oversight"], 1);
    assert_eq!(summary["approvals"]["requested"], 3);
    assert_eq!(summary["policy_failures"], 4);
    assert_eq!(summary["blocks"], 1);
    assert_eq!(summary["average_score"], 60.0);
    assert_eq!(summary["agents_below_50"], json!([loose]));

    // A window before all of it is empty; windows are checked.
    let early = expect_status(
        app.get(
            &format!("/agents/{watched}/oversight?start=2020-01-01&end=2020-02-01"),
            key,
        )
        .await,
        200,
    )
    .await;
    assert_eq!(early["data"]["approvals"]["requested"], 0);
    for bad in [
        "?start=2026-01-01&end=2026-12-31",
        "?start=2026-03-02&end=2026-03-01",
        "?start=soon",
        "?days=3",
    ] {
        let response = app.get(&format!("/oversight/summary{bad}"), key).await;
        expect_error(response, 422, "validation_failed").await;
    }
    let stranger = app.new_tenant("starter").await;
    expect_error(
        app.get(&format!("/agents/{watched}/oversight"), &stranger.admin_key)
            .await,
        404,
        "not_found",
    )
    .await;
    let theirs = expect_status(
        app.get("/oversight/summary", &stranger.admin_key).await,
        200,
    )
    .await;
    assert_eq!(theirs["data"]["agents_evaluated"], 0);
});
