//! Managed provider keys read by the proxy from a real (emulated) AWS Secrets Manager.

use std::time::Duration;

use serde_json::json;

use super::moto::Moto;
use super::{eventually, simple_chat, MockProvider, TestProxy, UPSTREAM_KEY};
use crate::helpers::expect_status;

db_test!(
    managed_keys_come_from_secrets_manager_cached_and_never_shown,
    |app| {
        let moto = Moto::start().await;
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start_with(&app, &provider, |config| {
            config.secrets_manager.endpoint_url = Some(moto.endpoint.clone());
            config.secrets_manager.cache_ttl_secs = 1;
            config.secrets_manager.access_key_id = Some(warden_shared::secret::Secret::new("test"));
            config.secrets_manager.secret_access_key =
                Some(warden_shared::secret::Secret::new("test"));
        })
        .await;
        let (tenant, managed_raw, _) = proxy
            .tenant_with_key(
                &app,
                json!({ "developer_label": "managed", "use_managed_key": true }),
            )
            .await;
        let (_, plain_raw, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "plain" }))
            .await;
        let key = &tenant.admin_key;
        let openai_ref = format!("warden/managed/{}/openai", tenant.id);
        let anthropic_ref = format!("warden/managed/{}/anthropic", tenant.id);
        // Anthropic's is registered by a name relative to the tenant's prefix.
        for (provider_name, secret_ref) in
            [("openai", openai_ref.as_str()), ("anthropic", "anthropic")]
        {
            expect_status(
                app.post(
                    "/managed-keys",
                    key,
                    json!({ "provider": provider_name, "label": "prod", "secret_ref": secret_ref }),
                )
                .await,
                201,
            )
            .await;
        }

        // Registered but not in Secrets Manager yet: a clear 502, and nothing cached, so the
        // request after the secret appears goes through.
        let missing = eventually(Duration::from_secs(3), || async {
            let response = proxy.chat(&managed_raw, simple_chat("gpt-4o-mini")).await;
            (response.status() == 502).then_some(response)
        })
        .await;
        let body: serde_json::Value = missing.json().await.unwrap();
        assert_eq!(
            body["error"]["code"],
            json!("managed_key_unavailable"),
            "{body}"
        );
        moto.create_secret(&openai_ref, "sk-managed-openai-1").await;
        let answered = proxy.chat(&managed_raw, simple_chat("gpt-4o-mini")).await;
        assert_eq!(answered.status(), 200);
        assert_eq!(
            provider.last().headers["authorization"],
            "Bearer sk-managed-openai-1"
        );
        // Cached: a second request reads nothing more.
        assert_eq!(
            proxy
                .chat(&managed_raw, simple_chat("gpt-4o-mini"))
                .await
                .status(),
            200
        );
        let metrics = proxy.metrics().await;
        assert!(
            metrics.contains("warden_proxy_managed_key_reads_total{outcome=\"ok\"} 1"),
            "{metrics}"
        );
        assert!(metrics.contains("warden_proxy_managed_key_reads_total{outcome=\"error\"} 1"));
        assert!(!metrics.contains("sk-managed"));

        // A rotated secret is used once the cached value expires (TTL 1 s here).
        moto.put_secret_value(&openai_ref, "sk-managed-openai-2")
            .await;
        eventually(Duration::from_secs(5), || async {
            assert_eq!(
                proxy
                    .chat(&managed_raw, simple_chat("gpt-4o-mini"))
                    .await
                    .status(),
                200
            );
            (provider.last().headers["authorization"] == "Bearer sk-managed-openai-2").then_some(())
        })
        .await;

        // A secret whose value would split the request's header (a line break inside the
        // key) is refused as unusable once the cached value expires: nothing reaches the
        // provider, and the answer does not carry the value.
        let before = provider.requests().len();
        moto.put_secret_value(&openai_ref, "sk-managed-openai-3\r\nx-injected: 1")
            .await;
        let unusable = eventually(Duration::from_secs(5), || async {
            let response = proxy.chat(&managed_raw, simple_chat("gpt-4o-mini")).await;
            (response.status() == 502).then_some(response)
        })
        .await;
        let body = unusable.text().await.unwrap();
        assert!(body.contains("\"managed_key_unavailable\""), "{body}");
        assert!(!body.contains("sk-managed"), "{body}");
        assert!(provider
            .requests()
            .iter()
            .skip(before)
            .all(|seen| !seen.headers.contains_key("x-injected")));
        moto.put_secret_value(&openai_ref, "sk-managed-openai-2")
            .await;

        // A JSON secret's `api_key`, sent the way the provider expects (Anthropic: x-api-key).
        moto.create_secret(&anthropic_ref, r#"{"api_key": "sk-managed-anthropic"}"#)
            .await;
        let answered = proxy
            .chat(&managed_raw, simple_chat("claude-3-5-haiku-20241022"))
            .await;
        assert_eq!(answered.status(), 200);
        assert_eq!(provider.last().headers["x-api-key"], "sk-managed-anthropic");

        // A key without managed keys uses the proxy's own credential; no tenant-facing
        // answer ever carries the secret's value.
        assert_eq!(
            proxy
                .chat(&plain_raw, simple_chat("gpt-4o-mini"))
                .await
                .status(),
            200
        );
        assert_eq!(
            provider.last().headers["authorization"],
            format!("Bearer {UPSTREAM_KEY}")
        );
        let listed = expect_status(app.get("/managed-keys", key).await, 200).await;
        assert!(!listed.to_string().contains("sk-managed"));
        assert!(!listed.to_string().contains(&openai_ref));

        // No managed key for the provider: refused before any read.
        let refused = proxy
            .chat(&managed_raw, simple_chat("gemini-2.0-flash"))
            .await;
        assert_eq!(refused.status(), 403);
        let body: serde_json::Value = refused.json().await.unwrap();
        assert_eq!(
            body["error"]["code"],
            json!("managed_key_missing"),
            "{body}"
        );
    }
);
