//! Budget limits (spec 2.11, 4.6): validation, plan gating, one limit per scope, status
//! from the ledger (including spend before the limit existed), threshold crossings
//! recorded once a month.

use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, TestApp, TestTenant};

async fn spend(app: &TestApp, tenant: &TestTenant, agent: &str, cost: f64) {
    expect_status(
        app.post(
            "/telemetry/usage",
            &tenant.admin_key,
            json!({ "agent_id": agent, "model_provider": "openai", "model_name": "gpt-4o",
                    "input_tokens": 10, "output_tokens": 5, "cost_usd": cost }),
        )
        .await,
        201,
    )
    .await;
}

async fn status_of(app: &TestApp, tenant: &TestTenant, scope: &str) -> Value {
    let status = expect_status(app.get("/budget/status", &tenant.admin_key).await, 200).await;
    status["data"]["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scope"] == json!(scope))
        .cloned()
        .unwrap_or(Value::Null)
}

db_test!(
    budget_limits_validate_and_change_nothing_on_bad_input,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let agent = app
            .register_agent(key, json!({ "name": "bot", "team": "alpha" }))
            .await;
        let agent_id = agent["id"].as_str().unwrap();
        let team_id = agent["team_id"].as_str().unwrap();

        // Defaults: warn 80, block 100, enabled; neither id: tenant-wide.
        let created = expect_status(
            app.post("/budget/limits", key, json!({ "monthly_limit_usd": 100 }))
                .await,
            201,
        )
        .await["data"]
            .clone();
        assert_eq!(created["scope"], json!("tenant"));
        assert_eq!(created["tenant_id"], json!(tenant.id));
        assert_eq!(created["team_id"], Value::Null);
        assert_eq!(created["agent_id"], Value::Null);
        assert_eq!(created["monthly_limit_usd"], json!(100.0));
        assert_eq!(created["warn_threshold_pct"], json!(80));
        assert_eq!(created["block_threshold_pct"], json!(100));
        assert_eq!(created["enabled"], json!(true));
        assert!(created["id"].as_str().unwrap().starts_with("bud_"));
        let tenant_limit = created["id"].as_str().unwrap().to_owned();

        let bad: Vec<(Value, &str)> = vec![
            (json!({ "monthly_limit_usd": -1 }), "monthly_limit_usd"),
            (
                json!({ "monthly_limit_usd": 1_000_000 }),
                "monthly_limit_usd",
            ),
            (json!({ "monthly_limit_usd": "ten" }), "monthly_limit_usd"),
            (json!({}), "monthly_limit_usd"),
            (
                json!({ "monthly_limit_usd": 5, "agent_id": agent_id, "warn_threshold_pct": 0 }),
                "warn_threshold_pct",
            ),
            (
                json!({ "monthly_limit_usd": 5, "agent_id": agent_id, "warn_threshold_pct": 101 }),
                "warn_threshold_pct",
            ),
            (
                json!({ "monthly_limit_usd": 5, "agent_id": agent_id, "block_threshold_pct": 0 }),
                "block_threshold_pct",
            ),
            (
                json!({ "monthly_limit_usd": 5, "agent_id": agent_id, "block_threshold_pct": 201 }),
                "block_threshold_pct",
            ),
            (
                json!({ "monthly_limit_usd": 5, "agent_id": agent_id, "warn_threshold_pct": 90, "block_threshold_pct": 50 }),
                "warn_threshold_pct",
            ),
            (
                json!({ "monthly_limit_usd": 5, "agent_id": agent_id, "team_id": team_id }),
                "agent_id",
            ),
            (
                json!({ "monthly_limit_usd": 5, "agent_id": "agt_01NOPE" }),
                "agent_id",
            ),
            (
                json!({ "monthly_limit_usd": 5, "team_id": "team_01NOPE" }),
                "team_id",
            ),
            (json!({ "monthly_limit_usd": 5, "scope": "tenant" }), ""),
        ];
        for (body, field) in bad {
            let answer = expect_error(
                app.post("/budget/limits", key, body.clone()).await,
                422,
                "validation_failed",
            )
            .await;
            if !field.is_empty() {
                assert_eq!(
                    answer["error"]["details"]["field"],
                    json!(field),
                    "{body}: {answer}"
                );
            }
        }
        // One limit per scope.
        expect_error(
            app.post("/budget/limits", key, json!({ "monthly_limit_usd": 7 }))
                .await,
            409,
            "budget_limit_exists",
        )
        .await;
        let listed = expect_status(app.get("/budget/limits", key).await, 200).await;
        assert_eq!(listed["data"].as_array().unwrap().len(), 1, "{listed}");
        assert_eq!(app.count_rows("budget_limits", &tenant.id).await, 1);

        // Team and agent limits; the extremes of every range are accepted.
        let team_limit = expect_status(
            app.post(
                "/budget/limits",
                key,
                json!({ "team_id": team_id, "monthly_limit_usd": 0,
            "warn_threshold_pct": 1, "block_threshold_pct": 1, "enabled": false }),
            )
            .await,
            201,
        )
        .await["data"]
            .clone();
        assert_eq!(team_limit["scope"], json!(format!("team:{team_id}")));
        assert_eq!(team_limit["enabled"], json!(false));
        let agent_limit = expect_status(
            app.post(
                "/budget/limits",
                key,
                json!({ "agent_id": agent_id, "monthly_limit_usd": 999_999,
            "warn_threshold_pct": 100, "block_threshold_pct": 200 }),
            )
            .await,
            201,
        )
        .await["data"]
            .clone();
        assert_eq!(agent_limit["scope"], json!(format!("agent:{agent_id}")));

        // Updates: partial, checked as a whole, scope fixed.
        let path = format!("/budget/limits/{tenant_limit}");
        let updated = expect_status(
            app.patch(
                &path,
                key,
                json!({ "monthly_limit_usd": 250.5, "enabled": false }),
            )
            .await,
            200,
        )
        .await["data"]
            .clone();
        assert_eq!(updated["monthly_limit_usd"], json!(250.5));
        assert_eq!(updated["enabled"], json!(false));
        assert_eq!(updated["warn_threshold_pct"], json!(80));
        for body in [
            json!({ "block_threshold_pct": 50 }),
            json!({ "monthly_limit_usd": -3 }),
            json!({ "agent_id": agent_id }),
            json!({ "warn_threshold_pct": 1.5 }),
        ] {
            expect_error(app.patch(&path, key, body).await, 422, "validation_failed").await;
        }
        let unchanged = expect_status(app.get("/budget/limits", key).await, 200).await;
        let mine = unchanged["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["id"] == json!(tenant_limit))
            .cloned()
            .unwrap();
        assert_eq!(mine["monthly_limit_usd"], json!(250.5));
        assert_eq!(mine["block_threshold_pct"], json!(100));

        // Another tenant sees none of it and cannot touch it.
        let other = app.new_tenant("starter").await;
        let theirs = expect_status(app.get("/budget/limits", &other.admin_key).await, 200).await;
        assert_eq!(theirs["data"], json!([]));
        expect_error(
            app.patch(&path, &other.admin_key, json!({ "enabled": true }))
                .await,
            404,
            "not_found",
        )
        .await;
        expect_error(app.delete(&path, &other.admin_key).await, 404, "not_found").await;
        expect_error(
            app.post(
                "/budget/limits",
                &other.admin_key,
                json!({ "agent_id": agent_id, "monthly_limit_usd": 1 }),
            )
            .await,
            422,
            "validation_failed",
        )
        .await;

        // Delete; then it is gone.
        expect_status(app.delete(&path, key).await, 204).await;
        expect_error(app.delete(&path, key).await, 404, "not_found").await;
        assert_eq!(
            app.audit_events(&tenant.id, &tenant_limit).await,
            [
                "budget_limit.created",
                "budget_limit.updated",
                "budget_limit.deleted"
            ]
        );
    }
);

db_test!(budget_limits_need_a_plan_with_enforcement, |app| {
    let free = app.new_tenant("free").await;
    expect_error(
        app.post(
            "/budget/limits",
            &free.admin_key,
            json!({ "monthly_limit_usd": 10 }),
        )
        .await,
        402,
        "plan_upgrade_required",
    )
    .await;
    // The plan is checked before the body's figures.
    expect_error(
        app.post(
            "/budget/limits",
            &free.admin_key,
            json!({ "monthly_limit_usd": -1, "warn_threshold_pct": 500 }),
        )
        .await,
        402,
        "plan_upgrade_required",
    )
    .await;
    assert_eq!(app.count_rows("budget_limits", &free.id).await, 0);
    // Reading is allowed (an empty list), and a downgraded tenant cannot update.
    let listed = expect_status(app.get("/budget/limits", &free.admin_key).await, 200).await;
    assert_eq!(listed["data"], json!([]));
    let paid = app.new_tenant("starter").await;
    let limit = expect_status(
        app.post(
            "/budget/limits",
            &paid.admin_key,
            json!({ "monthly_limit_usd": 10 }),
        )
        .await,
        201,
    )
    .await;
    let id = limit["data"]["id"].as_str().unwrap();
    sqlx::query("UPDATE tenants SET plan = 'free' WHERE id = $1")
        .bind(&paid.id)
        .execute(app.db.pool())
        .await
        .unwrap();
    expect_error(
        app.patch(
            &format!("/budget/limits/{id}"),
            &paid.admin_key,
            json!({ "monthly_limit_usd": 20 }),
        )
        .await,
        402,
        "plan_upgrade_required",
    )
    .await;
    // Deleting stays possible, so a downgraded tenant can clean up.
    expect_status(
        app.delete(&format!("/budget/limits/{id}"), &paid.admin_key)
            .await,
        204,
    )
    .await;
});

db_test!(
    budget_status_counts_the_months_spend_and_crossings_are_recorded_once,
    |app| {
        let tenant = app.new_tenant("enterprise").await;
        let key = &tenant.admin_key;
        let a = app
            .register_agent(key, json!({ "name": "a", "team": "alpha" }))
            .await;
        let b = app
            .register_agent(key, json!({ "name": "b", "team": "alpha" }))
            .await;
        let c = app.register_agent(key, json!({ "name": "c" })).await;
        let (a, b, c) = (
            a["id"].as_str().unwrap().to_owned(),
            b["id"].as_str().unwrap().to_owned(),
            c["id"].as_str().unwrap().to_owned(),
        );
        let team_id = app
            .register_agent(key, json!({ "name": "d", "team": "alpha" }))
            .await["team_id"]
            .as_str()
            .unwrap()
            .to_owned();

        // Spend before any limit exists counts once a limit names the scope.
        spend(&app, &tenant, &a, 1.25).await;
        spend(&app, &tenant, &c, 0.50).await;
        let team_limit = expect_status(
            app.post(
                "/budget/limits",
                key,
                json!({ "team_id": team_id, "monthly_limit_usd": 10 }),
            )
            .await,
            201,
        )
        .await["data"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        expect_status(
            app.post("/budget/limits", key, json!({ "monthly_limit_usd": 4 }))
                .await,
            201,
        )
        .await;
        expect_status(
            app.post(
                "/budget/limits",
                key,
                json!({ "agent_id": c, "monthly_limit_usd": 1, "warn_threshold_pct": 50 }),
            )
            .await,
            201,
        )
        .await;
        let team = status_of(&app, &tenant, &format!("team:{team_id}")).await;
        assert_eq!(team["current_spend_usd"], json!(1.25), "{team}");
        assert_eq!(team["percentage"], json!(12.5));
        assert_eq!(team["limit_id"], json!(team_limit));
        assert_eq!(team["monthly_limit_usd"], json!(10.0));
        assert_eq!(
            status_of(&app, &tenant, "tenant").await["current_spend_usd"],
            json!(1.75)
        );

        // New spend adds to every scope it falls in, exactly.
        for _ in 0..10 {
            spend(&app, &tenant, &b, 0.10).await;
        }
        spend(&app, &tenant, &c, 0.01).await;
        let team = status_of(&app, &tenant, &format!("team:{team_id}")).await;
        assert_eq!(team["current_spend_usd"], json!(2.25));
        let whole = status_of(&app, &tenant, "tenant").await;
        assert_eq!(whole["current_spend_usd"], json!(2.76));
        assert_eq!(whole["percentage"], json!(69.0));
        let agent_c = status_of(&app, &tenant, &format!("agent:{c}")).await;
        assert_eq!(agent_c["current_spend_usd"], json!(0.51));
        assert_eq!(agent_c["percentage"], json!(51.0));
        // c passed its 50 % warning: recorded once, whatever follows.
        let c_limit = agent_c["limit_id"].as_str().unwrap().to_owned();
        assert_eq!(
            app.audit_events(&tenant.id, &c_limit).await,
            ["budget_limit.created", "budget.warn_threshold_reached"]
        );
        spend(&app, &tenant, &c, 0.02).await;
        spend(&app, &tenant, &c, 0.60).await;
        assert_eq!(
            app.audit_events(&tenant.id, &c_limit).await,
            [
                "budget_limit.created",
                "budget.warn_threshold_reached",
                "budget.block_threshold_reached"
            ]
        );
        spend(&app, &tenant, &c, 0.60).await;
        assert_eq!(app.audit_events(&tenant.id, &c_limit).await.len(), 3);
        // Changing the amounts reports crossings of the new ones afresh.
        expect_status(
            app.patch(
                &format!("/budget/limits/{c_limit}"),
                key,
                json!({ "monthly_limit_usd": 100 }),
            )
            .await,
            200,
        )
        .await;
        spend(&app, &tenant, &c, 60.0).await;
        let events = app.audit_events(&tenant.id, &c_limit).await;
        assert_eq!(
            events.last().map(String::as_str),
            Some("budget.warn_threshold_reached"),
            "{events:?}"
        );
        assert_eq!(events.len(), 5, "{events:?}");
    }
);
