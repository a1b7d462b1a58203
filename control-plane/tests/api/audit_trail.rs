//! The audit trail: listed with filters, exported as CSV and JSON, and a hash chain whose
//! tampering (an altered field, a deleted, inserted or reordered event) is detected, by
//! the endpoint and by `warden audit verify`.

use std::process::Command;

use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, Backend, TestApp, TestTenant};

/// Registers `names` as agents (one `agent.registered` event each) and returns their ids.
async fn register(app: &TestApp, tenant: &TestTenant, names: &[&str]) -> Vec<String> {
    let mut ids = Vec::new();
    for name in names {
        let agent = app
            .register_agent(&tenant.admin_key, json!({ "name": name }))
            .await;
        ids.push(agent["id"].as_str().unwrap().to_owned());
    }
    ids
}

async fn trail(app: &TestApp, key: &str, query: &str) -> Value {
    expect_status(app.get(&format!("/audit-trail{query}"), key).await, 200).await
}

async fn verify(app: &TestApp, key: &str) -> Value {
    expect_status(app.get("/audit-trail/verify", key).await, 200).await["data"].clone()
}

db_test!(
    the_trail_lists_a_tenants_changes_newest_first_with_filters,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let other = app.new_tenant("starter").await;
        let agents = register(&app, &tenant, &["first", "second", "third"]).await;
        register(&app, &other, &["elsewhere"]).await;
        let blocked = app
            .post(
                &format!("/agents/{}/block", agents[1]),
                &tenant.admin_key,
                json!({ "reason": "audit" }),
            )
            .await;
        assert_eq!(blocked.status(), 204);

        let all = trail(&app, &tenant.admin_key, "?limit=100").await;
        let events = all["data"].as_array().unwrap();
        let types: Vec<&str> = events
            .iter()
            .map(|e| e["event_type"].as_str().unwrap())
            .collect();
        assert_eq!(types[0], "agent.blocked", "newest first: {types:?}");
        assert_eq!(
            types.iter().filter(|t| **t == "agent.registered").count(),
            3
        );
        assert!(events.iter().all(|e| e["tenant_id"] == tenant.id.as_str()));
        let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] == w[1] + 1), "{seqs:?}");
        let newest = &events[0];
        assert_eq!(newest["target_id"], agents[1].as_str());
        assert_eq!(newest["target_type"], "agent");
        assert_eq!(newest["details"]["reason"], "audit");
        assert_eq!(newest["actor_type"], "api_key");
        assert!(newest["actor"]
            .as_str()
            .unwrap()
            .starts_with("api_key:key_"));
        assert_eq!(newest["hash"].as_str().unwrap().len(), 64);
        assert_eq!(events[1]["hash"], newest["prev_hash"]);
        assert_eq!(all["meta"]["total"], events.len());

        let registered = trail(
            &app,
            &tenant.admin_key,
            "?event_type=agent.registered&limit=2",
        )
        .await;
        assert_eq!(registered["meta"]["total"], 3);
        assert_eq!(registered["data"].as_array().unwrap().len(), 2);
        assert_eq!(registered["data"][0]["target_id"], agents[2].as_str());
        let page_two = trail(
            &app,
            &tenant.admin_key,
            "?event_type=agent.registered&limit=2&page=2",
        )
        .await;
        assert_eq!(page_two["data"][0]["target_id"], agents[0].as_str());

        let one = trail(
            &app,
            &tenant.admin_key,
            &format!("?target_id={}", agents[1]),
        )
        .await;
        let one_types: Vec<&str> = one["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_type"].as_str().unwrap())
            .collect();
        assert_eq!(one_types, ["agent.blocked", "agent.registered"]);

        let now = app.clock.now().to_string();
        let future = trail(&app, &tenant.admin_key, "?from=2999-01-01").await;
        assert_eq!(future["meta"]["total"], 0);
        let past = trail(&app, &tenant.admin_key, &format!("?to={}", &now[..10])).await;
        assert_eq!(past["meta"]["total"], all["meta"]["total"]);
        for bad in [
            "?from=yesterday",
            "?from=2026-11-02&to=2026-11-01",
            "?limit=0",
            "?colour=red",
        ] {
            let response = app
                .get(&format!("/audit-trail{bad}"), &tenant.admin_key)
                .await;
            expect_error(response, 422, "validation_failed").await;
        }

        // Another tenant's events are not there, whatever the filter.
        let foreign = trail(&app, &other.admin_key, &format!("?target_id={}", agents[1])).await;
        assert_eq!(foreign["meta"]["total"], 0);
        let reader = app.key_with_scopes(&tenant, &["registry:read"]).await;
        let refused = app.get("/audit-trail", &reader).await;
        expect_error(refused, 403, "insufficient_scope").await;
    }
);

db_test!(the_export_streams_the_whole_trail_as_csv_and_json, |app| {
    let tenant = app.new_tenant("starter").await;
    // Commas, quotes and a would-be formula travel in the details.
    let names = [
        "plain",
        "with, comma",
        "with \"quotes\"",
        "=HYPERLINK(\"x\")",
    ];
    register(&app, &tenant, &names).await;
    // Past the export's pieces of 500 events: teams, which no plan limits.
    let more: Vec<String> = (0..1200).map(|i| format!("bulk-{i}")).collect();
    for chunk in more.chunks(100) {
        let futures = chunk
            .iter()
            .map(|name| app.post("/teams", &tenant.admin_key, json!({ "name": name })));
        for response in futures_util::future::join_all(futures).await {
            assert_eq!(response.status(), 201);
        }
    }

    let json_export = app
        .get("/audit-trail/export?format=json", &tenant.admin_key)
        .await;
    assert_eq!(json_export.status(), 200);
    let disposition = json_export.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        disposition.starts_with(&format!(
            "attachment; filename=\"audit-trail-{}-",
            tenant.id
        )) && disposition.ends_with(".json\""),
        "{disposition}"
    );
    let events: Vec<Value> = json_export.json().await.unwrap();
    let total = trail(&app, &tenant.admin_key, "").await["meta"]["total"]
        .as_i64()
        .unwrap();
    assert!(total > 1204, "{total}");
    assert_eq!(events.len() as i64, total, "every event");
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>(), "oldest first");

    let csv_export = app.get("/audit-trail/export", &tenant.admin_key).await;
    assert_eq!(csv_export.status(), 200);
    assert!(csv_export.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let text = csv_export.text().await.unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader.headers().unwrap().clone();
    assert_eq!(&headers[0], "id");
    assert_eq!(&headers[9], "details");
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len() as i64, total);
    for (row, event) in rows.iter().zip(&events) {
        assert_eq!(&row[0], event["id"].as_str().unwrap());
        assert_eq!(&row[11], event["hash"].as_str().unwrap());
        let details: Value = serde_json::from_str(&row[9]).unwrap();
        assert_eq!(details, event["details"]);
    }
    let names_in_csv: Vec<String> = rows
        .iter()
        .filter(|row| &row[3] == "agent.registered")
        .map(|row| {
            serde_json::from_str::<Value>(&row[9]).unwrap()["name"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(names_in_csv, names);

    let filtered = app
        .get(
            "/audit-trail/export?format=json&event_type=agent.deleted",
            &tenant.admin_key,
        )
        .await;
    assert_eq!(filtered.json::<Vec<Value>>().await.unwrap().len(), 0);
    let bad = app
        .get("/audit-trail/export?format=xml", &tenant.admin_key)
        .await;
    expect_error(bad, 422, "validation_failed").await;
    // Another tenant's export holds its own events only, whatever the filter.
    let other = app.new_tenant("starter").await;
    let target = events[5]["target_id"].as_str().unwrap().to_owned();
    let theirs: Vec<Value> = app
        .get(
            &format!("/audit-trail/export?format=json&target_id={target}"),
            &other.admin_key,
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(theirs.is_empty());
    let all_theirs: Vec<Value> = app
        .get("/audit-trail/export?format=json", &other.admin_key)
        .await
        .json()
        .await
        .unwrap();
    assert!(!all_theirs.is_empty());
    assert!(all_theirs
        .iter()
        .all(|e| e["tenant_id"] == other.id.as_str()));
});

/// A tenant with a verified chain of its creation's events and `n` agent registrations;
/// its events' ids by seq (`ids[i]` is at seq `i + 1`).
async fn chained_tenant(app: &TestApp, n: usize) -> (TestTenant, Vec<String>) {
    let tenant = app.new_tenant("starter").await;
    let names: Vec<String> = (0..n).map(|i| format!("agent-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    register(app, &tenant, &names).await;
    let verified = verify(app, &tenant.admin_key).await;
    assert_eq!(verified["valid"], true, "{verified}");
    let ids = sqlx::query_scalar("SELECT id FROM audit_events WHERE tenant_id = $1 ORDER BY seq")
        .bind(&tenant.id)
        .fetch_all(app.db.pool())
        .await
        .unwrap();
    (tenant, ids)
}

async fn execute(app: &TestApp, sql: &str, binds: &[&str]) {
    let mut query = sqlx::query(sql);
    for bind in binds {
        query = query.bind(*bind);
    }
    query.execute(app.db.pool()).await.unwrap();
}

/// The chain is reported broken at `seq` for `reason`.
async fn broken_at(app: &TestApp, tenant: &TestTenant, seq: i64, reason: &str) {
    let verified = verify(app, &tenant.admin_key).await;
    assert_eq!(verified["valid"], false, "{verified}");
    assert_eq!(verified["broken"]["seq"], seq, "{verified}");
    assert_eq!(verified["broken"]["reason"], reason, "{verified}");
}

db_test!(tampering_with_the_trail_is_detected, |app| {
    // An altered field.
    let (tenant, ids) = chained_tenant(&app, 5).await;
    execute(
        &app,
        "UPDATE audit_events SET details = '{\"name\":\"forged\"}' WHERE id = $1",
        &[&ids[2]],
    )
    .await;
    broken_at(&app, &tenant, 3, "hash_mismatch").await;

    // An altered actor, timestamp even.
    let (tenant, ids) = chained_tenant(&app, 3).await;
    execute(
        &app,
        "UPDATE audit_events SET actor = 'system' WHERE id = $1",
        &[&ids[0]],
    )
    .await;
    broken_at(&app, &tenant, 1, "hash_mismatch").await;

    // A deleted event in the middle, and one deleted from the end.
    let (tenant, ids) = chained_tenant(&app, 5).await;
    execute(&app, "DELETE FROM audit_events WHERE id = $1", &[&ids[1]]).await;
    broken_at(&app, &tenant, 2, "missing_event").await;
    let (tenant, ids) = chained_tenant(&app, 4).await;
    execute(
        &app,
        "DELETE FROM audit_events WHERE id = $1",
        &[ids.last().unwrap()],
    )
    .await;
    broken_at(&app, &tenant, ids.len() as i64, "head_mismatch").await;

    // Two events swapped: their positions exchanged.
    let (tenant, ids) = chained_tenant(&app, 5).await;
    execute(
        &app,
        "UPDATE audit_events SET seq = -1 WHERE id = $1",
        &[&ids[1]],
    )
    .await;
    execute(
        &app,
        "UPDATE audit_events SET seq = 2 WHERE id = $1",
        &[&ids[2]],
    )
    .await;
    execute(
        &app,
        "UPDATE audit_events SET seq = 3 WHERE id = $1",
        &[&ids[1]],
    )
    .await;
    broken_at(&app, &tenant, 2, "hash_mismatch").await;

    // An event inserted between two others, the later ones moved up to make room.
    let (tenant, ids) = chained_tenant(&app, 4).await;
    for id in ids[2..].iter().rev() {
        execute(
            &app,
            "UPDATE audit_events SET seq = seq + 1 WHERE id = $1",
            &[id],
        )
        .await;
    }
    execute(
        &app,
        "INSERT INTO audit_events (id, tenant_id, event_type, actor, target_id, target_type, \
         details, occurred_at, seq, prev_hash, hash) \
         SELECT 'evt_forged', tenant_id, 'agent.deleted', actor, target_id, target_type, \
         details, occurred_at, 3, hash, hash FROM audit_events WHERE id = $1",
        &[&ids[1]],
    )
    .await;
    broken_at(&app, &tenant, 3, "hash_mismatch").await;

    // Each tenant's chain is its own: the others stay intact.
    let (untouched, ids) = chained_tenant(&app, 2).await;
    let verified = verify(&app, &untouched.admin_key).await;
    assert_eq!(verified["events_checked"], ids.len());
    assert_eq!(verified["head"]["seq"], ids.len());
});

db_test!(concurrent_writers_append_one_unbroken_chain, |app| {
    let tenant = app.new_tenant("starter").await;
    let before = verify(&app, &tenant.admin_key).await["events_checked"]
        .as_i64()
        .unwrap();
    let writes = (0..40).map(|i| {
        app.post(
            "/teams",
            &tenant.admin_key,
            json!({ "name": format!("racer-{i}") }),
        )
    });
    for response in futures_util::future::join_all(writes).await {
        assert_eq!(response.status(), 201);
    }
    let verified = verify(&app, &tenant.admin_key).await;
    assert_eq!(verified["valid"], true, "{verified}");
    assert_eq!(verified["events_checked"], before + 40);
});

/// Two replicas on one PostgreSQL database append to one tenant's chain at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_append_one_unbroken_chain() {
    let one = TestApp::spawn_with(Backend::Postgres, |_| {}).await;
    let two = TestApp::spawn_with(Backend::Postgres, |_| {}).await;
    let tenant = one.new_tenant("starter").await;
    let before = verify(&one, &tenant.admin_key).await["events_checked"]
        .as_i64()
        .unwrap();
    let writes = (0..40).map(|i| {
        let app = if i % 2 == 0 { &one } else { &two };
        app.post(
            "/teams",
            &tenant.admin_key,
            json!({ "name": format!("replica-{i}") }),
        )
    });
    for response in futures_util::future::join_all(writes).await {
        assert_eq!(response.status(), 201);
    }
    let verified = verify(&two, &tenant.admin_key).await;
    assert_eq!(verified["valid"], true, "{verified}");
    assert_eq!(verified["events_checked"], before + 40);
}

/// `warden audit verify` reads the database itself: intact, then broken after a row is
/// altered, with a failing exit status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_verifies_every_chain_and_fails_on_a_broken_one() {
    let app = TestApp::spawn_with(Backend::Sqlite, |_| {}).await;
    let (tenant, ids) = chained_tenant(&app, 3).await;
    let run = |tenant: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
        command
            .args(["audit", "verify"])
            .env("WARDEN_DATABASE_URL", app.database_url());
        if let Some(tenant) = tenant {
            command.args(["--tenant", tenant]);
        }
        command.output().unwrap()
    };
    let intact = run(None);
    let out = String::from_utf8_lossy(&intact.stdout).into_owned();
    assert!(intact.status.success(), "{out}");
    assert!(
        out.contains(&format!("{}: intact, {} events", tenant.id, ids.len())),
        "{out}"
    );

    execute(
        &app,
        "UPDATE audit_events SET target_id = 'agt_other' WHERE id = $1",
        &[&ids[1]],
    )
    .await;
    let broken = run(Some(&tenant.id));
    let out = String::from_utf8_lossy(&broken.stdout).into_owned();
    assert!(!broken.status.success(), "{out}");
    assert!(
        out.contains(&format!("BROKEN at seq 2 ({})", ids[1])),
        "{out}"
    );
    assert!(out.contains("hash_mismatch"), "{out}");
}

db_test!(
    a_runaway_agent_cannot_flood_the_trail_with_violations,
    |app| {
        use crate::proxy::{eventually, simple_chat, MockProvider, TestProxy};
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "runaway" }))
            .await;
        let policy = crate::helpers::create_policy(
            &app,
            &tenant.admin_key,
            json!({ "name": "no openai", "policy_type": "block_provider",
                "config": { "providers": ["openai"] } }),
        )
        .await;
        let policy_id = policy["id"].to_string();
        for _ in 0..20 {
            let refused = proxy.chat(&key, simple_chat("gpt-4o-mini")).await;
            assert_eq!(refused.status(), 403);
        }
        let query = format!("?event_type=policy.violated&target_id={policy_id}");
        let counts = |trail: Value| -> Vec<i64> {
            trail["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["details"]["count"].as_i64().unwrap())
                .collect()
        };
        // Every refusal reaches the control plane (the evaluations list them all) ...
        eventually(std::time::Duration::from_secs(10), || async {
            let fails = expect_status(
                app.get("/policy-evaluations?result=fail", &tenant.admin_key)
                    .await,
                200,
            )
            .await;
            (fails["meta"]["total"] == 20).then_some(())
        })
        .await;
        // ... but the trail holds one event for the minute's first (two, should the burst
        // straddle a minute) ...
        let first = trail(&app, &tenant.admin_key, &query).await;
        let first_counts = counts(first.clone());
        assert!(first_counts == [1] || first_counts == [1, 1], "{first}");
        assert_eq!(first["data"][0]["actor"], "proxy");
        assert_eq!(first["data"][0]["details"]["policy_type"], "block_provider");
        // ... and one for the repeats once the minute is over: all 20 are accounted for.
        let later = app.clock.now().as_millis() + 3 * 60_000;
        warden_control_plane::api::policies::summarize_violations(&app.db, later, Some(&tenant.id))
            .await
            .unwrap();
        let total: i64 = counts(trail(&app, &tenant.admin_key, &query).await)
            .iter()
            .sum();
        assert_eq!(total, 20);
        let verified = verify(&app, &tenant.admin_key).await;
        assert_eq!(verified["valid"], true, "{verified}");
    }
);

db_test!(
    a_filter_matching_very_many_events_counts_to_a_floor,
    |app| {
        let tenant = app.new_tenant("starter").await;
        // 10,001 events of one type, written straight to the table (a count ignores the chain).
        for batch in 0..21 {
            let rows: Vec<String> = (0..500)
            .map(|i| format!("('evt_bulk{batch:04}{i:04}', $1, 'bulk.test', 'system', 't', 'x', '{{}}', 1)"))
            .collect();
            let sql = format!(
            "INSERT INTO audit_events (id, tenant_id, event_type, actor, target_id, target_type, \
             details, occurred_at) VALUES {}",
            rows.join(", ")
        );
            sqlx::query(&sql)
                .bind(&tenant.id)
                .execute(app.db.pool())
                .await
                .unwrap();
        }
        let many = trail(&app, &tenant.admin_key, "?event_type=bulk.test").await;
        assert_eq!(many["meta"]["total"], 10_000);
        assert_eq!(many["meta"]["total_is_lower_bound"], true);
        let few = trail(&app, &tenant.admin_key, "?event_type=team.created").await;
        assert!(few["meta"].get("total_is_lower_bound").is_none(), "{few}");
    }
);

db_test!(events_from_before_the_chain_join_it_at_start, |app| {
    let mut app = app;
    let tenant = app.new_tenant("starter").await;
    let before = verify(&app, &tenant.admin_key).await["events_checked"]
        .as_i64()
        .unwrap();
    // Two events as an older Warden wrote them: no seq, no hashes.
    for (i, event_type) in ["agent.registered", "agent.updated"].iter().enumerate() {
        sqlx::query(
            "INSERT INTO audit_events (id, tenant_id, event_type, actor, target_id, target_type, \
             details, occurred_at) VALUES ($1, $2, $3, 'system', 'agt_old', 'agent', '{}', $4)",
        )
        .bind(format!("evt_old{i}"))
        .bind(&tenant.id)
        .bind(*event_type)
        .bind(crate::helpers::now_ms() + i as i64)
        .execute(app.db.pool())
        .await
        .unwrap();
    }
    let broken = verify(&app, &tenant.admin_key).await;
    assert_eq!(broken["valid"], false, "{broken}");
    app.stop().await;
    app.start_again().await;
    let verified = verify(&app, &tenant.admin_key).await;
    assert_eq!(verified["valid"], true, "{verified}");
    assert_eq!(verified["events_checked"], before + 2);
});
