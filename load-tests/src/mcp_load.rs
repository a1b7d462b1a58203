//! The MCP gateway's load generator: `CONCURRENCY` agents, each an MCP session of the
//! official Rust SDK's client (`rmcp`), calling one tool in a loop for `SECONDS`, against
//! an MCP endpoint (a server directly, or Warden's `/mcp` with a proxy key). Prints one
//! JSON line: calls, errors, calls per second, p50 and p99 latency in microseconds.
//!
//!   mcp-load URL TOOL SECONDS CONCURRENCY [KEY]

use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, tool, seconds, concurrency, rest @ ..] = args.as_slice() else {
        return Err("usage: mcp-load URL TOOL SECONDS CONCURRENCY [KEY]".into());
    };
    let seconds: u64 = seconds.parse().map_err(|_| "SECONDS: a number")?;
    let concurrency: usize = concurrency.parse().map_err(|_| "CONCURRENCY: a number")?;
    let key = rest.first().cloned();
    // rmcp's HTTP client (reqwest 0.13, no TLS provider of its own) wants one installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut agents = Vec::new();
    for agent in 0..concurrency {
        let (url, tool, key) = (url.clone(), tool.clone(), key.clone());
        agents.push(tokio::spawn(async move {
            run_agent(agent, &url, &tool, key, deadline).await
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0u64;
    for agent in agents {
        let (mut seen, failed) = agent.await.map_err(|e| e.to_string())??;
        latencies.append(&mut seen);
        errors += failed;
    }
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{}",
        json!({
            "calls": latencies.len(),
            "errors": errors,
            "calls_per_second": latencies.len() as f64 / seconds as f64,
            "p50_us": at(0.50),
            "p99_us": at(0.99),
        })
    );
    Ok(())
}

/// One agent's loop: its latencies in microseconds and its failed calls.
async fn run_agent(
    agent: usize,
    url: &str,
    tool: &str,
    key: Option<String>,
    deadline: Instant,
) -> Result<(Vec<u64>, u64), String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(key) = key {
        config = config.auth_header(key);
    }
    let client = ClientConfig::default()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .map_err(|e| format!("agent {agent} cannot connect: {e}"))?;
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut call = 0u64;
    while Instant::now() < deadline {
        call += 1;
        let arguments = json!({ "text": format!("agent {agent} call {call}") });
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = arguments.as_object().cloned();
        let started = Instant::now();
        match client.call_tool(params).await {
            Ok(result) if result.is_error != Some(true) => {
                latencies.push(started.elapsed().as_micros() as u64);
            }
            _ => errors += 1,
        }
    }
    let _ = client.cancel().await;
    Ok((latencies, errors))
}
