//! Ranges that cut hours and days, and days closing into daily rows, leave every view
//! unchanged.

use serde_json::{json, Value};

use warden_control_plane::ledger;

use super::{day_of, spend, HOUR};
use crate::helpers::{expect_status, TestApp};

db_test!(ranges_cut_mid_day_count_edge_hours_exactly_once, |app| {
    // The views grouped by agent read daily rollups for whole days and hourly ones at
    // the edges; every level must agree on a range that starts and ends mid-day.
    let tenant = app.new_tenant("enterprise").await;
    let agent = app
        .register_agent(
            &tenant.admin_key,
            json!({ "name": "edgy", "team": "edges" }),
        )
        .await;
    let agent = agent["id"].as_str().unwrap();
    let now = app.clock.now().as_millis();
    let day = now - now.rem_euclid(24 * HOUR) - 5 * 24 * HOUR;
    // (hours after `day`, cost in micro-dollars, counted in the range?)
    let spends = [
        (10, 1_000, false),
        (13, 20_000, true),
        (29, 300_000, true),
        (51, 4_000_000, true),
        (54, 50_000_000, false),
    ];
    let records: Vec<Value> = spends
        .iter()
        .enumerate()
        .map(|(i, (hours, micros, _))| {
            json!({
                "record_id": format!("edge-{i}"), "tenant_id": tenant.id, "agent_id": agent,
                "model_provider": "openai", "model_name": "gpt-4o", "input_tokens": 1,
                "output_tokens": 1, "cost_usd": *micros as f64 / 1e6,
                "recorded_at": warden_shared::timestamp::Timestamp::from_millis(day + hours * HOUR + 60_000).to_string(),
            })
        })
        .collect();
    let ack = expect_status(
        app.client
            .post(format!("{}/internal/v1/usage-batches", app.base))
            .bearer_auth(crate::helpers::SERVICE_TOKEN)
            .json(&json!({ "batch_id": "edges", "records": records }))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(ack["data"]["accepted"], json!(5), "{ack}");
    let expected: i64 = spends.iter().filter(|s| s.2).map(|s| s.1).sum();
    let expected_usd = json!(expected as f64 / 1e6);
    let at = |hours: i64| warden_shared::timestamp::Timestamp::from_millis(day + hours * HOUR);
    let range = format!("from={}&to={}", at(12), at(52));
    let key = &tenant.admin_key;

    let summary = expect_status(app.get(&format!("/cost/summary?{range}"), key).await, 200).await;
    assert_eq!(summary["data"]["total_cost_usd"], expected_usd);
    assert_eq!(summary["data"]["total_requests"], json!(3));
    let by_agent = expect_status(app.get(&format!("/cost/by-agent?{range}"), key).await, 200).await;
    assert_eq!(by_agent["data"][0]["total_cost_usd"], expected_usd);
    assert_eq!(by_agent["data"][0]["requests"], json!(3));
    let by_team = expect_status(app.get(&format!("/cost/by-team?{range}"), key).await, 200).await;
    assert_eq!(by_team["data"][0]["total_cost_usd"], expected_usd);
    let series = expect_status(
        app.get(&format!("/cost/timeseries?{range}&granularity=hour"), key)
            .await,
        200,
    )
    .await;
    let points = series["data"].as_array().unwrap();
    assert_eq!(points.len(), 40);
    let series_micros: f64 = points
        .iter()
        .map(|p| p["cost_usd"].as_f64().unwrap() * 1e6)
        .sum();
    assert_eq!(series_micros.round() as i64, expected);
    let agent_series = expect_status(
        app.get(
            &format!("/cost/timeseries?{range}&granularity=day&agent_id={agent}"),
            key,
        )
        .await,
        200,
    )
    .await;
    let agent_micros: f64 = agent_series["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["cost_usd"].as_f64().unwrap() * 1e6)
        .sum();
    assert_eq!(agent_micros.round() as i64, expected);
});

/// by-agent and by-team totals (agent id or team name, micro-dollars) for `range`.
async fn grouped_totals(
    app: &TestApp,
    key: &str,
    range: &str,
) -> (Vec<(Value, i64)>, Vec<(Value, i64)>) {
    let micros = |row: &Value| (row["total_cost_usd"].as_f64().unwrap() * 1e6).round() as i64;
    let by_agent = expect_status(app.get(&format!("/cost/by-agent?{range}"), key).await, 200).await;
    let by_team = expect_status(app.get(&format!("/cost/by-team?{range}"), key).await, 200).await;
    (
        by_agent["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["agent_id"].clone(), micros(r)))
            .collect(),
        by_team["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["team"].clone(), micros(r)))
            .collect(),
    )
}

db_test!(
    closing_days_moves_usage_to_daily_rows_without_changing_any_view,
    |app| {
        // Batches write hourly rows; the ledger's round rolls finished hours into open
        // days' per-agent rows (usage_daily_open) and moves finished days into
        // usage_daily, one row per agent and day; a late record for a rolled hour or a
        // closed day is added to its daily row by the batch. Views grouped by agent or
        // team, and teams' monthly cost, must read the same sums in every state.
        let tenant = app.new_tenant("enterprise").await;
        let key = &tenant.admin_key;
        let a = app
            .register_agent(key, json!({ "name": "closer-a", "team": "night" }))
            .await;
        let b = app.register_agent(key, json!({ "name": "closer-b" })).await;
        let (a, b) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());
        let start = app.clock.now().as_millis();
        // Three days of spending at the clock's time, so every record lands on an open day.
        for day in 0..3 {
            spend(&app, &tenant, a, "gpt-4o", 0.25, (10, 1)).await;
            spend(&app, &tenant, b, "gpt-4o-mini", 0.5, (10, 1)).await;
            if day < 2 {
                app.clock.advance(24 * HOUR);
            }
        }
        let range = format!("from={}&to={}", day_of(start), day_of(start + 48 * HOUR));
        let expected = (
            vec![(json!(b), 1_500_000), (json!(a), 750_000)],
            vec![(Value::Null, 1_500_000), (json!("night"), 750_000)],
        );
        assert_eq!(grouped_totals(&app, key, &range).await, expected);
        assert_eq!(
            app.count_rows("usage_daily", &tenant.id).await,
            0,
            "open days have no daily rows"
        );
        assert_eq!(
            app.count_rows("usage_daily_open", &tenant.id).await,
            0,
            "hours are not rolled by batches"
        );

        // Roll every finished hour and close what ended before the third day (its
        // midnight plus the grace period has passed): the first two days become one daily
        // row per agent each; the third stays open, its finished hour rolled.
        let into_day = app.clock.now().as_millis().rem_euclid(24 * HOUR);
        let advance = (HOUR + ledger::ROLL_GRACE_MS).max(ledger::CLOSE_GRACE_MS + HOUR - into_day);
        app.clock.advance(advance);
        // Late in the day the advance closes the third day too.
        let third_closed = into_day + advance >= 24 * HOUR + ledger::CLOSE_GRACE_MS;
        let (daily, open) = if third_closed { (6, 0) } else { (4, 2) };
        let closed = ledger::close_days(&app.db, app.clock.now()).await.unwrap();
        assert!(closed >= 2, "closed {closed} tenant-days");
        assert_eq!(app.count_rows("usage_daily", &tenant.id).await, daily);
        assert_eq!(
            app.count_rows("usage_daily_open", &tenant.id).await,
            open,
            "the open day's rolled hour has its rows; the closed days' rows moved"
        );
        assert_eq!(grouped_totals(&app, key, &range).await, expected);
        // Closing again finds nothing of this tenant's left to do.
        ledger::close_days(&app.db, app.clock.now()).await.unwrap();
        assert_eq!(app.count_rows("usage_daily", &tenant.id).await, daily);

        // A late record for the first (closed) day is added to that day's row.
        let ack = expect_status(
        app.client
            .post(format!("{}/internal/v1/usage-batches", app.base))
            .bearer_auth(crate::helpers::SERVICE_TOKEN)
            .json(&json!({ "batch_id": "late", "records": [{
                "record_id": "late-1", "tenant_id": tenant.id, "agent_id": a,
                "model_provider": "openai", "model_name": "gpt-4o", "input_tokens": 1,
                "output_tokens": 1, "cost_usd": 0.125,
                "recorded_at": warden_shared::timestamp::Timestamp::from_millis(start + 60_000).to_string(),
            }] }))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
        assert_eq!(ack["data"]["accepted"], json!(1), "{ack}");
        assert_eq!(app.count_rows("usage_daily", &tenant.id).await, daily);
        // And one for the third (open) day's rolled hour is added to its open row.
        let ack = expect_status(
            app.client
                .post(format!("{}/internal/v1/usage-batches", app.base))
                .bearer_auth(crate::helpers::SERVICE_TOKEN)
                .json(&json!({ "batch_id": "late-open", "records": [{
                    "record_id": "late-2", "tenant_id": tenant.id, "agent_id": b,
                    "model_provider": "openai", "model_name": "gpt-4o", "input_tokens": 1,
                    "output_tokens": 1, "cost_usd": 0.0625,
                    "recorded_at": warden_shared::timestamp::Timestamp::from_millis(
                        start + 48 * HOUR + 60_000).to_string(),
                }] }))
                .send()
                .await
                .unwrap(),
            200,
        )
        .await;
        assert_eq!(ack["data"]["accepted"], json!(1), "{ack}");
        assert_eq!(app.count_rows("usage_daily_open", &tenant.id).await, open);
        assert_eq!(app.count_rows("usage_daily", &tenant.id).await, daily);
        let late = (
            vec![(json!(b), 1_562_500), (json!(a), 875_000)],
            vec![(Value::Null, 1_562_500), (json!("night"), 875_000)],
        );
        assert_eq!(grouped_totals(&app, key, &range).await, late);

        // The team's monthly cost reads the same way (when the three days share a month).
        let month = |ms: i64| day_of(ms)[..7].to_owned();
        if month(start) == month(app.clock.now().as_millis()) {
            let teams = expect_status(app.get("/teams", key).await, 200).await;
            assert_eq!(
                teams["data"][0]["monthly_cost_usd"],
                json!(0.875),
                "{teams}"
            );
        }
    }
);

/// SQLite only: on the shared PostgreSQL database this app's close would run on its own
/// clock over every other test's tenants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_closes_finished_days_by_itself() {
    let app = TestApp::spawn_with(crate::helpers::Backend::Sqlite, |config| {
        config.close_days_interval_secs = 1;
    })
    .await;
    let tenant = app.new_tenant("enterprise").await;
    let agent = app
        .register_agent(&tenant.admin_key, json!({ "name": "sleeper" }))
        .await;
    spend(
        &app,
        &tenant,
        agent["id"].as_str().unwrap(),
        "gpt-4o",
        0.5,
        (1, 1),
    )
    .await;
    app.clock.advance(24 * HOUR + ledger::CLOSE_GRACE_MS);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while app.count_rows("usage_daily", &tenant.id).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the day was not closed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(app.count_rows("usage_daily", &tenant.id).await, 1);
}
