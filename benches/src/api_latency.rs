//! Latency of authenticated management API reads, as ratios to an unauthenticated
//! baseline (`/healthz`) measured in the same process against the same server.
//!
//! Run: `cargo run --release -p warden-benches --bin api-latency [-- REQUESTS]`
//! (SQLite in a temporary folder; set `WARDEN_BENCH_DATABASE_URL` to a dedicated, empty
//! PostgreSQL database such as `postgres://postgres@127.0.0.1:5432/warden_bench` to
//! measure PostgreSQL).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use warden_benches::BenchServer;

#[tokio::main]
async fn main() {
    let requests: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let server = BenchServer::start(1024 * 1024).await;
    let (base, client) = (&server.base, &server.client);
    let (_, key) = server.create_tenant("enterprise", 200).await;
    let agent_id = server.register_agents(&key, 200, 10).await.pop().unwrap();

    let scenarios = [
        ("GET /healthz (baseline)", format!("{base}/healthz"), false),
        (
            "GET /api/v1/auth/me",
            format!("{base}/api/v1/auth/me"),
            true,
        ),
        (
            "GET /api/v1/agents/{id}",
            format!("{base}/api/v1/agents/{agent_id}"),
            true,
        ),
        (
            "GET /api/v1/agents?limit=20",
            format!("{base}/api/v1/agents?limit=20"),
            true,
        ),
        ("GET /api/v1/teams", format!("{base}/api/v1/teams"), true),
    ];
    println!(
        "api-latency: {requests} sequential requests per row, database {}",
        server.backend
    );
    println!(
        "{:<30} {:>10} {:>10} {:>12} {:>10}",
        "request", "p50 µs", "p99 µs", "req/s", "p50 ratio"
    );
    let mut baseline_p50 = 0.0;
    for (name, url, auth) in scenarios {
        let mut samples = Vec::with_capacity(requests);
        let started = Instant::now();
        for _ in 0..requests {
            let request = client.get(&url);
            let request = if auth {
                request.bearer_auth(&key)
            } else {
                request
            };
            let t = Instant::now();
            let response = request.send().await.unwrap();
            assert!(
                response.status().is_success(),
                "{name}: {}",
                response.status()
            );
            response.bytes().await.unwrap();
            samples.push(t.elapsed());
        }
        let elapsed = started.elapsed();
        samples.sort();
        let p50 = micros(samples[samples.len() / 2]);
        let p99 = micros(samples[samples.len() * 99 / 100]);
        if baseline_p50 == 0.0 {
            baseline_p50 = p50;
        }
        println!(
            "{name:<30} {p50:>10.0} {p99:>10.0} {:>12.0} {:>9.2}x",
            requests as f64 / elapsed.as_secs_f64(),
            p50 / baseline_p50
        );
    }
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
