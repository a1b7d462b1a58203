//! Ranges that cut hours and days, and days closing into daily rows, leave every view
//! unchanged.

use serde_json::{json, Value};

use warden_control_plane::ledger;
use warden_shared::timestamp::Timestamp;

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

/// By-agent and by-team totals: (agent id or team name, micro-dollars) each.
type Grouped = (Vec<(Value, i64)>, Vec<(Value, i64)>);

/// by-agent and by-team totals (agent id or team name, micro-dollars) for `range`.
async fn grouped_totals(app: &TestApp, key: &str, range: &str) -> Grouped {
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
        usage_at(&app, &tenant.id, "late-1", a, start + 60_000, 125_000).await;
        assert_eq!(app.count_rows("usage_daily", &tenant.id).await, daily);
        // And one for the third (open) day's rolled hour is added to its open row.
        usage_at(
            &app,
            &tenant.id,
            "late-2",
            b,
            start + 48 * HOUR + 60_000,
            62_500,
        )
        .await;
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

db_test!(
    months_of_closed_days_give_the_same_views_as_their_days,
    |app| {
        // Views grouped by agent or team read a month's closed days from its monthly rows
        // (usage_monthly) when the range holds all of them, and days otherwise. Spend over
        // three months, checked against sums computed here for ranges that hold whole
        // months, a month to date, a month's tail, days inside one month and hours cut
        // mid-day; before and after days close, and after a late record.
        let tenant = app.new_tenant("enterprise").await;
        let key = &tenant.admin_key;
        let a = app
            .register_agent(key, json!({ "name": "monthly-a", "team": "night" }))
            .await;
        let b = app
            .register_agent(key, json!({ "name": "monthly-b" }))
            .await;
        let (a, b) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());
        let month_of = |ms: i64| Timestamp::from_millis(ms).month_start();
        let now = app.clock.now().as_millis();
        let this_month = month_of(now);
        let last_month = month_of(this_month - 24 * HOUR);
        let before = month_of(last_month - 24 * HOUR);
        let day = 24 * HOUR;
        let mut records: Vec<(&str, i64, i64)> = vec![
            (a, before + 4 * day + 3 * HOUR, 1),
            (b, before + 20 * day + 5 * HOUR, 2),
            (a, last_month + HOUR, 4),
            (b, last_month + 9 * day + 12 * HOUR, 8),
            (a, last_month + 14 * day + 2 * HOUR, 16),
            (b, this_month - 2 * HOUR, 32),
            (a, this_month + (2 * HOUR).min((now - this_month) / 2), 64),
            (b, now - 60_000, 128),
        ];
        for (index, (agent, at, micros)) in records.iter().enumerate() {
            usage_at(&app, &tenant.id, &format!("m-{index}"), agent, *at, *micros).await;
        }
        // Up to the end of today, as the views default to: this month is not whole.
        let end_of_today = now - now.rem_euclid(day) + day;
        let ranges = [
            (before, end_of_today),
            (last_month + 9 * day, end_of_today),
            (last_month, this_month),
            (last_month + day, last_month + 20 * day),
            (
                before + 20 * day + 5 * HOUR,
                last_month + 14 * day + 2 * HOUR,
            ),
            (last_month, this_month + 40 * day),
            (this_month, end_of_today),
        ];
        compare(&app, key, &records, &ranges, a, "as written").await;
        assert!(app.count_rows("usage_monthly", &tenant.id).await > 0);

        // A day later every earlier day is closed: today's spend moves to daily and
        // monthly rows too.
        app.clock
            .advance(day + ledger::CLOSE_GRACE_MS + ledger::ROLL_GRACE_MS + HOUR);
        ledger::close_days(&app.db, app.clock.now()).await.unwrap();
        compare(&app, key, &records, &ranges, a, "closed").await;
        // A late record for a closed day of two months ago.
        usage_at(&app, &tenant.id, "m-late", a, before + 25 * day, 256).await;
        records.push((a, before + 25 * day, 256));
        compare(&app, key, &records, &ranges, a, "late").await;

        // Each month's rows hold exactly its days' rows.
        let monthly: i64 = sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) FROM usage_monthly WHERE tenant_id = $1",
        )
        .bind(&tenant.id)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
        let daily: i64 = sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) FROM usage_daily WHERE tenant_id = $1",
        )
        .bind(&tenant.id)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
        assert_eq!(monthly, daily);
        assert_eq!(daily, 511, "every record is on a closed day");
    }
);

/// The grouped views of each range against the sums of `records` in it.
async fn compare(
    app: &TestApp,
    key: &str,
    records: &[(&str, i64, i64)],
    ranges: &[(i64, i64)],
    team_agent: &str,
    phase: &str,
) {
    let at = |ms: i64| Timestamp::from_millis(ms).to_string();
    for (from, to) in ranges {
        // `to` is exclusive, the API's inclusive: its last millisecond.
        let query = format!("from={}&to={}", at(*from), at(*to - 1));
        let expected = expected_totals(records, *from, *to, team_agent);
        assert_eq!(
            grouped_totals(app, key, &query).await,
            expected,
            "{phase}: {query}"
        );
    }
}

/// One usage record of `micros` for `agent` at `at`, as a proxy reports it.
async fn usage_at(app: &TestApp, tenant_id: &str, id: &str, agent: &str, at: i64, micros: i64) {
    let ack = expect_status(
        app.client
            .post(format!("{}/internal/v1/usage-batches", app.base))
            .bearer_auth(crate::helpers::SERVICE_TOKEN)
            .json(&json!({ "batch_id": id, "records": [{
                "record_id": id, "tenant_id": tenant_id, "agent_id": agent,
                "model_provider": "openai", "model_name": "gpt-4o", "input_tokens": 1,
                "output_tokens": 1, "cost_usd": micros as f64 / 1e6,
                "recorded_at": Timestamp::from_millis(at).to_string(),
            }] }))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(ack["data"]["accepted"], json!(1), "{ack}");
}

/// What [`grouped_totals`] should find for the records in `[from, to)` (whole hours):
/// agents most expensive first, then teams (`team_agent` is in team `night`).
fn expected_totals(records: &[(&str, i64, i64)], from: i64, to: i64, team_agent: &str) -> Grouped {
    let mut agents: Vec<(Value, i64)> = Vec::new();
    let mut teams: Vec<(Value, i64)> = Vec::new();
    for (agent, at, micros) in records {
        if *at < from - from.rem_euclid(HOUR) || *at >= to {
            continue;
        }
        let team = match *agent == team_agent {
            true => json!("night"),
            false => Value::Null,
        };
        for (list, name) in [(&mut agents, json!(agent)), (&mut teams, team)] {
            match list.iter_mut().find(|(key, _)| *key == name) {
                Some((_, sum)) => *sum += micros,
                None => list.push((name, *micros)),
            }
        }
    }
    for list in [&mut agents, &mut teams] {
        list.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    }
    (agents, teams)
}
