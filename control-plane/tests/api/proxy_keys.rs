//! Proxy keys and managed keys: plan gating, the agent behind a key, secrets shown once,
//! revocation published to the proxies, isolation and bad input.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, TestApp};

async fn changes_about(app: &TestApp, entity_id: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM proxy_changes WHERE entity_id = $1")
        .bind(entity_id)
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

db_test!(
    a_proxy_key_registers_its_agent_and_shows_its_secret_once,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let created = expect_status(
        app.post(
            "/proxy-keys",
            key,
            json!({ "developer_label": "alice-laptop", "allowed_providers": ["openai", "anthropic", "openai"],
                    "allowed_models": ["gpt-4o-mini"], "budget_limit_usd": 25.5,
                    "expires_in_days": 30, "model_overrides": { "gpt-4o": "gpt-4o-mini" },
                    "rate_limit_override": { "requests_per_minute": 60 } }),
        )
        .await,
        201,
    )
    .await["data"]
        .clone();
        let raw = created["raw_key"].as_str().unwrap();
        assert!(raw.starts_with("wdn_"));
        assert!(raw.starts_with(created["key_prefix"].as_str().unwrap()));
        assert_eq!(created["allowed_providers"], json!(["anthropic", "openai"]));
        assert_eq!(created["budget_limit_usd"], json!(25.5));
        assert_eq!(created["use_managed_key"], json!(false));
        assert_eq!(
            created["rate_limit_override"]["requests_per_minute"],
            json!(60)
        );

        // The agent behind the key exists, named after the label.
        let agent_id = created["agent_id"].as_str().unwrap();
        let agent = expect_status(app.get(&format!("/agents/{agent_id}"), key).await, 200).await;
        assert_eq!(agent["data"]["name"], json!("alice-laptop"));

        // The key itself works on the management API with the proxy type's scopes.
        expect_status(app.get("/agents", raw).await, 200).await;
        expect_error(
            app.post("/agents", raw, json!({ "name": "x" })).await,
            403,
            "insufficient_scope",
        )
        .await;

        let listed = expect_status(app.get("/proxy-keys", key).await, 200).await;
        assert_eq!(listed["meta"]["total"], json!(1));
        let row = &listed["data"][0];
        assert!(row.get("raw_key").is_none(), "{row}");
        assert_eq!(row["api_key_id"], created["api_key_id"]);
        assert_eq!(row["model_overrides"], json!({ "gpt-4o": "gpt-4o-mini" }));
        assert_eq!(row["expires_at"], created["expires_at"]);
        let stored: String = sqlx::query_scalar("SELECT key_hash FROM api_keys WHERE id = $1")
            .bind(created["api_key_id"].as_str().unwrap())
            .fetch_one(app.db.pool())
            .await
            .unwrap();
        assert!(!stored.contains(raw) && stored.len() == 64);

        // Revocation: gone from the list, refused by the API, published to the proxies.
        let id = created["api_key_id"].as_str().unwrap();
        assert_eq!(changes_about(&app, id).await, 1);
        let response = app.delete(&format!("/proxy-keys/{id}"), key).await;
        assert_eq!(response.status().as_u16(), 204);
        assert_eq!(changes_about(&app, id).await, 2);
        expect_error(app.get("/agents", raw).await, 401, "invalid_credentials").await;
        let listed = expect_status(app.get("/proxy-keys", key).await, 200).await;
        assert_eq!(listed["meta"]["total"], json!(0));
        let trail = app.audit_events(&tenant.id, id).await;
        assert_eq!(
            trail,
            ["api_key.created", "proxy_key.created", "proxy_key.deleted"]
        );
    }
);

db_test!(a_proxy_key_can_act_for_an_existing_agent, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app
        .register_agent(key, json!({ "name": "support-bot", "team": "support" }))
        .await;
    let before = app.count_rows("agents", &tenant.id).await;
    let created = expect_status(
        app.post(
            "/proxy-keys",
            key,
            json!({ "developer_label": "bot key", "agent_id": agent["id"] }),
        )
        .await,
        201,
    )
    .await;
    assert_eq!(created["data"]["agent_id"], agent["id"]);
    assert_eq!(created["data"]["team_id"], agent["team_id"]);
    assert_eq!(app.count_rows("agents", &tenant.id).await, before);

    // Deleting it through /auth/api-keys revokes it as well.
    let id = created["data"]["api_key_id"].as_str().unwrap();
    let response = app.delete(&format!("/auth/api-keys/{id}"), key).await;
    assert_eq!(response.status().as_u16(), 204);
    assert_eq!(app.count_rows("proxy_keys", &tenant.id).await, 0);
    assert_eq!(changes_about(&app, id).await, 2);
});

db_test!(proxy_and_managed_keys_need_a_paid_plan, |app| {
    let tenant = app.new_tenant("free").await;
    let key = &tenant.admin_key;
    expect_error(
        app.post("/proxy-keys", key, json!({ "developer_label": "x" }))
            .await,
        402,
        "plan_upgrade_required",
    )
    .await;
    let secret_ref = format!("warden/managed/{}/openai", tenant.id);
    expect_error(
        app.post(
            "/managed-keys",
            key,
            json!({ "provider": "openai", "label": "prod", "secret_ref": secret_ref }),
        )
        .await,
        402,
        "plan_upgrade_required",
    )
    .await;
    // Nothing was created, not even the agent a key would have brought.
    assert_eq!(app.count_rows("agents", &tenant.id).await, 0);
    assert_eq!(app.count_rows("api_keys", &tenant.id).await, 1);
});

db_test!(
    managed_keys_store_only_a_reference_under_the_tenants_prefix,
    |app| {
        let tenant = app.new_tenant("professional").await;
        let other = app.new_tenant("professional").await;
        let key = &tenant.admin_key;
        let secret_ref = format!("warden/managed/{}/openai-prod", tenant.id);
        let created = expect_status(
            app.post(
                "/managed-keys",
                key,
                json!({ "provider": "openai", "label": "prod", "secret_ref": secret_ref }),
            )
            .await,
            201,
        )
        .await;
        assert!(created["data"].get("secret_ref").is_none());
        assert_eq!(created["data"]["provider"], json!("openai"));
        expect_error(
            app.post(
                "/managed-keys",
                key,
                json!({ "provider": "openai", "label": "again", "secret_ref": secret_ref }),
            )
            .await,
            409,
            "managed_key_exists",
        )
        .await;
        // Another tenant's secret, or one outside the prefix (a relative name that climbs
        // out of it, an ARN of a secret elsewhere), is refused.
        for bad in [
            format!("warden/managed/{}/openai", other.id),
            format!("../{}/openai", other.id),
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/openai-AbCdEf".to_owned(),
            format!("warden/managed/{}/../x", tenant.id),
        ] {
            expect_error(
                app.post(
                    "/managed-keys",
                    key,
                    json!({ "provider": "anthropic", "label": "x", "secret_ref": bad }),
                )
                .await,
                422,
                "validation_failed",
            )
            .await;
        }
        // Bad input of every other kind, each a 4xx that creates nothing.
        let good_ref = format!("warden/managed/{}/anthropic", tenant.id);
        for (body, field) in [
            (
                json!({ "provider": "azure", "label": "x", "secret_ref": good_ref }),
                "provider",
            ),
            (
                json!({ "provider": "anthropic", "label": "", "secret_ref": good_ref }),
                "label",
            ),
            (
                json!({ "provider": "anthropic", "label": "x" }),
                "secret_ref",
            ),
            (
                json!({ "provider": "anthropic", "label": "x", "secret_ref": "" }),
                "secret_ref",
            ),
            (
                json!({ "provider": "anthropic", "label": "x", "secret_ref": good_ref,
                     "value": "sk-leak" }),
                "value",
            ),
        ] {
            let refused = expect_error(
                app.post("/managed-keys", key, body.clone()).await,
                422,
                "validation_failed",
            )
            .await;
            assert_eq!(refused["error"]["details"]["field"], json!(field), "{body}");
        }
        let malformed = app
            .request(reqwest::Method::POST, "/managed-keys", Some(key))
            .header("content-type", "application/json")
            .body("{\"provider\": ")
            .send()
            .await
            .unwrap();
        expect_error(malformed, 400, "malformed_json").await;
        let listed = expect_status(app.get("/managed-keys", key).await, 200).await;
        assert_eq!(listed["meta"]["total"], json!(1));
        assert!(!listed.to_string().contains("openai-prod"));
        // Another tenant lists none of them.
        let theirs = expect_status(app.get("/managed-keys", &other.admin_key).await, 200).await;
        assert_eq!(theirs["meta"]["total"], json!(0));
        let id = created["data"]["id"].as_str().unwrap();
        expect_error(
            app.delete(&format!("/managed-keys/{id}"), &other.admin_key)
                .await,
            404,
            "not_found",
        )
        .await;
        let response = app.delete(&format!("/managed-keys/{id}"), key).await;
        assert_eq!(response.status().as_u16(), 204);
        assert_eq!(changes_about(&app, id).await, 2);
    }
);

db_test!(proxy_keys_refuse_bad_input_and_other_tenants, |app| {
    let tenant = app.new_tenant("starter").await;
    let other = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let foreign_agent = app
        .register_agent(&other.admin_key, json!({ "name": "theirs" }))
        .await;
    let before = (
        app.count_rows("agents", &tenant.id).await,
        app.count_rows("api_keys", &tenant.id).await,
        app.count_rows("audit_events", &tenant.id).await,
    );
    let cases: Vec<(Value, u16)> = vec![
        (json!({}), 422),
        (json!({ "developer_label": "" }), 422),
        (
            json!({ "developer_label": "x", "allowed_providers": ["azure"] }),
            422,
        ),
        (
            json!({ "developer_label": "x", "allowed_providers": "openai" }),
            422,
        ),
        (
            json!({ "developer_label": "x", "budget_limit_usd": -1 }),
            422,
        ),
        (
            json!({ "developer_label": "x", "budget_limit_usd": 1_000_000 }),
            422,
        ),
        (json!({ "developer_label": "x", "expires_in_days": 0 }), 422),
        (
            json!({ "developer_label": "x", "rate_limit_override": { "requests_per_minute": 0 } }),
            422,
        ),
        (
            json!({ "developer_label": "x", "rate_limit_override": { "rpm": 5 } }),
            422,
        ),
        (
            json!({ "developer_label": "x", "use_managed_key": "yes" }),
            422,
        ),
        (
            json!({ "developer_label": "x", "agent_id": foreign_agent["id"] }),
            422,
        ),
        (
            json!({ "developer_label": "x", "team_id": "team_01AAAAAAAAAAAAAAAAAAAAAAAA" }),
            422,
        ),
        (
            json!({ "developer_label": "x", "allowed_models": (0..101).map(|i| format!("m{i}")).collect::<Vec<_>>() }),
            422,
        ),
        (json!({ "developer_label": "x", "surprise": true }), 422),
    ];
    for (body, status) in cases {
        let response = app.post("/proxy-keys", key, body.clone()).await;
        let got = response.status().as_u16();
        let envelope: Value = response.json().await.unwrap();
        assert_eq!(got, status, "{body}: {envelope}");
        assert_eq!(envelope["success"], json!(false));
    }
    let response = app
        .request(Method::POST, "/proxy-keys", Some(key))
        .header("content-type", "application/json")
        .body("{\"developer_label\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(
        (
            app.count_rows("agents", &tenant.id).await,
            app.count_rows("api_keys", &tenant.id).await,
            app.count_rows("audit_events", &tenant.id).await,
        ),
        before
    );

    // Another tenant cannot see or delete the key.
    let created = expect_status(
        app.post("/proxy-keys", key, json!({ "developer_label": "mine" }))
            .await,
        201,
    )
    .await;
    let id = created["data"]["api_key_id"].as_str().unwrap();
    expect_error(
        app.delete(&format!("/proxy-keys/{id}"), &other.admin_key)
            .await,
        404,
        "not_found",
    )
    .await;
    let theirs = expect_status(app.get("/proxy-keys", &other.admin_key).await, 200).await;
    assert_eq!(theirs["meta"]["total"], json!(0));
    assert_eq!(app.count_rows("proxy_keys", &tenant.id).await, 1);
});
