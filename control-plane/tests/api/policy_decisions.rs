//! The proxies' decision reports (`/internal/v1/policy-decisions`): evaluation records
//! written once per request and policy, item errors, violations audited once.

use serde_json::{json, Value};

use crate::helpers::{expect_status, report_decisions};

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
        let fails = expect_status(app.get("/policy-evaluations?result=fail", key).await, 200).await;
        assert_eq!(fails["meta"]["total"], json!(10));
        assert_eq!(
            app.audit_events(&tenant.id, "1")
                .await
                .iter()
                .filter(|e| *e == "policy.violated")
                .count(),
            10
        );
        // The same batch again (a retried flush) writes nothing and audits nothing.
        let again = send().await;
        assert_eq!(again["evaluations_written"], json!(0), "{again}");
        let all = expect_status(app.get("/policy-evaluations", key).await, 200).await;
        assert_eq!(all["meta"]["total"], json!(3 * 995));
        assert_eq!(app.audit_events(&tenant.id, "1").await.len(), 10);
    }
);
