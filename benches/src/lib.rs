//! What every benchmark shares: the real control plane on port 0 and a seeded tenant.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use serde_json::{json, Value};
use warden_control_plane::config::{Config, LogFormat, Secret};
use warden_control_plane::startup;
use warden_shared::clock::Clock;

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
