//! Bad input on every write: a 4xx with the error envelope, and nothing changes.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{expect_status, platform_key, TestApp, TestTenant};

/// A snapshot of everything the tenant owns, to compare before and after.
async fn state_of(app: &TestApp, tenant: &TestTenant) -> Vec<i64> {
    let mut counts = Vec::new();
    for table in [
        "agents",
        "teams",
        "api_keys",
        "audit_events",
        "users",
        "sessions",
    ] {
        counts.push(app.count_rows(table, &tenant.id).await);
    }
    // Other tests create tenants concurrently: count only those the refused platform
    // writes below would have created.
    let tenants: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tenants WHERE company_name = 'X'")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    counts.push(tenants);
    counts
}

async fn send_raw(
    app: &TestApp,
    method: Method,
    path: &str,
    key: &str,
    body: &str,
) -> reqwest::Response {
    app.request(method, path, Some(key))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

async fn assert_rejected(
    app: &TestApp,
    method: Method,
    path: &str,
    key: &str,
    body: &str,
    expected: u16,
) {
    let response = send_raw(app, method.clone(), path, key, body).await;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert_eq!(status, expected, "{method} {path} with {body}: {text}");
    let envelope: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(envelope["success"], json!(false));
    let code = envelope["error"]["code"].as_str().unwrap();
    assert!(
        !code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
        "code {code}"
    );
    if status == 422 {
        assert!(
            envelope["error"]["details"]["field"].is_string(),
            "422 names the field: {text}"
        );
    }
}

db_test!(bad_writes_are_refused_and_change_nothing, |app| {
    let tenant = app.new_tenant("starter").await;
    let agent = app
        .register_agent(&tenant.admin_key, json!({ "name": "keep", "team": "keep" }))
        .await;
    let agent_path = format!("/agents/{}", agent["id"].as_str().unwrap());
    let team_path = format!("/teams/{}", agent["team_id"].as_str().unwrap());
    let before = state_of(&app, &tenant).await;
    let long = "x".repeat(5000);
    let key = tenant.admin_key.clone();

    let cases: Vec<(Method, String, String, u16)> = vec![
        // Malformed JSON.
        (Method::POST, "/agents".into(), "{\"name\": ".into(), 400),
        (Method::POST, "/teams".into(), "not json".into(), 400),
        (Method::PATCH, agent_path.clone(), "{".into(), 400),
        (Method::PATCH, team_path.clone(), "[1,".into(), 400),
        (Method::POST, "/auth/api-keys".into(), "{]".into(), 400),
        (Method::POST, "/agents".into(), "{\"name\":\"a\"} trailing".into(), 400),
        // Wrong types.
        (Method::POST, "/agents".into(), json!({ "name": 42 }).to_string(), 422),
        (Method::POST, "/agents".into(), json!({ "name": "a", "tags": ["x"] }).to_string(), 422),
        (Method::POST, "/agents".into(), json!({ "name": "a", "tags": { "k": 1 } }).to_string(), 422),
        (Method::POST, "/teams".into(), json!({ "name": true }).to_string(), 422),
        (Method::PATCH, agent_path.clone(), json!({ "description": 7 }).to_string(), 422),
        (Method::POST, "/auth/api-keys".into(), json!({ "name": "k", "scopes": "admin" }).to_string(), 422),
        (Method::POST, "/agents".into(), json!([]).to_string(), 422),
        // Missing required fields and unknown fields.
        (Method::POST, "/agents".into(), json!({}).to_string(), 422),
        (Method::POST, "/teams".into(), json!({}).to_string(), 422),
        (Method::POST, "/agents".into(), json!({ "name": "a", "colour": "red" }).to_string(), 422),
        // Unknown enum values.
        (Method::POST, "/agents".into(), json!({ "name": "a", "environment": "prod" }).to_string(), 422),
        (Method::POST, "/agents".into(), json!({ "name": "a", "model_provider": "azure" }).to_string(), 422),
        (Method::PATCH, agent_path.clone(), json!({ "environment": "qa" }).to_string(), 422),
        (Method::POST, "/auth/api-keys".into(), json!({ "name": "k", "scopes": ["registry:delete"] }).to_string(), 422),
        (Method::POST, "/auth/api-keys".into(), json!({ "name": "k", "key_type": "superuser" }).to_string(), 422),
        // Over-long and empty strings.
        (Method::POST, "/agents".into(), json!({ "name": long }).to_string(), 422),
        (Method::POST, "/agents".into(), json!({ "name": "  " }).to_string(), 422),
        (Method::POST, "/agents".into(), json!({ "name": "a", "team": long }).to_string(), 422),
        (Method::POST, "/teams".into(), json!({ "name": long }).to_string(), 422),
        (Method::PATCH, team_path.clone(), json!({ "name": "" }).to_string(), 422),
        (Method::POST, "/auth/api-keys".into(), json!({ "name": long, "scopes": ["registry:read"] }).to_string(), 422),
        (Method::POST, "/agents".into(), json!({ "name": "a\u{0}b" }).to_string(), 422),
        // Negative and out-of-range numbers.
        (Method::POST, "/auth/api-keys".into(), json!({ "name": "k", "scopes": ["registry:read"], "expires_in_days": -1 }).to_string(), 422),
        (Method::POST, "/auth/api-keys".into(), json!({ "name": "k", "scopes": ["registry:read"], "expires_in_days": 0 }).to_string(), 422),
        (Method::POST, "/auth/api-keys".into(), json!({ "name": "k", "scopes": ["registry:read"], "expires_in_days": 1.5 }).to_string(), 422),
        (Method::POST, "/auth/api-keys".into(), json!({ "name": "k", "scopes": ["registry:read"], "expires_in_days": 99999999999999999999u128 as f64 }).to_string(), 422),
        // Ids with path characters or of the wrong kind.
        (Method::PATCH, "/agents/..%2F..%2Fetc%2Fpasswd".into(), json!({ "name": "x" }).to_string(), 404),
        (Method::DELETE, "/agents/agt_'%20OR%201=1--".into(), String::new(), 404),
        (Method::DELETE, team_path.replace("team_", "agt_"), String::new(), 404),
        (Method::DELETE, "/auth/api-keys/%2e%2e".into(), String::new(), 404),
        (Method::DELETE, "/agents/%FF%FE".into(), String::new(), 404),
        (Method::PATCH, "/teams/%C3%28".into(), json!({ "name": "x" }).to_string(), 404),
        (Method::PATCH, "/teams/team_%00".into(), json!({ "name": "x" }).to_string(), 404),
    ];
    for (method, path, body, expected) in cases {
        assert_rejected(&app, method, &path, &key, &body, expected).await;
    }

    // Platform writes too.
    for body in [
        "{".to_owned(),
        json!({ "company_name": "X", "owner_email": "x@example.com", "plan": "platinum" }).to_string(),
        json!({ "company_name": "X", "owner_email": "x@example.com", "plan": "starter", "agent_limit": -1 }).to_string(),
        json!({ "company_name": "X", "owner_email": "x@example.com", "plan": "starter", "agent_limit": "ten" }).to_string(),
    ] {
        let expected = if body == "{" { 400 } else { 422 };
        assert_rejected(&app, Method::POST, "/admin/tenants", platform_key(), &body, expected).await;
    }
    assert_rejected(
        &app,
        Method::DELETE,
        "/admin/tenants/ten_..%2F",
        platform_key(),
        "",
        404,
    )
    .await;

    // A body without a JSON content type is refused as such.
    let response = app
        .request(Method::POST, "/agents", Some(&key))
        .header("content-type", "text/plain")
        .body(json!({ "name": "a" }).to_string())
        .send()
        .await
        .unwrap();
    expect_status(response, 415).await;

    assert_eq!(
        state_of(&app, &tenant).await,
        before,
        "a refused request changed stored state"
    );
    let read = expect_status(app.get(&agent_path, &key).await, 200).await;
    assert_eq!(read["data"], agent);
});

db_test!(an_unreadable_path_id_is_a_plain_404, |app| {
    let tenant = app.new_tenant("starter").await;
    for path in [
        "/approvals/null/decide",
        "/approvals/1e9/decide",
        "/approvals/-/decide",
    ] {
        let response = app
            .post(
                path,
                &tenant.admin_key,
                json!({ "reviewer_id": "a", "decision": "approved" }),
            )
            .await;
        let body = crate::helpers::expect_error(response, 404, "not_found").await;
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            !message.contains("parse") && !message.contains("i64"),
            "{message}"
        );
    }
});

db_test!(
    a_plan_without_the_feature_is_a_402_before_the_body_is_read,
    |app| {
        let free = app.new_tenant("free").await;
        let cases = [
            ("/managed-keys", json!({ "provider": "nobody" })),
            ("/proxy-keys", json!({ "developer_label": "" })),
            ("/budget/limits", json!({ "monthly_limit_usd": -1 })),
            (
                "/risk-classifications/bulk",
                json!({ "classifications": "many" }),
            ),
        ];
        for (path, body) in cases {
            let response = app.post(path, &free.admin_key, body).await;
            crate::helpers::expect_error(response, 402, "plan_upgrade_required").await;
        }
        // The body, too, is not read: not even whether it is JSON.
        let response = app
            .client
            .post(format!("{}/managed-keys", app.api))
            .bearer_auth(&free.admin_key)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        crate::helpers::expect_error(response, 402, "plan_upgrade_required").await;
    }
);
