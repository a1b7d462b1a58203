//! The control plane's one typed configuration: a TOML file plus `WARDEN_` variables.
//!
//! Nothing else in the crate reads the environment. Nested keys use a double underscore
//! in the environment (`WARDEN_AUTH__LOGIN_ATTEMPTS_PER_EMAIL=5`). Unknown keys are
//! rejected so that a typo fails at start instead of being silently ignored.

use std::net::SocketAddr;
use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use warden_proxy::config::{ProvidersConfig, ProxyConfig};
use warden_proxy::otel::{TraceExport, TracingConfig};
pub use warden_shared::secret::Secret;

/// Everything the `warden` binary's commands need: the control plane's settings at the top
/// level, the proxy's under `proxy` and `providers` (one configuration per binary, so
/// `warden dev` runs both from one set of variables).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address of the management API listener (`/api/v1`, `/healthz`, `/metrics`).
    pub listen: SocketAddr,
    /// `sqlite://path/to/warden.db` (embedded default) or `postgres://...`.
    pub database_url: Secret,
    /// Largest number of pooled database connections.
    pub database_max_connections: u32,
    /// Token the proxy presents on the internal endpoints. Generated at start when empty.
    pub service_token: Option<Secret>,
    /// Becomes the platform-admin key when no platform-admin key exists yet.
    pub bootstrap_platform_key: Option<Secret>,
    /// `json` for one JSON object per line (production) or `pretty` for people.
    pub log_format: LogFormat,
    /// `error`, `warn`, `info` (one line per request on both planes) or `debug`; a
    /// `tracing` filter such as `info,warden_proxy=debug` works too. `RUST_LOG` wins.
    pub log_level: String,
    /// Largest accepted request body on the management API, in bytes (413 above).
    pub max_body_bytes: usize,
    /// Seconds between rounds that roll finished hours of usage into the daily cost
    /// rollup and close finished days (see `ledger`); `0` turns them off on this replica
    /// (at least one replica must keep them).
    pub close_days_interval_secs: u64,
    /// Longest a management call that changes what the proxies enforce waits for every
    /// connected proxy to apply it before it answers (with `Warden-Enforcement: pending`
    /// when one has not).
    pub enforcement_wait_ms: u64,
    /// Seconds between rounds that audit the repeats of each past minute's policy
    /// violations as one `policy.violated` event; `0` turns them off on this replica
    /// (at least one replica must keep them).
    pub violation_summary_interval_secs: u64,
    /// Seconds between sweeps that mark approvals whose 24 hours ran out undecided as
    /// `expired` (audited and announced as `approval.expired`); `0` turns them off on
    /// this replica (reads show them expired regardless).
    pub approval_expiry_interval_secs: u64,
    /// Seconds between anomaly detection passes; `0` turns detection off on this replica
    /// (replicas sharing PostgreSQL elect one detector among those that have it on).
    pub anomaly_detection_interval_secs: u64,
    /// Seconds between rounds that delete captured payloads past their tenant's
    /// retention; `0` turns them off on this replica (keep them on at least one).
    pub payload_purge_interval_secs: u64,
    /// Seconds between rounds that verify every tenant's audit chain (what was appended
    /// since the last round; every event once a day) and set
    /// `warden_audit_chain_broken_tenants`; `0` turns them off on this replica.
    pub audit_verification_interval_secs: u64,
    pub auth: AuthConfig,
    pub notifications: NotificationsConfig,
    pub outbound: OutboundConfig,
    pub billing: BillingConfig,
    /// The proxy (`warden proxy`, and the proxy `warden dev` starts).
    pub proxy: ProxyConfig,
    /// Providers' endpoints and the proxy's own credentials
    /// (`WARDEN_PROVIDERS__OPENAI__BASE_URL`, `WARDEN_PROVIDERS__OPENAI__API_KEY`).
    pub providers: ProvidersConfig,
    /// Traces to an OpenTelemetry collector over OTLP (both planes); off unless an
    /// endpoint is named here or in `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub tracing: TracingConfig,
}

/// Brute-force throttling of the unauthenticated signup and login endpoints.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Failed and successful login attempts allowed per email per window.
    pub login_attempts_per_email: u32,
    /// Login attempts allowed per client address per window.
    pub login_attempts_per_ip: u32,
    /// Signups allowed per client address per window.
    pub signups_per_ip: u32,
    /// Length of the throttling window in seconds.
    pub throttle_window_secs: u64,
    /// SAML SSO login starts and ACS posts allowed per client address per window.
    pub sso_logins_per_ip: u32,
    /// The address browsers and identity providers reach this API at, without `/api/v1`
    /// (`https://warden.example.com`): SAML service providers' entity ids and assertion
    /// consumer URLs are built from it. Empty: `http://<listen>`.
    pub public_url: String,
}

impl Config {
    /// Where this API is reached from outside: `auth.public_url`, else the address the
    /// listener is bound to (`bound`, which knows the port a `:0` listen was given).
    pub fn public_url(&self, bound: std::net::SocketAddr) -> String {
        if self.auth.public_url.is_empty() {
            format!("http://{bound}")
        } else {
            self.auth.public_url.trim_end_matches('/').to_owned()
        }
    }
}

/// Delivery of notification events to tenants' channels.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationsConfig {
    /// Milliseconds between the delivery worker's rounds; `0` turns delivery off on this
    /// replica (at least one replica must keep it; replicas sharing PostgreSQL elect one
    /// worker among those that have it on).
    pub delivery_interval_ms: u64,
    /// How long after its event a failing delivery is retried before it is dead.
    pub retry_for_secs: u64,
    /// Time limit of one delivery attempt (and of a channel test), connection included.
    pub attempt_timeout_secs: u64,
    /// PEM file of certificate authorities trusted for email channels' SMTP servers in
    /// addition to the public roots (a relay whose certificate a private CA signed).
    pub smtp_ca_file: Option<std::path::PathBuf>,
}

/// Plans, checkout and the payment provider's webhook.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BillingConfig {
    /// The payment provider's checkout page; a checkout's URL is
    /// `<checkout_base_url>/<checkout id>`.
    pub checkout_base_url: String,
    /// Secrets the payment provider signs `POST /billing/webhook` with; more than one
    /// while a secret is rotated. Empty: every webhook call is refused (401).
    pub webhook_secrets: Vec<Secret>,
    /// Seconds between rounds that apply downgrades and cancellations whose billing
    /// period has ended; `0` turns them off on this replica.
    pub plan_change_interval_secs: u64,
}

impl Default for BillingConfig {
    fn default() -> Self {
        BillingConfig {
            checkout_base_url: "https://billing.example.com/checkout".to_owned(),
            webhook_secrets: Vec::new(),
            plan_change_interval_secs: 60,
        }
    }
}

/// Calls Warden makes to hosts that tenants name (notification channels).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundConfig {
    /// Host names, addresses or networks (CIDR) that tenants' channels may reach although
    /// they are private, loopback or link-local, e.g. `["127.0.0.1/32"]` for local
    /// receivers or `["smtp.internal"]` for a mail relay. Empty by default. DANGEROUS:
    /// every tenant's channels can reach what is listed here, so list only hosts that
    /// expect untrusted callers; never a network holding internal services or a cloud
    /// metadata address.
    pub allow_private: Vec<String>,
}

impl Default for NotificationsConfig {
    fn default() -> Self {
        NotificationsConfig {
            delivery_interval_ms: 1_000,
            retry_for_secs: 24 * 3_600,
            attempt_timeout_secs: 10,
            smtp_ca_file: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Json,
    Pretty,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            database_url: Secret::new("sqlite://warden.db"),
            database_max_connections: 16,
            service_token: None,
            bootstrap_platform_key: None,
            log_format: LogFormat::Json,
            log_level: "info".to_owned(),
            max_body_bytes: 1024 * 1024,
            close_days_interval_secs: 60,
            enforcement_wait_ms: 2_000,
            violation_summary_interval_secs: 15,
            approval_expiry_interval_secs: 60,
            payload_purge_interval_secs: 3600,
            anomaly_detection_interval_secs: 60,
            audit_verification_interval_secs: 300,
            auth: AuthConfig::default(),
            notifications: NotificationsConfig::default(),
            outbound: OutboundConfig::default(),
            billing: BillingConfig::default(),
            proxy: ProxyConfig::default(),
            providers: ProvidersConfig::default(),
            tracing: TracingConfig::default(),
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            login_attempts_per_email: 10,
            login_attempts_per_ip: 60,
            signups_per_ip: 10,
            throttle_window_secs: 900,
            sso_logins_per_ip: 60,
            public_url: String::new(),
        }
    }
}

impl Config {
    /// Loads defaults, then the optional TOML file, then `WARDEN_` variables (highest).
    pub fn load(file: Option<&Path>) -> Result<Config, Box<figment::Error>> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        figment
            .merge(Env::prefixed("WARDEN_").split("__"))
            .extract()
            .map_err(Box::new)
    }
}

impl Config {
    /// Where traces go: the `tracing` settings read with OpenTelemetry's standard
    /// `OTEL_` variables, which win over them (`warden_proxy::otel::export`); `None`
    /// when tracing is off.
    pub fn trace_export(&self) -> Result<Option<TraceExport>, String> {
        // The only variables read outside figment: their names are OpenTelemetry's.
        #[allow(clippy::disallowed_methods)]
        self.tracing.resolve(|name| std::env::var(name).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deployment_example_is_a_valid_configuration() {
        let example = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/control-plane.example.toml"
        ));
        let config = Config::load(Some(example));
        assert!(config.is_ok(), "{config:?}");
    }

    #[test]
    fn the_proxy_deployment_example_is_a_valid_configuration() {
        let example = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/proxy.example.toml"
        ));
        let config = Config::load(Some(example));
        assert!(config.is_ok(), "{config:?}");
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let dir = std::env::temp_dir().join(format!("warden-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("typo.toml");
        std::fs::write(&file, "listen = \"127.0.0.1:1\"\ndatabse_url = \"x\"\n").unwrap();
        assert!(Config::load(Some(&file)).is_err());
    }

    #[test]
    // figment's Jail fixes the closure's error type.
    #[allow(clippy::result_large_err)]
    fn provider_settings_come_from_nested_variables() {
        figment::Jail::expect_with(|jail| {
            jail.set_env(
                "WARDEN_PROVIDERS__OPENAI__BASE_URL",
                "http://127.0.0.1:9000/v1",
            );
            jail.set_env("WARDEN_PROVIDERS__ANTHROPIC__API_KEY", "sk-ant-test");
            jail.set_env("WARDEN_PROXY__MAX_BODY_BYTES", "1024");
            let config = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(config.providers.openai.base_url, "http://127.0.0.1:9000/v1");
            assert_eq!(
                config
                    .providers
                    .anthropic
                    .api_key
                    .as_ref()
                    .map(Secret::expose),
                Some("sk-ant-test")
            );
            assert_eq!(config.proxy.max_body_bytes, 1024);
            assert!(!format!("{config:?}").contains("sk-ant-test"));
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)]
    fn declared_providers_come_from_the_file_and_variables() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "warden.toml",
                "[providers.custom.vllm]\n\
                 base_url = \"http://10.0.0.5:8000/v1\"\n\
                 models = [\"meta-llama/Llama-3.1-8B-Instruct\"]\n\
                 prices = [{ model = \"meta-llama\", input_per_million_usd = 0.05, \
                 output_per_million_usd = 0.1 }]\n",
            )?;
            jail.set_env("WARDEN_PROVIDERS__CUSTOM__VLLM__API_KEY", "sk-local");
            jail.set_env(
                "WARDEN_PROVIDERS__CUSTOM__OLLAMA__BASE_URL",
                "http://127.0.0.1:11434/v1",
            );
            let config = Config::load(Some(Path::new("warden.toml"))).map_err(|e| e.to_string())?;
            let custom = &config.providers.custom;
            assert_eq!(custom.keys().collect::<Vec<_>>(), ["ollama", "vllm"]);
            assert_eq!(custom["ollama"].base_url, "http://127.0.0.1:11434/v1");
            assert_eq!(
                custom["vllm"].api_key.as_ref().map(Secret::expose),
                Some("sk-local")
            );
            let catalog = config.providers.catalog()?;
            let vllm = warden_shared::registry::Provider::parse("vllm");
            assert_eq!(
                catalog.provider_serving("meta-llama/Llama-3.1-8B-Instruct"),
                vllm
            );
            // A declaration under a built-in's name, or a malformed one, stops the start.
            jail.set_env(
                "WARDEN_PROVIDERS__CUSTOM__OPENAI__BASE_URL",
                "http://127.0.0.1:1/v1",
            );
            let config = Config::load(Some(Path::new("warden.toml"))).map_err(|e| e.to_string())?;
            assert!(config.providers.catalog().is_err());
            Ok(())
        });
    }

    #[test]
    fn secrets_do_not_print() {
        let config = Config {
            bootstrap_platform_key: Some(Secret::new("wdn_supersecret")),
            ..Config::default()
        };
        assert!(!format!("{config:?}").contains("supersecret"));
    }
}
