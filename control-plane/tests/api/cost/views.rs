//! The views' totals, defaults, refusals and decimals.

use serde_json::{json, Value};

use super::{day_of, spend, HOUR};
use crate::helpers::{expect_error, expect_status};

db_test!(cost_views_add_up_exactly, |app| {
    let tenant = app.new_tenant("enterprise").await;
    let a = app
        .register_agent(
            &tenant.admin_key,
            json!({ "name": "alpha-1", "team": "alpha" }),
        )
        .await;
    let b = app
        .register_agent(
            &tenant.admin_key,
            json!({ "name": "alpha-2", "team": "alpha" }),
        )
        .await;
    let c = app
        .register_agent(&tenant.admin_key, json!({ "name": "loner" }))
        .await;
    let (a, b, c) = (
        a["id"].as_str().unwrap(),
        b["id"].as_str().unwrap(),
        c["id"].as_str().unwrap(),
    );
    let start = app.clock.now().as_millis();

    // Day 0: a spends 0.10 + 0.20, b 0.01 (x10, to catch float drift), c 1.00.
    spend(&app, &tenant, a, "gpt-4o", 0.10, (100, 10)).await;
    spend(&app, &tenant, a, "gpt-4o-mini", 0.20, (200, 20)).await;
    for _ in 0..10 {
        spend(&app, &tenant, b, "gpt-4o", 0.01, (1, 1)).await;
    }
    spend(&app, &tenant, c, "gpt-4o", 1.00, (1000, 100)).await;
    // Day 2: a spends 0.30 more.
    app.clock.advance(48 * HOUR);
    spend(&app, &tenant, a, "gpt-4o", 0.30, (300, 30)).await;

    let from = day_of(start);
    let to = day_of(start + 48 * HOUR);
    let range = format!("from={from}&to={to}");
    let key = &tenant.admin_key;

    let summary = expect_status(app.get(&format!("/cost/summary?{range}"), key).await, 200).await;
    assert_eq!(summary["data"]["total_cost_usd"], json!(1.7));
    assert_eq!(summary["data"]["total_requests"], json!(14));
    assert_eq!(summary["data"]["total_input_tokens"], json!(1610));
    assert_eq!(summary["data"]["total_output_tokens"], json!(170));
    assert_eq!(summary["data"]["period"], json!("month"));

    let by_agent = expect_status(app.get(&format!("/cost/by-agent?{range}"), key).await, 200).await;
    assert_eq!(
        by_agent["meta"],
        json!({ "total": 3, "page": 1, "limit": 20 })
    );
    let rows: Vec<(Value, Value, Value)> = by_agent["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["agent_id"].clone(),
                r["total_cost_usd"].clone(),
                r["team"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (json!(c), json!(1.0), Value::Null),
            (json!(a), json!(0.6), json!("alpha")),
            (json!(b), json!(0.1), json!("alpha")),
        ]
    );
    assert_eq!(by_agent["data"][1]["requests"], json!(3));
    let page2 = expect_status(
        app.get(&format!("/cost/by-agent?{range}&limit=2&page=2"), key)
            .await,
        200,
    )
    .await;
    assert_eq!(page2["data"][0]["agent_id"], json!(b));
    assert_eq!(page2["meta"]["total"], json!(3));
    let beyond = expect_status(
        app.get(&format!("/cost/by-agent?{range}&limit=2&page=5"), key)
            .await,
        200,
    )
    .await;
    assert_eq!(beyond["data"], json!([]));
    assert_eq!(beyond["meta"]["total"], json!(3));

    let by_team = expect_status(app.get(&format!("/cost/by-team?{range}"), key).await, 200).await;
    assert_eq!(by_team["data"][0]["team"], Value::Null);
    assert_eq!(by_team["data"][0]["total_cost_usd"], json!(1.0));
    assert_eq!(by_team["data"][1]["team"], json!("alpha"));
    assert_eq!(by_team["data"][1]["total_cost_usd"], json!(0.7));
    assert_eq!(by_team["data"][1]["agent_count"], json!(2));

    let by_model = expect_status(app.get(&format!("/cost/by-model?{range}"), key).await, 200).await;
    assert_eq!(by_model["data"][0]["model_name"], json!("gpt-4o"));
    assert_eq!(by_model["data"][0]["total_cost_usd"], json!(1.5));
    assert_eq!(by_model["data"][0]["requests"], json!(13));
    assert_eq!(by_model["data"][1]["model_name"], json!("gpt-4o-mini"));
    assert_eq!(by_model["data"][1]["total_cost_usd"], json!(0.2));
    // One agent's or one team's models (read from the per-agent hours).
    let models_of = |filter: String| {
        let app = &app;
        let range = &range;
        async move {
            let body = expect_status(
                app.get(&format!("/cost/by-model?{range}&{filter}"), key)
                    .await,
                200,
            )
            .await;
            body["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    (
                        m["model_name"].clone(),
                        m["total_cost_usd"].clone(),
                        m["requests"].clone(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        models_of(format!("agent_id={a}")).await,
        [
            (json!("gpt-4o"), json!(0.4), json!(2)),
            (json!("gpt-4o-mini"), json!(0.2), json!(1)),
        ]
    );
    assert_eq!(
        models_of(format!("agent_id={c}")).await,
        [(json!("gpt-4o"), json!(1.0), json!(1))]
    );
    assert_eq!(
        models_of("team=alpha".into()).await,
        [
            (json!("gpt-4o"), json!(0.5), json!(12)),
            (json!("gpt-4o-mini"), json!(0.2), json!(1)),
        ]
    );
    assert_eq!(
        models_of(format!("team=alpha&agent_id={b}")).await,
        [(json!("gpt-4o"), json!(0.1), json!(10))]
    );
    assert!(models_of("team=nobody".into()).await.is_empty());
    assert!(models_of("agent_id=agt_nobody".into()).await.is_empty());

    // Daily buckets: three days, the middle one empty but present.
    let series = expect_status(
        app.get(&format!("/cost/timeseries?{range}"), key).await,
        200,
    )
    .await;
    let points = series["data"].as_array().unwrap();
    assert_eq!(points.len(), 3);
    assert_eq!(points[0]["cost_usd"], json!(1.4));
    assert_eq!(
        points[1],
        json!({ "timestamp": format!("{}T00:00:00.000Z", day_of(start + 24 * HOUR)),
        "cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0, "requests": 0 })
    );
    assert_eq!(points[2]["cost_usd"], json!(0.3));
    let total: f64 = points.iter().map(|p| p["cost_usd"].as_f64().unwrap()).sum();
    assert!((total - 1.7).abs() < 1e-9);

    let hourly = expect_status(
        app.get(&format!("/cost/timeseries?{range}&granularity=hour"), key)
            .await,
        200,
    )
    .await;
    assert_eq!(hourly["data"].as_array().unwrap().len(), 72);
    let for_agent = expect_status(
        app.get(&format!("/cost/timeseries?{range}&agent_id={a}"), key)
            .await,
        200,
    )
    .await;
    assert_eq!(for_agent["data"][0]["cost_usd"], json!(0.3));
    let for_team = expect_status(
        app.get(&format!("/cost/timeseries?{range}&team=alpha"), key)
            .await,
        200,
    )
    .await;
    assert_eq!(for_team["data"][0]["cost_usd"], json!(0.4));
    let no_team = expect_status(
        app.get(&format!("/cost/timeseries?{range}&team=nobody"), key)
            .await,
        200,
    )
    .await;
    assert!(no_team["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["requests"] == json!(0)));

    // The team's monthly cost and another tenant's view.
    let other = app.new_tenant("starter").await;
    let theirs = expect_status(
        app.get(&format!("/cost/summary?{range}"), &other.admin_key)
            .await,
        200,
    )
    .await;
    assert_eq!(theirs["data"]["total_cost_usd"], json!(0.0));
    let theirs = expect_status(
        app.get(&format!("/cost/by-agent?{range}"), &other.admin_key)
            .await,
        200,
    )
    .await;
    assert_eq!(theirs["meta"]["total"], json!(0));
});

db_test!(cost_queries_default_and_reject_bad_dates, |app| {
    let tenant = app.new_tenant("starter").await;
    let agent = app
        .register_agent(&tenant.admin_key, json!({ "name": "now" }))
        .await;
    spend(
        &app,
        &tenant,
        agent["id"].as_str().unwrap(),
        "gpt-4o",
        0.25,
        (1, 1),
    )
    .await;
    let key = &tenant.admin_key;
    for period in ["day", "week", "month"] {
        let summary = expect_status(
            app.get(&format!("/cost/summary?period={period}"), key)
                .await,
            200,
        )
        .await;
        assert_eq!(
            summary["data"]["total_cost_usd"],
            json!(0.25),
            "period {period}"
        );
        assert_eq!(summary["data"]["period"], json!(period));
    }
    let series = expect_status(app.get("/cost/timeseries", key).await, 200).await;
    assert_eq!(
        series["data"].as_array().unwrap().len(),
        31,
        "30 days ago through today"
    );
    for bad in [
        "/cost/summary?from=yesterday",
        "/cost/summary?to=2026-02-30",
        "/cost/summary?period=year",
        "/cost/summary?from=2026-06-02&to=2026-06-01",
        "/cost/by-agent?from=2020-01-01&to=2026-01-01",
        "/cost/by-agent?limit=101",
        // The team and model breakdowns are whole lists: paging them is an error, not
        // a silently ignored parameter.
        "/cost/by-team?limit=5",
        "/cost/by-model?page=2",
        "/cost/timeseries?granularity=minute",
        "/cost/timeseries?from=2026-01-01&to=2026-12-31&granularity=hour",
    ] {
        expect_error(app.get(bad, key).await, 422, "validation_failed").await;
    }
});

db_test!(small_amounts_are_plain_decimals_everywhere, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app
        .register_agent(key, serde_json::json!({ "name": "frugal" }))
        .await;
    let usage = serde_json::json!({ "agent_id": agent["id"], "model_provider": "openai",
        "model_name": "gpt-4o-mini", "input_tokens": 100, "output_tokens": 0 });
    let recorded = app.post("/telemetry/usage", key, usage).await;
    assert_eq!(recorded.status(), 201);
    let text = recorded.text().await.unwrap();
    assert!(text.contains("\"cost_usd\":0.000015"), "{text}");
    for path in [
        "/cost/summary",
        "/cost/by-agent",
        "/cost/by-model",
        "/teams",
    ] {
        let text = app.get(path, key).await.text().await.unwrap();
        assert!(
            !text.contains("e-0") && !text.contains("e-5"),
            "{path}: {text}"
        );
    }
});
