//! Registered MCP servers: CRUD within the tenant, names fit to prefix tools, URLs
//! through the SSRF guard (private ones only where the operator allows), credentials as
//! Secrets Manager references under the tenant's prefix, every change audited.

use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status};

db_test!(
    an_admin_registers_changes_and_removes_mcp_servers,
    |config| config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()],
    |app| {
        let tenant = app.new_tenant("starter").await;
        let admin = tenant.admin_key.clone();
        let created = expect_status(
            app.post(
                "/mcp-servers",
                &admin,
                json!({ "name": "github", "url": "http://127.0.0.1:9000/mcp",
                        "secret_ref": "mcp/github" }),
            )
            .await,
            201,
        )
        .await;
        let server = created["data"].clone();
        let id = server["id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("mcp_"));
        assert_eq!(server["enabled"], json!(true));
        assert_eq!(
            server["secret_ref"],
            json!(format!("warden/managed/{}/mcp/github", tenant.id))
        );

        // Names are unique in the tenant and fit to prefix tool names.
        expect_error(
            app.post(
                "/mcp-servers",
                &admin,
                json!({ "name": "github", "url": "http://127.0.0.1:9001/mcp" }),
            )
            .await,
            409,
            "mcp_server_name_taken",
        )
        .await;
        for bad in ["GitHub", "1st", "with space", "a.b", ""] {
            let refused = expect_error(
                app.post(
                    "/mcp-servers",
                    &admin,
                    json!({ "name": bad, "url": "http://127.0.0.1:9001/mcp" }),
                )
                .await,
                422,
                "validation_failed",
            )
            .await;
            assert_eq!(refused["error"]["details"]["field"], json!("name"), "{bad}");
        }
        // A credential outside the tenant's prefix is refused.
        let escaped = expect_error(
            app.post(
                "/mcp-servers",
                &admin,
                json!({ "name": "other", "url": "http://127.0.0.1:9001/mcp",
                        "secret_ref": "warden/managed/ten_someone_else/key" }),
            )
            .await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(escaped["error"]["details"]["field"], json!("secret_ref"));

        // Change, read, list.
        let changed = expect_status(
            app.patch(
                &format!("/mcp-servers/{id}"),
                &admin,
                json!({ "enabled": false, "secret_ref": null, "url": "http://127.0.0.1:9002/mcp" }),
            )
            .await,
            200,
        )
        .await;
        assert_eq!(changed["data"]["enabled"], json!(false));
        assert_eq!(changed["data"]["secret_ref"], Value::Null);
        let read = expect_status(app.get(&format!("/mcp-servers/{id}"), &admin).await, 200).await;
        assert_eq!(read["data"]["url"], json!("http://127.0.0.1:9002/mcp"));
        let listed = expect_status(app.get("/mcp-servers", &admin).await, 200).await;
        assert_eq!(listed["meta"]["total"], json!(1));

        // Another tenant sees nothing of it.
        let other = app.new_tenant("starter").await;
        expect_error(
            app.get(&format!("/mcp-servers/{id}"), &other.admin_key)
                .await,
            404,
            "not_found",
        )
        .await;
        let theirs = expect_status(app.get("/mcp-servers", &other.admin_key).await, 200).await;
        assert_eq!(theirs["meta"]["total"], json!(0));
        expect_error(
            app.delete(&format!("/mcp-servers/{id}"), &other.admin_key)
                .await,
            404,
            "not_found",
        )
        .await;

        assert_eq!(
            app.delete(&format!("/mcp-servers/{id}"), &admin)
                .await
                .status()
                .as_u16(),
            204
        );
        expect_error(
            app.get(&format!("/mcp-servers/{id}"), &admin).await,
            404,
            "not_found",
        )
        .await;
        assert_eq!(
            app.audit_events(&tenant.id, &id).await,
            [
                "mcp_server.created",
                "mcp_server.updated",
                "mcp_server.deleted"
            ]
        );
    }
);

db_test!(
    an_upstream_in_a_private_range_is_refused_at_registration,
    |app| {
        let tenant = app.new_tenant("starter").await;
        for url in [
            "http://127.0.0.1:9000/mcp",
            "http://10.0.0.5/mcp",
            "http://169.254.169.254/latest",
            "http://[::1]:9000/mcp",
            "ftp://example.com/mcp",
        ] {
            let refused = expect_error(
                app.post(
                    "/mcp-servers",
                    &tenant.admin_key,
                    json!({ "name": "internal", "url": url }),
                )
                .await,
                422,
                "url_not_allowed",
            )
            .await;
            assert_eq!(refused["error"]["details"]["field"], json!("url"), "{url}");
        }
        assert_eq!(app.count_rows("mcp_servers", &tenant.id).await, 0);
    }
);

db_test!(
    the_proxies_state_carries_enabled_servers_and_forgets_disabled_ones,
    |config| config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()],
    |app| {
        let provider = crate::proxy::MockProvider::start().await;
        let _proxy = crate::proxy::TestProxy::start(&app, &provider).await;
        let tenant = app.new_tenant("starter").await;
        let created = app
            .post(
                "/mcp-servers",
                &tenant.admin_key,
                json!({ "name": "search", "url": "http://127.0.0.1:9000/mcp" }),
            )
            .await;
        // Read-your-writes: the connected proxy has the server when this answers.
        assert_eq!(created.headers()["warden-enforcement"], "applied");
        let id = expect_status(created, 201).await["data"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let servers = |snapshot: warden_shared::snapshot::Snapshot| -> Vec<String> {
            snapshot
                .mcp_servers
                .into_iter()
                .filter(|s| s.tenant_id == tenant.id)
                .map(|s| s.name)
                .collect()
        };
        assert_eq!(servers(snapshot(&app).await), ["search"]);
        let disabled = app
            .patch(
                &format!("/mcp-servers/{id}"),
                &tenant.admin_key,
                json!({ "enabled": false }),
            )
            .await;
        assert_eq!(disabled.headers()["warden-enforcement"], "applied");
        expect_status(disabled, 200).await;
        assert!(servers(snapshot(&app).await).is_empty());
    }
);

/// The first message of a fresh state stream.
async fn snapshot(app: &crate::helpers::TestApp) -> warden_shared::snapshot::Snapshot {
    match crate::proxy_state::Stream::open(app, None)
        .await
        .next()
        .await
    {
        warden_shared::snapshot::StreamMessage::Snapshot(snapshot) => snapshot,
        other => panic!("expected a snapshot first, got {other:?}"),
    }
}
