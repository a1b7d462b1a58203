//! What every benchmark shares: the real control plane on port 0 and a seeded tenant.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::fmt::Write as _;

use serde_json::{json, Value};
use warden_control_plane::config::{Config, LogFormat, Secret};
use warden_control_plane::startup;
use warden_shared::clock::Clock;

/// jemalloc, as the `warden` binary runs both planes (`warden_proxy::allocator`): a
/// bench of the control plane in process measures what operators run, not glibc's
/// malloc, which cost the ledger's ingest a tenth of the bench's CPU.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The service token benchmarks configure for the internal endpoints.
pub const SERVICE_TOKEN: &str = "bench-service-token-0123456789";

/// A control plane started by `startup::build`, exactly as production starts it.
pub struct BenchServer {
    pub base: String,
    pub client: reqwest::Client,
    /// `sqlite` or `postgres`, for the printed header.
    pub backend: String,
    /// The server's database, for maintenance between phases (`VACUUM ANALYZE`).
    pub db: warden_control_plane::db::Db,
    platform_key: String,
    _dir: tempfile::TempDir,
}

impl BenchServer {
    /// SQLite in a temporary folder, or `WARDEN_BENCH_DATABASE_URL` (a dedicated, empty
    /// database: migrations are applied to it).
    pub async fn start(max_body_bytes: usize) -> BenchServer {
        Self::start_with_clock(max_body_bytes, Clock::system()).await
    }

    /// As [`BenchServer::start`], on `clock` (a benchmark replaying history moves it).
    pub async fn start_with_clock(max_body_bytes: usize, clock: Clock) -> BenchServer {
        let dir = tempfile::tempdir().unwrap();
        let database_url = std::env::var("WARDEN_BENCH_DATABASE_URL")
            .unwrap_or_else(|_| format!("sqlite://{}", dir.path().join("bench.db").display()));
        let platform_key = warden_shared::keys::generate_api_key();
        let config = Config {
            listen: ([127, 0, 0, 1], 0).into(),
            database_url: Secret::new(database_url.clone()),
            bootstrap_platform_key: Some(Secret::new(platform_key.clone())),
            service_token: Some(Secret::new(SERVICE_TOKEN)),
            log_format: LogFormat::Pretty,
            max_body_bytes,
            // Benchmarks run the detector themselves, when they measure it.
            anomaly_detection_interval_secs: 0,
            ..Config::default()
        };
        let app = startup::build(config, clock).await.unwrap();
        let base = format!("http://{}", app.addr);
        let db = app.state.db.clone();
        tokio::spawn(app.serve(std::future::pending()));
        BenchServer {
            base,
            client: reqwest::Client::new(),
            backend: database_url.split(':').next().unwrap_or("?").to_owned(),
            db,
            platform_key,
            _dir: dir,
        }
    }

    /// Runs what autovacuum does in steady state (`VACUUM ANALYZE` on PostgreSQL,
    /// `ANALYZE` on SQLite) after a bulk load; returns the statement it ran.
    pub async fn maintain(&self) -> &'static str {
        let maintenance = if self.backend == "postgres" {
            "VACUUM ANALYZE"
        } else {
            "ANALYZE"
        };
        sqlx::query(maintenance)
            .execute(self.db.pool())
            .await
            .unwrap();
        maintenance
    }

    /// What a day's end brings in production, at a day's end of the seeding: the ledger
    /// closes the day, and on PostgreSQL autovacuum has long since reclaimed the row
    /// versions the hour rolls and the close left in the small tables they churn (it
    /// runs after a fifth of a table's rows change: hourly there). Compressed into
    /// seconds without it, a month leaves `usage_daily_open` a hundred times its size.
    pub async fn end_of_day(&self, clock: &Clock) {
        warden_control_plane::ledger::close_days(&self.db, clock.now())
            .await
            .unwrap();
        if self.backend == "postgres" {
            sqlx::query("VACUUM usage_daily_open, usage_monthly, usage_days_closed")
                .execute(self.db.pool())
                .await
                .unwrap();
        }
    }

    /// Creates a tenant on `plan` through the platform API: its id and admin key.
    pub async fn create_tenant(&self, plan: &str, agent_limit: usize) -> (String, String) {
        let tenant = self
            .post(
                "/api/v1/admin/tenants",
                &self.platform_key,
                json!({ "company_name": "Bench", "owner_email": "bench@example.com",
                        "plan": plan, "agent_limit": agent_limit.max(1) }),
            )
            .await;
        let id = tenant["data"]["id"].as_str().unwrap().to_owned();
        let key = tenant["data"]["api_key"].as_str().unwrap().to_owned();
        (id, key)
    }

    /// Registers `count` agents spread over `teams` teams; returns their ids.
    pub async fn register_agents(&self, key: &str, count: usize, teams: usize) -> Vec<String> {
        let mut ids = Vec::with_capacity(count);
        for i in 0..count {
            let agent = self
                .post(
                    "/api/v1/agents",
                    key,
                    json!({ "name": format!("agent-{i}"), "team": format!("team-{}", i % teams) }),
                )
                .await;
            ids.push(agent["data"]["id"].as_str().unwrap().to_owned());
        }
        ids
    }

    /// POSTs `body` with `key` and returns the JSON answer.
    pub async fn post(&self, path: &str, key: &str, body: Value) -> Value {
        self.client
            .post(format!("{}{path}", self.base))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

const DAY_MS: i64 = 86_400_000;

/// How [`ingest_usage`] sends: batches in flight at once, and whether it closes each
/// day as it ends (see [`BenchServer::end_of_day`]).
#[derive(Debug, Clone, Copy)]
pub struct Seeding {
    pub senders: usize,
    pub close_each_day: bool,
}

/// Records per ingest batch, the proxies' largest.
pub const BATCH: usize = 1000;
const MODELS: [&str; 4] = ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "o4-mini"];

/// Sends `records` usage records of `agent_ids` through `/internal/v1/usage-batches`,
/// spread evenly over `span` (Unix ms, from and to), `senders` batches in flight, as
/// proxies flush. `clock` (the server's) follows the records, so the ledger's round
/// closes finished days; with `close_each_day`, each day is closed as it ends, as a
/// month of production leaves the tables. Returns how long it took.
pub async fn ingest_usage(
    server: &BenchServer,
    tenant_id: &str,
    agent_ids: &[String],
    records: usize,
    (from, to): (i64, i64),
    clock: &Clock,
    how: Seeding,
) -> std::time::Duration {
    let Seeding {
        senders,
        close_each_day,
    } = how;
    let started = std::time::Instant::now();
    let span = to - from;
    let agents: Vec<String> = agent_ids.iter().map(|id| json!(id).to_string()).collect();
    let tenant = json!(tenant_id).to_string();
    let mut in_flight = tokio::task::JoinSet::new();
    let (mut sent, mut batch_no) = (0usize, 0usize);
    while sent < records {
        let size = BATCH.min(records - sent);
        // Written as text, as a proxy's flush serialises its records: building a JSON
        // value per record cost the bench (sharing the cores with the ledger) more than
        // the server's parse of it.
        let mut body = String::with_capacity(64 + size * 256);
        let _ = write!(body, r#"{{"batch_id":"b{batch_no}","records":["#);
        for i in sent..sent + size {
            let at = from + (i as i64 * span / records as i64);
            let _ = write!(
                body,
                r#"{comma}{{"record_id":"r{i:010}","tenant_id":{tenant},"agent_id":{agent},"model_provider":"openai","model_name":"{model}","input_tokens":{input},"output_tokens":{output},"recorded_at":"{at}"}}"#,
                comma = if i > sent { "," } else { "" },
                agent = agents[i % agents.len()],
                model = MODELS[(i / agents.len()) % MODELS.len()],
                input = 500 + (i % 700),
                output = 100 + (i % 300),
                at = warden_shared::timestamp::Timestamp::from_millis(at),
            );
        }
        body.push_str("]}");
        let request = server
            .client
            .post(format!("{}/internal/v1/usage-batches", server.base))
            .bearer_auth(SERVICE_TOKEN)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        let last_at = from + ((sent + size - 1) as i64 * span / records as i64);
        let day_before = clock.now().as_millis() / DAY_MS;
        clock.advance((last_at - clock.now().as_millis()).max(0));
        if close_each_day && clock.now().as_millis() / DAY_MS > day_before {
            server.end_of_day(clock).await;
        }
        if in_flight.len() >= senders.max(1) {
            in_flight.join_next().await.unwrap().unwrap();
        }
        in_flight.spawn(async move {
            let ack: Value = request.send().await.unwrap().json().await.unwrap();
            assert_eq!(ack["data"]["accepted"].as_u64(), Some(size as u64), "{ack}");
        });
        sent += size;
        batch_no += 1;
        if batch_no % 1000 == 0 {
            eprintln!(
                "  {sent} records, {:.0} records/s so far",
                sent as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    while let Some(done) = in_flight.join_next().await {
        done.unwrap();
    }
    started.elapsed()
}
