//! What the proxies send about a tenant that no longer exists: dropped per record,
//! counted and logged, never a 5xx that would hold every later batch back.

use serde_json::{json, Value};
use warden_shared::timestamp::Timestamp;

use crate::helpers::{
    expect_status, metric, platform_key, post_decision_batch, TestApp, SERVICE_TOKEN,
};

async fn ingest(app: &TestApp, body: &Value) -> reqwest::Response {
    app.post_internal("usage-batches", SERVICE_TOKEN, body)
        .await
}

fn results() -> Value {
    json!([{ "policy_id": 1, "policy_name": "allowlist", "policy_type": "model_allowlist",
             "result": "pass", "reason": null }])
}

/// A record as the proxy sends it: with a policy decision, or a tool call.
fn record(id: &str, tenant: &str, agent: &str, at: &str) -> Value {
    json!({
        "record_id": id, "tenant_id": tenant, "agent_id": agent, "model_provider": "openai",
        "model_name": "gpt-4o", "request_type": "chat.completions", "input_tokens": 100,
        "output_tokens": 10, "recorded_at": at,
        "evaluation": { "model": "gpt-4o", "evaluated_at": at, "results": 0 },
    })
}

fn tool_call(id: &str, tenant: &str, agent: &str, at: &str) -> Value {
    json!({
        "record_id": id, "tenant_id": tenant, "agent_id": agent, "model_provider": "mcp",
        "model_name": "files__read", "request_type": "mcp.tools_call", "input_tokens": 0,
        "output_tokens": 0, "recorded_at": at,
        "tool_call": { "server_id": "mcp_1", "server": "files", "tool": "read",
                       "outcome": "refused", "decision": "tool_not_approved", "latency_ms": 3 },
    })
}

/// The control plane's count of dropped records of `kind`.
fn dropped(metrics: &str, kind: &str) -> f64 {
    let series =
        format!("warden_ingest_records_dropped_total{{kind=\"{kind}\",reason=\"tenant_deleted\"}}");
    metric(metrics, &series).unwrap_or(0.0)
}

db_test!(
    a_deleted_tenants_records_are_dropped_and_the_rest_lands,
    |app| {
        let gone = app.new_tenant("starter").await;
        let kept = app.new_tenant("starter").await;
        let gone_agent = app
            .register_agent(&gone.admin_key, json!({ "name": "doomed" }))
            .await;
        let kept_agent = app
            .register_agent(&kept.admin_key, json!({ "name": "steady" }))
            .await;
        let (gone_agent, kept_agent) = (
            gone_agent["id"].as_str().unwrap(),
            kept_agent["id"].as_str().unwrap(),
        );
        expect_status(
            app.delete(&format!("/admin/tenants/{}", gone.id), platform_key())
                .await,
            204,
        )
        .await;
        let at = Timestamp::from_millis(app.clock.now().as_millis()).to_string();
        let before = app.metrics().await;
        let batch = json!({
            "batch_id": format!("edges-{}", kept.id),
            "result_lists": [results()],
            "records": [
                record("r-gone", &gone.id, gone_agent, &at),
                tool_call("t-gone", &gone.id, gone_agent, &at),
                record("r-kept", &kept.id, kept_agent, &at),
                tool_call("t-kept", &kept.id, kept_agent, &at),
            ],
        });
        let ack = expect_status(ingest(&app, &batch).await, 200).await;
        assert_eq!(ack["data"]["accepted"], json!(2), "{ack}");
        assert_eq!(ack["data"]["dropped"], json!(2), "{ack}");
        assert_eq!(ack["data"]["rejected"], json!(0), "{ack}");
        // Resent (a lost acknowledgement): the kept tenant's records count once.
        let again = expect_status(ingest(&app, &batch).await, 200).await;
        assert_eq!(again["data"]["duplicates"], json!(2), "{again}");
        assert_eq!(again["data"]["dropped"], json!(2), "{again}");
        assert_eq!(app.count_rows("usage_records", &kept.id).await, 1);
        assert_eq!(app.count_rows("tool_calls", &kept.id).await, 1);
        for table in [
            "usage_records",
            "tool_calls",
            "policy_result_sets",
            "audit_events",
        ] {
            assert_eq!(app.count_rows(table, &gone.id).await, 0, "{table}");
        }

        // The other reports: decisions (with an approval to queue) and a tool drift.
        let decision = |tenant: &str, agent: &str, request: &str| {
            json!({ "tenant_id": tenant, "evaluation": {
            "request_id": request, "agent_id": agent, "provider": "openai", "model": "gpt-4o",
            "evaluated_at": at, "results": results() },
            "approval": { "policy_id": 1, "request_context": {} } })
        };
        let batch = json!({ "batch_id": format!("edges-d-{}", kept.id), "decisions": [
        decision(&gone.id, gone_agent, "q-gone"),
        decision(&kept.id, kept_agent, "q-kept"),
    ] });
        let ack = expect_status(post_decision_batch(&app, &batch).await, 200).await;
        assert_eq!(ack["data"]["dropped"], json!(1), "{ack}");
        assert_eq!(ack["data"]["evaluations_written"], json!(1), "{ack}");
        let drift = app
            .client
            .post(format!("{}/internal/v1/mcp-tool-drifts", app.base))
            .bearer_auth(SERVICE_TOKEN)
            .json(
                &json!({ "tenant_id": gone.id, "server_id": "mcp_1", "tool": "read",
                       "fingerprint": "a".repeat(64) }),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(drift.status(), 204);

        let after = app.metrics().await;
        assert_eq!(dropped(&after, "usage") - dropped(&before, "usage"), 2.0);
        assert_eq!(
            dropped(&after, "tool_call") - dropped(&before, "tool_call"),
            2.0
        );
        assert_eq!(
            dropped(&after, "decision") - dropped(&before, "decision"),
            1.0
        );
        assert_eq!(
            dropped(&after, "tool_drift") - dropped(&before, "tool_drift"),
            1.0
        );
    }
);

db_test!(
    a_tenant_deleted_while_a_batch_writes_keeps_none_of_its_rows,
    |app| {
        use warden_control_plane::ledger::{record_batch, Outcome, UsageEntry, UsageSource};
        use warden_shared::registry::Provider;

        let tenant = app.new_tenant("starter").await;
        let agent = app
            .register_agent(&tenant.admin_key, json!({ "name": "busy" }))
            .await;
        let now = app.clock.now();
        let entry = UsageEntry {
            tenant_id: &tenant.id,
            agent_id: agent["id"].as_str().unwrap(),
            provider: Provider::Openai,
            model_name: "gpt-4o",
            request_type: "chat.completions",
            input_tokens: 100,
            output_tokens: 10,
            cost_micros: Some(1_000),
            recorded_at: now,
            source: UsageSource::Proxy,
            idempotency_key: Some("r-race"),
            api_key_id: None,
            decision: None,
        };
        // A batch has written its rows and not yet committed when the tenant's deletion
        // begins: the deletion waits for it, then takes its rows too. (The rows written
        // per record have no foreign key to the tenant: the batch's lock on the tenant
        // is what stops the deletion from missing them.)
        let mut batch = app.db.begin_write().await.unwrap();
        let recorded = record_batch(&mut batch, "b-race", &[entry], now)
            .await
            .unwrap();
        assert!(matches!(recorded.outcomes[0], Outcome::Recorded { .. }));
        let (db, tenant_id) = (app.db.clone(), tenant.id.clone());
        let deletion = tokio::spawn(async move {
            let mut tx = db.begin_write().await.unwrap();
            assert!(
                warden_control_plane::tenancy::delete_tenant_rows(&mut tx, &tenant_id)
                    .await
                    .unwrap()
            );
            tx.commit().await.unwrap();
        });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!deletion.is_finished(), "the deletion waits for the batch");
        batch.commit().await.unwrap();
        deletion.await.unwrap();
        for table in [
            "usage_records",
            "usage_hourly",
            "usage_model_hourly",
            "tenants",
        ] {
            assert_eq!(app.count_rows(table, &tenant.id).await, 0, "{table}");
        }
    }
);
