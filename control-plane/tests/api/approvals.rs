//! The approval queue: the dry run naming an approval, the proxy's held request queued
//! once, decisions, grants, denials and expiry.

use serde_json::{json, Value};

use crate::helpers::{create_policy, expect_error, expect_status, report_decisions, TestApp};

/// Sends one decision report of `tenant_id` as a proxy would: in a batch of its own,
/// under a new batch id (a batch id is written once).
async fn report(app: &TestApp, tenant_id: &str, decision: Value) -> Value {
    static BATCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let batch = BATCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    report_in(app, &format!("b{batch}"), tenant_id, decision).await
}

/// Sends one decision report of `tenant_id` in batch `batch_id`.
async fn report_in(app: &TestApp, batch_id: &str, tenant_id: &str, decision: Value) -> Value {
    let mut decision = decision;
    decision["tenant_id"] = json!(tenant_id);
    report_decisions(app, batch_id, &[decision]).await
}

db_test!(approvals_queue_once_decide_once_and_expire, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app
        .register_agent(key, json!({ "name": "needs-approval" }))
        .await;
    let agent_id = agent["id"].as_str().unwrap();
    let policy = create_policy(
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

    // The proxy reports the held request, resends the batch (its acknowledgement lost),
    // then reports a retry of it: one pending approval, one evaluation record per
    // request, and the violations audited as the first of the minute and, once the
    // minute is over, the count of its repeats.
    let held = |request_id: &str| {
        json!({
            "evaluation": { "request_id": request_id, "agent_id": agent_id, "provider": "openai",
                "model": "gpt-4o", "evaluated_at": "2026-11-23T10:00:00Z",
                "results": [{ "policy_id": policy_id, "policy_name": "prod approval",
                    "policy_type": "require_approval", "result": "fail", "reason": "requires human approval" }] },
            "approval": { "policy_id": policy_id, "request_context": { "provider": "openai", "model": "gpt-4o" } },
        })
    };
    let ack = report_in(&app, "held-1", &tenant.id, held("req-1")).await;
    assert_eq!(
        (
            ack["evaluations_written"].clone(),
            ack["approvals_created"].clone()
        ),
        (json!(1), json!(1)),
        "{ack}"
    );
    let ack = report_in(&app, "held-1", &tenant.id, held("req-1")).await;
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
    let violations = || async {
        app.audit_events(&tenant.id, &policy_id.to_string())
            .await
            .iter()
            .filter(|e| *e == "policy.violated")
            .count()
    };
    assert_eq!(violations().await, 1);
    let later = warden_shared::timestamp::Timestamp::parse_rfc3339("2026-11-23T10:05:00Z").unwrap();
    warden_control_plane::api::policies::summarize_violations(
        &app.db,
        later.as_millis(),
        Some(&tenant.id),
    )
    .await
    .unwrap();
    assert_eq!(violations().await, 2);
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
        ["approval.requested", "approval.approved"]
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

async fn claim(app: &TestApp, body: &Value) -> reqwest::Response {
    app.client
        .post(format!("{}/internal/v1/approval-uses", app.base))
        .bearer_auth(crate::helpers::SERVICE_TOKEN)
        .json(body)
        .send()
        .await
        .unwrap()
}

db_test!(
    a_single_use_approval_is_claimed_once_however_many_race,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let agent = app.register_agent(key, json!({ "name": "racer" })).await;
        let agent_id = agent["id"].as_str().unwrap();
        let policy = create_policy(
            &app,
            key,
            json!({ "name": "each tool call", "policy_type": "require_approval",
                "config": { "tools": ["gh__delete_branch"] } }),
        )
        .await;
        let digest = "ab".repeat(32);
        let held = |request_id: &str, digest: Option<&str>| {
            json!({
                "evaluation": { "request_id": request_id, "agent_id": agent_id, "provider": "mcp",
                    "model": "gh__delete_branch", "evaluated_at": "2026-11-23T10:00:00Z",
                    "results": [{ "policy_id": policy["id"], "policy_name": "each tool call",
                        "policy_type": "require_approval", "result": "fail", "reason": "requires human approval" }] },
                "approval": { "policy_id": policy["id"], "releases": "action", "action_digest": digest,
                              "request_context": { "provider": "mcp", "model": "gh__delete_branch" } },
            })
        };
        // An ask bound to the action must name it.
        let ack = report(&app, &tenant.id, held("req-0", None)).await;
        assert_eq!(
            ack["errors"][0]["field"],
            json!("approval.action_digest"),
            "{ack}"
        );
        let ack = report(&app, &tenant.id, held("req-1", Some(&digest))).await;
        assert_eq!(ack["approvals_created"], json!(1), "{ack}");
        let pending = expect_status(app.get("/approvals?status=pending", key).await, 200).await;
        let id = pending["data"][0]["id"].clone();
        assert_eq!(pending["data"][0]["action_digest"], json!(digest));
        let use_of = |digest: &str| json!({ "tenant_id": tenant.id, "approval_id": id, "action_digest": digest });
        // Not approved yet: nothing to use.
        let answer = expect_status(claim(&app, &use_of(&digest)).await, 200).await;
        assert_eq!(answer["data"]["used"], json!(false));
        expect_status(
            app.post(
                &format!("/approvals/{id}/decide"),
                key,
                json!({ "reviewer_id": "oncall", "decision": "approved" }),
            )
            .await,
            204,
        )
        .await;
        // Another action's digest uses nothing.
        let answer = expect_status(claim(&app, &use_of(&"cd".repeat(32))).await, 200).await;
        assert_eq!(answer["data"]["used"], json!(false));
        // Twenty claims at once: one uses it.
        let claims = (0..20).map(|_| {
            let body = use_of(&digest);
            let app = &app;
            async move { expect_status(claim(app, &body).await, 200).await["data"]["used"].clone() }
        });
        let used = futures_util::future::join_all(claims).await;
        assert_eq!(
            used.iter().filter(|u| **u == json!(true)).count(),
            1,
            "{used:?}"
        );
        let shown = expect_status(app.get(&format!("/approvals/{id}"), key).await, 200).await;
        assert!(shown["data"]["consumed_at"].is_string(), "{shown}");
        // Bad claims are refused whole.
        for bad in [
            json!({ "tenant_id": tenant.id, "approval_id": id, "action_digest": "short" }),
            json!({ "tenant_id": "", "approval_id": id, "action_digest": digest }),
            json!({ "tenant_id": tenant.id, "approval_id": id }),
        ] {
            let answer = claim(&app, &bad).await;
            assert_eq!(answer.status(), 422, "{bad}");
        }
    }
);

db_test!(an_expired_single_use_approval_releases_nothing, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app.register_agent(key, json!({ "name": "late" })).await;
    let policy = create_policy(
        &app,
        key,
        json!({ "name": "each tool call", "policy_type": "require_approval",
                "config": { "tools": ["gh__delete_branch"] } }),
    )
    .await;
    let digest = "ef".repeat(32);
    let decision = json!({
        "evaluation": { "request_id": "req-late", "agent_id": agent["id"], "provider": "mcp",
            "model": "gh__delete_branch", "evaluated_at": "2026-11-23T10:00:00Z",
            "results": [{ "policy_id": policy["id"], "policy_name": "each tool call",
                "policy_type": "require_approval", "result": "fail", "reason": "requires human approval" }] },
        "approval": { "policy_id": policy["id"], "releases": "action", "action_digest": digest,
                      "request_context": { "provider": "mcp", "model": "gh__delete_branch" } },
    });
    report(&app, &tenant.id, decision).await;
    let pending = expect_status(app.get("/approvals?status=pending", key).await, 200).await;
    let id = pending["data"][0]["id"].clone();
    expect_status(
        app.post(
            &format!("/approvals/{id}/decide"),
            key,
            json!({ "reviewer_id": "oncall", "decision": "approved" }),
        )
        .await,
        204,
    )
    .await;
    // An hour later the grant has run out, unused: it releases nothing.
    app.clock.advance(3_600_001);
    let body = json!({ "tenant_id": tenant.id, "approval_id": id, "action_digest": digest });
    let answer = expect_status(claim(&app, &body).await, 200).await;
    assert_eq!(answer["data"]["used"], json!(false));
});
