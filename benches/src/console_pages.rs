//! Server time of each console page on a large tenant (by default 10,000 agents and
//! 1,000,000 usage records over 30 days, 50 pending approvals, 100 blocked agents, an
//! audit trail of every registration and block), as
//! p50 and p95 and as ratios to `/healthz` measured against the same server in the same
//! process. Target: p95 under 50 ms for every page, on SQLite and on PostgreSQL.
//!
//! Run: `cargo run --release -p warden-benches --bin console-pages -- [AGENTS] [RECORDS]`
//! (SQLite in a temporary folder, or set `WARDEN_BENCH_DATABASE_URL` to a dedicated,
//! empty PostgreSQL database).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use serde_json::json;
use warden_benches::{BenchServer, SERVICE_TOKEN};
use warden_shared::clock::Clock;
use warden_shared::timestamp::Timestamp;

const REQUESTS: usize = 200;
const DAY_MS: i64 = 86_400_000;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let agents = args.next().flatten().unwrap_or(10_000);
    let records = args.next().flatten().unwrap_or(1_000_000);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let clock = Clock::manual(Timestamp::from_millis(now - 30 * DAY_MS));
    let server = BenchServer::start_with_clock(8 * 1024 * 1024, clock.clone()).await;
    let (tenant_id, key) = server.create_tenant("enterprise_plus", agents).await;
    let seeding = Instant::now();
    let agent_ids = server.register_agents(&key, agents, 50).await;
    let ingest = warden_benches::ingest_usage(
        &server,
        &tenant_id,
        &agent_ids,
        records,
        (now - 30 * DAY_MS, now),
        &clock,
        warden_benches::Seeding {
            senders: 2,
            close_each_day: true,
        },
    )
    .await;
    clock.advance(now - clock.now().as_millis());
    warden_control_plane::ledger::close_days(&server.db, clock.now())
        .await
        .unwrap();
    for agent in agent_ids.iter().take(100) {
        let blocked = server
            .client
            .post(format!("{}/api/v1/agents/{agent}/block", server.base))
            .bearer_auth(&key)
            .json(&json!({ "reason": "bench" }))
            .send()
            .await
            .unwrap();
        assert_eq!(blocked.status(), 204);
    }
    pending_approvals(&server, &tenant_id, &key, &agent_ids[100..150]).await;
    let maintenance = server.maintain().await;
    println!(
        "console-pages: {agents} agents, {records} usage records over 30 days (ingested in {:.0} s), \
         100 blocked, 50 pending approvals, database {}, after {maintenance}; seeding took {:.0} s",
        ingest.as_secs_f64(),
        server.backend,
        seeding.elapsed().as_secs_f64()
    );

    let cookie = sign_in(&server, &key).await;
    let base = &server.base;
    let agent = &agent_ids[120];
    let ninety_days_ago = Timestamp::from_millis(now - 89 * DAY_MS).to_string()[..10].to_owned();
    let pages = [
        ("GET /healthz (baseline)", format!("{base}/healthz")),
        ("overview", format!("{base}/console")),
        ("approvals", format!("{base}/console/approvals")),
        (
            "approvals queue (live refresh)",
            format!("{base}/console/approvals/queue"),
        ),
        ("agents", format!("{base}/console/agents")),
        (
            "agents, filtered",
            format!("{base}/console/agents?status=unknown&team=team-7"),
        ),
        ("an agent", format!("{base}/console/agents/{agent}")),
        ("keys", format!("{base}/console/keys")),
        (
            "approvals history, one agent",
            format!("{base}/console/approvals?agent_id={agent}"),
        ),
        ("costs (this month by day)", format!("{base}/console/costs")),
        (
            "costs (90 days by hour)",
            format!("{base}/console/costs?granularity=hour&from={ninety_days_ago}"),
        ),
        (
            "costs, one agent, 90 days by hour",
            format!(
                "{base}/console/costs?granularity=hour&from={ninety_days_ago}&agent_id={agent}"
            ),
        ),
        (
            "costs CSV (this month by day)",
            format!("{base}/console/costs/export/series"),
        ),
        ("audit trail", format!("{base}/console/audit")),
        (
            "audit trail, filtered by type",
            format!("{base}/console/audit?event_type=agent.blocked"),
        ),
        (
            "audit chain verification",
            format!("{base}/console/audit/verification"),
        ),
        (
            "audit chain, whole walk (button)",
            format!("{base}/console/audit/verification?whole=true"),
        ),
        ("anomalies", format!("{base}/console/anomalies")),
        ("compliance", format!("{base}/console/compliance")),
        (
            "an agent's compliance",
            format!("{base}/console/agents/{agent}/compliance"),
        ),
        (
            "a transparency card",
            format!("{base}/console/agents/{agent}/transparency-card"),
        ),
        ("policies", format!("{base}/console/policies")),
        (
            "policies, with a dry run",
            format!("{base}/console/policies?agent_id={agent}&provider=openai&model=gpt-4o"),
        ),
        ("MCP servers", format!("{base}/console/mcp-servers")),
        ("notifications", format!("{base}/console/notifications")),
        ("billing", format!("{base}/console/billing")),
        ("API reference page", format!("{base}/docs")),
    ];
    println!(
        "{:<34} {:>9} {:>9} {:>11}",
        "page", "p50 ms", "p95 ms", "p95 ratio"
    );
    let mut baseline = 0.0;
    for (name, url) in pages {
        let mut samples = Vec::with_capacity(REQUESTS);
        for _ in 0..REQUESTS {
            let started = Instant::now();
            let response = server
                .client
                .get(&url)
                .header("cookie", &cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{name}");
            response.bytes().await.unwrap();
            samples.push(started.elapsed());
        }
        samples.sort();
        let (p50, p95) = (ms(samples[REQUESTS / 2]), ms(samples[REQUESTS * 95 / 100]));
        if baseline == 0.0 {
            baseline = p95;
        }
        println!("{name:<34} {p50:>9.2} {p95:>9.2} {:>10.1}x", p95 / baseline);
    }
}

/// A console session for `key`, as its cookie header.
async fn sign_in(server: &BenchServer, key: &str) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let form = client
        .get(format!("{}/console/sign-in", server.base))
        .send()
        .await
        .unwrap();
    let pairing = cookie_value(&form, "warden_sign_in");
    let signed = client
        .post(format!("{}/console/sign-in/key", server.base))
        .header("cookie", format!("warden_sign_in={pairing}"))
        .form(&[("api_key", key), ("csrf", &pairing), ("next", "")])
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 303);
    format!("warden_session={}", cookie_value(&signed, "warden_session"))
}

fn cookie_value(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_owned()
}

/// `agents`' requests held for approval, as a proxy reports them.
async fn pending_approvals(server: &BenchServer, tenant_id: &str, key: &str, agents: &[String]) {
    let policy = server
        .post(
            "/api/v1/policies",
            key,
            json!({ "name": "approve gpt-4o", "policy_type": "require_approval",
                    "config": { "models": ["gpt-4o"] } }),
        )
        .await;
    let policy_id = policy["data"]["id"].as_i64().unwrap();
    let decisions: Vec<_> = agents
        .iter()
        .enumerate()
        .map(|(i, agent)| {
            json!({
                "tenant_id": tenant_id,
                "evaluation": { "request_id": format!("held-{i}"), "agent_id": agent,
                    "provider": "openai", "model": "gpt-4o",
                    "evaluated_at": Timestamp::from_millis(
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .unwrap()
                            .as_millis() as i64,
                    ).to_string(),
                    "results": [{ "policy_id": policy_id, "policy_name": "approve gpt-4o",
                        "policy_type": "require_approval", "result": "fail",
                        "reason": "requires human approval" }] },
                "approval": { "policy_id": policy_id,
                    "request_context": { "provider": "openai", "model": "gpt-4o" } },
            })
        })
        .collect();
    let ack: serde_json::Value = server
        .client
        .post(format!("{}/internal/v1/policy-decisions", server.base))
        .bearer_auth(SERVICE_TOKEN)
        .json(&json!({ "batch_id": "bench-held", "decisions": decisions }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        ack["data"]["approvals_created"],
        json!(agents.len()),
        "{ack}"
    );
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
