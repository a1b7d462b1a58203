//! The MCP gateway end to end, with the official MCP Python SDK (`mcp` from PyPI) on
//! both sides: an agent's `Client` (`mcp_agent.py`) reaching, through the proxy's
//! `/mcp`, a server built with the SDK's `MCPServer` (`mcp_upstream.py`) that the test
//! starts. Listing and calling tools, an allowlist hiding and refusing a tool, a tool
//! held for a human's approval then allowed, a blocked agent refused, another tenant
//! seeing nothing, the tool-call records and graph edges, a changed definition ("rug
//! pull") withheld and reported, and the agent's key never reaching the server.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::{json, Value};

use super::{eventually, MockProvider, TestProxy};
use crate::helpers::{create_policy, expect_error, expect_status, TestApp};
use crate::python::venv_python;

/// The SDK's version the tests run: the protocol moves fast, the tests should not.
const MCP_SDK: &str = "mcp==2.3.0";

/// The upstream MCP server, a child process; killed when dropped.
struct Upstream {
    port: u16,
    child: Child,
    headers_log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Upstream {
    async fn start() -> Upstream {
        let dir = tempfile::tempdir().unwrap();
        let headers_log = dir.path().join("authorization.log");
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = spawn(port, &headers_log, false).await;
        Upstream {
            port,
            child,
            headers_log,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The same server restarted with `search` described differently.
    async fn change_definitions(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(self.port, &self.headers_log, true).await;
    }

    /// The `Authorization` values the server received (`-` for none).
    fn authorizations(&self) -> Vec<String> {
        std::fs::read_to_string(&self.headers_log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn spawn(port: u16, headers_log: &std::path::Path, changed: bool) -> Child {
    let script = format!(
        "{}/tests/api/proxy/mcp_upstream.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let log = headers_log.to_owned();
    let child = tokio::task::spawn_blocking(move || {
        let python = venv_python("mcp-sdk", &[MCP_SDK]);
        let mut command = Command::new(python);
        command.arg(script).arg(port.to_string()).arg(log);
        if changed {
            command.arg("changed");
        }
        command.spawn().unwrap()
    })
    .await
    .unwrap();
    eventually(Duration::from_secs(30), || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(drop)
    })
    .await;
    child
}

/// Runs the agent's client against `url` with `key`: `list`, or `call` a tool.
async fn agent(url: &str, key: &str, args: &[&str]) -> Value {
    let mut all = vec![url, key];
    all.extend_from_slice(args);
    super::sdk::run("mcp-sdk", MCP_SDK, "mcp_agent.py", &all).await
}

async fn tools(url: &str, key: &str) -> Value {
    agent(url, key, &["list"]).await["tools"].clone()
}

async fn call(url: &str, key: &str, tool: &str, arguments: Value) -> Value {
    agent(url, key, &["call", tool, &arguments.to_string()]).await
}

/// Registers `upstream` as `docs` in the tenant of `admin` and approves its tools.
async fn register(app: &TestApp, admin: &str, upstream: &Upstream) -> String {
    let created = expect_status(
        app.post(
            "/mcp-servers",
            admin,
            json!({ "name": "docs", "url": upstream.url() }),
        )
        .await,
        201,
    )
    .await;
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    let approved = expect_status(
        app.post(&format!("/mcp-servers/{id}/approve"), admin, json!({}))
            .await,
        200,
    )
    .await;
    let names: Vec<&str> = approved["data"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["add", "create_issue", "delete_repo", "fail", "search"]
    );
    id
}

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
        let id = approval["id"].as_i64().unwrap();
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

db_test!(
    a_tool_whose_definition_changes_after_approval_is_withheld_and_reported,
    |config| config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()],
    |app| {
        let mut upstream = Upstream::start().await;
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "toolbot" }))
            .await;
        let admin = tenant.admin_key.clone();
        let gateway = format!("{}/mcp", proxy.base);
        let server_id = register(&app, &admin, &upstream).await;
        assert_eq!(
            call(&gateway, &key, "docs__search", json!({ "query": "x" })).await["text"],
            json!("results for x")
        );

        // The server now describes `search` otherwise: agents no longer see or reach it.
        upstream.change_definitions().await;
        assert_eq!(
            tools(&gateway, &key).await,
            json!([
                "docs__add",
                "docs__create_issue",
                "docs__delete_repo",
                "docs__fail"
            ])
        );
        let refused = call(&gateway, &key, "docs__search", json!({ "query": "x" })).await;
        assert_eq!(refused["error"]["data"]["code"], json!("tool_not_approved"));

        // The change is reported once: on the server's tools and in the audit trail.
        let changed = eventually(Duration::from_secs(10), || {
            let (app, admin, id) = (&app, &admin, &server_id);
            async move {
                let tools = expect_status(
                    app.get(&format!("/mcp-servers/{id}/tools"), admin).await,
                    200,
                )
                .await;
                let changed = tools["data"]["changed"].clone();
                (changed.as_array().is_some_and(|c| !c.is_empty())).then_some(changed)
            }
        })
        .await;
        assert_eq!(changed.as_array().unwrap().len(), 1);
        assert_eq!(changed[0]["tool"], json!("search"));
        assert_ne!(
            changed[0]["fingerprint"],
            changed[0]["approved_fingerprint"]
        );
        let trail = expect_status(
            app.get("/audit-trail?event_type=mcp_server.tool_changed", &admin)
                .await,
            200,
        )
        .await;
        assert_eq!(trail["data"].as_array().unwrap().len(), 1);
        assert_eq!(trail["data"][0]["details"]["tool"], json!("search"));

        // A rate limit on one tool, per agent: within a minute's window the second call is
        // refused (a window may turn between two calls, so three are made).
        create_policy(
            &app,
            &admin,
            json!({ "name": "one add a minute", "policy_type": "rate_limit",
                    "config": { "requests_per_minute": 1, "tools": ["docs__add"] } }),
        )
        .await;
        let mut decisions = Vec::new();
        for _ in 0..3 {
            let answer = call(&gateway, &key, "docs__add", json!({ "a": 1, "b": 2 })).await;
            decisions.push(
                answer["error"]["data"]["code"]
                    .as_str()
                    .unwrap_or("allowed")
                    .to_owned(),
            );
        }
        assert_eq!(decisions[0], "allowed", "{decisions:?}");
        assert!(
            decisions.contains(&"rate_limit_exceeded".to_owned()),
            "{decisions:?}"
        );
        // Other tools are not counted by it.
        assert_eq!(
            call(
                &gateway,
                &key,
                "docs__create_issue",
                json!({ "title": "a", "body": "b" })
            )
            .await["is_error"],
            json!(false)
        );

        // A browser page cannot drive the gateway: a request with an Origin is refused.
        let from_page = proxy
            .client
            .post(&gateway)
            .bearer_auth(&key)
            .header("origin", "https://evil.example")
            .header("accept", "application/json, text/event-stream")
            .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
            .send()
            .await
            .unwrap();
        assert_eq!(from_page.status(), 403);
        // Without a key there is no gateway at all.
        let anonymous = proxy
            .client
            .post(&gateway)
            .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
            .send()
            .await
            .unwrap();
        assert_eq!(anonymous.status(), 401);

        // Approving again pins the new definition.
        register_again(&app, &admin, &server_id).await;
        assert_eq!(
            call(&gateway, &key, "docs__search", json!({ "query": "y" })).await["text"],
            json!("results for y")
        );
    }
);

async fn register_again(app: &TestApp, admin: &str, server_id: &str) {
    expect_status(
        app.post(
            &format!("/mcp-servers/{server_id}/approve"),
            admin,
            json!({}),
        )
        .await,
        200,
    )
    .await;
}

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
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
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

/// Secrets Manager settings pointing at a moto server on `port` (started by the test).
fn secrets_manager_at(port: u16) -> warden_proxy::config::SecretsManagerConfig {
    warden_proxy::config::SecretsManagerConfig {
        endpoint_url: Some(format!("http://127.0.0.1:{port}")),
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
        // The control plane reads the credential to approve the server: its Secrets
        // Manager is named now, and started on that port by the test.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        config.proxy.secrets_manager = secrets_manager_at(port);
    },
    |app| {
        let secrets = app.config().proxy.secrets_manager.clone();
        let port: u16 = secrets
            .endpoint_url
            .as_deref()
            .and_then(|url| url.rsplit(':').next())
            .and_then(|port| port.parse().ok())
            .unwrap();
        let moto = crate::proxy::moto::Moto::start_on(port).await;
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
