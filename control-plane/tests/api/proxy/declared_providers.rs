//! Providers the operator declares (`providers.custom`): a local OpenAI-compatible server
//! reached by `name/model` or by its listed models, without a credential, governed and
//! costed like a built-in provider, and names nobody declared refused by the API.

use std::time::Duration;

use serde_json::{json, Value};
use warden_proxy::config::{CustomPrice, CustomProvider, ProvidersConfig};

use super::mock::{COMPLETION_TOKENS, PROMPT_TOKENS};
use super::{eventually, MockProvider, TestProxy};
use crate::helpers::{create_policy, expect_error, expect_status};

/// The declaration both planes get: `local`, serving `llama3.1:8b` by name, with a price
/// for the `llama3.1` family only.
fn declare_local(providers: &mut ProvidersConfig, base_url: &str) {
    providers.custom.insert(
        "local".to_owned(),
        CustomProvider {
            base_url: base_url.to_owned(),
            api_key: None,
            models: vec!["llama3.1:8b".to_owned()],
            prices: vec![CustomPrice {
                model: "llama3.1".to_owned(),
                input_per_million_usd: 0.5,
                output_per_million_usd: 1.5,
            }],
        },
    );
}

db_test!(
    a_declared_local_server_is_governed_and_costed_like_a_built_in,
    |config| declare_local(&mut config.providers, "http://127.0.0.1:9/v1"),
    |app| {
        let provider = MockProvider::start().await;
        let base = provider.base.clone();
        let proxy = TestProxy::start_configured(
            &app,
            &provider,
            |_| {},
            |providers| declare_local(providers, &base),
        )
        .await;
        let tenant = app.new_tenant("starter").await;
        let admin = tenant.admin_key.clone();

        // Only declared names are accepted where the API takes a provider.
        let refused = expect_error(
            app.post(
                "/proxy-keys",
                &admin,
                json!({ "developer_label": "typo", "allowed_providers": ["lcoal"] }),
            )
            .await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(
            refused["error"]["details"]["field"],
            json!("allowed_providers")
        );
        assert!(refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("declared: local"));
        let (raw, created) = proxy
            .new_key(
                &app,
                &admin,
                json!({ "developer_label": "local only", "allowed_providers": ["local"] }),
            )
            .await;
        assert_eq!(created["allowed_providers"], json!(["local"]));

        // By prefix (the server receives the bare name) and by a listed model, with no
        // credential of the proxy's or the agent's sent on.
        assert_eq!(proxy.chat_answer(&raw, "local/qwen3:8b").await.0, 200);
        let received = provider.last();
        assert_eq!(
            serde_json::from_slice::<Value>(&received.body).unwrap()["model"],
            json!("qwen3:8b")
        );
        assert!(received.headers.get("authorization").is_none());
        assert_eq!(proxy.chat_answer(&raw, "llama3.1:8b").await.0, 200);
        assert_eq!(
            serde_json::from_slice::<Value>(&provider.last().body).unwrap()["model"],
            json!("llama3.1:8b")
        );
        // The key's providers still restrict: a built-in's model is refused.
        let (status, body) = proxy.chat_answer(&raw, "gpt-4o").await;
        assert_eq!(status, 403);
        assert_eq!(body["error"]["code"], json!("provider_not_allowed"));

        // `/v1/models` names the declared models, owned by the provider.
        let models = proxy.models(&raw).await;
        let listed: Vec<(&str, &str)> = models
            .iter()
            .map(|(id, owner)| (id.as_str(), owner.as_str()))
            .collect();
        assert_eq!(listed, [("llama3.1", "local"), ("llama3.1:8b", "local")]);

        // Costed to the token from the declared price; a model without one unpriced.
        let by_model = eventually(Duration::from_secs(10), || {
            let (app, admin) = (&app, admin.clone());
            async move {
                let body = expect_status(app.get("/cost/by-model", &admin).await, 200).await;
                (body["data"].as_array().unwrap().len() == 2).then_some(body)
            }
        })
        .await;
        let row = |name: &str| -> Value {
            by_model["data"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["model_name"] == json!(name))
                .cloned()
                .unwrap_or_else(|| panic!("{name} in {by_model}"))
        };
        let priced = row("llama3.1:8b");
        assert_eq!(priced["model_provider"], json!("local"));
        assert_eq!(priced["input_tokens"], json!(PROMPT_TOKENS));
        let micros = PROMPT_TOKENS * 500_000 + COMPLETION_TOKENS * 1_500_000;
        assert_eq!(
            priced["total_cost_usd"].as_f64().unwrap(),
            (micros as f64 / 1_000_000.0).round() / 1_000_000.0
        );
        assert_eq!(row("qwen3:8b")["total_cost_usd"].as_f64(), Some(0.0));

        // Agents' own usage reports may name it too, priced the same way.
        let agent = created["agent_id"].as_str().unwrap();
        let stored = expect_status(
            app.post(
                "/telemetry/usage",
                &admin,
                json!({ "agent_id": agent, "model_provider": "local", "model_name": "llama3.1:70b",
                        "input_tokens": 1_000_000, "output_tokens": 0 }),
            )
            .await,
            201,
        )
        .await;
        assert_eq!(stored["data"]["cost_usd"], json!(0.5));
        assert_eq!(stored["data"]["priced"], json!(true));
        expect_error(
            app.post(
                "/telemetry/usage",
                &admin,
                json!({ "agent_id": agent, "model_provider": "azure", "model_name": "gpt-4o",
                        "input_tokens": 1, "output_tokens": 1 }),
            )
            .await,
            422,
            "validation_failed",
        )
        .await;

        // Policies name it: a misspelt block is refused, a block of `local` applies.
        let misspelt = expect_error(
            app.post(
                "/policies",
                &admin,
                json!({ "name": "typo", "policy_type": "block_provider",
                        "config": { "providers": ["locl"] } }),
            )
            .await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(
            misspelt["error"]["details"]["field"],
            json!("config.providers")
        );
        create_policy(
            &app,
            &admin,
            json!({ "name": "no local", "policy_type": "block_provider",
                    "config": { "providers": ["local"] } }),
        )
        .await;
        let (status, body) = proxy.chat_answer(&raw, "llama3.1:8b").await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"]["code"], json!("policy_violation"));
    }
);
