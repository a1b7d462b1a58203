//! What the proxy reports back: `/proxy/stats` (spec 4.11) counts the usage the proxy
//! measured today, per tenant, apart from usage agents report themselves; and
//! `/v1/models` lists only the models a key may use.

use std::time::Duration;

use serde_json::json;

use super::mock::{COMPLETION_TOKENS, PROMPT_TOKENS};
use super::{eventually, simple_chat, MockProvider, TestProxy};
use crate::helpers::expect_status;

/// Tokens the mock reports for an embedding.
const EMBEDDING_TOKENS: i64 = 5;

db_test!(
    proxy_stats_count_todays_proxied_usage_of_the_callers_tenant,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "counted" }))
            .await;
        let admin = tenant.admin_key.clone();
        let agent = created["agent_id"].as_str().unwrap().to_owned();
        let stats = || async {
            expect_status(app.get("/proxy/stats", &admin).await, 200).await["data"].clone()
        };
        assert_eq!(
            stats().await,
            json!({ "total_requests_today": 0, "total_tokens_today": 0,
                    "total_cost_today_usd": "0.000000", "active_proxy_keys": 1 })
        );

        for model in ["gpt-4o-mini", "gpt-4o"] {
            assert_eq!(proxy.chat(&raw, simple_chat(model)).await.status(), 200);
        }
        let embedded = proxy
            .client
            .post(format!("{}/v1/embeddings", proxy.base))
            .bearer_auth(&raw)
            .json(&json!({ "model": "text-embedding-3-small", "input": "hello" }))
            .send()
            .await
            .unwrap();
        assert_eq!(embedded.status(), 200);
        let counted = eventually(Duration::from_secs(10), || async {
            let now = stats().await;
            (now["total_requests_today"] == json!(3)).then_some(now)
        })
        .await;
        assert_eq!(
            counted["total_tokens_today"],
            json!(2 * (PROMPT_TOKENS + COMPLETION_TOKENS) + EMBEDDING_TOKENS)
        );
        // The exact cost of what the ledger priced, as a six-place decimal string.
        let cost = counted["total_cost_today_usd"].as_str().unwrap().to_owned();
        let (units, places) = cost.split_once('.').unwrap();
        assert!(units.bytes().all(|b| b.is_ascii_digit()), "{cost}");
        assert_eq!(places.len(), 6, "{cost}");
        let summary = expect_status(app.get("/cost/summary?period=day", &admin).await, 200).await;
        let ledger_cost = summary["data"]["total_cost_usd"].as_f64().unwrap();
        assert!(ledger_cost > 0.0);
        assert!((cost.parse::<f64>().unwrap() - ledger_cost).abs() < 1e-9);

        // Usage an agent reports itself is not the proxy's.
        expect_status(
            app.post(
                "/telemetry/usage",
                &admin,
                json!({ "agent_id": agent, "model_provider": "openai", "model_name": "gpt-4o",
                        "input_tokens": 1000, "output_tokens": 1000, "cost_usd": 1.5 }),
            )
            .await,
            201,
        )
        .await;
        assert_eq!(stats().await, counted);

        // Keys: another counts while it exists.
        let second = expect_status(
            app.post(
                "/proxy-keys",
                &admin,
                json!({ "developer_label": "second", "agent_id": agent, "expires_in_days": 1 }),
            )
            .await,
            201,
        )
        .await;
        assert_eq!(stats().await["active_proxy_keys"], json!(2));
        let second_id = second["data"]["api_key_id"].as_str().unwrap();
        expect_status(
            app.delete(&format!("/proxy-keys/{second_id}"), &admin)
                .await,
            204,
        )
        .await;
        assert_eq!(stats().await["active_proxy_keys"], json!(1));

        // Another tenant sees only its own (nothing).
        let other = app.new_tenant("starter").await;
        assert_eq!(
            expect_status(app.get("/proxy/stats", &other.admin_key).await, 200).await["data"],
            json!({ "total_requests_today": 0, "total_tokens_today": 0,
                    "total_cost_today_usd": "0.000000", "active_proxy_keys": 0 })
        );
    }
);

db_test!(the_model_list_holds_only_what_the_key_may_use, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, anthropic_only, created) = proxy
        .tenant_with_key(
            &app,
            json!({ "developer_label": "claude", "allowed_providers": ["anthropic"] }),
        )
        .await;
    let models = proxy.models(&anthropic_only).await;
    assert!(!models.is_empty());
    assert!(
        models
            .iter()
            .all(|(id, owner)| owner == "anthropic" && id.starts_with("claude-")),
        "{models:?}"
    );

    let agent = created["agent_id"].as_str().unwrap();
    let (two_models, _) = proxy
        .new_key(
            &app,
            &tenant.admin_key,
            json!({ "developer_label": "two models", "agent_id": agent,
                    "allowed_models": ["gpt-4o-mini", "claude-sonnet-4-5"] }),
        )
        .await;
    assert_eq!(
        proxy.models(&two_models).await,
        vec![
            ("claude-sonnet-4-5".to_owned(), "anthropic".to_owned()),
            ("gpt-4o-mini".to_owned(), "openai".to_owned()),
        ]
    );
});
