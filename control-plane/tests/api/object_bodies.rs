//! Every JSON body is an object: walking every operation of the OpenAPI document that
//! takes a body, `null`, arrays, a string, a number and a boolean are refused (400 or
//! 422 with the envelope) and change nothing. Serde alone would read a struct from an
//! array by position (`["array-agent"]` as `{"name": "array-agent"}`).

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, platform_key, Backend, TestApp, SERVICE_TOKEN};
use crate::proxy::{MockProvider, TestProxy};
use crate::scopes::{operations, SERVICE};

/// What a write would change: the audit chains' lengths (each write is audited; every
/// tenant's on SQLite, this tenant's on the PostgreSQL database other tests share) and
/// the tenant's rows, table by table.
async fn state(app: &TestApp, tenant_id: &str) -> Vec<i64> {
    let heads = match app.backend {
        Backend::Sqlite => "SELECT seq FROM audit_heads WHERE $1 = $1 ORDER BY tenant_id",
        Backend::Postgres => "SELECT seq FROM audit_heads WHERE tenant_id = $1",
    };
    let mut state: Vec<i64> = sqlx::query_scalar(heads)
        .bind(tenant_id)
        .fetch_all(app.db.pool())
        .await
        .unwrap();
    for table in warden_control_plane::tenancy::TENANT_TABLES {
        state.push(app.count_rows(table, tenant_id).await);
    }
    state
}

db_test!(no_body_but_an_object_is_accepted_anywhere, |app| {
    // Enterprise: every plan gate (SSO is Enterprise and above) lets the body be read.
    let tenant = app.new_tenant("enterprise").await;
    let key = &tenant.admin_key;
    let agent = app.register_agent(key, json!({ "name": "steady" })).await;
    let agent_id = agent["id"].as_str().unwrap().to_owned();
    let team = expect_status(
        app.post("/teams", key, json!({ "name": "blue" })).await,
        201,
    )
    .await;
    let team_id = team["data"]["id"].as_str().unwrap().to_owned();
    let policy = crate::helpers::create_policy(
        &app,
        key,
        json!({ "name": "p", "policy_type": "block_provider", "config": { "providers": ["nvidia"] } }),
    )
    .await;
    let limit = expect_status(
        app.post("/budget/limits", key, json!({ "monthly_limit_usd": 10 }))
            .await,
        201,
    )
    .await;
    let ids = [
        ("{agent_id}", agent_id.clone()),
        ("{team_id}", team_id),
        ("{policy_id}", policy["id"].to_string()),
        (
            "{limit_id}",
            limit["data"]["id"].as_str().unwrap().to_owned(),
        ),
        ("{tenant_id}", tenant.id.clone()),
    ];
    let bodies = [
        json!(null),
        json!([]),
        json!(["array-agent"]),
        json!([{ "name": "x" }]),
        json!([5]),
        json!("a string"),
        json!(5),
        json!(true),
    ];

    // The operations that take a body, as the document declares them.
    let doc = app.openapi().await;
    let takes_body =
        |method: &str, path: &str| doc["paths"][path][method].get("requestBody").is_some();
    let before = state(&app, &tenant.id).await;
    let mut checked = 0;
    for op in operations(&app).await {
        if !takes_body(&op.method, &op.path) {
            continue;
        }
        let method = Method::from_bytes(op.method.to_uppercase().as_bytes()).unwrap();
        let mut path = op.path.clone();
        for (param, id) in &ids {
            path = path.replace(param, id);
        }
        let credential = match op.requirement.as_ref().and_then(|r| r.as_deref()) {
            Some(SERVICE) => Some(SERVICE_TOKEN),
            Some("platform:admin") => Some(platform_key()),
            None if op.requirement.is_none() => None,
            _ => Some(key.as_str()),
        };
        for body in &bodies {
            let mut request = app
                .client
                .request(method.clone(), format!("{}{path}", app.base))
                .json(body);
            if let Some(credential) = credential {
                request = request.bearer_auth(credential);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let answer: Value = response.json().await.unwrap_or_default();
            // 404: a path id this walk could not make exist; the body was never read.
            // 401: the payment provider's webhook, whose body is read only once its
            // signature verifies (`billing` tests send it signed non-object bodies).
            let allowed: &[u16] = if op.path.ends_with("/billing/webhook") {
                &[401]
            } else {
                &[400, 404, 422]
            };
            assert!(
                allowed.contains(&status),
                "{} {path} with {body}: {status} {answer}",
                op.method
            );
            assert!(
                answer["error"]["code"].is_string(),
                "{} {path}: {answer}",
                op.method
            );
            checked += 1;
        }
    }
    assert!(
        checked > 200,
        "only {checked} requests: the walk found too few operations"
    );
    assert_eq!(
        state(&app, &tenant.id).await,
        before,
        "a refused body changed something"
    );
    let still = expect_status(app.get(&format!("/agents/{agent_id}"), key).await, 200).await;
    assert_eq!(still["data"]["name"], "steady");

    // The examples of the report, one by one.
    let renamed = app
        .patch(&format!("/agents/{agent_id}"), key, json!(["renamed"]))
        .await;
    let error = crate::helpers::expect_error(renamed, 422, "validation_failed").await;
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("JSON object"),
        "{error}"
    );
    let not_json = app
        .client
        .post(format!("{}/agents", app.api))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body("[1,")
        .send()
        .await
        .unwrap();
    crate::helpers::expect_error(not_json, 400, "malformed_json").await;
});

db_test!(the_proxy_refuses_a_body_that_is_not_an_object, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (_, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "arrays" }))
        .await;
    for body in [
        json!(["gpt-4o-mini"]),
        json!(null),
        json!("gpt-4o-mini"),
        json!(5),
    ] {
        let response = proxy.chat(&key, body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
        assert!(answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("JSON object"));
    }
    assert!(
        provider.requests().is_empty(),
        "nothing reached the provider"
    );
});

db_test!(nested_structs_are_objects_too, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app.register_agent(key, json!({ "name": "nested" })).await;
    let agent_id = agent["id"].as_str().unwrap();
    // Each would have been read by position: a heartbeat item, a rate limit, a rule.
    let response = app
        .post(
            "/telemetry/heartbeats",
            key,
            json!({ "heartbeats": [[agent_id, "healthy"]] }),
        )
        .await;
    expect_error(response, 422, "validation_failed").await;
    assert_eq!(app.count_rows("heartbeats", &tenant.id).await, 0);
    let response = app
        .post(
            "/proxy-keys",
            key,
            json!({ "developer_label": "x", "agent_id": agent_id,
            "rate_limit_override": [5, 6] }),
        )
        .await;
    expect_error(response, 422, "validation_failed").await;
    assert_eq!(app.count_rows("proxy_keys", &tenant.id).await, 0);
    let response = app
        .request(Method::PUT, "/payload-capture/config", Some(key))
        .json(&json!({ "enabled": true, "retention_days": 7,
            "processing_purpose": "nested arrays refused", "redaction_rules": [["a", "x"]] }))
        .send()
        .await
        .unwrap();
    expect_error(response, 422, "validation_failed").await;
    assert_eq!(
        app.count_rows("payload_capture_configs", &tenant.id).await,
        0
    );
    // Objects still work.
    let ok = app
        .post(
            "/telemetry/heartbeats",
            key,
            json!({ "heartbeats": [{"agent_id": agent_id, "status": "healthy"}] }),
        )
        .await;
    assert_eq!(ok.status().as_u16(), 200);
    let ok = app
        .post(
            "/proxy-keys",
            key,
            json!({ "developer_label": "x", "agent_id": agent_id,
            "rate_limit_override": {"requests_per_minute": 5} }),
        )
        .await;
    assert_eq!(ok.status().as_u16(), 201);
});
