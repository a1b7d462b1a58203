//! `TestApp`: the real control plane on port 0, one per test, with typed helpers.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use reqwest::{Method, RequestBuilder, Response};
use serde_json::{json, Value};
use sqlx::Connection;
use tokio::sync::{oneshot, OnceCell};
use warden_control_plane::config::{Config, LogFormat, Secret};
use warden_control_plane::db::Db;
use warden_control_plane::startup;
use warden_shared::clock::Clock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs the test body once per backend, as `<name>::sqlite` and `<name>::postgres`.
macro_rules! db_test {
    ($name:ident, |$app:ident| $body:expr) => {
        db_test!($name, |_config| {}, |$app| $body);
    };
    ($name:ident, |$config:ident| $configure:expr, |$app:ident| $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let $app = crate::helpers::TestApp::spawn_with(
                    crate::helpers::Backend::Sqlite,
                    |$config: &mut warden_control_plane::config::Config| $configure,
                )
                .await;
                $body
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let $app = crate::helpers::TestApp::spawn_with(
                    crate::helpers::Backend::Postgres,
                    |$config: &mut warden_control_plane::config::Config| $configure,
                )
                .await;
                $body
            }
        }
    };
}

fn serve(app: startup::Application) -> Server {
    let (shutdown, signal) = oneshot::channel::<()>();
    let task = tokio::spawn(app.serve(async move {
        let _ = signal.await;
    }));
    Server { shutdown, task }
}

/// The service token every test app is configured with.
pub const SERVICE_TOKEN: &str = "test-service-token-0123456789abcdef";

/// The platform-admin key every test app of this process bootstraps with.
pub fn platform_key() -> &'static str {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(warden_shared::keys::generate_api_key)
}

pub struct TestApp {
    pub base: String,
    pub api: String,
    pub client: reqwest::Client,
    pub db: Db,
    pub clock: Clock,
    pub backend: Backend,
    server: Option<Server>,
    config: Config,
    _dir: Option<tempfile::TempDir>,
}

/// A running control plane: its shutdown trigger and its task.
struct Server {
    shutdown: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// A tenant made for one test, with its `admin` key.
#[derive(Debug, Clone)]
pub struct TestTenant {
    pub id: String,
    pub admin_key: String,
}

impl TestApp {
    /// The control plane's `/metrics` text.
    pub async fn metrics(&self) -> String {
        let response = self.client.get(format!("{}/metrics", self.base)).send();
        response.await.unwrap().text().await.unwrap()
    }

    /// The configuration the app was started with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    pub async fn spawn_with(backend: Backend, configure: impl FnOnce(&mut Config)) -> TestApp {
        let (database_url, dir) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}", dir.path().join("warden.db").display());
                (url, Some(dir))
            }
            Backend::Postgres => (postgres_test_database().await.to_owned(), None),
        };
        let mut config = Config {
            listen: ([127, 0, 0, 1], 0).into(),
            database_url: Secret::new(database_url),
            database_max_connections: 5,
            bootstrap_platform_key: Some(Secret::new(platform_key())),
            service_token: Some(Secret::new(SERVICE_TOKEN)),
            log_format: LogFormat::Pretty,
            // Tests close days by hand: a background close on the shared PostgreSQL
            // database would run on another test's clock.
            close_days_interval_secs: 0,
            // Likewise the summaries of repeated policy violations (tests run them).
            violation_summary_interval_secs: 0,
            // Likewise the sweep of lapsed approvals, and the notification worker (its
            // lease is one per database); the tests that need them start their own.
            approval_expiry_interval_secs: 0,
            anomaly_detection_interval_secs: 0,
            // Tests purge captured payloads by hand, on their own clock.
            payload_purge_interval_secs: 0,
            billing: warden_control_plane::config::BillingConfig {
                plan_change_interval_secs: 0,
                ..Default::default()
            },
            notifications: warden_control_plane::config::NotificationsConfig {
                delivery_interval_ms: 0,
                ..Default::default()
            },
            ..Config::default()
        };
        configure(&mut config);
        // A manual clock frozen at the real time: tests move it instead of sleeping.
        let clock = Clock::manual(warden_shared::timestamp::Timestamp::from_millis(now_ms()));
        let app = startup::build(config.clone(), clock.clone())
            .await
            .expect("the control plane starts");
        config.listen = app.addr;
        let base = format!("http://{}", app.addr);
        let db = app.state.db.clone();
        TestApp {
            api: format!("{base}/api/v1"),
            base,
            client: reqwest::Client::new(),
            db,
            clock,
            backend,
            server: Some(serve(app)),
            config,
            _dir: dir,
        }
    }

    /// A control plane on a database of its own (on PostgreSQL a new database, not the
    /// one the process's other tests share), for the jobs that run once per database,
    /// such as the notification worker, elected by a lease.
    pub async fn spawn_alone(backend: Backend, configure: impl FnOnce(&mut Config)) -> TestApp {
        let own = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(new_postgres_database().await),
        };
        TestApp::spawn_with(backend, |config| {
            configure(config);
            if let Some(url) = own {
                config.database_url = Secret::new(url);
            }
        })
        .await
    }

    /// Stops the control plane and starts it again on the same database and address
    /// with its configuration changed by `configure`.
    pub async fn restart_with(&mut self, configure: impl FnOnce(&mut Config)) {
        self.stop().await;
        configure(&mut self.config);
        self.start_again().await;
    }

    /// The OpenAPI document the control plane serves.
    pub async fn openapi(&self) -> Value {
        self.client
            .get(format!("{}/openapi.json", self.api))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The database this control plane uses, as `database_url` names it.
    pub fn database_url(&self) -> String {
        self.config.database_url.expose().to_owned()
    }

    /// Stops the control plane (gracefully, as on SIGTERM) and waits until it is gone.
    pub async fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            let _ = server.shutdown.send(());
            server.task.await.unwrap().unwrap();
        }
    }

    /// Starts the control plane again on the same address and database.
    pub async fn start_again(&mut self) {
        let app = startup::build(self.config.clone(), self.clock.clone())
            .await
            .expect("the control plane starts again");
        self.server = Some(serve(app));
    }

    /// A request to `/api/v1{path}` carrying `key` as bearer when given.
    pub fn request(&self, method: Method, path: &str, key: Option<&str>) -> RequestBuilder {
        let builder = self.client.request(method, format!("{}{path}", self.api));
        match key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    pub async fn get(&self, path: &str, key: &str) -> Response {
        self.request(Method::GET, path, Some(key))
            .send()
            .await
            .unwrap()
    }

    /// Posts `body` to the internal endpoint `path` (`/internal/v1/...`) with `token`, as
    /// a proxy would with the service token.
    pub async fn post_internal(&self, path: &str, token: &str, body: &Value) -> Response {
        let url = format!("{}/internal/v1/{path}", self.base);
        let request = self.client.post(url).bearer_auth(token).json(body);
        request.send().await.unwrap()
    }

    pub async fn post(&self, path: &str, key: &str, body: Value) -> Response {
        self.request(Method::POST, path, Some(key))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn patch(&self, path: &str, key: &str, body: Value) -> Response {
        self.request(Method::PATCH, path, Some(key))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn delete(&self, path: &str, key: &str) -> Response {
        self.request(Method::DELETE, path, Some(key))
            .send()
            .await
            .unwrap()
    }

    /// A new tenant (through the platform API) and its admin key.
    pub async fn new_tenant(&self, plan: &str) -> TestTenant {
        let unique = warden_shared::ids::new_id(warden_shared::ids::IdKind::User, now_ms());
        let response = self
            .post(
                "/admin/tenants",
                platform_key(),
                json!({
                    "company_name": format!("Test {unique}"),
                    "owner_email": format!("{}@example.com", unique.to_lowercase()),
                    "plan": plan,
                }),
            )
            .await;
        let body = expect_status(response, 201).await;
        TestTenant {
            id: body["data"]["id"].as_str().unwrap().to_owned(),
            admin_key: body["data"]["api_key"].as_str().unwrap().to_owned(),
        }
    }

    /// A key of `tenant` holding exactly `scopes`.
    pub async fn key_with_scopes(&self, tenant: &TestTenant, scopes: &[&str]) -> String {
        let response = self
            .post(
                "/auth/api-keys",
                &tenant.admin_key,
                json!({ "name": "test key", "scopes": scopes }),
            )
            .await;
        let body = expect_status(response, 201).await;
        body["data"]["raw_key"].as_str().unwrap().to_owned()
    }

    pub async fn register_agent(&self, key: &str, body: Value) -> Value {
        let response = self.post("/agents", key, body).await;
        expect_status(response, 201).await["data"].clone()
    }

    /// The audit trail of one target, oldest first.
    pub async fn audit_events(&self, tenant_id: &str, target_id: &str) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT event_type FROM audit_events WHERE tenant_id = $1 AND target_id = $2 \
             ORDER BY occurred_at, id",
        )
        .bind(tenant_id)
        .bind(target_id)
        .fetch_all(self.db.pool())
        .await
        .unwrap()
    }

    /// Rows of `table` whose `tenant_id` is `tenant_id`.
    pub async fn count_rows(&self, table: &str, tenant_id: &str) -> i64 {
        // Table names come from the database catalog in tests, never from a request.
        let column = if table == "tenants" {
            "id"
        } else {
            "tenant_id"
        };
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE {column} = $1");
        sqlx::query_scalar(&sql)
            .bind(tenant_id)
            .fetch_one(self.db.pool())
            .await
            .unwrap()
    }

    /// Every table of the schema (migration bookkeeping excluded).
    pub async fn tables(&self) -> Vec<String> {
        let sql = match self.backend {
            Backend::Sqlite => {
                "SELECT name FROM sqlite_master WHERE type = 'table' \
                 AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx%' ORDER BY name"
            }
            Backend::Postgres => {
                "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
                 WHERE table_schema = 'public' AND table_name NOT LIKE '_sqlx%' ORDER BY 1"
            }
        };
        sqlx::query_scalar(sql)
            .fetch_all(self.db.pool())
            .await
            .unwrap()
    }
}

/// Asserts the status and returns the JSON body (or `null` for an empty body).
pub async fn expect_status(response: Response, status: u16) -> Value {
    let actual = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert_eq!(actual, status, "unexpected status; body: {text}");
    if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }
}

/// Asserts an error answer: status, the envelope's shape and its stable code.
pub async fn expect_error(response: Response, status: u16, code: &str) -> Value {
    let body = expect_status(response, status).await;
    assert_eq!(body["success"], json!(false), "error envelope: {body}");
    assert_eq!(body["error"]["code"], json!(code), "error code: {body}");
    assert!(
        body["error"]["message"].is_string(),
        "error message: {body}"
    );
    assert!(
        body["error"]["details"].is_object(),
        "error details: {body}"
    );
    body
}

/// The value of `series` (a metric's name with its labels, as Prometheus's text format
/// writes them) in the exposition `metrics`, if it is there.
pub fn metric(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One PostgreSQL database per test process, shared by its tests (each test works in
/// its own tenant). Databases left by earlier runs more than an hour old are dropped.
async fn postgres_test_database() -> &'static str {
    static URL: OnceCell<String> = OnceCell::const_new();
    URL.get_or_init(|| async {
        #[allow(clippy::disallowed_methods)] // Test settings are not the service's configuration.
        let admin_url = std::env::var("WARDEN_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
        let mut admin = sqlx::PgConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "PostgreSQL is required for the postgres half of the suite and is not \
                 reachable at {admin_url}: {error}. Start it (see README) or set \
                 WARDEN_TEST_POSTGRES_URL."
                )
            });
        let now_secs = now_ms() / 1000;
        let stale: Vec<String> = sqlx::query_scalar(
            "SELECT datname::text FROM pg_database WHERE datname LIKE 'warden_test_%'",
        )
        .fetch_all(&mut admin)
        .await
        .unwrap();
        for name in stale {
            let created = name.split('_').nth(2).and_then(|s| s.parse::<i64>().ok());
            if created.is_some_and(|secs| now_secs - secs > 3600) {
                let drop = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                let _ = sqlx::query(&drop).execute(&mut admin).await;
            }
        }
        let name = format!("warden_test_{now_secs}_{}", std::process::id());
        let create = format!("CREATE DATABASE \"{name}\"");
        sqlx::query(&create).execute(&mut admin).await.unwrap();
        let (prefix, _) = admin_url.rsplit_once('/').unwrap();
        format!("{prefix}/{name}")
    })
    .await
}

/// A new, empty PostgreSQL database for one test; its name starts like the shared one's,
/// so the stale-database sweep drops it after an hour.
async fn new_postgres_database() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let shared = postgres_test_database().await;
    let (prefix, shared_name) = shared.rsplit_once('/').unwrap();
    let name = format!(
        "{shared_name}_{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let mut admin = sqlx::PgConnection::connect(&format!("{prefix}/postgres"))
        .await
        .unwrap();
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&mut admin)
        .await
        .unwrap();
    format!("{prefix}/{name}")
}

/// Creates a policy through the API; returns its `data`.
pub async fn create_policy(app: &TestApp, key: &str, body: Value) -> Value {
    expect_status(app.post("/policies", key, body).await, 201).await["data"].clone()
}

/// Posts a whole decision batch (`batch_id`, `decisions`, maybe `result_lists`) to
/// `/internal/v1/policy-decisions` with the service token.
pub async fn post_decision_batch(app: &TestApp, batch: &Value) -> reqwest::Response {
    app.post_internal("policy-decisions", SERVICE_TOKEN, batch)
        .await
}

/// Posts `decisions` to `/internal/v1/policy-decisions` as a proxy would; returns the
/// acknowledgement's `data`. A batch id is written once, platform-wide, and the
/// PostgreSQL half's tests share one database: give each test batch ids of its own.
pub async fn report_decisions(app: &TestApp, batch_id: &str, decisions: &[Value]) -> Value {
    let batch = json!({ "batch_id": batch_id, "decisions": decisions });
    expect_status(post_decision_batch(app, &batch).await, 200).await["data"].clone()
}

/// Turns SQLite's busy handler off on every connection of `app`'s pool: a write that then
/// meets the write lock held fails at once (500) instead of sleeping, so a test sees
/// whether a write took its turn among the writers (`Db::begin_write`).
pub async fn without_busy_handler(app: &TestApp) {
    let pool = app.db.pool();
    let mut connections = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        connections.push(pool.acquire().await.unwrap());
    }
    for connection in &mut connections {
        sqlx::query("PRAGMA busy_timeout = 0")
            .execute(&mut **connection)
            .await
            .unwrap();
    }
}
