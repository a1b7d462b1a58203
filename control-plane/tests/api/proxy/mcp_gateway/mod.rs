//! The MCP gateway end to end, with the official MCP Python SDK (`mcp` from PyPI) on
//! both sides: an agent's `Client` (`mcp_agent.py`) reaching, through the proxy's
//! `/mcp`, a server built with the SDK's `MCPServer` (`mcp_upstream.py`) that the test
//! starts.
//!
//! - [`governance`]: listing and calling tools, an allowlist hiding and refusing a tool,
//!   a tool held for a human's approval then allowed, a blocked agent refused, another
//!   tenant seeing nothing, the tool-call records and graph edges.
//! - [`drift`]: a changed definition ("rug pull") withheld and reported until approved.
//! - [`servers`]: where servers may be (private ranges refused at registration and by
//!   the proxy's own resolution), and the server's own credential in place of the
//!   agent's key.

mod action_approvals;
mod drift;
mod governance;
mod guardrails;
mod servers;
mod traces;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{expect_status, TestApp};
use crate::python::venv_python;
use crate::servers::ChildOutput;

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
        let (child, port) = spawn(0, &headers_log, false).await;
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
        self.child = spawn(self.port, &self.headers_log, true).await.0;
    }

    /// The `_meta.traceparent` of each tool call the server received (`-` for none).
    fn traceparents(&self) -> Vec<String> {
        let path = format!("{}.traceparent", self.headers_log.display());
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
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

/// Starts the upstream on `port` (0: any free one) and returns it with the port it got.
async fn spawn(port: u16, headers_log: &std::path::Path, changed: bool) -> (Child, u16) {
    let script = format!(
        "{}/tests/api/proxy/mcp_upstream.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let log = headers_log.to_owned();
    let mut child = tokio::task::spawn_blocking(move || {
        let python = venv_python("mcp-sdk", &[MCP_SDK]);
        let mut command = Command::new(python);
        command.arg(script).arg(port.to_string()).arg(log);
        if changed {
            command.arg("changed");
        }
        command.stdout(Stdio::piped()).spawn().unwrap()
    })
    .await
    .unwrap();
    let output = ChildOutput::capture(&mut child);
    let port = output.ports(Duration::from_secs(60)).await[0];
    (child, port)
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
    register_at(app, admin, "docs", &upstream.url()).await
}

/// Registers the test's server, reached at `url`, as `name` and approves its tools.
async fn register_at(app: &TestApp, admin: &str, name: &str, url: &str) -> String {
    let created = expect_status(
        app.post("/mcp-servers", admin, json!({ "name": name, "url": url }))
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
