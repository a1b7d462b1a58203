//! Operational surface: probes, metrics in Prometheus format, the OpenAPI document, request
//! ids and the envelope on framework-level errors.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, TestApp};

/// Every endpoint of the foundation issue, as (method, path template).
const EXPECTED_ROUTES: &[(&str, &str)] = &[
    ("post", "/api/v1/auth/signup"),
    ("post", "/api/v1/auth/login"),
    ("get", "/api/v1/auth/me"),
    ("get", "/api/v1/auth/api-keys"),
    ("post", "/api/v1/auth/api-keys"),
    ("delete", "/api/v1/auth/api-keys/{key_id}"),
    ("get", "/api/v1/agents"),
    ("post", "/api/v1/agents"),
    ("get", "/api/v1/agents/{agent_id}"),
    ("patch", "/api/v1/agents/{agent_id}"),
    ("delete", "/api/v1/agents/{agent_id}"),
    ("get", "/api/v1/teams"),
    ("post", "/api/v1/teams"),
    ("get", "/api/v1/teams/{team_id}"),
    ("patch", "/api/v1/teams/{team_id}"),
    ("delete", "/api/v1/teams/{team_id}"),
    ("get", "/api/v1/admin/tenants"),
    ("post", "/api/v1/admin/tenants"),
    ("get", "/api/v1/admin/tenants/{tenant_id}"),
    ("delete", "/api/v1/admin/tenants/{tenant_id}"),
    ("post", "/api/v1/telemetry/heartbeat"),
    ("post", "/api/v1/telemetry/heartbeats"),
    ("post", "/api/v1/telemetry/usage"),
    ("post", "/api/v1/telemetry/usages"),
    ("get", "/api/v1/monitoring/overview"),
    ("get", "/api/v1/agents/{agent_id}/health"),
    ("get", "/api/v1/cost/summary"),
    ("get", "/api/v1/cost/by-agent"),
    ("get", "/api/v1/cost/by-team"),
    ("get", "/api/v1/cost/by-model"),
    ("get", "/api/v1/cost/timeseries"),
    ("post", "/internal/v1/usage-batches"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
];

db_test!(
    the_openapi_document_lists_every_route_and_every_route_is_served,
    |app| {
        let operations = crate::scopes::operations(&app).await;
        let mut documented: Vec<(String, String)> = operations
            .iter()
            .map(|op| (op.method.clone(), op.path.clone()))
            .collect();
        documented.sort();
        for (method, path) in EXPECTED_ROUTES {
            assert!(
                documented.contains(&(method.to_string(), path.to_string())),
                "{method} {path} is missing from the OpenAPI document"
            );
        }
        // Every documented operation is routed: nothing answers route_not_found or 405.
        for op in &operations {
            let method = Method::from_bytes(op.method.to_uppercase().as_bytes()).unwrap();
            let path = op.path.replace('{', "x").replace('}', "");
            let response = app
                .client
                .request(method, format!("{}{path}", app.base))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            assert!(
                !text.contains("route_not_found") && status != 405,
                "{} {} is not routed",
                op.method,
                op.path
            );
        }
    }
);

db_test!(probes_answer, |app| {
    let health = expect_status(
        app.client
            .get(format!("{}/healthz", app.base))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(health, json!({ "status": "ok" }));
    let ready = expect_status(
        app.client
            .get(format!("{}/readyz", app.base))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(ready, json!({ "status": "ready" }));
});

db_test!(
    metrics_parse_as_prometheus_text_and_count_by_route_template,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let agent = app
            .register_agent(&tenant.admin_key, json!({ "name": "m" }))
            .await;
        let id = agent["id"].as_str().unwrap();
        for _ in 0..3 {
            expect_status(
                app.get(&format!("/agents/{id}"), &tenant.admin_key).await,
                200,
            )
            .await;
        }
        let text = app.metrics().await;
        let exposition = openmetrics_parser::prometheus::parse_prometheus(&text).unwrap();
        let family = &exposition.families["warden_http_requests_total"];
        let count = family
            .iter_samples()
            .find_map(|sample| {
                let labels: std::collections::HashMap<String, String> = sample
                    .get_labelset()
                    .unwrap()
                    .iter()
                    .map(|(name, value)| (name.clone(), value.clone()))
                    .collect();
                let wanted = labels.get("route").map(String::as_str)
                    == Some("/api/v1/agents/{agent_id}")
                    && labels.get("method").map(String::as_str) == Some("GET")
                    && labels.get("status").map(String::as_str) == Some("200");
                match (&sample.value, wanted) {
                    (openmetrics_parser::PrometheusValue::Counter(counter), true) => {
                        Some(counter.value)
                    }
                    _ => None,
                }
            })
            .expect("a counter for the route template");
        let count = match count {
            openmetrics_parser::MetricNumber::Float(v) => v,
            openmetrics_parser::MetricNumber::Int(v) => v as f64,
        };
        assert!(count >= 3.0, "three reads counted, got {count}");
        assert!(exposition
            .families
            .contains_key("warden_http_request_duration_seconds"));
        assert!(!text.contains(id), "raw paths must not become labels");
    }
);

db_test!(
    framework_errors_use_the_envelope_and_responses_carry_a_request_id,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let response = app.get("/no-such-route", &tenant.admin_key).await;
        assert!(response.headers().contains_key("x-request-id"));
        expect_error(response, 404, "route_not_found").await;
        let response = app
            .request(Method::PUT, "/agents", Some(&tenant.admin_key))
            .send()
            .await
            .unwrap();
        expect_error(response, 405, "method_not_allowed").await;
        let response = app
            .request(Method::GET, "/agents", Some(&tenant.admin_key))
            .header("x-request-id", "trace-me-123")
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["x-request-id"], "trace-me-123");
    }
);

db_test!(
    bodies_over_the_limit_are_413,
    |config| config.max_body_bytes = 4096,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let big = "x".repeat(5000);
        let response = app
            .post(
                "/agents",
                &tenant.admin_key,
                json!({ "name": "a", "description": big }),
            )
            .await;
        expect_error(response, 413, "payload_too_large").await;
        let list = expect_status(app.get("/agents", &tenant.admin_key).await, 200).await;
        assert_eq!(list["meta"]["total"], json!(0));
    }
);

/// Every status an operation can answer by its shape is declared in the OpenAPI
/// document: 401 and 403 with a credential, 404 with a path id, 400, 413, 415 and 422
/// with a body, 422 with query parameters; each with the error body's schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_declares_the_error_answers_of_every_operation() {
    let app = crate::helpers::TestApp::spawn_with(crate::helpers::Backend::Sqlite, |_| {}).await;
    let doc = app.openapi().await;
    let codes = doc["components"]["schemas"]["ErrorBody"]["properties"]["error"]["properties"]
        ["code"]["enum"]
        .as_array()
        .expect("the error body's codes are listed");
    assert!(codes.iter().any(|c| c == "validation_failed"));
    // Text fields carry their own length range, each range a schema of its own.
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["Text1_1000"]["maxLength"], 1000,
        "{}",
        schemas["Text1_1000"]
    );
    assert_eq!(schemas["Text1_100"]["maxLength"], 100);
    let reason = &schemas["QuarantineInput"]["properties"]["reason"];
    assert_eq!(
        reason["$ref"], "#/components/schemas/Text1_1000",
        "{reason}"
    );
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let declared = |status: &str| operation["responses"].get(status).is_some();
            let mut expect = |status: &str, when: bool| {
                if when {
                    assert!(
                        declared(status),
                        "{method} {path} does not declare {status}"
                    );
                    checked += 1;
                }
            };
            let authenticated = operation.get("security").is_some();
            let body = operation.get("requestBody").is_some();
            let query = operation["parameters"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["in"] == "query"));
            expect("401", authenticated);
            expect("403", authenticated);
            expect("404", path.contains('{'));
            for status in ["400", "413", "415", "422"] {
                expect(status, body);
            }
            expect("422", query);
        }
    }
    assert!(checked > 300, "{checked}");
}

/// The document refers only to schemas it has, lists the shared enums' names, and
/// describes an optional body as absent or an object (never `null`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_whole_and_names_what_it_accepts() {
    let app = crate::helpers::TestApp::spawn_with(crate::helpers::Backend::Sqlite, |_| {}).await;
    let doc = app.openapi().await;
    fn refs<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
        match value {
            Value::Object(members) => {
                if let Some(Value::String(target)) = members.get("$ref") {
                    found.push(target);
                }
                members.values().for_each(|v| refs(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(found.len() > 100, "{}", found.len());
    for target in found {
        let name = target
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("an unexpected reference {target}"));
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "{target} refers to nothing"
        );
    }
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["CreateManagedKeyInput"]["properties"]["provider"]["enum"],
        json!(["openai", "anthropic", "google", "nvidia", "bedrock"])
    );
    let block = &doc["paths"]["/api/v1/agents/{agent_id}/block"]["post"]["requestBody"];
    assert_eq!(block.get("required"), None);
    assert_eq!(
        block["content"]["application/json"]["schema"],
        json!({ "$ref": "#/components/schemas/BlockInput" })
    );
}

/// Spec 2.1: every `*_usd` field is a number, except `total_cost_today_usd` in proxy
/// stats (an exact decimal string). Walks every schema of the document, request and
/// answer bodies alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_usd_field_is_a_number_but_the_one_the_spec_names() {
    let app = crate::helpers::TestApp::spawn_with(crate::helpers::Backend::Sqlite, |_| {}).await;
    let doc = app.openapi().await;
    fn is_number(schema: &Value) -> bool {
        let typed = |t: &Value| t == "number" || t == "integer";
        match &schema["type"] {
            Value::Array(types) => types.iter().any(typed),
            t if typed(t) => true,
            _ => ["oneOf", "anyOf", "allOf"].iter().any(|key| {
                schema[*key]
                    .as_array()
                    .is_some_and(|options| options.iter().any(is_number))
            }),
        }
    }
    fn walk(value: &Value, path: &str, checked: &mut usize, wrong: &mut Vec<String>) {
        match value {
            Value::Object(members) => {
                if let Some(Value::Object(properties)) = members.get("properties") {
                    for (name, schema) in properties {
                        if name.ends_with("_usd") {
                            *checked += 1;
                            let exception = name == "total_cost_today_usd";
                            if is_number(schema) == exception {
                                wrong.push(format!("{path}.{name}: {schema}"));
                            }
                        }
                    }
                }
                for (key, member) in members {
                    walk(member, &format!("{path}/{key}"), checked, wrong);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, path, checked, wrong)),
            _ => {}
        }
    }
    let (mut checked, mut wrong) = (0, Vec::new());
    walk(&doc, "", &mut checked, &mut wrong);
    assert!(checked > 10, "only {checked} `*_usd` fields found");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The value of the sample `name` (with its labels as written) in a scrape.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// SQLite only: the gauges read every tenant's state, which on the shared PostgreSQL
/// database holds every other test's too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alerting_gauges_follow_the_state_they_watch() {
    let app = TestApp::spawn_with(crate::helpers::Backend::Sqlite, |config| {
        config.audit_verification_interval_secs = 1;
    })
    .await;
    let scrape = || async {
        let response = app.client.get(format!("{}/metrics", app.base)).send();
        response.await.unwrap().text().await.unwrap()
    };
    let quiet = scrape().await;
    assert_eq!(sample(&quiet, "warden_database_up"), Some(1.0));
    assert_eq!(
        sample(&quiet, "warden_approvals_oldest_pending_seconds"),
        Some(0.0)
    );
    let warn = "warden_budget_limits_at_threshold{threshold=\"warn\"}";
    assert_eq!(sample(&quiet, warn), Some(0.0));
    let version = sample(&quiet, "warden_state_version").unwrap();

    // A held request waits; the clock moves on: its age is the gauge.
    let tenant = app.new_tenant("enterprise").await;
    let key = &tenant.admin_key;
    let agent = app.register_agent(key, json!({ "name": "gauged" })).await;
    let agent_id = agent["id"].as_str().unwrap();
    let policy = crate::helpers::create_policy(
        &app,
        key,
        json!({ "name": "hold", "policy_type": "require_approval",
                "config": { "models": ["gpt-4o"] } }),
    )
    .await;
    let policy_id = policy["id"].as_i64().unwrap();
    let held = json!({
        "tenant_id": tenant.id,
        "evaluation": { "request_id": "held-gauge", "agent_id": agent_id, "provider": "openai",
            "model": "gpt-4o", "evaluated_at": app.clock.now().to_string(),
            "results": [{ "policy_id": policy_id, "policy_name": "hold",
                "policy_type": "require_approval", "result": "fail",
                "reason": "requires human approval" }] },
        "approval": { "policy_id": policy_id,
            "request_context": { "provider": "openai", "model": "gpt-4o" } },
    });
    crate::helpers::report_decisions(&app, "gauge-held", &[held]).await;
    app.clock.advance(90_000);
    // A budget limit of $1 and $0.85 spent: its warn threshold (80 %) is reached.
    expect_status(
        app.post("/budget/limits", key, json!({ "monthly_limit_usd": 1 }))
            .await,
        201,
    )
    .await;
    expect_status(
        app.post(
            "/telemetry/usage",
            key,
            json!({ "agent_id": agent_id, "model_provider": "openai", "model_name": "gpt-4o",
                    "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.85 }),
        )
        .await,
        201,
    )
    .await;
    let busy = scrape().await;
    assert_eq!(
        sample(&busy, "warden_approvals_oldest_pending_seconds"),
        Some(90.0)
    );
    assert_eq!(sample(&busy, warn), Some(1.0));
    assert!(sample(&busy, "warden_state_version").unwrap() > version);

    // The chain's round finds a tampered chain within its interval.
    assert_eq!(
        sample(&busy, "warden_audit_chain_broken_tenants"),
        Some(0.0)
    );
    sqlx::query(
        "UPDATE audit_events SET actor = 'forged' WHERE tenant_id = $1 \
         AND seq = (SELECT MAX(seq) FROM audit_events WHERE tenant_id = $1)",
    )
    .bind(&tenant.id)
    .execute(app.db.pool())
    .await
    .unwrap();
    crate::proxy::eventually(std::time::Duration::from_secs(10), || async {
        (sample(&scrape().await, "warden_audit_chain_broken_tenants") == Some(1.0)).then_some(())
    })
    .await;
}
