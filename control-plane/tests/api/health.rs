//! Agent health scores: the documented formula, the five-minute cache, tenant isolation.

use serde_json::json;

use crate::helpers::{expect_error, expect_status};

db_test!(health_scores_follow_the_formula_and_are_cached, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let quiet = app.register_agent(key, json!({ "name": "quiet" })).await;
    let quiet = quiet["id"].as_str().unwrap();
    // No heartbeats: reliability 0; cost and performance neutral (100): 0.3 + 0.3.
    let health = expect_status(app.get(&format!("/agents/{quiet}/health"), key).await, 200).await;
    assert_eq!(health["data"]["score"], json!(60));
    assert_eq!(health["data"]["color"], json!("yellow"));
    assert_eq!(health["data"]["cached"], json!(false));
    assert_eq!(
        health["data"]["breakdown"]["reliability"]["details"]["uptime_pct"],
        json!(0.0)
    );

    // A heartbeat every five minutes for a day at 100 ms: a perfect score.
    let steady = app.register_agent(key, json!({ "name": "steady" })).await;
    let steady = steady["id"].as_str().unwrap();
    for _ in 0..288 {
        app.clock.advance(300_000);
        expect_status(
            app.post(
                "/telemetry/heartbeat",
                key,
                json!({ "agent_id": steady, "latency_ms": 100 }),
            )
            .await,
            200,
        )
        .await;
    }
    let health = expect_status(app.get(&format!("/agents/{steady}/health"), key).await, 200).await;
    let data = &health["data"];
    assert_eq!(data["score"], json!(100), "{data}");
    assert_eq!(data["color"], json!("green"));
    assert_eq!(data["breakdown"]["reliability"]["weight"], json!(0.4));
    assert_eq!(
        data["breakdown"]["reliability"]["details"],
        json!({ "error_rate": 0.0, "uptime_pct": 100.0 })
    );
    assert_eq!(
        data["breakdown"]["performance"]["details"]["p95_latency_ms"],
        json!(100.0)
    );
    assert_eq!(
        data["breakdown"]["cost_efficiency"]["details"]["daily_cost_trend"],
        json!(0.0)
    );

    // Within five minutes the cached answer is served, even after the agent degrades.
    let down: Vec<_> = (0..20)
        .map(|_| json!({ "agent_id": steady, "status": "down", "latency_ms": 9000 }))
        .collect();
    let degraded = json!({ "heartbeats": down });
    let recorded = expect_status(app.post("/telemetry/heartbeats", key, degraded).await, 200).await;
    assert_eq!(recorded["data"]["recorded"], json!(20), "{recorded}");
    app.clock.advance(299_000);
    let again = expect_status(app.get(&format!("/agents/{steady}/health"), key).await, 200).await;
    assert_eq!(again["data"]["cached"], json!(true));
    assert_eq!(again["data"]["score"], json!(100));
    app.clock.advance(1_000);
    let fresh = expect_status(app.get(&format!("/agents/{steady}/health"), key).await, 200).await;
    assert_eq!(fresh["data"]["cached"], json!(false));
    // 20 of 308 heartbeats down at 9 s: reliability 100 x (1 - 20/308) = 93.5, p95 9 s
    // gives performance 11.1: 0.4 x 93.5 + 0.3 x 100 + 0.3 x 11.1 = 71.
    assert_eq!(fresh["data"]["score"], json!(71), "{}", fresh["data"]);
    assert_eq!(fresh["data"]["color"], json!("yellow"));
    assert!(
        fresh["data"]["breakdown"]["reliability"]["details"]["error_rate"]
            .as_f64()
            .unwrap()
            > 0.0
    );

    // A cached score does not outlive its agent.
    let doomed = app.register_agent(key, json!({ "name": "doomed" })).await;
    let doomed = doomed["id"].as_str().unwrap();
    expect_status(app.get(&format!("/agents/{doomed}/health"), key).await, 200).await;
    expect_status(app.delete(&format!("/agents/{doomed}"), key).await, 204).await;
    expect_error(
        app.get(&format!("/agents/{doomed}/health"), key).await,
        404,
        "not_found",
    )
    .await;

    // Another tenant's agent, or none at all, is a 404.
    let other = app.new_tenant("starter").await;
    expect_error(
        app.get(&format!("/agents/{steady}/health"), &other.admin_key)
            .await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.get("/agents/agt_01AAAAAAAAAAAAAAAAAAAAAAAA/health", key)
            .await,
        404,
        "not_found",
    )
    .await;
});

db_test!(a_new_agent_is_scored_over_its_own_life, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app
        .register_agent(key, serde_json::json!({ "name": "newborn" }))
        .await;
    let id = agent["id"].as_str().unwrap();
    let beat = app
        .post(
            "/telemetry/heartbeat",
            key,
            serde_json::json!({ "agent_id": id, "latency_ms": 100 }),
        )
        .await;
    assert_eq!(beat.status(), 200);
    let score = expect_status(app.get(&format!("/agents/{id}/health"), key).await, 200).await;
    let reliability = &score["data"]["breakdown"]["reliability"];
    assert_eq!(reliability["details"]["uptime_pct"], 100.0, "{score}");
    assert_eq!(score["data"]["color"], "green", "{score}");
});
