//! Where registered servers may be and how the gateway presents itself to them.

use std::time::Duration;

use serde_json::{json, Value};

use super::{call, register_at, tools, Upstream};
use crate::helpers::{expect_error, expect_status};
use crate::proxy::moto::Moto;
use crate::proxy::{eventually, MockProvider, TestProxy};
use crate::servers::RefusingPort;

db_test!(
    servers_in_private_ranges_are_refused_and_unreachable_ones_not_approved,
    |config| config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()],
    |app| {
        let tenant = app.new_tenant("starter").await;
        let admin = tenant.admin_key.clone();
        for private in [
            "http://10.1.2.3/mcp",
            "http://169.254.169.254/mcp",
            "http://[::1]/mcp",
        ] {
            expect_error(
                app.post(
                    "/mcp-servers",
                    &admin,
                    json!({ "name": "internal", "url": private }),
                )
                .await,
                422,
                "url_not_allowed",
            )
            .await;
        }
        // Allowed, but nothing answers there: nothing is approved.
        let refusing = RefusingPort::new();
        let port = refusing.port;
        let created = expect_status(
            app.post(
                "/mcp-servers",
                &admin,
                json!({ "name": "gone", "url": format!("http://127.0.0.1:{port}/mcp") }),
            )
            .await,
            201,
        )
        .await;
        let id = created["data"]["id"].as_str().unwrap();
        let refused = expect_error(
            app.post(&format!("/mcp-servers/{id}/approve"), &admin, json!({}))
                .await,
            422,
            "mcp_server_unreachable",
        )
        .await;
        assert!(refused["error"]["details"]["reason"].is_string());
        let server = expect_status(app.get(&format!("/mcp-servers/{id}"), &admin).await, 200).await;
        assert_eq!(server["data"]["approved_at"], Value::Null);
    }
);

/// Secrets Manager settings pointing at `moto`.
fn secrets_manager_of(moto: &Moto) -> warden_proxy::config::SecretsManagerConfig {
    warden_proxy::config::SecretsManagerConfig {
        endpoint_url: Some(moto.endpoint.clone()),
        access_key_id: Some(warden_shared::secret::Secret::new("test")),
        secret_access_key: Some(warden_shared::secret::Secret::new("test")),
        cache_ttl_secs: 1,
        ..warden_proxy::config::SecretsManagerConfig::default()
    }
}

db_test!(
    the_server_gets_its_own_credential_from_secrets_manager_never_the_agents_key,
    |config| {
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
    },
    |app| {
        let mut app = app;
        // The control plane reads the credential to approve the server: it starts again
        // with its Secrets Manager named, as an operator's settings would.
        let moto = Moto::start().await;
        let secrets = secrets_manager_of(&moto);
        app.restart_with(|config| config.proxy.secrets_manager = secrets.clone())
            .await;
        let upstream = Upstream::start().await;
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start_with(&app, &provider, |config| {
            config.secrets_manager = secrets.clone();
        })
        .await;
        let (tenant, key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "toolbot" }))
            .await;
        let admin = tenant.admin_key.clone();
        moto.create_secret(
            &format!("warden/managed/{}/mcp/docs", tenant.id),
            "docs-server-token",
        )
        .await;
        let created = expect_status(
            app.post(
                "/mcp-servers",
                &admin,
                json!({ "name": "docs", "url": upstream.url(), "secret_ref": "mcp/docs" }),
            )
            .await,
            201,
        )
        .await;
        let id = created["data"]["id"].as_str().unwrap();
        expect_status(
            app.post(&format!("/mcp-servers/{id}/approve"), &admin, json!({}))
                .await,
            200,
        )
        .await;
        assert_eq!(
            call(
                &format!("{}/mcp", proxy.base),
                &key,
                "docs__add",
                json!({ "a": 20, "b": 22 })
            )
            .await,
            json!({ "text": "42", "is_error": false })
        );
        // The approval (the control plane) and the call (the proxy) both presented the
        // server's own token; the agent's key never reached it.
        let seen = upstream.authorizations();
        assert!(!seen.is_empty());
        assert!(
            seen.iter().all(|value| value == "Bearer docs-server-token"),
            "{seen:?}"
        );
        assert!(!seen.iter().any(|value| value.contains(&key)));
        // The credential is never shown.
        let server = expect_status(app.get(&format!("/mcp-servers/{id}"), &admin).await, 200).await;
        assert!(!server.to_string().contains("docs-server-token"));
    }
);

db_test!(
    the_proxy_reaches_servers_only_at_addresses_it_allows_itself,
    |config| {
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned(), "::1/128".to_owned()]
    },
    |app| {
        // The control plane allows the loopback server and approves it, by name and by
        // address. A proxy that does not allow loopback must not call it: what it finds
        // when its settings differ, or when a name resolves elsewhere after
        // registration (DNS rebinding), since it resolves and checks names itself.
        let upstream = Upstream::start().await;
        let provider = MockProvider::start().await;
        let strict = TestProxy::start_allowing(&app, &provider, Vec::new()).await;
        let (tenant, key, _) = strict
            .tenant_with_key(&app, json!({ "developer_label": "toolbot" }))
            .await;
        let admin = tenant.admin_key.clone();
        let by_name = format!("http://localhost:{}/mcp", upstream.port);
        register_at(&app, &admin, "byname", &by_name).await;
        register_at(&app, &admin, "byaddress", &upstream.url()).await;
        let reached = upstream.authorizations().len();
        assert!(reached > 0, "the approvals listed the server");

        let url = format!("{}/mcp", strict.base);
        assert_eq!(tools(&url, &key).await, json!([]));
        for tool in ["byname__add", "byaddress__add"] {
            let refused = call(&url, &key, tool, json!({ "a": 1, "b": 2 })).await;
            assert_eq!(
                refused["error"]["data"]["code"],
                json!("upstream_unreachable"),
                "{refused}"
            );
            assert!(
                refused["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("cannot reach the MCP server"),
                "{refused}"
            );
        }
        assert_eq!(
            upstream.authorizations().len(),
            reached,
            "the proxy sent the server nothing"
        );
        // Both refusals are recorded, with the reason.
        eventually(Duration::from_secs(10), || {
            let app = &app;
            let admin = &admin;
            async move {
                let listed = expect_status(app.get("/tool-calls?limit=10", admin).await, 200).await;
                let seen: Vec<(&Value, &Value)> = listed["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|record| (&record["outcome"], &record["decision"]))
                    .collect();
                let failed = (&json!("upstream_error"), &json!("upstream_unreachable"));
                (seen == [failed, failed]).then_some(())
            }
        })
        .await;

        // The same servers through a proxy allowing loopback, as the control plane does.
        let allowing = TestProxy::start(&app, &provider).await;
        let url = format!("{}/mcp", allowing.base);
        for tool in ["byname__add", "byaddress__add"] {
            assert_eq!(
                call(&url, &key, tool, json!({ "a": 1, "b": 2 })).await,
                json!({ "text": "3", "is_error": false })
            );
        }
    }
);
