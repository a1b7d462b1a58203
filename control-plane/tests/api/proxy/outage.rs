//! The control plane goes away: the proxy keeps enforcing its last state, queues usage,
//! and once the control plane is back every record arrives exactly once.

use std::time::Duration;

use serde_json::json;

use super::{eventually, simple_chat, stays, MockProvider, TestProxy};
use crate::helpers::expect_status;

async fn total_requests(app: &crate::helpers::TestApp, key: &str) -> Option<i64> {
    let body = expect_status(app.get("/cost/summary", key).await, 200).await;
    body["data"]["total_requests"].as_i64()
}

db_test!(
    usage_survives_a_control_plane_outage_without_loss_or_double_count,
    |app| {
        let mut app = app;
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "outage" }))
            .await;
        assert_eq!(
            proxy
                .chat(&raw_key, simple_chat("gpt-4o-mini"))
                .await
                .status(),
            200
        );
        let key = tenant.admin_key.clone();
        eventually(Duration::from_secs(10), || async {
            (total_requests(&app, &key).await == Some(1)).then_some(())
        })
        .await;

        // Down: the proxy still serves from its last state; usage waits in its queue.
        app.stop().await;
        for _ in 0..5 {
            let response = proxy.chat(&raw_key, simple_chat("gpt-4o-mini")).await;
            assert_eq!(response.status(), 200);
        }
        // Until the proxy has failed to flush at least twice.
        eventually(Duration::from_secs(10), || async {
            let metrics = proxy.metrics().await;
            let series = "warden_proxy_usage_flush_failures_total";
            let failures = crate::helpers::metric(&metrics, series).unwrap_or(0.0);
            (failures >= 2.0).then_some(())
        })
        .await;

        // Back: the queued records arrive, each once.
        app.start_again().await;
        eventually(Duration::from_secs(20), || async {
            (total_requests(&app, &key).await == Some(6)).then_some(())
        })
        .await;
        // And stay at six: no retry counted twice.
        stays(Duration::from_millis(500), "six requests", || async {
            total_requests(&app, &key).await == Some(6)
        })
        .await;
        assert_eq!(app.count_rows("usage_records", &tenant.id).await, 6);

        // The proxy follows the control plane again: a block takes effect.
        let agent = expect_status(app.get("/proxy-keys", &key).await, 200).await["data"][0]
            ["agent_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let blocked = app
            .post(&format!("/agents/{agent}/block"), &key, json!({}))
            .await;
        assert_eq!(blocked.status().as_u16(), 204);
        eventually(Duration::from_secs(15), || {
            let request = proxy.chat(&raw_key, simple_chat("gpt-4o-mini"));
            async move { (request.await.status() == 403).then_some(()) }
        })
        .await;
    }
);
