//! The whole system end to end: the control plane (`TestApp`), the proxy built by
//! `warden_proxy::build` pointed at it, and a local mock provider, all on port 0.

mod action_approvals;
mod adversary;
mod balancer;
mod bodies;
mod budget_asks;
mod budgets;
mod capture;
mod connections;
mod declared_providers;
mod descriptors;
mod enforcement;
mod exit_paths;
mod failover;
mod failures;
pub mod guardrails;
mod key_limits;
mod ledger_faults;
mod lifecycle;
mod managed_keys;
mod mcp_gateway;
mod messages_api;
mod metrics;
mod mock;
mod moto;
mod openai_client;
mod outage;
mod policies;
mod rate_grants;
mod read_your_writes;
mod replicas;
mod responses_api;
mod sdk;
mod stats;
mod tls;
mod tls_upstream;
mod traces;
mod usage_spool;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::oneshot;
use warden_proxy::config::{ProvidersConfig, ProxyConfig};
use warden_proxy::ProxySettings;
use warden_shared::secret::Secret;

use crate::helpers::{expect_status, TestApp, TestTenant, SERVICE_TOKEN};
pub use mock::MockProvider;

/// The credential the proxy holds for the mock provider; agents never see it.
pub const UPSTREAM_KEY: &str = "sk-upstream-test-credential";

pub struct TestProxy {
    pub base: String,
    pub client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// The proxy's own usage spool, unless the test named one.
    _spool: Option<tempfile::TempDir>,
}

impl TestProxy {
    /// A proxy following `app`'s state stream, sending every provider to `provider`.
    pub async fn start(app: &TestApp, provider: &MockProvider) -> TestProxy {
        TestProxy::start_with(app, provider, |_| {}).await
    }

    pub async fn start_with(
        app: &TestApp,
        provider: &MockProvider,
        configure: impl FnOnce(&mut ProxyConfig),
    ) -> TestProxy {
        TestProxy::start_configured(app, provider, configure, |_| {}).await
    }

    /// As [`TestProxy::start_with`], then `providers` changes the providers' settings
    /// (each points at the mock with [`UPSTREAM_KEY`] before). The proxy allows the
    /// private hosts `app` allows (`outbound.allow_private`), as one settings file gives
    /// both planes the same.
    pub async fn start_configured(
        app: &TestApp,
        provider: &MockProvider,
        configure: impl FnOnce(&mut ProxyConfig),
        configure_providers: impl FnOnce(&mut ProvidersConfig),
    ) -> TestProxy {
        let allow_private = app.config().outbound.allow_private.clone();
        TestProxy::launch(
            app,
            provider,
            configure,
            configure_providers,
            allow_private,
            None,
        )
        .await
    }

    /// A proxy sending its spans to `tracer`.
    pub async fn start_traced(
        app: &TestApp,
        provider: &MockProvider,
        tracer: warden_proxy::otel::Tracer,
    ) -> TestProxy {
        let allow_private = app.config().outbound.allow_private.clone();
        TestProxy::launch(app, provider, |_| {}, |_| {}, allow_private, Some(tracer)).await
    }

    /// A proxy allowing only the private hosts `allow_private` names, whatever `app`
    /// allows.
    pub async fn start_allowing(
        app: &TestApp,
        provider: &MockProvider,
        allow_private: Vec<String>,
    ) -> TestProxy {
        TestProxy::launch(app, provider, |_| {}, |_| {}, allow_private, None).await
    }

    async fn launch(
        app: &TestApp,
        provider: &MockProvider,
        configure: impl FnOnce(&mut ProxyConfig),
        configure_providers: impl FnOnce(&mut ProvidersConfig),
        allow_private: Vec<String>,
        tracer: Option<warden_proxy::otel::Tracer>,
    ) -> TestProxy {
        let spool = tempfile::tempdir().expect("a spool folder");
        let mut proxy = ProxyConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            control_plane_url: app.base.clone(),
            usage_flush_interval_ms: 50,
            usage_spool_dir: spool.path().to_owned(),
            ..ProxyConfig::default()
        };
        configure(&mut proxy);
        let mut providers = ProvidersConfig::default();
        for endpoint in [
            &mut providers.openai,
            &mut providers.anthropic,
            &mut providers.google,
            &mut providers.nvidia,
            &mut providers.bedrock,
        ] {
            endpoint.base_url = provider.base.clone();
            endpoint.api_key = Some(Secret::new(UPSTREAM_KEY));
        }
        configure_providers(&mut providers);
        let built = warden_proxy::build(ProxySettings {
            proxy,
            providers,
            service_token: Secret::new(SERVICE_TOKEN),
            allow_private,
            // The control plane's manual clock: rate windows and budget periods turn when
            // the test moves it, on both planes at once.
            clock: app.clock.clone(),
            tracer,
        })
        .await
        .expect("the proxy starts");
        let base = format!("http://{}", built.addr);
        let (shutdown, signal) = oneshot::channel::<()>();
        let served = tokio::spawn(built.serve(async move {
            let _ = signal.await;
        }));
        let proxy = TestProxy {
            base,
            client: reqwest::Client::new(),
            shutdown: Some(shutdown),
            served: Some(served),
            _spool: Some(spool),
        };
        proxy.wait_until_loaded().await;
        proxy
    }

    async fn wait_until_loaded(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let health: Value = self
                .client
                .get(format!("{}/healthz", self.base))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if health["status"] == "ok" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the proxy never loaded its state"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends the proxy the shutdown signal (as SIGTERM does) without waiting for it to
    /// end; [`TestProxy::stop`] then waits.
    pub fn signal_stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Stops the proxy as SIGTERM does (open requests finish, usage is spooled and sent
    /// for a short while) and waits until it is gone.
    pub async fn stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(served) = self.served.take() {
            served.await.unwrap().unwrap();
        }
    }

    /// POSTs a chat completion with `key`.
    pub async fn chat(&self, key: &str, body: Value) -> reqwest::Response {
        self.client
            .post(format!("{}/v1/chat/completions", self.base))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// The status and body of a short chat with `model`.
    pub async fn chat_answer(&self, key: &str, model: &str) -> (u16, Value) {
        let response = self.chat(key, simple_chat(model)).await;
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or_default())
    }

    /// The models and owners `GET /v1/models` lists for `key`.
    pub async fn models(&self, key: &str) -> Vec<(String, String)> {
        let list: Value = self
            .client
            .get(format!("{}/v1/models", self.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(list["object"], json!("list"));
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["id"].as_str().unwrap().to_owned(),
                    m["owned_by"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}

impl TestProxy {
    /// A starter tenant with a proxy key (and the agent behind it), once this proxy knows
    /// the key: tenant, raw key, body of the created key.
    pub async fn tenant_with_key(
        &self,
        app: &TestApp,
        key_body: Value,
    ) -> (TestTenant, String, Value) {
        let tenant = app.new_tenant("starter").await;
        let (raw, created) = self.new_key(app, &tenant.admin_key, key_body).await;
        (tenant, raw, created)
    }

    /// The proxy's `/metrics` text.
    pub async fn metrics(&self) -> String {
        let response = self.client.get(format!("{}/metrics", self.base)).send();
        response.await.unwrap().text().await.unwrap()
    }

    /// A proxy key created with `admin` from `body`, once this proxy knows it (keys
    /// arrive within a second): raw key, body of the created key.
    pub async fn new_key(&self, app: &TestApp, admin: &str, body: Value) -> (String, Value) {
        let created = expect_status(app.post("/proxy-keys", admin, body).await, 201).await;
        let raw = created["data"]["raw_key"].as_str().unwrap().to_owned();
        eventually(Duration::from_secs(3), || {
            let request = self
                .client
                .get(format!("{}/v1/models", self.base))
                .bearer_auth(&raw);
            async move { (request.send().await.unwrap().status() == 200).then_some(()) }
        })
        .await;
        (raw, created["data"].clone())
    }
}

/// Polls `check` every 20 ms until it returns `Some`, for at most `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "the condition did not hold within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `check` every 20 ms for `window` and fails the moment it does not hold: what
/// "nothing more arrives" means (a resend counted twice, a late duplicate), checked
/// throughout the window rather than once at its end.
pub async fn stays<F, Fut>(window: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + window;
    while Instant::now() < deadline {
        assert!(check().await, "{what} stopped holding");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn simple_chat(model: &str) -> Value {
    json!({ "model": model, "messages": [{ "role": "user", "content": "Say hello" }] })
}

/// What the approval tests share: a proxy in front of a mock provider, a tenant whose key
/// (labelled `label`, an agent behind it) is held for a person's approval on `gpt-4o` by a
/// `require_approval` policy, in force when this returns.
pub struct HeldForApproval {
    /// The provider the proxy forwards to, kept running as long as this lives.
    _provider: MockProvider,
    pub proxy: TestProxy,
    pub tenant: TestTenant,
    /// The proxy key's secret.
    pub key: String,
    /// The proxy key as created (`agent_id`, ...).
    pub created: Value,
}

impl HeldForApproval {
    pub async fn start(app: &TestApp, label: &str) -> HeldForApproval {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(app, &provider).await;
        let (tenant, key, created) = proxy
            .tenant_with_key(app, json!({ "developer_label": label }))
            .await;
        crate::helpers::create_policy(
            app,
            &tenant.admin_key,
            json!({ "name": "approve gpt-4o", "policy_type": "require_approval",
                    "config": { "models": ["gpt-4o"] } }),
        )
        .await;
        HeldForApproval {
            _provider: provider,
            proxy,
            tenant,
            key,
            created,
        }
    }
}
