//! The proxy's `/metrics`, read by a Prometheus text-format parser after real traffic.

use std::collections::HashMap;
use std::time::Duration;

use openmetrics_parser::{MetricNumber, PrometheusValue};
use serde_json::json;

use super::{eventually, simple_chat, MockProvider, TestProxy};

fn number(value: &MetricNumber) -> f64 {
    match value {
        MetricNumber::Float(v) => *v,
        MetricNumber::Int(v) => *v as f64,
    }
}

db_test!(
    the_proxy_exposes_prometheus_metrics_with_bounded_labels,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw_key, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "metrics" }))
            .await;
        // A key that wants the tenant's managed key, which the tenant has not stored: its
        // request is admitted (provider and model known), then refused.
        let (managed, _) = proxy
            .new_key(
                &app,
                &tenant.admin_key,
                json!({ "developer_label": "managed", "use_managed_key": true,
                        "agent_id": created["agent_id"] }),
            )
            .await;
        assert_eq!(
            proxy
                .chat(&managed, simple_chat("claude-haiku-4-5"))
                .await
                .status(),
            403
        );
        for model in [
            "gpt-4o-mini",
            "gpt-4o-mini-2024-07-18",
            "some-unlisted-model",
        ] {
            assert_eq!(proxy.chat(&raw_key, simple_chat(model)).await.status(), 200);
        }
        assert_eq!(
            proxy
                .chat("wdn_unknown", simple_chat("gpt-4o"))
                .await
                .status(),
            401
        );

        let text = eventually(Duration::from_secs(5), || async {
            let text = proxy.metrics().await;
            // Wait for the usage flush, so the buffer gauges have settled too.
            text.contains("warden_proxy_usage_flushed_total 3")
                .then_some(text)
        })
        .await;
        let exposition = openmetrics_parser::prometheus::parse_prometheus(&text).unwrap();
        let requests = &exposition.families["warden_proxy_requests_total"];
        let mut counted: HashMap<(String, String, String), f64> = HashMap::new();
        let mut providers: HashMap<String, String> = HashMap::new();
        for sample in requests.iter_samples() {
            let labels: HashMap<String, String> = sample
                .get_labelset()
                .unwrap()
                .iter()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect();
            providers.insert(labels["decision"].clone(), labels["provider"].clone());
            if let PrometheusValue::Counter(counter) = &sample.value {
                counted.insert(
                    (
                        labels["model"].clone(),
                        labels["status"].clone(),
                        labels["decision"].clone(),
                    ),
                    number(&counter.value),
                );
            }
        }
        // Dated variants fold into their family, unknown models into `other`.
        assert_eq!(
            counted[&("gpt-4o-mini".into(), "2xx".into(), "forwarded".into())],
            2.0
        );
        assert_eq!(
            counted[&("other".into(), "2xx".into(), "forwarded".into())],
            1.0
        );
        // (Waiting for the key to reach the proxy made some refused requests too.) Refused
        // before the model was read, a request has no provider or model; after, it has.
        assert!(counted[&("none".into(), "4xx".into(), "invalid_api_key".into())] >= 1.0);
        assert_eq!(providers["invalid_api_key"], "none");
        assert_eq!(
            counted[&(
                "claude-haiku-4-5".into(),
                "4xx".into(),
                "managed_key_missing".into()
            )],
            1.0
        );
        assert_eq!(providers["managed_key_missing"], "anthropic");
        for family in [
            "warden_proxy_request_duration_seconds",
            "warden_proxy_overhead_seconds",
            "warden_proxy_tokens_total",
            "warden_proxy_cost_microdollars_total",
            "warden_proxy_snapshot_version",
            "warden_proxy_snapshot_age_seconds",
            "warden_proxy_usage_buffer_depth",
            "warden_proxy_usage_flush_failures_total",
            "warden_proxy_usage_dropped_total",
            "warden_proxy_accept_failures_total",
        ] {
            assert!(exposition.families.contains_key(family), "{family} missing");
        }
        assert!(!text.contains(&raw_key), "a key became a label");
    }
);
