//! Anomaly detection, measured: AGENTS agents of one tenant with DAYS days of synthetic
//! usage in the hourly rollup (a daily rhythm, weekday effects, noise, one or two
//! models), a day of heartbeats every five minutes and a week of policy refusals; 5% of
//! the agents get an injected anomaly of each type (disjoint sets, half of each type in
//! each of its two forms), and as many again get a harmless bump (a 1.5× day, a one-off
//! unhealthy heartbeat, a few refusals) that a good detector ignores. One detector pass
//! (`anomalies::detect_tenant`, as the background round runs it) is then scored against
//! the injected truth: precision and recall per type. The pass's time is printed against
//! a baseline in the same process: one plain scan of the rows it reads.
//!
//! Run: `cargo run --release -p warden-benches --bin anomalies -- [AGENTS] [DAYS]`
//! (defaults 1000 30; SQLite in a temporary folder, or `WARDEN_BENCH_DATABASE_URL` for a
//! dedicated, empty PostgreSQL database).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use warden_benches::BenchServer;
use warden_control_plane::anomalies::detect_tenant;
use warden_control_plane::db::Db;
use warden_shared::clock::Clock;
use warden_shared::timestamp::Timestamp;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
const TYPES: [&str; 4] = [
    "cost_spike",
    "reliability_decay",
    "behavioral_drift",
    "security_threat",
];

/// A small deterministic generator (splitmix64): the same data on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn between(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.unit()
    }
}

/// What is planted in an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plant {
    Normal,
    Bump,
    Anomaly(&'static str, bool),
}

enum Param {
    I(i64),
    S(String),
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let agents = args.next().flatten().unwrap_or(1000);
    let days = args.next().flatten().unwrap_or(30) as i64;
    // A fixed "now", on an hour, so that every run sees the same windows.
    let now = Timestamp::from_millis(1_790_000_000_000 - 1_790_000_000_000 % HOUR_MS + 30 * 60_000);
    let server = BenchServer::start_with_clock(1024 * 1024, Clock::manual(now)).await;
    let (tenant_id, key) = server.create_tenant("enterprise", agents).await;
    println!(
        "anomalies: {agents} agents, {days} days, database {}",
        server.backend
    );
    let started = Instant::now();
    let ids = server.register_agents(&key, agents, 20).await;
    let mut rng = Rng(42);
    let plants = plant(&ids, &mut rng);
    let rows = seed(
        &server.db,
        &tenant_id,
        &ids,
        &plants,
        days,
        now.as_millis(),
        &mut rng,
    )
    .await;
    let maintenance = server.maintain().await;
    println!(
        "seeded {rows} rows in {:.1} s, then {maintenance}",
        started.elapsed().as_secs_f64()
    );

    // Baseline: one plain scan of the rows a pass reads.
    let started = Instant::now();
    let scanned = scan(&server.db, &tenant_id, now.as_millis(), days).await;
    let scan_time = started.elapsed();
    let started = Instant::now();
    let report = detect_tenant(&server.db, &tenant_id, now).await.unwrap();
    let pass_time = started.elapsed();
    println!(
        "pass: {} agents in {:.2} s ({:.2} ms per agent); a plain scan of its {scanned} input rows: {:.2} s; pass / scan = {:.2}",
        report.agents,
        pass_time.as_secs_f64(),
        pass_time.as_secs_f64() * 1000.0 / report.agents.max(1) as f64,
        scan_time.as_secs_f64(),
        pass_time.as_secs_f64() / scan_time.as_secs_f64().max(1e-9)
    );

    let found: Vec<(String, String)> =
        sqlx::query_as("SELECT agent_id, anomaly_type FROM anomalies WHERE tenant_id = $1")
            .bind(&tenant_id)
            .fetch_all(server.db.pool())
            .await
            .unwrap();
    score(&ids, &plants, &found);
}

/// 5% of the agents per type get an anomaly (half in each form), 20% a harmless bump.
fn plant(ids: &[String], rng: &mut Rng) -> HashMap<String, Plant> {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    for i in (1..order.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let share = (ids.len() / 20).max(2);
    let mut plants = HashMap::new();
    for (rank, index) in order.iter().enumerate() {
        let plant = match rank / share {
            t @ 0..=3 => Plant::Anomaly(TYPES[t], rank % 2 == 0),
            4..=7 => Plant::Bump,
            _ => Plant::Normal,
        };
        plants.insert(ids[*index].clone(), plant);
    }
    plants
}

#[allow(clippy::too_many_lines)]
async fn seed(
    db: &Db,
    tenant: &str,
    ids: &[String],
    plants: &HashMap<String, Plant>,
    days: i64,
    now: i64,
    rng: &mut Rng,
) -> usize {
    let end = now - now % HOUR_MS + HOUR_MS;
    let mut usage = Vec::new();
    let mut beats = Vec::new();
    let mut refusals = Vec::new();
    for (n, agent) in ids.iter().enumerate() {
        let plant = plants[agent];
        let daily = rng.between(2.0, 40.0);
        let tokens = rng.between(300.0, 3000.0);
        let second_model = rng.unit() < 0.5;
        let active: Vec<i64> = (0..24)
            .filter(|h| (8..20).contains(h) || rng.unit() < 0.1)
            .collect();
        for hours_ago in 1..=days * 24 {
            let hour = end - hours_ago * HOUR_MS;
            let hour_of_day = (hour / HOUR_MS) % 24;
            if !active.contains(&hour_of_day) {
                continue;
            }
            let recent = hours_ago <= 24;
            let weekday = if ((hour / DAY_MS) % 7) < 5 { 1.0 } else { 0.6 };
            let mut cost = daily / active.len() as f64 * weekday * rng.between(0.7, 1.3);
            let mut per_request = tokens * rng.between(0.85, 1.15);
            let mut model = if second_model && rng.unit() < 0.3 {
                "gpt-4o-mini"
            } else {
                "gpt-4o"
            };
            match plant {
                Plant::Anomaly("cost_spike", _) if recent => cost *= rng.between(4.0, 10.0),
                Plant::Anomaly("behavioral_drift", true) if recent => model = "claude-sonnet",
                Plant::Anomaly("behavioral_drift", false) if recent => per_request *= 5.0,
                Plant::Bump if recent && n % 3 == 0 => cost *= 1.5,
                _ => {}
            }
            let requests = (rng.between(3.0, 12.0)) as i64;
            usage.push(vec![
                Param::S(tenant.to_owned()),
                Param::I(hour),
                Param::S(agent.clone()),
                Param::S(String::new()),
                Param::S("openai".to_owned()),
                Param::S(model.to_owned()),
                Param::I(requests),
                Param::I((per_request * requests as f64) as i64),
                Param::I(0),
                Param::I((cost * 1e6) as i64),
            ]);
        }
        // A day of heartbeats every five minutes, up to now.
        let stops = matches!(plant, Plant::Anomaly("reliability_decay", true));
        for step in 0..288 {
            let at = now - step * 5 * 60_000;
            if stops && now - at < 45 * 60_000 {
                continue;
            }
            let failing = match plant {
                Plant::Anomaly("reliability_decay", false) => {
                    now - at < HOUR_MS && rng.unit() < 0.8
                }
                Plant::Bump => step == 3 && n % 3 == 1,
                _ => rng.unit() < 0.01,
            };
            beats.push(vec![
                Param::S(format!("hb_{n}_{step}")),
                Param::S(tenant.to_owned()),
                Param::S(agent.clone()),
                Param::S(if failing { "degraded" } else { "healthy" }.to_owned()),
                Param::I(at),
            ]);
        }
        // A week of refusals at an agent's own low rate; a burst for the planted ones.
        let rate = rng.between(0.0, 0.5);
        for hours_ago in 0..(7 * 24 + 1) {
            let mut count = usize::from(rng.unit() < rate);
            if hours_ago == 0 {
                count += match plant {
                    Plant::Anomaly("security_threat", _) => rng.between(30.0, 90.0) as usize,
                    Plant::Bump if n % 3 == 2 => 4,
                    _ => 0,
                };
            }
            for i in 0..count {
                let at = now - hours_ago * HOUR_MS - (rng.unit() * (HOUR_MS - 1) as f64) as i64;
                refusals.push(vec![
                    Param::S(tenant.to_owned()),
                    Param::S(format!("r_{n}_{hours_ago}_{i}")),
                    Param::S(agent.clone()),
                    Param::S("openai".to_owned()),
                    Param::S("o1".to_owned()),
                    Param::I(at),
                    Param::I(0),
                ]);
            }
        }
    }
    let total = usage.len() + beats.len() + refusals.len();
    insert(db, "usage_hourly", "tenant_id, hour, agent_id, team_id, model_provider, model_name, requests, input_tokens, output_tokens, cost_micros", usage).await;
    insert(
        db,
        "heartbeats",
        "id, tenant_id, agent_id, status, received_at",
        beats,
    )
    .await;
    insert(
        db,
        "policy_decisions",
        "tenant_id, request_id, agent_id, provider, model, evaluated_at, result_set_id",
        refusals,
    )
    .await;
    total
}

async fn insert(db: &Db, table: &str, columns: &str, rows: Vec<Vec<Param>>) {
    let width = columns.split(',').count();
    for chunk in rows.chunks(500) {
        let values: Vec<String> = (0..chunk.len())
            .map(|r| {
                let cells: Vec<String> =
                    (1..=width).map(|c| format!("${}", r * width + c)).collect();
                format!("({})", cells.join(", "))
            })
            .collect();
        let sql = format!(
            "INSERT INTO {table} ({columns}) VALUES {}",
            values.join(", ")
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            for cell in row {
                query = match cell {
                    Param::I(value) => query.bind(*value),
                    Param::S(value) => query.bind(value.clone()),
                };
            }
        }
        query.execute(db.pool()).await.unwrap();
    }
}

/// One plain read of every row a pass reads (its baseline).
async fn scan(db: &Db, tenant: &str, now: i64, days: i64) -> i64 {
    let mut rows = 0;
    for (sql, from) in [
        (
            "SELECT COUNT(*) FROM usage_hourly WHERE tenant_id = $1 AND hour >= $2",
            now - (days.min(15) + 1) * DAY_MS,
        ),
        (
            "SELECT COUNT(*) FROM heartbeats WHERE tenant_id = $1 AND received_at >= $2",
            now - DAY_MS,
        ),
        (
            "SELECT COUNT(*) FROM policy_decisions WHERE tenant_id = $1 AND evaluated_at >= $2",
            now - 8 * DAY_MS,
        ),
    ] {
        let count: i64 = sqlx::query_scalar(sql)
            .bind(tenant)
            .bind(from)
            .fetch_one(db.pool())
            .await
            .unwrap();
        rows += count;
    }
    rows
}

/// Precision and recall per type against the planted truth.
fn score(ids: &[String], plants: &HashMap<String, Plant>, found: &[(String, String)]) {
    let found: HashSet<(&str, &str)> = found
        .iter()
        .map(|(a, t)| (a.as_str(), t.as_str()))
        .collect();
    println!(
        "{:<18} {:>7} {:>7} {:>7} {:>10} {:>7}",
        "type", "planted", "found", "right", "precision", "recall"
    );
    let mut worst: f64 = 1.0;
    for kind in TYPES {
        let planted: HashSet<&str> = ids
            .iter()
            .filter(|id| matches!(plants[*id], Plant::Anomaly(t, _) if t == kind))
            .map(String::as_str)
            .collect();
        let flagged: HashSet<&str> = found
            .iter()
            .filter(|(_, t)| *t == kind)
            .map(|(a, _)| *a)
            .collect();
        let right = planted.intersection(&flagged).count();
        let precision = if flagged.is_empty() {
            1.0
        } else {
            right as f64 / flagged.len() as f64
        };
        let recall = if planted.is_empty() {
            1.0
        } else {
            right as f64 / planted.len() as f64
        };
        worst = worst.min(precision).min(recall);
        println!(
            "{kind:<18} {:>7} {:>7} {right:>7} {precision:>10.3} {recall:>7.3}",
            planted.len(),
            flagged.len()
        );
    }
    println!("lowest precision or recall: {worst:.3} (goal 0.9)");
}
