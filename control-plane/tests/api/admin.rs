//! Platform administration: tenants listed, created and deleted with all their data.

use reqwest::Method;
use serde_json::json;

use crate::helpers::{expect_error, expect_status, platform_key, TestApp};

db_test!(platform_admins_create_and_list_tenants_by_plan, |app| {
    let created = expect_status(
        app.post(
            "/admin/tenants",
            platform_key(),
            json!({ "company_name": "Globex", "owner_email": "CEO@globex.example", "plan": "enterprise", "agent_limit": 7 }),
        )
        .await,
        201,
    )
    .await;
    let data = &created["data"];
    assert_eq!(data["plan"], json!("enterprise"));
    assert_eq!(data["agent_limit"], json!(7));
    assert_eq!(data["active_agents"], json!(0));
    assert_eq!(data["owner_email"], json!("ceo@globex.example"));
    assert_eq!(data["monthly_cost_usd"], json!(0.0));
    let id = data["id"].as_str().unwrap();
    let key = data["api_key"].as_str().unwrap();
    let me = expect_status(app.get("/auth/me", key).await, 200).await;
    assert_eq!(me["data"]["tenant_id"], json!(id));
    assert_eq!(me["data"]["scopes"], json!(["admin"]));

    let read = expect_status(
        app.get(&format!("/admin/tenants/{id}"), platform_key())
            .await,
        200,
    )
    .await;
    assert!(
        read["data"].get("api_key").is_none(),
        "the key is shown only once"
    );
    assert!(read["data"]["last_activity"].is_string());

    // Filter by plan and page. Other tests share the PostgreSQL database, so count
    // only what this test made.
    let mut mine = vec![id.to_owned()];
    for _ in 0..2 {
        mine.push(app.new_tenant("enterprise").await.id);
    }
    let page = expect_status(
        app.get("/admin/tenants?plan=enterprise&limit=2", platform_key())
            .await,
        200,
    )
    .await;
    assert_eq!(page["meta"]["limit"], json!(2));
    assert!(page["meta"]["total"].as_i64().unwrap() >= 3);
    assert_eq!(page["data"].as_array().unwrap().len(), 2);
    let all = expect_status(
        app.get("/admin/tenants?plan=enterprise&limit=100", platform_key())
            .await,
        200,
    )
    .await;
    let listed: Vec<&str> = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert!(mine.iter().all(|id| listed.contains(&id.as_str())));
    assert!(all["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["plan"] == json!("enterprise")));

    expect_error(
        app.get("/admin/tenants?plan=gold", platform_key()).await,
        422,
        "validation_failed",
    )
    .await;
    for bad in [
        json!({ "company_name": "X", "owner_email": "x@example.com", "plan": "gold" }),
        json!({ "company_name": "X", "owner_email": "x@example.com", "plan": "starter", "agent_limit": -5 }),
        json!({ "company_name": "X", "owner_email": "not-an-email", "plan": "starter" }),
        json!({ "company_name": "", "owner_email": "x@example.com", "plan": "starter" }),
    ] {
        expect_error(
            app.post("/admin/tenants", platform_key(), bad).await,
            422,
            "validation_failed",
        )
        .await;
    }
});

db_test!(tenant_keys_cannot_administer_the_platform, |app| {
    let tenant = app.new_tenant("enterprise_plus").await;
    expect_error(
        app.get("/admin/tenants", &tenant.admin_key).await,
        403,
        "insufficient_scope",
    )
    .await;
    expect_error(
        app.delete(&format!("/admin/tenants/{}", tenant.id), &tenant.admin_key)
            .await,
        403,
        "insufficient_scope",
    )
    .await;
    // And the platform key is not tenant access.
    expect_error(
        app.get("/agents", platform_key()).await,
        403,
        "insufficient_scope",
    )
    .await;
    let me = expect_status(app.get("/auth/me", platform_key()).await, 200).await;
    let platform_tenant = me["data"]["tenant_id"].as_str().unwrap();
    expect_error(
        app.delete(&format!("/admin/tenants/{platform_tenant}"), platform_key())
            .await,
        403,
        "platform_tenant_protected",
    )
    .await;
});

/// Puts at least one row in every tenant-owned table for `tenant`.
async fn seed_every_table(app: &TestApp) -> (String, String) {
    let email = format!(
        "{}@example.com",
        warden_shared::ids::new_id(warden_shared::ids::IdKind::User, 1).to_lowercase()
    );
    let signup = expect_status(
        app.request(Method::POST, "/auth/signup", None)
            .json(&json!({ "email": email, "password": "correct horse battery", "company_name": "Doomed" }))
            .send()
            .await
            .unwrap(),
        201,
    )
    .await;
    let key = signup["data"]["api_key"].as_str().unwrap().to_owned();
    let tenant_id = signup["data"]["tenant_id"].as_str().unwrap().to_owned();
    expect_status(
        app.request(Method::POST, "/auth/login", None)
            .json(&json!({ "email": email, "password": "correct horse battery" }))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    // A console session signed in with the key (key_sessions).
    crate::console::Browser::new(app)
        .sign_in_with_key(&key)
        .await;
    let agent = app
        .register_agent(&key, json!({ "name": "a", "team": "t" }))
        .await;
    let agent_id = agent["id"].as_str().unwrap();
    expect_status(
        app.post(
            "/telemetry/heartbeat",
            &key,
            json!({ "agent_id": agent_id }),
        )
        .await,
        200,
    )
    .await;
    // The current hour counts as rolled, so this usage reaches usage_daily_open at once
    // (otherwise only the ledger's background round, an hour later, puts rows there).
    sqlx::query("UPDATE usage_days_closed SET rolled_until = $2 WHERE tenant_id = $1")
        .bind(&tenant_id)
        .bind(app.clock.now().as_millis() + 3_600_000)
        .execute(app.db.pool())
        .await
        .unwrap();
    let usage = json!({ "agent_id": agent_id, "model_provider": "openai", "model_name": "gpt-4o",
                        "input_tokens": 10, "output_tokens": 5 });
    expect_status(app.post("/telemetry/usage", &key, usage).await, 201).await;
    let batch = json!({ "batch_id": "seed", "records": [{
        "record_id": format!("seed-{agent_id}"), "tenant_id": tenant_id, "agent_id": agent_id,
        "model_provider": "openai", "model_name": "gpt-4o", "input_tokens": 1, "output_tokens": 1,
        "recorded_at": app.clock.now().to_string(), "api_key_id": "ak_seed" }, {
        // A day before the tenant existed is closed: this one reaches usage_daily.
        "record_id": format!("seed-late-{agent_id}"), "tenant_id": tenant_id, "agent_id": agent_id,
        "model_provider": "openai", "model_name": "gpt-4o", "input_tokens": 1, "output_tokens": 1,
        "recorded_at": warden_shared::timestamp::Timestamp::from_millis(
            app.clock.now().as_millis() - 86_400_000).to_string() }] });
    let ingested = app
        .client
        .post(format!("{}/internal/v1/usage-batches", app.base))
        .bearer_auth(crate::helpers::SERVICE_TOKEN)
        .json(&batch)
        .send()
        .await
        .unwrap();
    assert_eq!(
        expect_status(ingested, 200).await["data"]["accepted"],
        json!(2)
    );
    expect_status(
        app.post(
            "/auth/api-keys",
            &key,
            json!({ "name": "k", "key_type": "read_only" }),
        )
        .await,
        201,
    )
    .await;
    // Proxy and managed keys need a paid plan; the seed upgrades the tenant directly
    // rather than through checkout and the payment provider's webhook.
    sqlx::query("UPDATE tenants SET plan = 'starter' WHERE id = $1")
        .bind(&tenant_id)
        .execute(app.db.pool())
        .await
        .unwrap();
    expect_status(
        app.post(
            "/proxy-keys",
            &key,
            json!({ "developer_label": "seed", "agent_id": agent_id }),
        )
        .await,
        201,
    )
    .await;
    let policy = expect_status(
        app.post(
            "/policies",
            &key,
            json!({ "name": "seed", "policy_type": "require_approval", "config": {} }),
        )
        .await,
        201,
    )
    .await;
    let decisions = json!({ "batch_id": format!("seed-{tenant_id}"), "decisions": [{
        "tenant_id": tenant_id,
        "evaluation": { "request_id": "seed", "agent_id": agent_id, "provider": "openai",
            "model": "gpt-4o", "evaluated_at": app.clock.now().to_string(),
            "results": [{ "policy_id": policy["data"]["id"], "policy_name": "seed",
                "policy_type": "require_approval", "result": "fail" }] },
        "approval": { "policy_id": policy["data"]["id"], "request_context": { "provider": "openai", "model": "gpt-4o" } } }] });
    let reported = crate::helpers::post_decision_batch(app, &decisions).await;
    assert_eq!(
        expect_status(reported, 200).await["data"]["approvals_created"],
        json!(1)
    );
    expect_status(
        app.post(
            &format!("/agents/{agent_id}/risk-classification"),
            &key,
            json!({ "risk_level": "limited", "justification": "seed" }),
        )
        .await,
        201,
    )
    .await;
    expect_status(
        app.post(
            &format!("/agents/{agent_id}/owners"),
            &key,
            json!({ "owner_type": "user", "owner_id": "seed", "owner_name": "Seed" }),
        )
        .await,
        201,
    )
    .await;
    let secret_ref = format!("warden/managed/{tenant_id}/openai");
    expect_status(
        app.post(
            "/managed-keys",
            &key,
            json!({ "provider": "openai", "label": "seed", "secret_ref": secret_ref }),
        )
        .await,
        201,
    )
    .await;
    // A budget limit, and spend past its thresholds (recorded as alerts).
    expect_status(
        app.post(
            "/budget/limits",
            &key,
            json!({ "agent_id": agent_id, "monthly_limit_usd": 0.0001 }),
        )
        .await,
        201,
    )
    .await;
    let usage = json!({ "agent_id": agent_id, "model_provider": "openai", "model_name": "gpt-4o",
                        "input_tokens": 10, "output_tokens": 5 });
    expect_status(app.post("/telemetry/usage", &key, usage).await, 201).await;
    // An impact assessment, and an incident with one operator response.
    expect_status(
        app.post(
            &format!("/agents/{agent_id}/fria"),
            &key,
            json!({ "processes": "p", "frequency_and_scope": "f", "categories_of_persons": "c",
                    "specific_risks": "s", "human_oversight_measures": "h",
                    "risk_mitigation_measures": "r" }),
        )
        .await,
        201,
    )
    .await;
    let incident = expect_status(
        app.post(
            "/incidents",
            &key,
            json!({ "agent_id": agent_id, "title": "t", "severity": "low", "description": "d" }),
        )
        .await,
        201,
    )
    .await;
    expect_status(
        app.patch(
            &format!("/incidents/{}", incident["data"]["id"].as_str().unwrap()),
            &key,
            json!({ "update_note": "looked at it" }),
        )
        .await,
        200,
    )
    .await;
    // A notification channel; the registration below queues a delivery to it, and one
    // attempt is recorded as the (here stopped) delivery worker would.
    expect_status(
        app.post(
            "/notifications/channels",
            &key,
            json!({ "name": "seed", "channel_type": "webhook", "events": ["agent.registered"],
                    "config": { "url": "https://8.8.8.8/seed" } }),
        )
        .await,
        201,
    )
    .await;
    let gone = app
        .register_agent(&key, json!({ "name": "soft-deleted" }))
        .await;
    expect_status(
        app.delete(&format!("/agents/{}", gone["id"].as_str().unwrap()), &key)
            .await,
        204,
    )
    .await;
    expect_status(
        app.post(
            "/anomaly-rules",
            &key,
            json!({ "anomaly_type": "cost_spike", "threshold_config": { "daily_cost_usd": 0 } }),
        )
        .await,
        201,
    )
    .await;
    expect_status(
        app.request(Method::PUT, "/payload-capture/config", Some(&key))
            .json(&json!({ "enabled": true, "retention_days": 7,
                           "processing_purpose": "seeding every table" }))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    // A captured payload, through the proxies' ingest as a proxy sends it.
    let captured = json!({ "batch_id": format!("seed-capture-{tenant_id}"), "records": [{
        "record_id": format!("seed-capture-{agent_id}"), "tenant_id": tenant_id, "agent_id": agent_id,
        "model_provider": "openai", "model_name": "gpt-4o", "input_tokens": 1, "output_tokens": 1,
        "recorded_at": app.clock.now().to_string(),
        "capture": { "config_version": 1, "bytes": 2, "body": {} } }] });
    let ingested = app
        .client
        .post(format!("{}/internal/v1/usage-batches", app.base))
        .bearer_auth(crate::helpers::SERVICE_TOKEN)
        .json(&captured)
        .send()
        .await
        .unwrap();
    expect_status(ingested, 200).await;
    assert_eq!(app.count_rows("payload_captures", &tenant_id).await, 1);
    // A rate limit's allowance granted to a proxy.
    let granted = app
        .client
        .post(format!("{}/internal/v1/rate-grants", app.base))
        .bearer_auth(crate::helpers::SERVICE_TOKEN)
        .json(
            &json!({ "asks": [{ "tenant_id": tenant_id, "limiter": "policy:1", "bucket": agent_id,
                       "minute": app.clock.now().as_millis() / 60_000, "limit": 10, "want": 10 }] }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        expect_status(granted, 200).await["data"]["grants"][0]["granted"],
        json!(1)
    );
    // A budget's allowance granted to a proxy.
    let granted = app
        .client
        .post(format!("{}/internal/v1/budget-grants", app.base))
        .bearer_auth(crate::helpers::SERVICE_TOKEN)
        .json(&json!({ "holder": "ins_seed", "month": app.clock.now().month_start(),
                       "scopes": [{ "tenant_id": tenant_id, "scope": "tenant", "block_micros": 1_000,
                                    "need_micros": 10, "release_micros": 0 }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        expect_status(granted, 200).await["data"]["scopes"][0]["granted_micros"],
        json!(125)
    );
    // A tool call through the MCP gateway, as the proxies record it (in usage batches).
    let tool_call = json!({ "batch_id": format!("seed-tool-{tenant_id}"), "records": [{
        "record_id": format!("seed-tool-{agent_id}"), "tenant_id": tenant_id, "agent_id": agent_id,
        "model_provider": "mcp", "model_name": "tools__search", "request_type": "tool_call",
        "input_tokens": 0, "output_tokens": 0, "recorded_at": app.clock.now().to_string(),
        "tool_call": { "server_id": format!("mcp_{tenant_id}"), "server": "tools",
                       "tool": "search", "outcome": "ok", "decision": "allowed", "latency_ms": 3 } }] });
    let ingested = app
        .client
        .post(format!("{}/internal/v1/usage-batches", app.base))
        .bearer_auth(crate::helpers::SERVICE_TOKEN)
        .json(&tool_call)
        .send()
        .await
        .unwrap();
    let ack = expect_status(ingested, 200).await;
    assert_eq!(ack["data"]["accepted"], json!(1), "{ack}");
    assert_eq!(app.count_rows("tool_calls", &tenant_id).await, 1);
    // A checkout started, and a provider event applied (as the webhook records it).
    expect_status(
        app.post("/billing/checkout", &key, json!({ "plan": "professional" }))
            .await,
        200,
    )
    .await;
    sqlx::query(
        "INSERT INTO billing_events (id, tenant_id, event, received_at) VALUES ($1, $2, 'invoice.paid', 0)",
    )
    .bind(format!("evt_seed_{tenant_id}"))
    .bind(&tenant_id)
    .execute(app.db.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO anomalies (id, tenant_id, agent_id, anomaly_type, cause, severity, status, \
         description, details, detected_at, last_seen_at, occurrences) \
         VALUES ($1, $2, $3, 'cost_spike', 'daily_cost', 'low', 'open', 'seed', '{}', 0, 0, 1)",
    )
    .bind(format!("anm_seed_{tenant_id}"))
    .bind(&tenant_id)
    .bind(agent_id)
    .execute(app.db.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO notification_attempts (delivery_id, attempt, tenant_id, attempted_at, \
         outcome, duration_ms) SELECT id, 1, tenant_id, created_at, 'failed', 1 \
         FROM notification_deliveries WHERE tenant_id = $1",
    )
    .bind(&tenant_id)
    .execute(app.db.pool())
    .await
    .unwrap();
    // SSO: a configuration, a request awaiting its answer and a consumed assertion (the
    // SAML flow itself is tested in `sso`).
    for sql in [
        "INSERT INTO sso_configs (id, tenant_id, provider_name, idp_entity_id, idp_sso_url, \
         idp_x509_cert, enabled, auto_provision, created_at, updated_at) \
         VALUES ('sso_' || $1, $1, 'IdP', 'idp', 'https://idp.example.com/sso', 'pem', 1, 1, 0, 0)",
        "INSERT INTO sso_requests (id, tenant_id, expires_at) VALUES ('_req' || $1, $1, 0)",
        "INSERT INTO sso_assertions (tenant_id, assertion_id, expires_at) VALUES ($1, 'a1', 0)",
        "INSERT INTO mcp_servers (id, tenant_id, name, url, enabled, created_at, updated_at) \
         VALUES ('mcp_' || $1, $1, 'tools', 'https://mcp.example.com/mcp', 1, 0, 0)",
        "INSERT INTO mcp_server_tools (tenant_id, server_id, name, fingerprint, definition, \
         approved_at) VALUES ($1, 'mcp_' || $1, 'search', 'f1', '{}', 0)",
        "INSERT INTO mcp_tool_drifts (tenant_id, server_id, tool, fingerprint, first_seen_at) \
         VALUES ($1, 'mcp_' || $1, 'search', 'f2', 0)",
    ] {
        sqlx::query(sql)
            .bind(&tenant_id)
            .execute(app.db.pool())
            .await
            .unwrap();
    }
    (tenant_id, agent_id.to_owned())
}

db_test!(
    deleting_a_tenant_removes_every_row_it_owns_and_nothing_else,
    |app| {
        let (doomed, _) = seed_every_table(&app).await;
        let (survivor, survivor_agent) = seed_every_table(&app).await;

        let tables = app.tables().await;
        let mut tenant_tables = Vec::new();
        for table in &tables {
            if table == "tenants"
                || warden_control_plane::tenancy::PLATFORM_TABLES.contains(&table.as_str())
            {
                continue;
            }
            let has_tenant_column = match app.backend {
            crate::helpers::Backend::Sqlite => {
                let sql = format!("SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = 'tenant_id'");
                sqlx::query_scalar::<_, i64>(&sql).fetch_one(app.db.pool()).await.unwrap() > 0
            }
            crate::helpers::Backend::Postgres => {
                sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM information_schema.columns \
                     WHERE table_schema = 'public' AND table_name = $1 AND column_name = 'tenant_id'",
                )
                .bind(table)
                .fetch_one(app.db.pool())
                .await
                .unwrap()
                    > 0
            }
        };
            assert!(
                has_tenant_column,
                "table {table} has no tenant_id: every row must belong to a tenant"
            );
            tenant_tables.push(table.clone());
        }
        let mut declared: Vec<String> = warden_control_plane::tenancy::TENANT_TABLES
            .iter()
            .map(|t| t.to_string())
            .collect();
        declared.sort();
        tenant_tables.sort();
        assert_eq!(
            declared, tenant_tables,
            "tenancy::TENANT_TABLES must list every tenant table"
        );

        let mut owned = tenant_tables.clone();
        owned.push("tenants".to_owned());
        let mut survivor_before = Vec::new();
        for table in owned.iter() {
            let doomed_rows = app.count_rows(table, &doomed).await;
            assert!(doomed_rows > 0, "the seed must put rows in {table}");
            survivor_before.push(app.count_rows(table, &survivor).await);
        }

        expect_status(
            app.delete(&format!("/admin/tenants/{doomed}"), platform_key())
                .await,
            204,
        )
        .await;
        for (table, before) in owned.iter().zip(survivor_before) {
            assert_eq!(
                app.count_rows(table, &doomed).await,
                0,
                "rows of {table} survived"
            );
            assert_eq!(
                app.count_rows(table, &survivor).await,
                before,
                "{table} of another tenant changed"
            );
        }
        expect_error(
            app.get(&format!("/admin/tenants/{doomed}"), platform_key())
                .await,
            404,
            "not_found",
        )
        .await;
        expect_error(
            app.delete(&format!("/admin/tenants/{doomed}"), platform_key())
                .await,
            404,
            "not_found",
        )
        .await;

        // The deletion is in the platform operators' trail.
        let events: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM audit_events WHERE event_type = 'tenant.deleted' AND target_id = $1",
    )
    .bind(&doomed)
    .fetch_one(app.db.pool())
    .await
    .unwrap();
        assert_eq!(events, 1);
        let _ = survivor_agent;
    }
);
