//! The proxies' decision reports (`/internal/v1/policy-decisions`): evaluation records
//! written once per request and policy, item errors, violations audited once.

use serde_json::{json, Value};

use crate::helpers::{expect_status, post_decision_batch, report_decisions, TestApp};

/// How many result sets the tenant's decisions share.
async fn result_sets(app: &TestApp, tenant_id: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM policy_result_sets WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

db_test!(
    a_full_batch_of_decisions_is_written_once_with_item_errors,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let agent = app.register_agent(key, json!({ "name": "busy" })).await;
        let agent_id = agent["id"].as_str().unwrap();
        let results = |request: usize| {
            let outcome = if request % 100 == 0 { "fail" } else { "pass" };
            json!([
                { "policy_id": 1, "policy_name": "one", "policy_type": "model_allowlist", "result": outcome, "reason": null },
                { "policy_id": 2, "policy_name": "two", "policy_type": "rate_limit", "result": "pass", "reason": null },
                { "policy_id": 3, "policy_name": "three", "policy_type": "require_approval", "result": "skip", "reason": "the request does not match" },
            ])
        };
        // 1,000 decisions (3,000 rows, many statements on either database); every 250th names
        // no agent of the tenant and one repeats an earlier request.
        let decisions: Vec<Value> = (0..1000)
        .map(|i| {
            let agent = if i % 250 == 7 { "agt_01AAAAAAAAAAAAAAAAAAAAAAAA" } else { agent_id };
            let request = if i == 999 { 0 } else { i };
            json!({ "tenant_id": tenant.id, "evaluation": {
                "request_id": format!("req-{request}"), "agent_id": agent, "provider": "openai",
                "model": "gpt-4o", "evaluated_at": "2026-11-23T10:00:00Z", "results": results(request) } })
        })
        .collect();
        let send = || report_decisions(&app, "big", &decisions);
        let ack = send().await;
        assert_eq!(
            ack["evaluations_written"],
            json!(3 * (1000 - 4 - 1)),
            "{ack}"
        );
        assert_eq!(ack["rejected"], json!(4));
        let indexes: Vec<i64> = ack["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["index"].as_i64().unwrap())
            .collect();
        assert_eq!(indexes, [7, 257, 507, 757]);
        let fails = expect_status(
            app.get("/policy-evaluations?result=fail&limit=100", key)
                .await,
            200,
        )
        .await;
        assert_eq!(fails["meta"]["total"], json!(10));
        let mut failed: Vec<&str> = fails["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["request_id"].as_str().unwrap())
            .collect();
        failed.sort_unstable();
        let mut expected: Vec<String> = (0..10).map(|i| format!("req-{}", i * 100)).collect();
        expected.sort_unstable();
        assert_eq!(failed, expected);
        // Decisions that came out alike share their results: two sets for 995 decisions.
        let sets = result_sets(&app, &tenant.id).await;
        assert_eq!(sets, 2);
        // Ten refusals by policy 1 of one agent in one minute: audited once at once ...
        let violations = || async {
            let events = expect_status(
                app.get("/audit-trail?event_type=policy.violated&target_id=1", key)
                    .await,
                200,
            )
            .await;
            events["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["details"]["count"].as_i64().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(violations().await, [1]);
        // ... and the nine repeats together once the minute is over.
        let later =
            warden_shared::timestamp::Timestamp::parse_rfc3339("2026-11-23T10:02:00Z").unwrap();
        let summarized = warden_control_plane::api::policies::summarize_violations(
            &app.db,
            later.as_millis(),
            Some(&tenant.id),
        )
        .await
        .unwrap();
        assert!(summarized >= 1);
        assert_eq!(violations().await, [9, 1]);
        // The same batch again (a retried flush) writes nothing and audits nothing.
        let again = send().await;
        assert_eq!(again["evaluations_written"], json!(0), "{again}");
        assert_eq!(violations().await, [9, 1]);
        let all = expect_status(app.get("/policy-evaluations?limit=6", key).await, 200).await;
        assert_eq!(all["meta"]["total"], json!(3 * 995));
        // Each record is its own: ids unique, results in the policies' order.
        let page = all["data"].as_array().unwrap();
        let ids: std::collections::HashSet<i64> =
            page.iter().map(|e| e["id"].as_i64().unwrap()).collect();
        assert_eq!(ids.len(), 6);
        let policies: Vec<i64> = page
            .iter()
            .map(|e| e["policy_id"].as_i64().unwrap())
            .collect();
        assert_eq!(policies, [1, 2, 3, 1, 2, 3]);
        // The ten refusals of one minute: the first and the summary of the nine others.
        assert_eq!(app.audit_events(&tenant.id, "1").await.len(), 2);
    }
);

db_test!(
    a_decision_with_malformed_results_is_refused_alone_naming_the_field,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let agent = app
            .register_agent(&tenant.admin_key, json!({ "name": "odd" }))
            .await;
        let decision = |request: &str, result: &str| {
            json!({ "tenant_id": tenant.id, "evaluation": {
                "request_id": request, "agent_id": agent["id"], "provider": "openai",
                "model": "gpt-4o", "evaluated_at": "2026-11-23T10:00:00Z",
                "results": [{ "policy_id": 1, "policy_name": "one",
                    "policy_type": "model_allowlist", "result": result, "reason": null }] } })
        };
        let ack = report_decisions(
            &app,
            "mixed",
            &[
                decision("a", "maybe"),
                decision("b", "pass"),
                decision("c", "maybe"),
            ],
        )
        .await;
        assert_eq!(ack["evaluations_written"], json!(1), "{ack}");
        let errors = ack["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 2, "{ack}");
        assert_eq!(errors[0]["index"], json!(0));
        assert_eq!(errors[1]["index"], json!(2));
        assert!(
            errors[0]
                .to_string()
                .contains("evaluation.results[0].result"),
            "{ack}"
        );
    }
);

db_test!(
    decisions_may_name_a_results_list_the_batch_sends_once,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let agent = app.register_agent(key, json!({ "name": "alike" })).await;
        let list = |outcome: &str| {
            json!([
                { "policy_id": 1, "policy_name": "one", "policy_type": "model_allowlist", "result": outcome, "reason": null },
                { "policy_id": 2, "policy_name": "two", "policy_type": "rate_limit", "result": "pass", "reason": null },
            ])
        };
        let decision = |request: &str, results: Value| {
            json!({ "tenant_id": tenant.id, "evaluation": {
                "request_id": request, "agent_id": agent["id"], "provider": "openai",
                "model": "gpt-4o", "evaluated_at": "2026-11-23T10:00:00Z", "results": results } })
        };
        let malformed = json!([{ "policy_id": 3, "policy_name": "", "policy_type": "rate_limit", "result": "pass" }]);
        let batch = json!({
            "batch_id": "shared",
            "result_lists": [list("pass"), list("fail"), malformed],
            "decisions": [
                decision("a", json!(0)),
                decision("b", json!(1)),
                decision("c", json!(0)),
                decision("d", json!(3)),
                decision("e", json!(2)),
                decision("f", list("pass")),
            ],
        });
        let ack = expect_status(post_decision_batch(&app, &batch).await, 200).await["data"].clone();
        // Four decisions of two results each; the one naming no list and the one naming
        // a malformed list are refused alone, each naming what is wrong.
        assert_eq!(ack["evaluations_written"], json!(8), "{ack}");
        let errors = ack["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 2, "{ack}");
        assert_eq!(errors[0]["index"], json!(3));
        assert!(
            errors[0]["message"]
                .as_str()
                .unwrap()
                .contains("no list 3 in result_lists"),
            "{ack}"
        );
        assert_eq!(errors[1]["index"], json!(4));
        assert_eq!(
            errors[1]["field"],
            json!("result_lists[2][0].policy_name"),
            "{ack}"
        );
        let fails = expect_status(app.get("/policy-evaluations?result=fail", key).await, 200).await;
        assert_eq!(fails["meta"]["total"], json!(1), "{fails}");
        assert_eq!(fails["data"][0]["request_id"], json!("b"));
        assert_eq!(fails["data"][0]["policy_name"], json!("one"));
        // A list sent once or written out is the same result set.
        let sets = result_sets(&app, &tenant.id).await;
        assert_eq!(sets, 2);
        // More lists than a batch may carry decisions is refused whole.
        let too_many = json!({ "batch_id": "lists", "result_lists": vec![list("pass"); 1001], "decisions": [] });
        let body = expect_status(post_decision_batch(&app, &too_many).await, 422).await;
        assert_eq!(
            body["error"]["details"]["field"],
            json!("result_lists"),
            "{body}"
        );
    }
);

db_test!(
    a_decision_batch_id_is_written_once_and_forgotten_after_a_week,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let agent = app
            .register_agent(&tenant.admin_key, json!({ "name": "refused" }))
            .await;
        // Batch ids are the platform's, shared by the tests of one PostgreSQL database:
        // this test's are its tenant's, and received a month back, so that forgetting
        // them by age touches no other test's.
        app.clock.advance(-30 * 86_400_000);
        let (first_id, second_id) = (format!("{}-1", tenant.id), format!("{}-2", tenant.id));
        let decision = |request: &str| {
            json!({ "tenant_id": tenant.id, "evaluation": {
                "request_id": request, "agent_id": agent["id"], "provider": "openai",
                "model": "gpt-4o", "evaluated_at": app.clock.now().to_string(),
                "results": [{ "policy_id": 1, "policy_name": "one",
                    "policy_type": "block_provider", "result": "fail", "reason": "blocked" }] } })
        };
        let batch = [decision("a"), decision("b")];
        let first = report_decisions(&app, &first_id, &batch).await;
        assert_eq!(first["evaluations_written"], json!(2), "{first}");
        // Resent within the week (a lost acknowledgement): nothing written.
        app.clock.advance(6 * 86_400_000);
        let again = report_decisions(&app, &first_id, &batch).await;
        assert_eq!(again["evaluations_written"], json!(0), "{again}");
        // Another batch id is another batch.
        let other = report_decisions(&app, &second_id, &[decision("c")]).await;
        assert_eq!(other["evaluations_written"], json!(1), "{other}");
        let kept = || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM policy_decision_batches WHERE batch_id IN ($1, $2)",
            )
            .bind(&first_id)
            .bind(&second_id)
            .fetch_one(app.db.pool())
            .await
            .unwrap()
        };
        assert_eq!(kept().await, 2);
        // A week after it arrived, the first id is forgotten; the second is kept.
        app.clock.advance(2 * 86_400_000);
        let before = app.clock.now().as_millis()
            - warden_control_plane::api::internal::BATCH_ID_RETENTION_MS;
        warden_control_plane::api::internal::forget_batches_before(&app.db, before)
            .await
            .unwrap();
        assert_eq!(kept().await, 1);
        let resent = report_decisions(&app, &first_id, &batch).await;
        assert_eq!(resent["evaluations_written"], json!(2), "{resent}");
    }
);

db_test!(pages_of_both_kinds_read_as_one_list_newest_first, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let mut agents = Vec::new();
    for name in ["one", "two"] {
        let agent = app.register_agent(key, json!({ "name": name })).await;
        agents.push(agent["id"].as_str().unwrap().to_owned());
    }
    // One decision in four fails the second policy.
    let results = |i: i64| {
        let second = if i % 4 == 1 { "fail" } else { "pass" };
        json!([
            { "policy_id": 1, "policy_name": "one", "policy_type": "model_allowlist", "result": "pass" },
            { "policy_id": 2, "policy_name": "two", "policy_type": "rate_limit", "result": second },
        ])
    };
    // Forwarded requests (decisions on usage records) and refused ones (decision
    // rows), interleaved in time, alternating agents in another rhythm.
    let start = app.clock.now().as_millis() - 3_600_000;
    let at =
        |i: i64| warden_shared::timestamp::Timestamp::from_millis(start + i * 1000).to_string();
    let (mut records, mut refused) = (Vec::new(), Vec::new());
    for i in 0..23_i64 {
        let agent = &agents[(i % 3 == 0) as usize];
        if i % 2 == 0 {
            records.push(json!({ "record_id": format!("rec-{i}"), "tenant_id": tenant.id,
                    "agent_id": agent, "model_provider": "openai", "model_name": "gpt-4o",
                    "input_tokens": 1, "output_tokens": 1, "recorded_at": at(i),
                    "evaluation": { "model": "gpt-4o", "evaluated_at": at(i), "results": results(i) } }));
        } else {
            refused.push(json!({ "tenant_id": tenant.id, "evaluation": {
                    "request_id": format!("ref-{i}"), "agent_id": agent, "provider": "openai",
                    "model": "gpt-4o", "evaluated_at": at(i), "results": results(i) } }));
        }
    }
    let ingested = app
        .client
        .post(format!("{}/internal/v1/usage-batches", app.base))
        .bearer_auth(crate::helpers::SERVICE_TOKEN)
        .json(&json!({ "batch_id": format!("pages-{}", tenant.id), "records": records }))
        .send()
        .await
        .unwrap();
    expect_status(ingested, 200).await;
    report_decisions(&app, &format!("pages-{}", tenant.id), &refused).await;

    // Each filter with the rows it must give, newest first, each decision's results in
    // the policies' order.
    let request = |i: i64| format!("{}-{i}", if i % 2 == 0 { "rec" } else { "ref" });
    let rows = |agent_only: bool, policies: &[i64], failing: bool| -> Vec<(String, i64)> {
        (0..23_i64)
            .rev()
            .filter(|i| !agent_only || i % 3 == 0)
            .flat_map(|i| {
                policies
                    .iter()
                    .filter(move |policy| !failing || (**policy == 2 && i % 4 == 1))
                    .map(move |policy| (request(i), *policy))
            })
            .collect()
    };
    let cases = [
        (String::new(), rows(false, &[1, 2], false)),
        (
            format!("&agent_id={}", agents[1]),
            rows(true, &[1, 2], false),
        ),
        ("&result=fail".to_owned(), rows(false, &[1, 2], true)),
        (
            "&policy_id=2&result=fail".to_owned(),
            rows(false, &[2], true),
        ),
        ("&policy_id=1".to_owned(), rows(false, &[1], false)),
        (
            format!("&policy_id=2&agent_id={}&result=fail", agents[1]),
            rows(true, &[2], true),
        ),
    ];
    for (filter, expected) in cases {
        let whole = expect_status(
            app.get(&format!("/policy-evaluations?limit=100{filter}"), key)
                .await,
            200,
        )
        .await;
        let whole: Vec<(String, i64)> = whole["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["request_id"].as_str().unwrap().to_owned(),
                    e["policy_id"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(whole, expected, "{filter}");
        // Every page of 3 (splitting decisions' results) is its slice of the whole.
        let mut paged = Vec::new();
        for page in 1.. {
            let answer = expect_status(
                app.get(
                    &format!("/policy-evaluations?limit=3&page={page}{filter}"),
                    key,
                )
                .await,
                200,
            )
            .await;
            assert_eq!(answer["meta"]["total"], json!(whole.len()), "{filter}");
            // Exact below the counting limit: no floor flag.
            assert_eq!(answer["meta"]["total_is_lower_bound"], Value::Null);
            let rows = answer["data"].as_array().unwrap().clone();
            if rows.is_empty() {
                break;
            }
            paged.extend(rows.iter().map(|e| {
                (
                    e["request_id"].as_str().unwrap().to_owned(),
                    e["policy_id"].as_i64().unwrap(),
                )
            }));
        }
        assert_eq!(paged, whole, "{filter}");
    }
});
