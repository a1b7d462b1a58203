//! The payload capture configuration: the unconfigured answer, every rule of spec 2.18
//! and 8 refusing without a change, the version and the one audit event per update.

use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status};

fn config(extra: Value) -> Value {
    let mut body = json!({
        "enabled": true, "retention_days": 7,
        "processing_purpose": "Debugging agent failures reported by customers",
        "redaction_rules": [
            {"id": "emails", "field_path": "messages.content", "pattern": "[\\w.+-]+@[\\w-]+\\.[\\w.]+"},
            {"id": "system", "field_path": "system"}
        ]
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

db_test!(capture_configuration_follows_every_rule, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let path = "/payload-capture/config";
    let empty = expect_status(app.get(path, key).await, 200).await["data"].clone();
    assert_eq!(
        (empty["enabled"].clone(), empty["configured"].clone()),
        (json!(false), json!(false))
    );
    assert_eq!(empty["maximum_retention_days"], 30);
    assert!(empty["legal_basis_notice"]
        .as_str()
        .unwrap()
        .contains("lawful basis"));

    let rules = |rules: Value| config(json!({ "redaction_rules": rules }));
    let many: Vec<Value> = (0..26)
        .map(|i| json!({"id": format!("r{i}"), "field_path": "a"}))
        .collect();
    for (body, field) in [
        (config(json!({"retention_days": 0})), "retention_days"),
        (config(json!({"retention_days": 31})), "retention_days"),
        // Starter keeps telemetry 14 days.
        (config(json!({"retention_days": 20})), "retention_days"),
        (
            config(json!({"processing_purpose": "too short"})),
            "processing_purpose",
        ),
        (
            config(json!({"processing_purpose": "x".repeat(501)})),
            "processing_purpose",
        ),
        (rules(json!(many)), "redaction_rules"),
        (
            rules(json!([{"id": "a", "field_path": "x"}, {"id": "a", "field_path": "y"}])),
            "redaction_rules[1].id",
        ),
        (
            rules(json!([{"id": "a", "field_path": "messages[*].content"}])),
            "redaction_rules[0].field_path",
        ),
        (
            rules(json!([{"id": "a", "field_path": "messages..content"}])),
            "redaction_rules[0].field_path",
        ),
        (
            rules(json!([{"id": "a", "field_path": "x", "pattern": "(unclosed"}])),
            "redaction_rules[0].pattern",
        ),
        (
            rules(json!([{"id": "a", "field_path": "x", "pattern": "a".repeat(501)}])),
            "redaction_rules[0].pattern",
        ),
        // Within 500 characters but far beyond the compiled size limit.
        (
            rules(json!([{"id": "a", "field_path": "x", "pattern": "(\\w{100}){100}"}])),
            "redaction_rules[0].pattern",
        ),
    ] {
        let error = expect_error(
            app.request(reqwest::Method::PUT, path, Some(key))
                .json(&body)
                .send()
                .await
                .unwrap(),
            422,
            "validation_failed",
        )
        .await;
        assert!(
            error["error"]["details"]["field"]
                .as_str()
                .unwrap()
                .starts_with(field),
            "{field}: {error}"
        );
    }
    assert_eq!(
        app.count_rows("payload_capture_configs", &tenant.id).await,
        0
    );

    let first = expect_status(
        app.request(reqwest::Method::PUT, path, Some(key))
            .json(&config(json!({})))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await["data"]
        .clone();
    assert_eq!(
        (first["configured"].clone(), first["config_version"].clone()),
        (json!(true), json!(1))
    );
    assert_eq!(first["redaction_rules"][0]["id"], "emails");
    // Disabling still needs retention and purpose.
    let off = json!({"enabled": false, "retention_days": 7, "processing_purpose": "Debugging agent failures reported by customers"});
    let second = expect_status(
        app.request(reqwest::Method::PUT, path, Some(key))
            .json(&off)
            .send()
            .await
            .unwrap(),
        200,
    )
    .await["data"]
        .clone();
    assert_eq!(
        (second["enabled"].clone(), second["config_version"].clone()),
        (json!(false), json!(2))
    );
    expect_error(
        app.request(reqwest::Method::PUT, path, Some(key))
            .json(&json!({"enabled": false}))
            .send()
            .await
            .unwrap(),
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(
        app.audit_events(&tenant.id, &tenant.id)
            .await
            .iter()
            .filter(|e| *e == "payload_capture.configured")
            .count(),
        2
    );

    let reader = app.key_with_scopes(&tenant, &["payload:read"]).await;
    expect_status(app.get(path, &reader).await, 200).await;
    expect_error(
        app.request(reqwest::Method::PUT, path, Some(&reader))
            .json(&off)
            .send()
            .await
            .unwrap(),
        403,
        "insufficient_scope",
    )
    .await;
    let other = app.new_tenant("starter").await;
    assert_eq!(
        expect_status(app.get(path, &other.admin_key).await, 200).await["data"]["configured"],
        false
    );
});
