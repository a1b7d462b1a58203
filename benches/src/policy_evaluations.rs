//! `GET /policy-evaluations` at size: seeds a tenant with RECORDS decided usage records
//! (each forwarded request's policy decision, as the proxy sends them, through the
//! ledger's ingest) over 100 agents, plus one refused decision in fifty, then measures
//! the first page, an agent's first page and a deep page as ratios to `/healthz`
//! against the same server, and prints the `total` each answers.
//!
//! Run: `cargo run --release -p warden-benches --bin policy-evaluations -- [RECORDS]
//! [REQUESTS]` (defaults 1000000 200; SQLite in a temporary folder, or
//! `WARDEN_BENCH_DATABASE_URL` for a dedicated, empty PostgreSQL database).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_benches::{BenchServer, SERVICE_TOKEN};
use warden_shared::timestamp::Timestamp;

const AGENTS: usize = 100;
const BATCH: usize = 1000;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let records = args.next().flatten().unwrap_or(1_000_000);
    let requests = args.next().flatten().unwrap_or(200);
    let server = BenchServer::start(16 * 1024 * 1024).await;
    let (tenant_id, key) = server.create_tenant("enterprise", AGENTS).await;
    let agents = server.register_agents(&key, AGENTS, 10).await;
    println!(
        "policy-evaluations: {records} decided usage records, database {}",
        server.backend
    );
    let started = Instant::now();
    seed(&server, &tenant_id, &agents, records).await;
    println!(
        "seeded in {:.1} s ({:.0} records/s)",
        started.elapsed().as_secs_f64(),
        records as f64 / started.elapsed().as_secs_f64()
    );
    let maintenance = server.maintain().await;
    println!("after {maintenance} (what autovacuum does in steady state):");
    let base = &server.base;
    let agent = &agents[7];
    let scenarios = [
        ("GET /healthz (baseline)", format!("{base}/healthz")),
        (
            "first page",
            format!("{base}/api/v1/policy-evaluations?limit=20"),
        ),
        (
            "an agent's first page",
            format!("{base}/api/v1/policy-evaluations?agent_id={agent}&limit=20"),
        ),
        (
            "page 50",
            format!("{base}/api/v1/policy-evaluations?page=50&limit=20"),
        ),
        (
            "failures of one policy",
            format!("{base}/api/v1/policy-evaluations?policy_id=2&result=fail&limit=20"),
        ),
    ];
    println!(
        "{:<26} {:>10} {:>10} {:>10} {:>12}",
        "request", "p50 ms", "p99 ms", "p99 ratio", "total"
    );
    let mut baseline = 0.0;
    for (name, url) in scenarios {
        let (p50, p99, total) = measure(&server, &key, &url, requests).await;
        if baseline == 0.0 {
            baseline = p99;
        }
        println!(
            "{name:<26} {:>10.2} {:>10.2} {:>10.1} {:>12}",
            p50 * 1e3,
            p99 * 1e3,
            p99 / baseline,
            total
        );
    }
}

/// Posts `records` decided records in batches of [`BATCH`], as a proxy does: each
/// carries its decision (two policies passed, or one passed and one failed for one in
/// ten), and one request in fifty was refused instead (a decision of its own).
async fn seed(server: &BenchServer, tenant_id: &str, agents: &[String], records: usize) {
    let result = |id: i64, outcome: &str| {
        json!({ "policy_id": id, "policy_name": format!("policy {id}"),
                "policy_type": "model_allowlist", "result": outcome })
    };
    let lists = json!([
        [result(1, "pass"), result(2, "pass")],
        [result(1, "pass"), result(2, "fail")]
    ]);
    // Spread over the last 30 days, oldest first.
    let now = Timestamp::from_millis(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    );
    let span_ms = 30 * 86_400_000_i64;
    let step = (span_ms / records.max(1) as i64).max(1);
    let mut sent = 0;
    while sent < records {
        let count = BATCH.min(records - sent);
        let mut usage = Vec::with_capacity(count);
        let mut refused = Vec::new();
        for i in sent..sent + count {
            let at = Timestamp::from_millis(now.as_millis() - span_ms + i as i64 * step);
            let agent = &agents[i % agents.len()];
            if i % 50 == 49 {
                refused.push(json!({ "tenant_id": tenant_id, "evaluation": {
                    "request_id": format!("refused-{i}"), "agent_id": agent, "provider": "openai",
                    "model": "gpt-4o", "evaluated_at": at.to_string(), "results": 1 } }));
                continue;
            }
            usage.push(json!({
                "record_id": format!("rec-{i}"), "tenant_id": tenant_id, "agent_id": agent,
                "model_provider": "openai", "model_name": "gpt-4o-mini",
                "input_tokens": 100, "output_tokens": 20, "recorded_at": at.to_string(),
                "evaluation": { "model": "gpt-4o-mini", "evaluated_at": at.to_string(),
                                "results": usize::from(i % 10 == 3) },
            }));
        }
        post(
            server,
            "usage-batches",
            json!({ "batch_id": format!("seed-{sent}"),
            "result_lists": lists, "records": usage }),
        )
        .await;
        if !refused.is_empty() {
            post(
                server,
                "policy-decisions",
                json!({ "batch_id": format!("seed-refused-{sent}"),
                "result_lists": lists, "decisions": refused }),
            )
            .await;
        }
        sent += count;
    }
}

async fn post(server: &BenchServer, operation: &str, body: Value) {
    let response = server
        .client
        .post(format!("{}/internal/v1/{operation}", server.base))
        .bearer_auth(SERVICE_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}

/// p50 and p99 in seconds over `requests` sequential requests, and the page's `total`.
async fn measure(
    server: &BenchServer,
    key: &str,
    url: &str,
    requests: usize,
) -> (f64, f64, String) {
    let mut samples: Vec<Duration> = Vec::with_capacity(requests);
    let mut total = String::new();
    for _ in 0..requests {
        let started = Instant::now();
        let response = server
            .client
            .get(url)
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{url}");
        let body: Value = response.json().await.unwrap();
        samples.push(started.elapsed());
        let floor = if body["meta"]["total_is_lower_bound"] == true {
            "≥ "
        } else {
            ""
        };
        total = format!("{floor}{}", body["meta"]["total"]);
    }
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    (at(0.50).as_secs_f64(), at(0.99).as_secs_f64(), total)
}
