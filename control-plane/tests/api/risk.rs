//! Risk classification: one agent at a time and in bulk, the agent's level kept in step,
//! the history audited, and the suggestion with each rule's evidence.

use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, TestApp, TestTenant};

async fn agent(app: &TestApp, tenant: &TestTenant, body: Value) -> String {
    app.register_agent(&tenant.admin_key, body).await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn classify(app: &TestApp, key: &str, agent: &str, level: &str) -> reqwest::Response {
    app.post(
        &format!("/agents/{agent}/risk-classification"),
        key,
        json!({ "risk_level": level, "justification": format!("assessed as {level}") }),
    )
    .await
}

db_test!(an_agent_is_classified_and_its_level_follows, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let bot = agent(&app, &tenant, json!({ "name": "support-bot" })).await;
    let other = agent(&app, &tenant, json!({ "name": "reporter" })).await;
    let never = agent(&app, &tenant, json!({ "name": "unassessed" })).await;

    let first =
        expect_status(classify(&app, key, &bot, "limited").await, 201).await["data"].clone();
    assert_eq!(first["risk_level"], "limited");
    assert_eq!(first["previous_risk_level"], Value::Null);
    assert_eq!(first["agent_name"], "support-bot");
    assert!(first["assessed_by"]
        .as_str()
        .unwrap()
        .starts_with("api_key:"));
    assert!(first["id"].as_str().unwrap().starts_with("rsk_"));
    let second = expect_status(classify(&app, key, &bot, "high").await, 201).await["data"].clone();
    assert_eq!(second["previous_risk_level"], "limited");
    expect_status(classify(&app, key, &other, "minimal").await, 201).await;

    let current = expect_status(
        app.get(&format!("/agents/{bot}/risk-classification"), key)
            .await,
        200,
    )
    .await;
    assert_eq!(current["data"]["id"], second["id"]);
    let shown = expect_status(app.get(&format!("/agents/{bot}"), key).await, 200).await;
    assert_eq!(shown["data"]["risk_level"], "high");
    expect_error(
        app.get(&format!("/agents/{never}/risk-classification"), key)
            .await,
        404,
        "not_found",
    )
    .await;

    let all = expect_status(app.get("/risk-classifications", key).await, 200).await;
    assert_eq!(all["meta"]["total"], 2, "one per agent, its newest: {all}");
    let high = expect_status(
        app.get("/risk-classifications?risk_level=high", key).await,
        200,
    )
    .await;
    assert_eq!(high["meta"]["total"], 1);
    assert_eq!(high["data"][0]["agent_id"], bot.as_str());
    let limited = expect_status(
        app.get("/risk-classifications?risk_level=limited", key)
            .await,
        200,
    )
    .await;
    assert_eq!(
        limited["meta"]["total"], 0,
        "the older classification is history"
    );
    assert_eq!(
        app.audit_events(&tenant.id, &bot)
            .await
            .iter()
            .filter(|e| *e == "risk.classified")
            .count(),
        2
    );

    // Bad input changes nothing.
    for body in [
        json!({ "risk_level": "extreme", "justification": "x" }),
        json!({ "risk_level": "high", "justification": "" }),
        json!({ "risk_level": "high" }),
        json!({ "risk_level": "high", "justification": "x", "extra": 1 }),
    ] {
        let response = app
            .post(&format!("/agents/{other}/risk-classification"), key, body)
            .await;
        expect_error(response, 422, "validation_failed").await;
    }
    expect_error(
        app.get("/risk-classifications?risk_level=extreme", key)
            .await,
        422,
        "validation_failed",
    )
    .await;
    expect_error(
        classify(&app, key, "agt_01AAAAAAAAAAAAAAAAAAAAAAAA", "high").await,
        404,
        "not_found",
    )
    .await;
    let stranger = app.new_tenant("starter").await;
    expect_error(
        classify(&app, &stranger.admin_key, &bot, "minimal").await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.get(
            &format!("/agents/{bot}/risk-classification"),
            &stranger.admin_key,
        )
        .await,
        404,
        "not_found",
    )
    .await;
    let theirs = expect_status(
        app.get("/risk-classifications", &stranger.admin_key).await,
        200,
    )
    .await;
    assert_eq!(theirs["meta"]["total"], 0);
    let reader = app.key_with_scopes(&tenant, &["governance:read"]).await;
    expect_error(
        classify(&app, &reader, &bot, "minimal").await,
        403,
        "insufficient_scope",
    )
    .await;
    let after = expect_status(app.get("/risk-classifications", key).await, 200).await;
    assert_eq!(after["meta"]["total"], 2);

    let free = app.new_tenant("free").await;
    let free_agent = agent(&app, &free, json!({ "name": "free-bot" })).await;
    expect_error(
        classify(&app, &free.admin_key, &free_agent, "minimal").await,
        402,
        "plan_upgrade_required",
    )
    .await;
});

db_test!(classifications_in_bulk_report_each_failure, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let known = agent(&app, &tenant, json!({ "name": "known" })).await;
    let fresh = agent(&app, &tenant, json!({ "name": "fresh" })).await;
    expect_status(classify(&app, key, &known, "minimal").await, 201).await;

    let outcome = expect_status(
        app.post(
            "/risk-classifications/bulk",
            key,
            json!({ "classifications": [
                { "agent_id": known, "risk_level": "high", "justification": "hiring", "assessed_by": "dpo@acme.example" },
                { "agent_id": fresh, "risk_level": "limited", "justification": "chat" },
                { "agent_id": "agt_01AAAAAAAAAAAAAAAAAAAAAAAA", "risk_level": "high", "justification": "x" },
                { "agent_id": fresh, "risk_level": "severe", "justification": "x" },
                [],
            ] }),
        )
        .await,
        200,
    )
    .await["data"]
        .clone();
    assert_eq!(
        (
            outcome["created"].clone(),
            outcome["updated"].clone(),
            outcome["failed"].clone()
        ),
        (json!(1), json!(1), json!(3)),
        "{outcome}"
    );
    let failures: Vec<(i64, String)> = outcome["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["index"].as_i64().unwrap(),
                e["field"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(failures[0], (2, "agent_id".to_owned()));
    assert_eq!(failures[1], (3, "risk_level".to_owned()));
    assert_eq!(failures[2].0, 4);
    let known_now = expect_status(
        app.get(&format!("/agents/{known}/risk-classification"), key)
            .await,
        200,
    )
    .await;
    assert_eq!(known_now["data"]["assessed_by"], "dpo@acme.example");
    assert_eq!(known_now["data"]["risk_level"], "high");

    // Over 100 items: refused whole, nothing written.
    let many: Vec<Value> = (0..101)
        .map(|_| json!({ "agent_id": fresh, "risk_level": "high", "justification": "x" }))
        .collect();
    let refused = app
        .post(
            "/risk-classifications/bulk",
            key,
            json!({ "classifications": many }),
        )
        .await;
    expect_error(refused, 422, "validation_failed").await;
    let fresh_now = expect_status(
        app.get(&format!("/agents/{fresh}/risk-classification"), key)
            .await,
        200,
    )
    .await;
    assert_eq!(fresh_now["data"]["risk_level"], "limited");
});

db_test!(
    the_suggestion_explains_itself_from_what_warden_knows,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let suggestion = |agent: String| {
            let app = &app;
            async move {
                expect_status(
                    app.get(&format!("/agents/{agent}/risk-suggestion"), key)
                        .await,
                    200,
                )
                .await["data"]
                    .clone()
            }
        };
        let rule = |suggestion: &Value, name: &str| -> Value {
            suggestion["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["rule"] == name)
                .unwrap()
                .clone()
        };

        let plain = agent(
            &app,
            &tenant,
            json!({ "name": "nightly-report", "environment": "dev" }),
        )
        .await;
        let plain_says = suggestion(plain.clone()).await;
        assert_eq!(
            plain_says["suggested_risk_level"], "minimal",
            "{plain_says}"
        );
        assert_eq!(plain_says["rules"].as_array().unwrap().len(), 5);
        assert!(plain_says["rules"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["matched"] == false));

        let hiring = agent(
            &app,
            &tenant,
            json!({ "name": "screener", "description": "Ranks candidates for open roles",
        "tags": { "domain": "recruiting" } }),
        )
        .await;
        let usage = json!({ "agent_id": hiring, "model_provider": "openai", "model_name": "gpt-4o",
        "input_tokens": 10, "output_tokens": 5 });
        expect_status(app.post("/telemetry/usage", key, usage).await, 201).await;
        let hiring_says = suggestion(hiring.clone()).await;
        assert_eq!(
            hiring_says["inputs"]["models_used"],
            json!(["openai/gpt-4o"])
        );
        assert_eq!(hiring_says["inputs"]["requests_30d"], 1);
        assert_eq!(hiring_says["suggested_risk_level"], "high");
        let annex = rule(&hiring_says, "annex_iii_area");
        assert_eq!(annex["matched"], true);
        assert!(
            annex["evidence"].as_str().unwrap().contains("recruit"),
            "{annex}"
        );
        assert_eq!(hiring_says["inputs"]["tags"]["domain"], "recruiting");
        assert_eq!(hiring_says["current_risk_level"], Value::Null);
        assert_eq!(hiring_says["differs_from_current"], true);
        // The same inputs give the same verdicts.
        let again = suggestion(hiring.clone()).await;
        assert_eq!(again["rules"], hiring_says["rules"]);

        // A block is history the rules read.
        let blocked = app
            .post(
                &format!("/agents/{plain}/block"),
                key,
                json!({ "reason": "loop" }),
            )
            .await;
        assert_eq!(blocked.status(), 204);
        let after_block = suggestion(plain.clone()).await;
        assert_eq!(after_block["suggested_risk_level"], "limited");
        let history = rule(&after_block, "enforcement_history");
        assert_eq!(history["matched"], true);
        assert!(
            history["evidence"].as_str().unwrap().contains("1 blocks"),
            "{history}"
        );

        // Classified as suggested: no longer differs.
        expect_status(classify(&app, key, &hiring, "high").await, 201).await;
        assert_eq!(suggestion(hiring).await["differs_from_current"], false);
        let stranger = app.new_tenant("starter").await;
        expect_error(
            app.get(
                &format!("/agents/{plain}/risk-suggestion"),
                &stranger.admin_key,
            )
            .await,
            404,
            "not_found",
        )
        .await;
    }
);
