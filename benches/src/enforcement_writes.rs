//! The latency read-your-writes adds to management writes that change what the proxies
//! enforce: a kill-switch call answers only once every connected proxy has applied it.
//! Rows: the same write with no proxy connected (the baseline: it waits for nobody),
//! then with one and two proxies (`warden_proxy::build`, in this process) following the
//! control plane over HTTP; and a write the proxies do not hold, for reference.
//!
//! Run: `cargo run --release -p warden-benches --bin enforcement-writes [-- WRITES]`
//! (SQLite in a temporary folder; `WARDEN_BENCH_DATABASE_URL` for PostgreSQL, as for
//! `api-latency`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use serde_json::json;
use warden_benches::{BenchServer, SERVICE_TOKEN};
use warden_proxy::config::{ProvidersConfig, ProxyConfig};
use warden_proxy::ProxySettings;
use warden_shared::secret::Secret;

#[tokio::main]
async fn main() {
    let writes: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let server = BenchServer::start(1024 * 1024).await;
    let (_, key) = server.create_tenant("enterprise", 10).await;
    let agent = server.register_agents(&key, 1, 1).await.pop().unwrap();
    println!(
        "enforcement-writes: {writes} sequential writes per row, database {}",
        server.backend
    );
    println!(
        "{:<44} {:>9} {:>9} {:>9} {:>9}",
        "write", "p50 µs", "p99 µs", "p50 ×", "p99 ×"
    );
    let mut proxies = Vec::new();
    let mut baseline = None;
    for connected in 0..=2 {
        while proxies.len() < connected {
            proxies.push(start_proxy(&server).await);
        }
        let (p50, p99) = kill_switch_writes(&server, &key, &agent, writes, "applied").await;
        let (base50, base99) = *baseline.get_or_insert((p50, p99));
        println!(
            "{:<44} {p50:>9.0} {p99:>9.0} {:>8.2}x {:>8.2}x",
            format!("block/unblock, {connected} proxies connected"),
            p50 / base50,
            p99 / base99
        );
    }
    let (p50, p99) = description_writes(&server, &key, &agent, writes).await;
    let (base50, base99) = baseline.unwrap();
    println!(
        "{:<44} {p50:>9.0} {p99:>9.0} {:>8.2}x {:>8.2}x",
        "PATCH description (no proxy change), 2 conn.",
        p50 / base50,
        p99 / base99
    );
}

/// Blocks and unblocks `agent` in turn, `writes` times; each answer must say `expect`.
async fn kill_switch_writes(
    server: &BenchServer,
    key: &str,
    agent: &str,
    writes: usize,
    expect: &str,
) -> (f64, f64) {
    let mut samples = Vec::with_capacity(writes);
    for i in 0..writes {
        let action = if i % 2 == 0 { "block" } else { "unblock" };
        let request = server
            .client
            .post(format!("{}/api/v1/agents/{agent}/{action}", server.base))
            .bearer_auth(key)
            .json(&json!({}));
        let started = Instant::now();
        let response = request.send().await.unwrap();
        samples.push(started.elapsed());
        assert_eq!(response.status(), 204);
        let said = response.headers().get("warden-enforcement").unwrap();
        assert_eq!(said.to_str().unwrap(), expect);
    }
    percentiles(samples)
}

async fn description_writes(
    server: &BenchServer,
    key: &str,
    agent: &str,
    writes: usize,
) -> (f64, f64) {
    let mut samples = Vec::with_capacity(writes);
    for i in 0..writes {
        let request = server
            .client
            .patch(format!("{}/api/v1/agents/{agent}", server.base))
            .bearer_auth(key)
            .json(&json!({ "description": format!("write {i}") }));
        let started = Instant::now();
        let response = request.send().await.unwrap();
        samples.push(started.elapsed());
        assert_eq!(response.status(), 200);
        response.bytes().await.unwrap();
    }
    percentiles(samples)
}

/// A proxy following `server`, once it has loaded its state. It serves until the
/// benchmark ends.
async fn start_proxy(server: &BenchServer) -> tempfile::TempDir {
    let spool = tempfile::tempdir().unwrap();
    let built = warden_proxy::build(ProxySettings {
        proxy: ProxyConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            control_plane_url: server.base.clone(),
            usage_spool_dir: spool.path().to_owned(),
            event_loops: 1,
            ..ProxyConfig::default()
        },
        providers: ProvidersConfig::default(),
        service_token: Secret::new(SERVICE_TOKEN),
        allow_private: Vec::new(),
        clock: warden_shared::clock::Clock::system(),
        tracer: None,
    })
    .await
    .unwrap();
    let health = format!("http://{}/healthz", built.addr);
    tokio::spawn(built.serve(std::future::pending()));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = server.client.get(&health).send().await;
        if let Ok(answer) = answer {
            let body: serde_json::Value = answer.json().await.unwrap_or_default();
            if body["status"] == "ok" {
                return spool;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the proxy never loaded its state"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// p50 and p99 in microseconds.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |q: usize| samples[(samples.len() * q / 100).min(samples.len() - 1)];
    (micros(at(50)), micros(at(99)))
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
