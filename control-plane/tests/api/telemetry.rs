//! Heartbeats and the agent status derived from them (spec 3.1), at each threshold.

use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, TestApp, TestTenant};

/// The status as `GET /agents/{id}`, the `status` filter and the overview see it now;
/// all three must agree.
async fn status_everywhere(app: &TestApp, tenant: &TestTenant, agent_id: &str) -> String {
    let agent = expect_status(
        app.get(&format!("/agents/{agent_id}"), &tenant.admin_key)
            .await,
        200,
    )
    .await;
    let status = agent["data"]["status"].as_str().unwrap().to_owned();
    let filtered = expect_status(
        app.get(&format!("/agents?status={status}"), &tenant.admin_key)
            .await,
        200,
    )
    .await;
    let ids: Vec<&str> = filtered["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&agent_id),
        "the {status} filter must list the agent"
    );
    let overview = expect_status(
        app.get("/monitoring/overview", &tenant.admin_key).await,
        200,
    )
    .await;
    assert_eq!(
        overview["data"][status.as_str()],
        json!(1),
        "overview: {overview}"
    );
    assert_eq!(overview["data"]["total_agents"], json!(1));
    status
}

async fn heartbeat(app: &TestApp, key: &str, body: Value) -> Value {
    expect_status(app.post("/telemetry/heartbeat", key, body).await, 200).await
}

db_test!(status_follows_heartbeat_age_at_each_threshold, |app| {
    let tenant = app.new_tenant("starter").await;
    let agent = app
        .register_agent(&tenant.admin_key, json!({ "name": "pulse" }))
        .await;
    let id = agent["id"].as_str().unwrap();
    assert_eq!(status_everywhere(&app, &tenant, id).await, "unknown");

    let answer = heartbeat(
        &app,
        &tenant.admin_key,
        json!({ "agent_id": id, "latency_ms": 120 }),
    )
    .await;
    assert_eq!(answer["data"]["status"], json!("healthy"));
    assert!(answer["data"]["last_heartbeat"].is_string());
    assert_eq!(status_everywhere(&app, &tenant, id).await, "healthy");

    app.clock.advance(119_999);
    assert_eq!(status_everywhere(&app, &tenant, id).await, "healthy");
    app.clock.advance(1);
    assert_eq!(status_everywhere(&app, &tenant, id).await, "degraded");
    app.clock.advance(179_999);
    assert_eq!(status_everywhere(&app, &tenant, id).await, "degraded");
    app.clock.advance(1);
    assert_eq!(status_everywhere(&app, &tenant, id).await, "down");

    // A heartbeat brings it back at once, whatever status the 2.12 object carries.
    let answer = heartbeat(
        &app,
        &tenant.admin_key,
        json!({ "agent_id": id, "status": "down", "metadata": {} }),
    )
    .await;
    assert_eq!(answer["data"]["status"], json!("healthy"));
    assert_eq!(status_everywhere(&app, &tenant, id).await, "healthy");
    let read = expect_status(
        app.get(&format!("/agents/{id}"), &tenant.admin_key).await,
        200,
    )
    .await;
    assert!(read["data"]["last_heartbeat"].is_string());
});

db_test!(batch_items_carry_their_own_status, |app| {
    let tenant = app.new_tenant("starter").await;
    let a = app
        .register_agent(&tenant.admin_key, json!({ "name": "a" }))
        .await;
    let b = app
        .register_agent(&tenant.admin_key, json!({ "name": "b" }))
        .await;
    let (a, b) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());
    let other = app.new_tenant("starter").await;
    let foreign = app
        .register_agent(&other.admin_key, json!({ "name": "foreign" }))
        .await;
    let foreign = foreign["id"].as_str().unwrap();

    let answer = expect_status(
        app.post(
            "/telemetry/heartbeats",
            &tenant.admin_key,
            json!({ "heartbeats": [
                { "agent_id": a, "status": "degraded", "latency_ms": 900 },
                { "agent_id": b, "status": "down", "metadata": { "region": "eu" } },
                { "agent_id": foreign, "status": "healthy" },
            ] }),
        )
        .await,
        200,
    )
    .await;
    assert_eq!(answer["data"]["recorded"], json!(2));
    assert_eq!(answer["data"]["unknown_agent_ids"], json!([foreign]));
    let read_a = expect_status(
        app.get(&format!("/agents/{a}"), &tenant.admin_key).await,
        200,
    )
    .await;
    assert_eq!(read_a["data"]["status"], json!("degraded"));
    let read_b = expect_status(
        app.get(&format!("/agents/{b}"), &tenant.admin_key).await,
        200,
    )
    .await;
    assert_eq!(read_b["data"]["status"], json!("down"));
    // Another tenant's agent is untouched.
    let read_foreign = expect_status(
        app.get(&format!("/agents/{foreign}"), &other.admin_key)
            .await,
        200,
    )
    .await;
    assert_eq!(read_foreign["data"]["status"], json!("unknown"));
    assert_eq!(app.count_rows("heartbeats", &tenant.id).await, 2);
    assert_eq!(app.count_rows("heartbeats", &other.id).await, 0);

    let overview = expect_status(
        app.get("/monitoring/overview", &tenant.admin_key).await,
        200,
    )
    .await;
    assert_eq!(
        overview["data"],
        json!({ "total_agents": 2, "healthy": 0, "degraded": 1, "down": 1, "unknown": 0 })
    );
});

db_test!(bad_heartbeats_are_refused_and_record_nothing, |app| {
    let tenant = app.new_tenant("starter").await;
    let agent = app
        .register_agent(&tenant.admin_key, json!({ "name": "a" }))
        .await;
    let id = agent["id"].as_str().unwrap();
    let key = &tenant.admin_key;
    for body in [
        json!({}),
        json!({ "agent_id": id, "latency_ms": -1 }),
        json!({ "agent_id": id, "latency_ms": 3_600_001 }),
        json!({ "agent_id": id, "metadata": "x" }),
        json!({ "agent_id": id, "status": "asleep" }),
    ] {
        expect_error(
            app.post("/telemetry/heartbeat", key, body).await,
            422,
            "validation_failed",
        )
        .await;
    }
    expect_error(
        app.post(
            "/telemetry/heartbeat",
            key,
            json!({ "agent_id": "agt_01AAAAAAAAAAAAAAAAAAAAAAAA" }),
        )
        .await,
        404,
        "not_found",
    )
    .await;
    let too_many: Vec<Value> = (0..101)
        .map(|_| json!({ "agent_id": id, "status": "healthy" }))
        .collect();
    for body in [
        json!({ "heartbeats": too_many }),
        json!({ "heartbeats": [{ "agent_id": id }] }),
        json!({ "heartbeats": [{ "agent_id": id, "status": "asleep" }] }),
        json!({ "heartbeats": [{ "agent_id": id, "status": "healthy" }, { "agent_id": id, "status": "healthy", "latency_ms": 4_000_000 }] }),
    ] {
        expect_error(
            app.post("/telemetry/heartbeats", key, body).await,
            422,
            "validation_failed",
        )
        .await;
    }
    let hundred: Vec<Value> = (0..100)
        .map(|_| json!({ "agent_id": id, "status": "healthy" }))
        .collect();
    let answer = expect_status(
        app.post(
            "/telemetry/heartbeats",
            key,
            json!({ "heartbeats": hundred }),
        )
        .await,
        200,
    )
    .await;
    assert_eq!(answer["data"]["recorded"], json!(100));
    assert_eq!(app.count_rows("heartbeats", &tenant.id).await, 100);
});

db_test!(
    usage_is_priced_from_the_table_unless_a_cost_is_given,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let agent = app
            .register_agent(
                &tenant.admin_key,
                json!({ "name": "spender", "team": "ml" }),
            )
            .await;
        let id = agent["id"].as_str().unwrap();
        let priced = expect_status(
        app.post(
            "/telemetry/usage",
            &tenant.admin_key,
            json!({ "agent_id": id, "model_provider": "openai", "model_name": "gpt-4o-2024-08-06",
                    "input_tokens": 1000, "output_tokens": 500 }),
        )
        .await,
        201,
    )
    .await;
        let data = &priced["data"];
        assert!(data["id"].as_str().unwrap().starts_with("use_"));
        assert_eq!(data["cost_usd"], json!(0.0075));
        assert_eq!(data["priced"], json!(true));
        assert!(data["recorded_at"].is_string());

        let given = expect_status(
            app.post(
                "/telemetry/usage",
                &tenant.admin_key,
                json!({ "agent_id": id, "model_provider": "openai", "model_name": "gpt-4o",
                    "input_tokens": 1000, "output_tokens": 500, "cost_usd": 0.5 }),
            )
            .await,
            201,
        )
        .await;
        assert_eq!(given["data"]["cost_usd"], json!(0.5));

        let unknown = expect_status(
            app.post(
                "/telemetry/usage",
                &tenant.admin_key,
                json!({ "agent_id": id, "model_provider": "google", "model_name": "gemini-9-ultra",
                    "input_tokens": 10, "output_tokens": 10 }),
            )
            .await,
            201,
        )
        .await;
        assert_eq!(unknown["data"]["priced"], json!(false));
        assert_eq!(unknown["data"]["cost_usd"], json!(0.0));
        assert_eq!(app.count_rows("usage_records", &tenant.id).await, 3);

        // The hourly rollup holds exactly what the records hold.
        let (requests, cost): (i64, i64) = sqlx::query_as(
        "SELECT CAST(SUM(requests) AS BIGINT), CAST(SUM(cost_micros) AS BIGINT) FROM usage_hourly WHERE tenant_id = $1",
    )
    .bind(&tenant.id)
    .fetch_one(app.db.pool())
    .await
    .unwrap();
        assert_eq!((requests, cost), (3, 507_500));

        expect_error(
            app.post(
                "/telemetry/usage",
                &tenant.admin_key,
                json!({ "agent_id": "agt_01AAAAAAAAAAAAAAAAAAAAAAAA", "model_provider": "openai",
                    "model_name": "gpt-4o", "input_tokens": 1, "output_tokens": 1 }),
            )
            .await,
            404,
            "not_found",
        )
        .await;
    }
);

db_test!(
    a_usage_batch_records_valid_items_and_reports_the_rest,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let agent = app
            .register_agent(&tenant.admin_key, json!({ "name": "batcher" }))
            .await;
        let id = agent["id"].as_str().unwrap();
        let good = json!({ "agent_id": id, "model_provider": "anthropic", "model_name": "claude-sonnet-4",
                       "input_tokens": 2000, "output_tokens": 100 });
        let answer = expect_status(
        app.post(
            "/telemetry/usages",
            &tenant.admin_key,
            json!({ "usages": [
                good,
                { "agent_id": id, "model_provider": "azure", "model_name": "x", "input_tokens": 1, "output_tokens": 1 },
                { "agent_id": id, "model_provider": "openai", "model_name": "gpt-4o", "input_tokens": -5, "output_tokens": 1 },
                { "agent_id": id, "model_provider": "openai", "input_tokens": 1, "output_tokens": 1 },
                { "agent_id": "agt_01AAAAAAAAAAAAAAAAAAAAAAAA", "model_provider": "openai", "model_name": "gpt-4o", "input_tokens": 1, "output_tokens": 1 },
                "not an object",
                good,
            ] }),
        )
        .await,
        200,
    )
    .await;
        let data = &answer["data"];
        assert_eq!(data["accepted"], json!(2));
        assert_eq!(data["rejected"], json!(5));
        let errors = data["errors"].as_array().unwrap();
        let indexes: Vec<i64> = errors
            .iter()
            .map(|e| e["index"].as_i64().unwrap())
            .collect();
        assert_eq!(indexes, [1, 2, 3, 4, 5]);
        assert_eq!(errors[0]["field"], json!("model_provider"));
        assert_eq!(errors[1]["field"], json!("input_tokens"));
        assert_eq!(errors[2]["field"], json!("model_name"));
        assert_eq!(errors[3]["field"], json!("agent_id"));
        assert_eq!(app.count_rows("usage_records", &tenant.id).await, 2);

        let too_many: Vec<Value> = (0..101).map(|_| good.clone()).collect();
        expect_error(
            app.post(
                "/telemetry/usages",
                &tenant.admin_key,
                json!({ "usages": too_many }),
            )
            .await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(app.count_rows("usage_records", &tenant.id).await, 2);
    }
);
