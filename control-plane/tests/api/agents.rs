//! The agent registry: register, read, filter, page, update, soft delete, plan limits.

use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status};

db_test!(a_registered_agent_is_unknown_and_reads_back, |app| {
    let tenant = app.new_tenant("starter").await;
    let agent = app
        .register_agent(
            &tenant.admin_key,
            json!({
                "name": "support-bot", "description": "answers tickets", "framework": "langgraph",
                "model_provider": "openai", "model_name": "gpt-4o", "environment": "staging",
                "team": "support", "tags": { "cost-center": "42" }
            }),
        )
        .await;
    let id = agent["id"].as_str().unwrap();
    assert!(id.starts_with("agt_"));
    assert_eq!(agent["status"], json!("unknown"));
    assert_eq!(agent["team"], json!("support"));
    assert_eq!(agent["environment"], json!("staging"));
    assert_eq!(agent["tags"], json!({ "cost-center": "42" }));
    assert_eq!(agent["blocked"], json!(false));
    assert!(agent["last_heartbeat"].is_null());
    assert!(agent["created_at"].as_str().unwrap().ends_with('Z'));

    let read = expect_status(
        app.get(&format!("/agents/{id}"), &tenant.admin_key).await,
        200,
    )
    .await;
    assert_eq!(read["data"], agent);

    // The team named at registration did not exist, so it was created.
    let teams = expect_status(app.get("/teams", &tenant.admin_key).await, 200).await;
    assert_eq!(teams["data"][0]["name"], json!("support"));
    assert_eq!(teams["data"][0]["agent_count"], json!(1));
    assert_eq!(app.audit_events(&tenant.id, id).await, ["agent.registered"]);

    // Environment defaults to production.
    let plain = app
        .register_agent(&tenant.admin_key, json!({ "name": "plain" }))
        .await;
    assert_eq!(plain["environment"], json!("production"));
    assert!(plain["team"].is_null());
});

db_test!(agents_filter_and_page, |app| {
    let tenant = app.new_tenant("professional").await;
    for i in 0..25 {
        app.clock.advance(1);
        let framework = if i % 2 == 0 { "crewai" } else { "langgraph" };
        let environment = if i < 5 { "dev" } else { "production" };
        let team = if i < 10 { "alpha" } else { "beta" };
        app.register_agent(
            &tenant.admin_key,
            json!({ "name": format!("agent-{i:02}"), "framework": framework,
                    "environment": environment, "team": team }),
        )
        .await;
    }
    let first = expect_status(app.get("/agents", &tenant.admin_key).await, 200).await;
    assert_eq!(
        first["meta"],
        json!({ "total": 25, "page": 1, "limit": 20 })
    );
    assert_eq!(first["data"].as_array().unwrap().len(), 20);
    assert_eq!(first["data"][0]["name"], json!("agent-24"), "newest first");
    let second = expect_status(app.get("/agents?page=2", &tenant.admin_key).await, 200).await;
    assert_eq!(second["data"].as_array().unwrap().len(), 5);
    assert_eq!(second["data"][4]["name"], json!("agent-00"));
    let all = expect_status(app.get("/agents?limit=100", &tenant.admin_key).await, 200).await;
    assert_eq!(all["data"].as_array().unwrap().len(), 25);

    let crewai = expect_status(
        app.get("/agents?framework=crewai", &tenant.admin_key).await,
        200,
    )
    .await;
    assert_eq!(crewai["meta"]["total"], json!(13));
    let alpha_dev = expect_status(
        app.get("/agents?team=alpha&environment=dev", &tenant.admin_key)
            .await,
        200,
    )
    .await;
    assert_eq!(alpha_dev["meta"]["total"], json!(5));
    let unknown = expect_status(
        app.get("/agents?status=unknown&limit=1", &tenant.admin_key)
            .await,
        200,
    )
    .await;
    assert_eq!(
        unknown["meta"],
        json!({ "total": 25, "page": 1, "limit": 1 })
    );
    let healthy = expect_status(
        app.get("/agents?status=healthy", &tenant.admin_key).await,
        200,
    )
    .await;
    assert_eq!(healthy["meta"]["total"], json!(0));

    for bad in [
        "limit=0",
        "limit=101",
        "page=0",
        "page=x",
        "status=sleepy",
        "environment=prod",
    ] {
        let response = app.get(&format!("/agents?{bad}"), &tenant.admin_key).await;
        expect_error(response, 422, "validation_failed").await;
    }
});

db_test!(updating_an_agent_changes_only_what_is_sent, |app| {
    let tenant = app.new_tenant("starter").await;
    let agent = app
        .register_agent(
            &tenant.admin_key,
            json!({ "name": "bot", "description": "old", "team": "alpha", "framework": "crewai" }),
        )
        .await;
    let id = agent["id"].as_str().unwrap();
    let updated = expect_status(
        app.patch(
            &format!("/agents/{id}"),
            &tenant.admin_key,
            json!({ "name": "bot-2", "description": null, "team": "beta", "model_provider": "anthropic" }),
        )
        .await,
        200,
    )
    .await;
    let data = &updated["data"];
    assert_eq!(data["name"], json!("bot-2"));
    assert!(data["description"].is_null());
    assert_eq!(data["team"], json!("beta"));
    assert_eq!(data["framework"], json!("crewai"));
    assert_eq!(data["model_provider"], json!("anthropic"));

    let cleared = expect_status(
        app.patch(
            &format!("/agents/{id}"),
            &tenant.admin_key,
            json!({ "team": null }),
        )
        .await,
        200,
    )
    .await;
    assert!(cleared["data"]["team"].is_null());
    expect_error(
        app.patch(
            &format!("/agents/{id}"),
            &tenant.admin_key,
            json!({ "name": null }),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(
        app.audit_events(&tenant.id, id).await,
        ["agent.registered", "agent.updated", "agent.updated"]
    );
});

db_test!(deleting_an_agent_is_soft_and_frees_its_plan_slot, |app| {
    // The free plan allows three active agents.
    let tenant = app.new_tenant("free").await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let agent = app
            .register_agent(&tenant.admin_key, json!({ "name": format!("a{i}") }))
            .await;
        ids.push(agent["id"].as_str().unwrap().to_owned());
    }
    expect_error(
        app.post(
            "/agents",
            &tenant.admin_key,
            json!({ "name": "one too many" }),
        )
        .await,
        402,
        "agent_limit_reached",
    )
    .await;

    let id = &ids[0];
    expect_status(
        app.delete(&format!("/agents/{id}"), &tenant.admin_key)
            .await,
        204,
    )
    .await;
    expect_error(
        app.get(&format!("/agents/{id}"), &tenant.admin_key).await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.delete(&format!("/agents/{id}"), &tenant.admin_key)
            .await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.patch(
            &format!("/agents/{id}"),
            &tenant.admin_key,
            json!({ "name": "back" }),
        )
        .await,
        404,
        "not_found",
    )
    .await;
    let list = expect_status(app.get("/agents", &tenant.admin_key).await, 200).await;
    assert_eq!(list["meta"]["total"], json!(2));
    assert!(!list.to_string().contains(id.as_str()));

    // History is kept: the row and its audit trail remain.
    assert_eq!(app.count_rows("agents", &tenant.id).await, 3);
    assert_eq!(
        app.audit_events(&tenant.id, id).await,
        ["agent.registered", "agent.deleted"]
    );

    app.register_agent(&tenant.admin_key, json!({ "name": "replacement" }))
        .await;
    let tenant_view = expect_status(
        app.get(
            &format!("/admin/tenants/{}", tenant.id),
            crate::helpers::platform_key(),
        )
        .await,
        200,
    )
    .await;
    assert_eq!(tenant_view["data"]["active_agents"], json!(3));
    assert_eq!(tenant_view["data"]["agent_limit"], json!(3));
});

db_test!(agents_are_found_by_name_and_risk_level, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let mut ids = std::collections::BTreeMap::new();
    for name in [
        "Support Bot",
        "support-triage",
        "billing_100%",
        "billing-1000",
    ] {
        let agent = app.register_agent(key, json!({ "name": name })).await;
        ids.insert(name, agent["id"].as_str().unwrap().to_owned());
    }
    let names = |body: &Value| -> Vec<String> {
        let mut names: Vec<String> = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    let found = expect_status(app.get("/agents?search=SUPPORT", key).await, 200).await;
    assert_eq!(names(&found), ["Support Bot", "support-triage"]);
    assert_eq!(found["meta"]["total"], 2);
    // `%` and `_` are the characters themselves, not wildcards.
    let literal = expect_status(app.get("/agents?search=100%25", key).await, 200).await;
    assert_eq!(names(&literal), ["billing_100%"]);
    let underscore = expect_status(app.get("/agents?search=g_1", key).await, 200).await;
    assert_eq!(names(&underscore), ["billing_100%"]);

    expect_status(
        app.post(
            &format!("/agents/{}/risk-classification", ids["support-triage"]),
            key,
            json!({ "risk_level": "high", "justification": "triages customer data" }),
        )
        .await,
        201,
    )
    .await;
    let high = expect_status(app.get("/agents?risk_level=high", key).await, 200).await;
    assert_eq!(names(&high), ["support-triage"]);
    let both = expect_status(
        app.get("/agents?risk_level=high&search=bot", key).await,
        200,
    )
    .await;
    assert!(names(&both).is_empty());
    for bad in ["risk_level=severe", "search="] {
        let refused = app.get(&format!("/agents?{bad}"), key).await;
        expect_error(refused, 422, "validation_failed").await;
    }
});
