//! Tools listed and called through the gateway under the tenant's policies, approvals,
//! kill switch and isolation, and what the operator sees of the calls.

use std::time::Duration;

use serde_json::{json, Value};

use super::{call, tools, Upstream};
use crate::console::Browser;
use crate::helpers::{create_policy, expect_status};
use crate::proxy::{eventually, MockProvider, TestProxy};

db_test!(
    agents_list_and_call_tools_through_the_gateway_under_policies_and_approvals,
    |config| config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()],
    |app| {
        let upstream = Upstream::start().await;
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, key, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "toolbot" }))
            .await;
        let admin = tenant.admin_key.clone();
        let agent_id = created["agent_id"].as_str().unwrap().to_owned();
        let gateway = format!("{}/mcp", proxy.base);

        // Before approval the server's tools reach nobody.
        let created = expect_status(
            app.post(
                "/mcp-servers",
                &admin,
                json!({ "name": "docs", "url": upstream.url() }),
            )
            .await,
            201,
        )
        .await;
        let server_id = created["data"]["id"].as_str().unwrap().to_owned();
        assert_eq!(tools(&gateway, &key).await, json!([]));
        expect_status(
            app.post(
                &format!("/mcp-servers/{server_id}/approve"),
                &admin,
                json!({}),
            )
            .await,
            200,
        )
        .await;

        // Listed under the server's prefix at /mcp, under their own names at /mcp/docs.
        assert_eq!(
            tools(&gateway, &key).await,
            json!([
                "docs__add",
                "docs__create_issue",
                "docs__delete_repo",
                "docs__fail",
                "docs__search"
            ])
        );
        assert_eq!(
            tools(&format!("{gateway}/docs"), &key).await,
            json!(["add", "create_issue", "delete_repo", "fail", "search"])
        );
        assert_eq!(
            call(&gateway, &key, "docs__add", json!({ "a": 2, "b": 3 })).await,
            json!({ "text": "5", "is_error": false })
        );
        assert_eq!(
            call(
                &format!("{gateway}/docs"),
                &key,
                "add",
                json!({ "a": 4, "b": 5 })
            )
            .await,
            json!({ "text": "9", "is_error": false })
        );
        // A tool's own error stays the tool's.
        assert_eq!(
            call(&gateway, &key, "docs__fail", json!({ "reason": "no" })).await["is_error"],
            json!(true)
        );

        // An allowlist hides what it does not list, and refuses it if called anyway.
        create_policy(
            &app,
            &admin,
            json!({ "name": "docs only", "policy_type": "tool_allowlist",
                    "config": { "allowed_tools": ["docs__add", "docs__search", "docs__create_issue"] } }),
        )
        .await;
        assert_eq!(
            tools(&gateway, &key).await,
            json!(["docs__add", "docs__create_issue", "docs__search"])
        );
        let refused = call(
            &gateway,
            &key,
            "docs__delete_repo",
            json!({ "name": "prod" }),
        )
        .await;
        assert_eq!(refused["error"]["data"]["code"], json!("policy_violation"));

        // A risky tool is held for a human, with its arguments in the approval item.
        let held = create_policy(
            &app,
            &admin,
            json!({ "name": "issues need a human", "policy_type": "require_approval",
                    "config": { "tools": ["docs__create_issue"] } }),
        )
        .await;
        // The tenant's payload rules redact what reviewers see of the arguments.
        let redacting = app
            .request(
                reqwest::Method::PUT,
                "/payload-capture/config",
                Some(&admin),
            )
            .json(&json!({ "enabled": true, "retention_days": 7,
                           "processing_purpose": "reviewing held tool calls",
                           "redaction_rules": [{ "id": "token", "field_path": "arguments.body",
                                                 "pattern": "token-[0-9]+" }] }))
            .send()
            .await
            .unwrap();
        expect_status(redacting, 200).await;
        let issue = json!({ "title": "Outage", "body": "Roll back with token-1234" });
        let refused = call(&gateway, &key, "docs__create_issue", issue.clone()).await;
        assert_eq!(refused["error"]["data"]["code"], json!("approval_required"));
        assert_eq!(refused["error"]["data"]["approval_policy_id"], held["id"]);
        let pending = expect_status(app.get("/approvals?status=pending", &admin).await, 200).await;
        let approval = pending["data"][0].clone();
        assert_eq!(approval["agent_id"], json!(agent_id));
        let context = &approval["request_context"];
        assert_eq!(context["request_type"], json!("tool_call"));
        assert_eq!(context["provider"], json!("mcp"));
        assert_eq!(context["server"], json!("docs"));
        assert_eq!(context["tool"], json!("create_issue"));
        assert_eq!(
            context["arguments"],
            json!({ "title": "Outage", "body": "Roll back with [REDACTED:token]" })
        );
        // Reviewers see the same in the console: server, tool, the redacted arguments.
        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(&admin).await;
        let queue = browser.get("/console/approvals").await;
        let id = approval["id"].as_i64().unwrap();
        let item = &queue.body[queue.body.find(&format!("id=\"approval-{id}\"")).unwrap()..];
        let item = &item[..item.find("</li>").unwrap()];
        for shown in [
            "<dt>MCP server</dt><dd>docs</dd>",
            "<dt>Tool</dt><dd>create_issue</dd>",
            "Roll back with [REDACTED:token]",
            "Outage",
            "<dt>Approving releases</dt><dd>this exact action (the same arguments or request body), once</dd>",
            "<dt>Action digest</dt>",
        ] {
            assert!(item.contains(shown), "{shown} not in {item}");
        }
        assert!(!queue.body.contains("token-1234"));
        expect_status(
            app.post(
                &format!("/approvals/{id}/decide"),
                &admin,
                json!({ "reviewer_id": "oncall-ana", "decision": "approved" }),
            )
            .await,
            204,
        )
        .await;
        assert_eq!(
            call(&gateway, &key, "docs__create_issue", issue).await,
            json!({ "text": "opened: Outage", "is_error": false })
        );

        // The kill switch stops tool calls at once.
        expect_status(
            app.post(&format!("/agents/{agent_id}/block"), &admin, json!({}))
                .await,
            204,
        )
        .await;
        let refused = call(&gateway, &key, "docs__add", json!({ "a": 1, "b": 1 })).await;
        assert_eq!(refused["error"]["data"]["code"], json!("agent_blocked"));

        // Another tenant sees none of it and cannot reach it by name.
        let (_other, other_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "stranger" }))
            .await;
        assert_eq!(tools(&gateway, &other_key).await, json!([]));
        let refused = call(&gateway, &other_key, "docs__add", json!({ "a": 1, "b": 1 })).await;
        assert_eq!(refused["error"]["data"]["code"], json!("tool_not_found"));
        assert!(tools(&format!("{gateway}/docs"), &other_key)
            .await
            .as_array()
            .unwrap()
            .is_empty());

        // Every call is recorded, refused ones too (the stranger's in its own tenant); the
        // graph shows what reached the server.
        let records = eventually(Duration::from_secs(10), || {
            let app = &app;
            let admin = &admin;
            async move {
                let listed =
                    expect_status(app.get("/tool-calls?limit=100", admin).await, 200).await;
                (listed["meta"]["total"] == json!(7)).then_some(listed)
            }
        })
        .await;
        let seen: Vec<(String, String, String)> = records["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    format!(
                        "{}__{}",
                        r["server"].as_str().unwrap(),
                        r["tool"].as_str().unwrap()
                    ),
                    r["outcome"].as_str().unwrap().to_owned(),
                    r["decision"].as_str().unwrap().to_owned(),
                )
            })
            .rev()
            .collect();
        let expected = [
            ("docs__add", "ok", "allowed"),
            ("docs__add", "ok", "allowed"),
            ("docs__fail", "tool_error", "allowed"),
            ("docs__delete_repo", "refused", "policy_violation"),
            ("docs__create_issue", "refused", "approval_required"),
            ("docs__create_issue", "ok", "allowed"),
            ("docs__add", "refused", "agent_blocked"),
        ];
        for (index, (tool, outcome, decision)) in expected.iter().enumerate() {
            assert_eq!(
                seen[index],
                (
                    (*tool).to_owned(),
                    (*outcome).to_owned(),
                    (*decision).to_owned()
                ),
                "{seen:?}"
            );
        }
        let graph = expect_status(app.get("/relationships/graph", &admin).await, 200).await;
        let edges = graph["data"]["edges"].as_array().unwrap();
        let calls_tool = |tool: &str| {
            edges
                .iter()
                .find(|e| e["type"] == "calls_tool" && e["target"] == format!("tool:{tool}"))
                .map(|e| (e["source"].clone(), e["request_count"].clone()))
        };
        assert_eq!(calls_tool("docs__add"), Some((json!(agent_id), json!(2))));
        assert_eq!(
            calls_tool("docs__create_issue"),
            Some((json!(agent_id), json!(1)))
        );
        assert_eq!(calls_tool("docs__delete_repo"), None);
        let relationships = expect_status(
            app.get(&format!("/agents/{agent_id}/relationships"), &admin)
                .await,
            200,
        )
        .await;
        assert_eq!(
            relationships["data"]["tools"],
            json!(["docs__add", "docs__create_issue", "docs__fail"])
        );

        // Prometheus: calls by server, tool and decision; latency of those forwarded.
        let metrics = proxy.metrics().await;
        let series = |decision: &str, tool: &str| {
            let wanted = format!(
                "warden_proxy_tool_calls_total{{decision=\"{decision}\",server=\"docs\",tool=\"{tool}\"}}"
            );
            metrics
                .lines()
                .find(|line| line.starts_with(&wanted))
                .and_then(|line| line.rsplit(' ').next())
                .map(str::to_owned)
        };
        assert_eq!(series("allowed", "add").as_deref(), Some("2"), "{metrics}");
        assert_eq!(
            series("policy_violation", "delete_repo").as_deref(),
            Some("1")
        );
        assert_eq!(
            series("approval_required", "create_issue").as_deref(),
            Some("1")
        );
        assert!(
            metrics.contains("warden_proxy_tool_call_duration_seconds_count{server=\"docs\"} 4")
        );

        // The server saw Warden's requests, never the agent's key (it takes no credential).
        let seen = upstream.authorizations();
        assert!(!seen.is_empty());
        assert!(seen.iter().all(|value| value == "-"), "{seen:?}");

        // Another URL is another server: the approval is cleared.
        let changed = expect_status(
            app.patch(
                &format!("/mcp-servers/{server_id}"),
                &admin,
                json!({ "url": "http://127.0.0.1:1/mcp" }),
            )
            .await,
            200,
        )
        .await;
        assert_eq!(changed["data"]["approved_at"], Value::Null);
    }
);
