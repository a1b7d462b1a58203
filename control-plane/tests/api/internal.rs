//! The proxy's usage ingest: service-token only, idempotent by record id.

use serde_json::{json, Value};

use crate::helpers::{
    expect_error, expect_status, platform_key, report_decisions, TestApp, SERVICE_TOKEN,
};

async fn ingest(app: &TestApp, token: &str, body: &Value) -> reqwest::Response {
    app.post_internal("usage-batches", token, body).await
}

/// A batch acknowledgement's counts of new and already-seen records.
fn accepted_and_duplicates(answer: &Value) -> (Value, Value) {
    (
        answer["data"]["accepted"].clone(),
        answer["data"]["duplicates"].clone(),
    )
}

fn record(id: &str, tenant: &str, agent: &str, at: i64, cost: f64) -> Value {
    json!({
        "record_id": id, "tenant_id": tenant, "agent_id": agent, "model_provider": "openai",
        "model_name": "gpt-4o", "request_type": "chat.completions", "input_tokens": 100,
        "output_tokens": 10, "cost_usd": cost,
        "recorded_at": warden_shared::timestamp::Timestamp::from_millis(at).to_string(),
    })
}

db_test!(a_batch_sent_twice_counts_once, |app| {
    let tenant = app.new_tenant("starter").await;
    let agent = app
        .register_agent(&tenant.admin_key, json!({ "name": "proxied" }))
        .await;
    let agent = agent["id"].as_str().unwrap();
    let now = app.clock.now().as_millis();
    let two_hours_ago = now - 2 * 3_600_000;
    let batch = json!({
        "batch_id": "batch-1",
        "records": [
            record("r-1", &tenant.id, agent, now, 0.25),
            record("r-2", &tenant.id, agent, two_hours_ago, 0.5),
            record("r-3", &tenant.id, "agt_01AAAAAAAAAAAAAAAAAAAAAAAA", now, 1.0),
            { "record_id": "r-4" },
        ],
    });
    let first = expect_status(ingest(&app, SERVICE_TOKEN, &batch).await, 200).await;
    assert_eq!(first["data"]["batch_id"], json!("batch-1"));
    assert_eq!(first["data"]["accepted"], json!(2));
    assert_eq!(first["data"]["duplicates"], json!(0));
    assert_eq!(first["data"]["rejected"], json!(2));
    assert_eq!(first["data"]["errors"][0]["index"], json!(2));

    // The acknowledgement was lost; the proxy sends the batch again.
    let again = expect_status(ingest(&app, SERVICE_TOKEN, &batch).await, 200).await;
    assert_eq!(again["data"]["accepted"], json!(0));
    assert_eq!(again["data"]["duplicates"], json!(2));
    assert_eq!(app.count_rows("usage_records", &tenant.id).await, 2);
    let yesterday = warden_shared::timestamp::Timestamp::from_millis(now - 86_400_000).to_string();
    let since_yesterday = format!("/cost/summary?from={}", &yesterday[..10]);
    let summary = expect_status(app.get(&since_yesterday, &tenant.admin_key).await, 200).await;
    assert_eq!(summary["data"]["total_cost_usd"], json!(0.75));
    assert_eq!(summary["data"]["total_requests"], json!(2));

    // The record's own time decides its bucket.
    let today = &warden_shared::timestamp::Timestamp::from_millis(now).to_string()[..10];
    let series = expect_status(
        app.get(
            &format!("/cost/timeseries?granularity=hour&from={today}&to={today}"),
            &tenant.admin_key,
        )
        .await,
        200,
    )
    .await;
    let hour_of = |ms: i64| {
        warden_shared::timestamp::Timestamp::from_millis(ms - ms.rem_euclid(3_600_000)).to_string()
    };
    let points = series["data"].as_array().unwrap();
    let cost_at = |ms: i64| {
        points
            .iter()
            .find(|p| p["timestamp"] == json!(hour_of(ms)))
            .map(|p| p["cost_usd"].clone())
    };
    assert_eq!(cost_at(now), Some(json!(0.25)));
    if today == &warden_shared::timestamp::Timestamp::from_millis(two_hours_ago).to_string()[..10] {
        assert_eq!(cost_at(two_hours_ago), Some(json!(0.5)));
    }

    // The same record twice within one batch also counts once.
    let twice = json!({ "batch_id": "batch-3", "records": [
        record("r-6", &tenant.id, agent, now, 0.0625),
        record("r-6", &tenant.id, agent, now, 0.0625),
    ] });
    let answer = expect_status(ingest(&app, SERVICE_TOKEN, &twice).await, 200).await;
    assert_eq!(accepted_and_duplicates(&answer), (json!(1), json!(1)));
    assert_eq!(app.count_rows("usage_records", &tenant.id).await, 3);

    // A deleted agent's usage that the proxy already served still counts.
    expect_status(
        app.delete(&format!("/agents/{agent}"), &tenant.admin_key)
            .await,
        204,
    )
    .await;
    let late =
        json!({ "batch_id": "batch-2", "records": [record("r-5", &tenant.id, agent, now, 0.125)] });
    let answer = expect_status(ingest(&app, SERVICE_TOKEN, &late).await, 200).await;
    assert_eq!(answer["data"]["accepted"], json!(1));

    // A batch of seen and new records (a proxy that re-batched after a lost
    // acknowledgement): each is told apart, and only the new ones count.
    let mixed = json!({ "batch_id": "batch-4", "records": [
        record("r-7", &tenant.id, agent, now, 2.0),
        record("r-1", &tenant.id, agent, now, 0.25),
        record("r-8", &tenant.id, agent, now, 4.0),
        record("r-5", &tenant.id, agent, now, 0.125),
    ] });
    let answer = expect_status(ingest(&app, SERVICE_TOKEN, &mixed).await, 200).await;
    assert_eq!(
        accepted_and_duplicates(&answer),
        (json!(2), json!(2)),
        "{answer}"
    );
    assert_eq!(app.count_rows("usage_records", &tenant.id).await, 6);
    let summary = expect_status(app.get(&since_yesterday, &tenant.admin_key).await, 200).await;
    assert_eq!(summary["data"]["total_requests"], json!(6), "{summary}");
    assert_eq!(
        summary["data"]["total_cost_usd"],
        json!(6.9375),
        "{summary}"
    );
});

db_test!(only_the_service_token_reaches_internal_endpoints, |app| {
    let tenant = app.new_tenant("enterprise").await;
    let batch = json!({ "batch_id": "b", "records": [] });
    expect_error(
        ingest(&app, &tenant.admin_key, &batch).await,
        401,
        "invalid_credentials",
    )
    .await;
    expect_error(
        ingest(&app, platform_key(), &batch).await,
        401,
        "invalid_credentials",
    )
    .await;
    expect_error(
        ingest(&app, "test-service-token-0123456789abcdeX", &batch).await,
        401,
        "invalid_credentials",
    )
    .await;
    let response = app
        .client
        .post(format!("{}/internal/v1/usage-batches", app.base))
        .json(&batch)
        .send()
        .await
        .unwrap();
    expect_error(response, 401, "missing_credentials").await;
    let too_many: Vec<Value> = (0..1001)
        .map(|i| json!({ "record_id": i.to_string() }))
        .collect();
    expect_error(
        ingest(
            &app,
            SERVICE_TOKEN,
            &json!({ "batch_id": "b", "records": too_many }),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
    let future = record(
        "f",
        &tenant.id,
        "agt_01AAAAAAAAAAAAAAAAAAAAAAAA",
        app.clock.now().as_millis() + 3_600_000,
        1.0,
    );
    let answer = expect_status(
        ingest(
            &app,
            SERVICE_TOKEN,
            &json!({ "batch_id": "b", "records": [future] }),
        )
        .await,
        200,
    )
    .await;
    assert_eq!(answer["data"]["errors"][0]["field"], json!("recorded_at"));
});

db_test!(record_ids_are_unique_per_tenant_not_globally, |app| {
    // Two proxies' tenants may pick the same record id; one batch carries both.
    let (first, second) = (
        app.new_tenant("starter").await,
        app.new_tenant("starter").await,
    );
    let mut agents = Vec::new();
    for tenant in [&first, &second] {
        let agent = app
            .register_agent(&tenant.admin_key, json!({ "name": "proxied" }))
            .await;
        agents.push(agent["id"].as_str().unwrap().to_owned());
    }
    let now = app.clock.now().as_millis();
    let batch = json!({
        "batch_id": "shared-ids",
        "records": [
            record("same-id", &first.id, &agents[0], now, 0.5),
            record("same-id", &second.id, &agents[1], now, 0.25),
        ],
    });
    let answer = expect_status(ingest(&app, SERVICE_TOKEN, &batch).await, 200).await;
    assert_eq!(answer["data"]["accepted"], json!(2), "{answer}");
    let again = expect_status(ingest(&app, SERVICE_TOKEN, &batch).await, 200).await;
    assert_eq!(again["data"]["duplicates"], json!(2), "{again}");
    assert_eq!(app.count_rows("usage_records", &first.id).await, 1);
    assert_eq!(app.count_rows("usage_records", &second.id).await, 1);
});

db_test!(concurrent_batches_over_the_same_rollups_all_land, |app| {
    // Batches touching the same rollup rows in different orders must not deadlock.
    let tenant = app.new_tenant("enterprise").await;
    let mut agents = Vec::new();
    for i in 0..20 {
        let agent = app
            .register_agent(&tenant.admin_key, json!({ "name": format!("busy-{i}") }))
            .await;
        agents.push(agent["id"].as_str().unwrap().to_owned());
    }
    let now = app.clock.now().as_millis();
    let mut sends = Vec::new();
    for batch in 0..8 {
        let mut records: Vec<Value> = (0..200)
            .map(|i| {
                let agent = &agents[(i * 7 + batch * 3) % agents.len()];
                record(
                    &format!("c{batch}-{i}"),
                    &tenant.id,
                    agent,
                    now - (i as i64 % 3) * 3_600_000,
                    0.001,
                )
            })
            .collect();
        if batch % 2 == 1 {
            records.reverse();
        }
        let body = json!({ "batch_id": format!("concurrent-{batch}"), "records": records });
        let app = &app;
        sends.push(async move { ingest(app, SERVICE_TOKEN, &body).await.status().as_u16() });
    }
    let statuses = futures_util::future::join_all(sends).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(app.count_rows("usage_records", &tenant.id).await, 1600);
});

db_test!(only_keys_with_a_budget_have_their_spend_tracked, |app| {
    let tenant = app.new_tenant("starter").await;
    let mut keys = Vec::new();
    for body in [
        json!({ "developer_label": "capped", "budget_limit_usd": 10 }),
        json!({ "developer_label": "uncapped" }),
    ] {
        let created =
            expect_status(app.post("/proxy-keys", &tenant.admin_key, body).await, 201).await;
        keys.push((
            created["data"]["api_key_id"].as_str().unwrap().to_owned(),
            created["data"]["agent_id"].as_str().unwrap().to_owned(),
        ));
    }
    let now = app.clock.now().as_millis();
    let records: Vec<Value> = keys
        .iter()
        .enumerate()
        .map(|(i, (key, agent))| {
            let mut record = record(&format!("k-{i}"), &tenant.id, agent, now, 0.5);
            record["api_key_id"] = json!(key);
            record
        })
        .collect();
    let ack = expect_status(
        ingest(
            &app,
            SERVICE_TOKEN,
            &json!({ "batch_id": "keys", "records": records }),
        )
        .await,
        200,
    )
    .await;
    assert_eq!(ack["data"]["accepted"], json!(2), "{ack}");
    let scopes: Vec<&str> = ack["data"]["spend"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["scope"].as_str().unwrap())
        .collect();
    assert_eq!(scopes, [format!("key:{}", keys[0].0)], "{ack}");
    assert_eq!(ack["data"]["spend"][0]["cost_micros"], json!(500_000));
});

db_test!(
    a_records_decision_is_written_with_it_once_and_a_bad_one_refuses_it_alone,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let agent = app.register_agent(key, json!({ "name": "governed" })).await;
        let agent = agent["id"].as_str().unwrap();
        let now = app.clock.now().as_millis();
        let at = warden_shared::timestamp::Timestamp::from_millis(now).to_string();
        let list = |outcome: &str| {
            json!([
                { "policy_id": 1, "policy_name": "allowlist", "policy_type": "model_allowlist", "result": "pass", "reason": null },
                { "policy_id": 2, "policy_name": "review", "policy_type": "require_human_review", "result": outcome, "reason": "flagged" },
            ])
        };
        let governed = |id: &str, results: Value| {
            let mut record = record(id, &tenant.id, agent, now, 0.1);
            record["evaluation"] =
                json!({ "model": "gpt-4o-alias", "evaluated_at": at, "results": results });
            record
        };
        let batch = json!({
            "batch_id": "governed-1",
            "result_lists": [list("pass"), list("fail")],
            "records": [
                governed("r-1", json!(0)),
                governed("r-2", json!(1)),
                record("r-3", &tenant.id, agent, now, 0.1),
                governed("r-4", json!(7)),
                governed("r-5", list("pass")),
            ],
        });
        let first = expect_status(ingest(&app, SERVICE_TOKEN, &batch).await, 200).await;
        // The record naming a list the batch lacks is refused alone, usage and all.
        assert_eq!(first["data"]["accepted"], json!(4), "{first}");
        assert_eq!(first["data"]["errors"][0]["index"], json!(3), "{first}");
        assert_eq!(
            first["data"]["errors"][0]["field"],
            json!("evaluation.results"),
            "{first}"
        );
        let evaluations = |query: &'static str| {
            let app = &app;
            async move { expect_status(app.get(query, key).await, 200).await }
        };
        let all = evaluations("/policy-evaluations?limit=100").await;
        assert_eq!(all["meta"]["total"], json!(6), "{all}");
        let mut requests: Vec<&str> = all["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["request_id"].as_str().unwrap())
            .collect();
        requests.sort_unstable();
        requests.dedup();
        // A decision's request id is its usage record's id; the model, the one asked for.
        assert_eq!(requests, ["r-1", "r-2", "r-5"]);
        assert_eq!(all["data"][0]["model"], json!("gpt-4o-alias"));
        assert_eq!(all["data"][0]["agent_id"], json!(agent));
        let fails = evaluations("/policy-evaluations?result=fail").await;
        assert_eq!(fails["meta"]["total"], json!(1), "{fails}");
        assert_eq!(fails["data"][0]["request_id"], json!("r-2"));
        // The failure of policy 2, audited once.
        let violations = || async {
            app.audit_events(&tenant.id, "2")
                .await
                .iter()
                .filter(|e| *e == "policy.violated")
                .count()
        };
        assert_eq!(violations().await, 1);

        // Resent (a lost acknowledgement): the records are duplicates, and so are their
        // decisions and their audit events.
        let again = expect_status(ingest(&app, SERVICE_TOKEN, &batch).await, 200).await;
        assert_eq!(again["data"]["duplicates"], json!(4), "{again}");
        let all = evaluations("/policy-evaluations?limit=100").await;
        assert_eq!(all["meta"]["total"], json!(6), "{all}");
        assert_eq!(violations().await, 1);
    }
);

db_test!(
    forwarded_and_refused_decisions_list_as_one_newest_first,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let agent = |name: &'static str| {
            let app = &app;
            async move {
                let agent = app.register_agent(key, json!({ "name": name })).await;
                agent["id"].as_str().unwrap().to_owned()
            }
        };
        let (a, b) = (agent("first").await, agent("second").await);
        let now = app.clock.now().as_millis();
        let at = |ms: i64| warden_shared::timestamp::Timestamp::from_millis(now - ms).to_string();
        let results = |second: &str| {
            json!([
                { "policy_id": 1, "policy_name": "allowlist", "policy_type": "model_allowlist", "result": "pass", "reason": null },
                { "policy_id": 2, "policy_name": "cap", "policy_type": "rate_limit", "result": second, "reason": null },
            ])
        };
        // Forwarded: decisions on usage records, listed by when their answers ended.
        let forwarded = |id: &str, agent: &str, ended: i64, decided: i64, model: &str| {
            let mut record = record(id, &tenant.id, agent, now - ended, 0.1);
            record["evaluation"] =
                json!({ "model": model, "evaluated_at": at(decided), "results": results("pass") });
            record
        };
        let batch = json!({ "batch_id": "merged-usage", "records": [
            forwarded("u-old", &a, 3_000, 4_000, "gpt-4o"),
            forwarded("u-new", &b, 1_000, 1_500, "my-alias"),
        ] });
        let ack = expect_status(ingest(&app, SERVICE_TOKEN, &batch).await, 200).await;
        assert_eq!(ack["data"]["accepted"], json!(2), "{ack}");
        // Refused: decisions on their own, listed by when they were decided.
        let refused = |id: &str, agent: &str, decided: i64| {
            json!({ "tenant_id": tenant.id, "evaluation": {
                "request_id": id, "agent_id": agent, "provider": "openai", "model": "gpt-4o",
                "evaluated_at": at(decided), "results": results("fail") } })
        };
        report_decisions(
            &app,
            "merged-decisions",
            &[refused("d-mid", &a, 2_000), refused("d-newest", &b, 500)],
        )
        .await;

        let list = |query: String| {
            let app = &app;
            async move { expect_status(app.get(&query, key).await, 200).await }
        };
        let requests = |page: &Value| -> Vec<String> {
            page["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["request_id"].as_str().unwrap().to_owned())
                .collect()
        };
        let all = list("/policy-evaluations?limit=100".to_owned()).await;
        assert_eq!(all["meta"]["total"], json!(8), "{all}");
        assert_eq!(
            requests(&all),
            ["d-newest", "d-newest", "u-new", "u-new", "d-mid", "d-mid", "u-old", "u-old"]
        );
        let ids: std::collections::HashSet<i64> = all["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_i64().unwrap())
            .collect();
        assert_eq!(ids.len(), 8, "{all}");
        // A forwarded decision shows the model asked for and when it was decided.
        assert_eq!(all["data"][2]["model"], json!("my-alias"));
        assert_eq!(all["data"][2]["evaluated_at"], json!(at(1_500)));
        assert_eq!(all["data"][6]["model"], json!("gpt-4o"));
        assert_eq!(all["data"][6]["policy_id"], json!(1));
        assert_eq!(all["data"][7]["policy_id"], json!(2));
        // Pages of three walk the same list, each record once.
        let mut paged = Vec::new();
        for page in 1..=3 {
            let page = list(format!("/policy-evaluations?limit=3&page={page}")).await;
            assert_eq!(page["meta"]["total"], json!(8), "{page}");
            paged.extend(requests(&page));
        }
        assert_eq!(paged, requests(&all));
        // Filters apply to both kinds.
        let of_a = list(format!("/policy-evaluations?agent_id={a}")).await;
        assert_eq!(requests(&of_a), ["d-mid", "d-mid", "u-old", "u-old"]);
        assert_eq!(of_a["meta"]["total"], json!(4));
        let fails = list("/policy-evaluations?result=fail".to_owned()).await;
        assert_eq!(requests(&fails), ["d-newest", "d-mid"]);
        let second = list(format!(
            "/policy-evaluations?policy_id=2&agent_id={b}&result=pass"
        ))
        .await;
        assert_eq!(requests(&second), ["u-new"]);
        assert_eq!(second["meta"]["total"], json!(1));

        // The forwarded requests' decisions are columns of their usage records: only the
        // refused ones have rows of their own.
        let count = |sql: &'static str| {
            let app = &app;
            let tenant_id = tenant.id.clone();
            async move {
                sqlx::query_scalar::<_, i64>(sql)
                    .bind(tenant_id)
                    .fetch_one(app.db.pool())
                    .await
                    .unwrap()
            }
        };
        assert_eq!(
            count("SELECT COUNT(*) FROM policy_decisions WHERE tenant_id = $1").await,
            2
        );
        assert_eq!(
            count(
                "SELECT COUNT(*) FROM usage_records WHERE tenant_id = $1 \
                 AND decision_set_id IS NOT NULL AND requested_model IS NULL"
            )
            .await,
            1
        );
    }
);
