//! A proxy's asks for rate limits' allowances (`warden_proxy::rate_grants`): in a
//! minute, a bucket asks the control plane once however many of its requests come at
//! once, and the buckets whose allowance ran out together ask in one batch.

use futures_util::future::join_all;
use serde_json::json;

use super::{simple_chat, MockProvider, TestProxy};
use crate::helpers::{create_policy, metric};

/// The proxy's (asks, batches) so far.
async fn asked(proxy: &TestProxy) -> (f64, f64) {
    let metrics = proxy.metrics().await;
    let count = |series| metric(&metrics, series).unwrap_or_else(|| panic!("{series} missing"));
    (
        count("warden_proxy_rate_grant_asks_total"),
        count("warden_proxy_rate_grant_batches_total"),
    )
}

db_test!(
    a_minutes_first_requests_ask_once_a_bucket_and_together,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, first, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "key-0" }))
            .await;
        let admin = tenant.admin_key.clone();
        let mut keys = vec![first];
        for i in 1..40 {
            let label = json!({ "developer_label": format!("key-{i}") });
            keys.push(proxy.new_key(&app, &admin, label).await.0);
        }
        create_policy(
            &app,
            &admin,
            json!({ "name": "per key", "policy_type": "rate_limit",
                    "config": { "requests_per_minute": 1000, "per": "key" } }),
        )
        .await;
        assert_eq!(asked(&proxy).await, (0.0, 0.0));

        // Forty keys' first requests of the minute at once: forty buckets, one ask each,
        // in a few batches (the first alone, the others queued behind it).
        let answers = join_all(keys.iter().map(|key| proxy.chat(key, simple_chat("gpt-4o"))));
        for answer in answers.await {
            assert_eq!(answer.status(), 200);
        }
        let (asks, batches) = asked(&proxy).await;
        println!("40 buckets' first requests at once: {asks} asks in {batches} batches");
        assert_eq!(asks, 40.0);
        assert!(batches <= 20.0, "{batches} batches for 40 asks");

        // Twenty requests at once of a key new this minute: they wait for one ask.
        let (fresh, _) = proxy
            .new_key(&app, &admin, json!({ "developer_label": "fresh" }))
            .await;
        let answers = join_all((0..20).map(|_| proxy.chat(&fresh, simple_chat("gpt-4o"))));
        for answer in answers.await {
            assert_eq!(answer.status(), 200);
        }
        assert_eq!(asked(&proxy).await.0, 41.0);

        // The next minute, each bucket asks again.
        app.clock.advance(60_000);
        assert_eq!(proxy.chat(&fresh, simple_chat("gpt-4o")).await.status(), 200);
        assert_eq!(asked(&proxy).await.0, 42.0);
    }
);
