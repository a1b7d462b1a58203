//! Payload capture end to end: a tenant enables capture with redaction rules, the proxy
//! captures each forwarded body redacted (checked in the database: nothing reads it
//! through the API), a body over the size limit is recorded by size only, disabling
//! stops capture at once, a capture arriving after that is not stored, and the purge
//! deletes captures past the tenant's retention.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use sqlx::Row;
use warden_control_plane::api::payload_capture::purge_expired;
use warden_shared::timestamp::Timestamp;

use super::{eventually, MockProvider, TestProxy};
use crate::helpers::{expect_status, now_ms, TestApp, SERVICE_TOKEN};

const PURPOSE: &str = "Debugging agent failures reported by customers";
const DAY_MS: i64 = 86_400_000;

/// PUTs the capture configuration and checks the proxies applied it on answering.
pub(crate) async fn configure(app: &TestApp, key: &str, body: Value) -> Value {
    let response = app
        .request(Method::PUT, "/payload-capture/config", Some(key))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response
            .headers()
            .get("warden-enforcement")
            .and_then(|v| v.to_str().ok()),
        Some("applied")
    );
    expect_status(response, 200).await["data"].clone()
}

/// Turns capture on with one rule, redacting mail addresses at `field_path`.
pub(crate) async fn capture_redacting_mail(app: &TestApp, key: &str, field_path: &str) {
    let settings = json!({
        "enabled": true, "retention_days": 7, "processing_purpose": PURPOSE,
        "redaction_rules": [{
            "id": "email", "field_path": field_path,
            "pattern": "[\\w.+-]+@[\\w-]+\\.[\\w.]+"
        }]
    });
    configure(app, key, settings).await;
}

/// The tenant's captures, oldest first: (record id, body, omitted, bytes, redactions, version).
async fn captures(
    app: &TestApp,
    tenant_id: &str,
) -> Vec<(String, Value, Option<String>, i64, i64, i64)> {
    sqlx::query(
        "SELECT record_id, body, omitted, body_bytes, redactions, config_version \
         FROM payload_captures WHERE tenant_id = $1 ORDER BY captured_at, record_id",
    )
    .bind(tenant_id)
    .fetch_all(app.db.pool())
    .await
    .unwrap()
    .iter()
    .map(|row| {
        let body: Option<String> = row.get(1);
        (
            row.get(0),
            body.map_or(Value::Null, |b| serde_json::from_str(&b).unwrap()),
            row.get(2),
            row.get(3),
            row.get(4),
            row.get(5),
        )
    })
    .collect()
}

async fn wait_for_records(app: &TestApp, tenant_id: &str, expected: i64) {
    eventually(Duration::from_secs(10), || async {
        (app.count_rows("usage_records", tenant_id).await == expected).then_some(())
    })
    .await;
}

db_test!(the_proxy_captures_redacted_bodies_while_enabled, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start_with(&app, &provider, |config| {
        config.payload_capture_max_bytes = 2_000;
    })
    .await;
    let (tenant, key, created) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "captured" }))
        .await;
    let admin = tenant.admin_key.clone();
    let config = configure(
        &app,
        &admin,
        json!({
            "enabled": true, "retention_days": 7, "processing_purpose": PURPOSE,
            "redaction_rules": [
                {"id": "email", "field_path": "messages.content", "pattern": "[\\w.+-]+@[\\w-]+\\.[\\w.]+"},
                {"id": "user", "field_path": "user"},
            ]
        }),
    )
    .await;
    let version = config["config_version"].as_i64().unwrap();

    let secret_mail = "alice.secret@example.com";
    let body = json!({
        "model": "gpt-4o",
        "user": "customer-4711",
        "messages": [
            {"role": "system", "content": "You answer support mail."},
            {"role": "user", "content": format!("Write to {secret_mail} today")},
        ],
    });
    assert_eq!(proxy.chat(&key, body).await.status(), 200);
    // The provider gets the body as the agent sent it: capture changes nothing forwarded.
    assert!(String::from_utf8_lossy(&provider.last().body).contains(secret_mail));
    let large =
        json!({ "model": "gpt-4o", "messages": [{"role": "user", "content": "x".repeat(3_000)}] });
    let large_bytes = serde_json::to_vec(&large).unwrap().len() as i64;
    assert_eq!(proxy.chat(&key, large).await.status(), 200);
    wait_for_records(&app, &tenant.id, 2).await;

    let stored = eventually(Duration::from_secs(5), || async {
        let stored = captures(&app, &tenant.id).await;
        (stored.len() == 2).then_some(stored)
    })
    .await;
    let (record_id, captured, omitted, _, redactions, captured_version) = &stored[0];
    assert_eq!(omitted, &None);
    assert_eq!((*redactions, *captured_version), (2, version));
    assert_eq!(captured["model"], "gpt-4o");
    assert_eq!(captured["user"], "[REDACTED:user]");
    assert_eq!(
        captured["messages"][0]["content"],
        "You answer support mail."
    );
    assert_eq!(
        captured["messages"][1]["content"],
        "Write to [REDACTED:email] today"
    );
    assert!(!captured.to_string().contains("alice.secret"));
    // The capture belongs to the request's usage record, and to its agent and key.
    let record: (String, String) = sqlx::query_as(
        "SELECT agent_id, api_key_id FROM usage_records WHERE tenant_id = $1 AND record_id = $2",
    )
    .bind(&tenant.id)
    .bind(record_id)
    .fetch_one(app.db.pool())
    .await
    .unwrap();
    assert_eq!(record.0, created["agent_id"].as_str().unwrap());
    let (_, body, omitted, bytes, _, _) = &stored[1];
    assert_eq!(
        (body, omitted.as_deref(), *bytes),
        (&Value::Null, Some("too_large"), large_bytes)
    );

    // No endpoint reads, exports or deletes captures: the only capture path is the
    // configuration.
    let document = app.openapi().await;
    let capture_paths: Vec<&String> = document["paths"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|path| path.contains("capture"))
        .collect();
    assert_eq!(capture_paths, ["/api/v1/payload-capture/config"]);

    // Disabled: the very next request is not captured.
    configure(
        &app,
        &admin,
        json!({ "enabled": false, "retention_days": 7, "processing_purpose": PURPOSE }),
    )
    .await;
    assert_eq!(
        proxy
            .chat(
                &key,
                json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
            )
            .await
            .status(),
        200
    );
    wait_for_records(&app, &tenant.id, 3).await;
    // A capture a proxy still held (spooled before the change) is not stored either.
    let late = json!({ "batch_id": format!("late-{}", tenant.id), "records": [{
        "record_id": format!("late-{}", tenant.id), "tenant_id": tenant.id,
        "agent_id": created["agent_id"], "model_provider": "openai", "model_name": "gpt-4o",
        "input_tokens": 1, "output_tokens": 1,
        "recorded_at": Timestamp::from_millis(now_ms()).to_string(),
        "capture": { "config_version": version, "bytes": 2, "redactions": 0, "body": {} } }] });
    let ingested = app
        .client
        .post(format!("{}/internal/v1/usage-batches", app.base))
        .bearer_auth(SERVICE_TOKEN)
        .json(&late)
        .send()
        .await
        .unwrap();
    assert_eq!(expect_status(ingested, 200).await["data"]["accepted"], 1);
    assert_eq!(captures(&app, &tenant.id).await.len(), 2);

    // Kept for the retention's 7 days, deleted after.
    let now = Timestamp::from_millis(now_ms());
    purge_expired(
        &app.db,
        Timestamp::from_millis(now.as_millis() + 6 * DAY_MS),
    )
    .await
    .unwrap();
    assert_eq!(captures(&app, &tenant.id).await.len(), 2);
    purge_expired(
        &app.db,
        Timestamp::from_millis(now.as_millis() + 8 * DAY_MS),
    )
    .await
    .unwrap();
    assert_eq!(captures(&app, &tenant.id).await.len(), 0);
    // The usage records stay: they follow the telemetry retention.
    assert_eq!(app.count_rows("usage_records", &tenant.id).await, 4);
});
