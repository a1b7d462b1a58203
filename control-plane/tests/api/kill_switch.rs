//! Kill switch and quarantine: flags, reasons, the quarantined list, audit, and the
//! change each one publishes to the proxies.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, TestApp};

async fn agent(app: &TestApp, key: &str, id: &str) -> Value {
    expect_status(app.get(&format!("/agents/{id}"), key).await, 200).await["data"].clone()
}

/// The newest proxy change about `entity_id` (tests share the database, so the newest
/// change overall may be another test's).
async fn latest_change(app: &TestApp, entity_id: &str) -> (i64, String, String) {
    sqlx::query_as(
        "SELECT version, kind, entity_id FROM proxy_changes WHERE entity_id = $1 \
         ORDER BY version DESC LIMIT 1",
    )
    .bind(entity_id)
    .fetch_one(app.db.pool())
    .await
    .unwrap()
}

db_test!(block_and_unblock_set_the_flag_audit_and_publish, |app| {
    let tenant = app.new_tenant("starter").await;
    let registered = app
        .register_agent(&tenant.admin_key, json!({ "name": "rogue" }))
        .await;
    let id = registered["id"].as_str().unwrap();
    assert_eq!(registered["blocked"], json!(false));
    let key = &tenant.admin_key;

    // No body at all is a block without a reason.
    let response = app
        .request(Method::POST, &format!("/agents/{id}/block"), Some(key))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
    assert_eq!(response.text().await.unwrap(), "");
    let blocked = agent(&app, key, id).await;
    assert_eq!(blocked["blocked"], json!(true));
    assert_eq!(blocked["block_reason"], Value::Null);
    let (first_version, kind, entity) = latest_change(&app, id).await;
    assert_eq!((kind.as_str(), entity.as_str()), ("agent", id));

    // Blocking again updates the reason and is a new change.
    let response = app
        .post(
            &format!("/agents/{id}/block"),
            key,
            json!({ "reason": "looping on tool calls" }),
        )
        .await;
    assert_eq!(response.status().as_u16(), 204);
    assert_eq!(
        agent(&app, key, id).await["block_reason"],
        json!("looping on tool calls")
    );
    let (second_version, ..) = latest_change(&app, id).await;
    assert!(second_version > first_version);

    let response = app
        .request(Method::POST, &format!("/agents/{id}/unblock"), Some(key))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
    let unblocked = agent(&app, key, id).await;
    assert_eq!(unblocked["blocked"], json!(false));
    assert_eq!(unblocked["block_reason"], Value::Null);
    assert!(latest_change(&app, id).await.0 > second_version);

    let trail = app.audit_events(&tenant.id, id).await;
    assert_eq!(
        trail
            .iter()
            .filter(|e| e.starts_with("agent.blocked"))
            .count(),
        2,
        "{trail:?}"
    );
    assert!(trail.iter().any(|e| e.starts_with("agent.unblocked")));
});

db_test!(quarantine_lists_the_agent_until_released, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let calm = app.register_agent(key, json!({ "name": "calm" })).await;
    let suspect = app.register_agent(key, json!({ "name": "suspect" })).await;
    let id = suspect["id"].as_str().unwrap();

    // A reason is required to quarantine.
    expect_error(
        app.post(&format!("/agents/{id}/quarantine"), key, json!({}))
            .await,
        422,
        "validation_failed",
    )
    .await;
    let response = app
        .post(
            &format!("/agents/{id}/quarantine"),
            key,
            json!({ "reason": "exfiltration pattern" }),
        )
        .await;
    assert_eq!(response.status().as_u16(), 204);
    let listed = expect_status(app.get("/agents/quarantined", key).await, 200).await;
    assert_eq!(
        listed["meta"],
        json!({ "total": 1, "page": 1, "limit": 20 })
    );
    assert_eq!(listed["data"][0]["id"], json!(id));
    assert_eq!(listed["data"][0]["quarantined"], json!(true));
    assert_eq!(
        listed["data"][0]["quarantine_reason"],
        json!("exfiltration pattern")
    );
    // Quarantine is its own flag: the kill switch stays off.
    assert_eq!(listed["data"][0]["blocked"], json!(false));
    assert_eq!(
        agent(&app, key, calm["id"].as_str().unwrap()).await["quarantined"],
        json!(false)
    );

    let response = app
        .request(
            Method::POST,
            &format!("/agents/{id}/release-quarantine"),
            Some(key),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
    let listed = expect_status(app.get("/agents/quarantined", key).await, 200).await;
    assert_eq!(listed["meta"]["total"], json!(0));
    let trail = app.audit_events(&tenant.id, id).await;
    assert!(trail.iter().any(|e| e.starts_with("agent.quarantined")));
    assert!(trail
        .iter()
        .any(|e| e.starts_with("agent.quarantine_released")));
});

db_test!(kill_switch_refuses_bad_input_and_other_tenants, |app| {
    let owner = app.new_tenant("starter").await;
    let other = app.new_tenant("starter").await;
    let agent_id = app
        .register_agent(&owner.admin_key, json!({ "name": "mine" }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for action in ["block", "unblock", "quarantine", "release-quarantine"] {
        expect_error(
            app.post(
                &format!("/agents/{agent_id}/{action}"),
                &other.admin_key,
                json!({ "reason": "not yours" }),
            )
            .await,
            404,
            "not_found",
        )
        .await;
    }
    let listed = expect_status(app.get("/agents/quarantined", &other.admin_key).await, 200).await;
    assert_eq!(listed["meta"]["total"], json!(0));

    let key = &owner.admin_key;
    let path = format!("/agents/{agent_id}/block");
    for (body, status) in [
        ("{", 400),
        ("{\"reason\": 5}", 422),
        ("{\"reason\": \"\"}", 422),
        ("{\"reason\": \"x\", \"until\": 1}", 422),
    ] {
        let response = app
            .request(Method::POST, &path, Some(key))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{body}");
    }
    let response = app
        .request(Method::POST, &path, Some(key))
        .header("content-type", "text/plain")
        .body("{\"reason\": \"x\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 415);
    expect_error(
        app.post(
            &format!("/agents/{agent_id}/quarantine"),
            key,
            json!({ "reason": "r".repeat(1001) }),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;

    let unchanged = agent(&app, key, &agent_id).await;
    assert_eq!(unchanged["blocked"], json!(false));
    assert_eq!(unchanged["quarantined"], json!(false));
    assert!(app
        .audit_events(&owner.id, &agent_id)
        .await
        .iter()
        .all(|e| e.starts_with("agent.registered")));
});
