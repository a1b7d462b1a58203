//! Anomaly detection over real telemetry, heartbeats and policy decisions, and the
//! anomaly and rule resources: one unresolved anomaly per agent, type and cause, the
//! state machine, rules that tune or stop detection, notifications.

use serde_json::{json, Value};
use warden_control_plane::anomalies::{detect_tenant, PassReport};

use crate::helpers::{expect_error, expect_status, report_decisions, TestApp, TestTenant};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

async fn usage(app: &TestApp, key: &str, agent_id: &str, model: &str, cost_usd: f64, tokens: i64) {
    let body = json!({ "agent_id": agent_id, "model_provider": "openai", "model_name": model,
                       "input_tokens": tokens, "output_tokens": 0, "cost_usd": cost_usd });
    expect_status(app.post("/telemetry/usage", key, body).await, 201).await;
}

async fn detect(app: &TestApp, tenant: &TestTenant) -> PassReport {
    detect_tenant(&app.db, &tenant.id, app.clock.now())
        .await
        .unwrap()
}

async fn anomalies(app: &TestApp, key: &str, query: &str) -> Vec<Value> {
    expect_status(app.get(&format!("/anomalies{query}"), key).await, 200).await["data"]
        .as_array()
        .unwrap()
        .clone()
}

db_test!(
    a_daily_cost_the_tenant_set_opens_an_anomaly_on_an_agents_first_day,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        expect_status(
            app.post(
                "/anomaly-rules",
                key,
                json!({ "anomaly_type": "cost_spike", "threshold_config": { "daily_cost_usd": 1 } }),
            )
            .await,
            201,
        )
        .await;
        let looping = app.register_agent(key, json!({ "name": "looping" })).await;
        let thrifty = app.register_agent(key, json!({ "name": "thrifty" })).await;
        let (looping, thrifty) = (
            looping["id"].as_str().unwrap(),
            thrifty["id"].as_str().unwrap(),
        );
        // A new agent stuck in a loop: $50 on its first day, no history at all.
        usage(&app, key, looping, "gpt-4o", 50.0, 1000).await;
        usage(&app, key, thrifty, "gpt-4o", 0.5, 1000).await;
        let report = detect(&app, &tenant).await;
        assert_eq!(report.opened, 1, "{report:?}");
        let found = anomalies(&app, key, "?type=cost_spike").await;
        assert_eq!(found.len(), 1);
        assert_eq!(found[0]["agent_id"], looping);
        assert_eq!(found[0]["details"]["current_cost_usd"], 50.0);
        assert_eq!(found[0]["details"]["threshold_usd"], 1.0);
        assert_eq!(found[0]["severity"], "critical");
    }
);

db_test!(
    a_cost_spike_against_two_weeks_of_history_opens_one_anomaly,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let steady = app.register_agent(key, json!({ "name": "steady" })).await;
        let spiky = app.register_agent(key, json!({ "name": "spiky" })).await;
        let (steady, spiky) = (
            steady["id"].as_str().unwrap(),
            spiky["id"].as_str().unwrap(),
        );
        let channel = expect_status(
            app.post(
                "/notifications/channels",
                key,
                json!({
        "name": "ops", "channel_type": "webhook", "events": ["anomaly.detected"],
        "config": {"url": "https://8.8.8.8/hooks"}}),
            )
            .await,
            201,
        )
        .await["data"]
            .clone();
        // Fourteen ordinary days: about $10 a day each.
        for day in 0..14 {
            let cost = 9.0 + f64::from(day % 3);
            usage(&app, key, steady, "gpt-4o", cost, 1000).await;
            usage(&app, key, spiky, "gpt-4o", cost, 1000).await;
            app.clock.advance(DAY_MS);
        }
        // Today: the steady agent as usual, the other eight times its median day.
        usage(&app, key, steady, "gpt-4o", 10.0, 1000).await;
        usage(&app, key, spiky, "gpt-4o", 80.0, 1000).await;

        let report = detect(&app, &tenant).await;
        assert_eq!((report.agents, report.opened), (2, 1), "{report:?}");
        let found = anomalies(&app, key, "").await;
        assert_eq!(found.len(), 1);
        let anomaly = &found[0];
        assert_eq!(anomaly["agent_id"], spiky);
        assert_eq!(anomaly["agent_name"], "spiky");
        assert_eq!(anomaly["anomaly_type"], "cost_spike");
        assert_eq!(anomaly["status"], "open");
        assert_eq!(anomaly["severity"], "high");
        assert_eq!(anomaly["details"]["current_cost_usd"], 80.0);
        assert_eq!(anomaly["details"]["baseline_cost_usd"], 10.0);
        assert_eq!(anomaly["details"]["deviation_percent"], 700.0);
        assert!(anomaly["details"]["explanation"]
            .as_str()
            .unwrap()
            .contains("MAD"));

        // The next pass finds it again: the same anomaly, seen twice, no new row.
        app.clock.advance(HOUR_MS);
        let report = detect(&app, &tenant).await;
        assert_eq!((report.opened, report.updated), (0, 1));
        let again = &anomalies(&app, key, "").await[0];
        assert_eq!(
            (again["id"].clone(), again["occurrences"].clone()),
            (anomaly["id"].clone(), json!(2))
        );

        // Announced once, to the channel that follows anomalies, and audited.
        let deliveries = expect_status(
            app.get(
                &format!(
                    "/notifications/channels/{}/deliveries",
                    channel["id"].as_str().unwrap()
                ),
                key,
            )
            .await,
            200,
        )
        .await;
        assert_eq!(deliveries["meta"]["total"], 1);
        assert_eq!(deliveries["data"][0]["event_type"], "anomaly.detected");
        let id = anomaly["id"].as_str().unwrap();
        assert_eq!(app.audit_events(&tenant.id, id).await, ["anomaly.detected"]);
    }
);

db_test!(
    heartbeat_loss_refusal_bursts_and_model_drift_are_found,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let agent = app.register_agent(key, json!({ "name": "worker" })).await;
        let agent_id = agent["id"].as_str().unwrap();
        // A week on one model.
        for _ in 0..7 {
            for _ in 0..4 {
                usage(&app, key, agent_id, "gpt-4o", 0.01, 500).await;
            }
            app.clock.advance(DAY_MS);
        }
        for _ in 0..25 {
            usage(&app, key, agent_id, "gpt-4o", 0.01, 500).await;
        }
        app.clock.advance(2 * HOUR_MS);
        // Then a heartbeat every five minutes for two hours, and silence.
        for _ in 0..24 {
            let beat = json!({ "agent_id": agent_id, "status": "healthy" });
            expect_status(app.post("/telemetry/heartbeat", key, beat).await, 200).await;
            app.clock.advance(5 * 60_000);
        }
        // The last day on another model with long prompts.
        for _ in 0..30 {
            usage(&app, key, agent_id, "gpt-4o-mini", 0.01, 6000).await;
        }
        app.clock.advance(40 * 60_000);
        let policy = crate::helpers::create_policy(
            &app,
            key,
            json!({
        "name": "no o1", "policy_type": "model_allowlist", "config": {"allowed_models": ["gpt-4o"]}}),
        )
        .await;
        let now = app.clock.now().to_string();
        let refusals: Vec<Value> = (0..25)
        .map(|i| json!({
            "tenant_id": tenant.id,
            "evaluation": { "request_id": format!("burst-{i}"), "agent_id": agent_id, "provider": "openai",
                "model": "o1", "evaluated_at": now,
                "results": [{ "policy_id": policy["id"], "policy_name": "no o1",
                    "policy_type": "model_allowlist", "result": "fail", "reason": "not allowed" }] },
        }))
        .collect();
        report_decisions(&app, &format!("burst-{}", tenant.id), &refusals).await;

        let report = detect(&app, &tenant).await;
        let found = anomalies(&app, key, "").await;
        let mut causes: Vec<(String, String)> = found
            .iter()
            .map(|a| {
                (
                    a["anomaly_type"].as_str().unwrap().to_owned(),
                    a["details"]["cause"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        causes.sort();
        assert_eq!(
            causes,
            [
                ("behavioral_drift".to_owned(), "model_mix".to_owned()),
                ("behavioral_drift".to_owned(), "token_shift".to_owned()),
                ("reliability_decay".to_owned(), "heartbeat_loss".to_owned()),
                ("security_threat".to_owned(), "policy_refusals".to_owned()),
            ],
            "{report:?} {found:?}"
        );
        let summary =
            expect_status(app.get("/anomalies/summary", key).await, 200).await["data"].clone();
        assert_eq!(summary["total"], 4);
        assert_eq!(summary["by_status"]["open"], 4);
        assert_eq!(summary["by_type"]["behavioral_drift"], 2);
        assert_eq!(summary["by_type"]["cost_spike"], 0);
        let drift = anomalies(&app, key, "?type=behavioral_drift&status=open").await;
        assert_eq!(drift.len(), 2);

        // A disabled rule stops its type: resolved anomalies of it do not come back.
        let rule = expect_status(
            app.post(
                "/anomaly-rules",
                key,
                json!({
        "anomaly_type": "security_threat", "enabled": false}),
            )
            .await,
            201,
        )
        .await["data"]
            .clone();
        assert_eq!(rule["enabled"], false);
        let threat = &anomalies(&app, key, "?type=security_threat").await[0];
        let resolve = format!("/anomalies/{}/resolve", threat["id"].as_str().unwrap());
        assert_eq!(
            app.post(
                &resolve,
                key,
                json!({"resolution": "blocked the prompt injection"})
            )
            .await
            .status()
            .as_u16(),
            204
        );
        detect(&app, &tenant).await;
        let threats = anomalies(&app, key, "?type=security_threat").await;
        assert_eq!(threats.len(), 1);
        assert_eq!(threats[0]["status"], "resolved");
    }
);

db_test!(
    anomalies_move_open_acknowledged_resolved_and_nowhere_else,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let agent = app.register_agent(key, json!({ "name": "a" })).await;
        let agent_id = agent["id"].as_str().unwrap();
        for _ in 0..8 {
            usage(&app, key, agent_id, "gpt-4o", 5.0, 100).await;
            app.clock.advance(DAY_MS);
        }
        usage(&app, key, agent_id, "gpt-4o", 200.0, 100).await;
        detect(&app, &tenant).await;
        let anomaly = anomalies(&app, key, "").await[0].clone();
        let id = anomaly["id"].as_str().unwrap();
        let path = |action: &str| format!("/anomalies/{id}/{action}");

        let reader = app.key_with_scopes(&tenant, &["anomaly:read"]).await;
        expect_status(app.get(&format!("/anomalies/{id}"), &reader).await, 200).await;
        expect_error(
            app.post(&path("acknowledge"), &reader, json!({})).await,
            403,
            "insufficient_scope",
        )
        .await;
        let other = app.new_tenant("starter").await;
        expect_error(
            app.get(&format!("/anomalies/{id}"), &other.admin_key).await,
            404,
            "not_found",
        )
        .await;
        expect_error(
            app.post(&path("resolve"), &other.admin_key, json!({}))
                .await,
            404,
            "not_found",
        )
        .await;
        expect_error(app.get("/anomalies/anm_nope", key).await, 404, "not_found").await;
        expect_error(
            app.get("/anomalies?type=meteor", key).await,
            422,
            "validation_failed",
        )
        .await;

        let long = "x".repeat(2001);
        expect_error(
            app.post(&path("acknowledge"), key, json!({"note": long}))
                .await,
            422,
            "validation_failed",
        )
        .await;
        let acknowledged = app
            .post(&path("acknowledge"), key, json!({"note": "looking"}))
            .await;
        assert_eq!(acknowledged.status().as_u16(), 204);
        let error = expect_error(
            app.post(&path("acknowledge"), key, json!({})).await,
            409,
            "invalid_anomaly_transition",
        )
        .await;
        assert_eq!(error["error"]["details"]["status"], "acknowledged");
        let read = expect_status(app.get(&format!("/anomalies/{id}"), key).await, 200).await
            ["data"]
            .clone();
        assert_eq!(
            (read["status"].clone(), read["note"].clone()),
            (json!("acknowledged"), json!("looking"))
        );
        // The body is optional.
        let resolved = app
            .request(reqwest::Method::POST, &path("resolve"), Some(key))
            .send()
            .await
            .unwrap();
        assert_eq!(resolved.status().as_u16(), 204);
        expect_error(
            app.post(&path("resolve"), key, json!({})).await,
            409,
            "invalid_anomaly_transition",
        )
        .await;
        expect_error(
            app.post(&path("acknowledge"), key, json!({})).await,
            409,
            "invalid_anomaly_transition",
        )
        .await;
        assert_eq!(
            app.audit_events(&tenant.id, id).await,
            [
                "anomaly.detected",
                "anomaly.acknowledged",
                "anomaly.resolved"
            ]
        );
        // Resolved, a new spike opens a new anomaly.
        app.clock.advance(HOUR_MS);
        usage(&app, key, agent_id, "gpt-4o", 300.0, 100).await;
        assert_eq!(detect(&app, &tenant).await.opened, 1);
    }
);

db_test!(rules_are_checked_one_per_type_and_webhooks_guarded, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    for (body, code) in [
        (
            json!({"anomaly_type": "cost_spike", "threshold_config": {"daily_cost": 5}}),
            "validation_failed",
        ),
        (
            json!({"anomaly_type": "cost_spike", "threshold_config": {"baseline_days": 3}}),
            "validation_failed",
        ),
        (
            json!({"anomaly_type": "behavioral_drift", "threshold_config": {"model_mix_shift": 2}}),
            "validation_failed",
        ),
        (json!({"anomaly_type": "volcano"}), "validation_failed"),
        (
            json!({"anomaly_type": "cost_spike", "notification_config": {"webhook_url": "http://169.254.169.254/"}}),
            "url_not_allowed",
        ),
        (
            json!({"anomaly_type": "cost_spike", "notification_config": {"email": "x@y.z"}}),
            "validation_failed",
        ),
    ] {
        expect_error(
            app.post("/anomaly-rules", key, body.clone()).await,
            422,
            code,
        )
        .await;
    }
    assert_eq!(app.count_rows("anomaly_rules", &tenant.id).await, 0);
    let rule = expect_status(app.post("/anomaly-rules", key, json!({
        "anomaly_type": "cost_spike", "threshold_config": {"daily_cost_usd": 50, "baseline_days": 7},
        "notification_config": {"webhook_url": "https://8.8.8.8/warden/secret-path"}})).await, 201).await["data"].clone();
    assert_eq!(rule["enabled"], true);
    assert_eq!(
        rule["notification_config"]["webhook_url"],
        "https://8.8.8.8/****"
    );
    assert!(rule["signing_secret"]
        .as_str()
        .unwrap()
        .starts_with("whsec_"));
    expect_error(
        app.post("/anomaly-rules", key, json!({"anomaly_type": "cost_spike"}))
            .await,
        409,
        "anomaly_rule_exists",
    )
    .await;
    let id = rule["id"].as_i64().unwrap();
    let path = format!("/anomaly-rules/{id}");
    let patched = expect_status(app.patch(&path, key, json!({
        "threshold_config": {"daily_cost_usd": 100}, "notification_config": rule["notification_config"]})).await, 200).await["data"].clone();
    assert_eq!(patched["threshold_config"]["daily_cost_usd"], 100);
    assert!(patched.get("signing_secret").is_none());
    let stored: String =
        sqlx::query_scalar("SELECT notification_config FROM anomaly_rules WHERE id = $1")
            .bind(id)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert!(stored.contains("secret-path"), "{stored}");
    let listed = expect_status(app.get("/anomaly-rules", key).await, 200).await["data"].clone();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert!(!listed.to_string().contains("secret-path"));
    let other = app.new_tenant("starter").await;
    expect_error(
        app.patch(&path, &other.admin_key, json!({"enabled": false}))
            .await,
        404,
        "not_found",
    )
    .await;
    assert_eq!(app.delete(&path, key).await.status().as_u16(), 204);
    expect_error(app.delete(&path, key).await, 404, "not_found").await;
    assert_eq!(
        app.audit_events(&tenant.id, &id.to_string()).await,
        [
            "anomaly_rule.created",
            "anomaly_rule.updated",
            "anomaly_rule.deleted"
        ]
    );
});
