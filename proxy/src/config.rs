//! The proxy's settings. The `warden` binary reads them (file and `WARDEN_` variables)
//! with the rest of its configuration; this crate only defines them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use warden_shared::catalog::{DeclaredPrice, ProviderCatalog};
use warden_shared::registry::Provider;
use warden_shared::secret::Secret;

/// Everything the proxy needs besides the service token.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// Where agents connect (`/v1/...`), plus `/healthz` and `/metrics`.
    pub listen: SocketAddr,
    /// The control plane's base URL, for the state stream and usage batches.
    pub control_plane_url: String,
    /// Largest request body forwarded, in bytes; 413 above.
    pub max_body_bytes: usize,
    /// Connecting to a provider, TLS included.
    pub connect_timeout_ms: u64,
    /// Waiting for a provider's response headers (reasoning models think first).
    pub first_byte_timeout_ms: u64,
    /// Longest silence between two reads of a provider's answer.
    pub idle_timeout_ms: u64,
    /// Usage records are sent to the ledger at least this often.
    pub usage_flush_interval_ms: u64,
    /// Records per usage batch, at most 1,000 (what the control plane accepts): under
    /// load a batch fills before the interval ends, and each costs the ledger a
    /// transaction and a few statements whatever its size.
    pub usage_batch_size: usize,
    /// Records held while the control plane is unreachable; beyond, new ones are dropped
    /// and counted (`warden_proxy_usage_dropped_total`).
    pub usage_buffer_capacity: usize,
    /// Folder of the usage spool: batches not yet acknowledged by the ledger, kept on
    /// disk so they survive a restart of the proxy and are sent on its next start
    /// (`usage::spool`). Relative to the working directory; empty turns the spool off
    /// (usage then waits in memory only). One folder per proxy process.
    pub usage_spool_dir: PathBuf,
    /// Largest size of the spool folder, in MiB; batches beyond are held in memory only
    /// and counted (`warden_proxy_usage_unspooled_total`).
    pub usage_spool_max_mb: u64,
    /// Request bodies larger than this (bytes) are not captured for payload capture;
    /// their capture records only their size (`omitted: too_large`).
    pub payload_capture_max_bytes: usize,
    /// Request bodies held in memory for payload capture until their usage batch is
    /// written (redacted) to the spool, in MiB; beyond, a capture records only its size
    /// (`omitted: buffer_full`, counted in `warden_proxy_payload_captures_total`).
    pub payload_capture_buffer_mb: usize,
    /// A PEM file of extra CA certificates trusted for providers (private gateways, tests).
    pub ca_file: Option<PathBuf>,
    pub secrets_manager: SecretsManagerConfig,
    /// Threads of `warden proxy`'s runtime (tokio workers); 0 = one per CPU core. With
    /// event loops it runs only the background work (usage flushing); with
    /// `event_loops = 0` it serves the connections too. `warden dev` runs both planes on
    /// one runtime and ignores it.
    pub worker_threads: usize,
    /// Event loops serving agents' connections, a thread each; the default is one per
    /// CPU core. 0 serves them on the runtime's workers instead, which can take over each
    /// other's connections: a steadier tail where busy neighbours compete for the cores,
    /// at about a fifth less throughput (`event_loops`, `load-tests/README.md`).
    pub event_loops: usize,
    /// Browser origins allowed to call the MCP gateway (`https://app.example.com:443`,
    /// `http://localhost:*`). Agents send no `Origin`; a request with one not listed is
    /// refused (403), so a web page cannot drive an operator's browser against it.
    pub mcp_allowed_origins: Vec<String>,
    /// How long an MCP server may take to answer a tool call through the gateway.
    pub mcp_call_timeout_secs: u64,
    /// After the shutdown signal, how long the proxy keeps accepting connections while
    /// `/readyz` answers 503, so that a load balancer polling it takes the proxy out of
    /// rotation before the listener closes (more than its probe period times its failure
    /// threshold). Then it stops accepting and lets open requests finish.
    pub shutdown_delay_ms: u64,
    /// The agents' listener's backlog: connections the kernel completes and queues
    /// before the proxy accepts them. A burst beyond it waits for SYN retransmissions (a
    /// second or more); the kernel caps it at `net.core.somaxconn`.
    pub listen_backlog: u32,
    /// How long an agent's connection may stay open without a request (before its first
    /// and between two), in seconds (at least 1). Above a load balancer's idle timeout,
    /// the balancer closes an idle connection first and no request races the close.
    pub keepalive_timeout_secs: u64,
    /// Longest a request's `guardrail` policies may take to scan it; a scan that takes
    /// longer refuses the request (503 `guardrail_unavailable`): guardrails fail closed.
    pub guardrail_timeout_ms: u64,
}

/// Where managed provider keys are read (AWS Secrets Manager or a compatible emulator).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsManagerConfig {
    /// Overrides the AWS endpoint (for an emulator); the region's endpoint otherwise.
    pub endpoint_url: Option<String>,
    pub region: String,
    /// How long a resolved key is reused before it is read again (a rotated secret
    /// reaches the proxy within this).
    pub cache_ttl_secs: u64,
    /// Static AWS credentials; leave both empty to use the AWS default chain
    /// (environment, profile, web identity, ECS task or EC2 instance role).
    pub access_key_id: Option<Secret>,
    pub secret_access_key: Option<Secret>,
}

/// The five built-in providers' endpoints and the proxy's own credentials for them, and
/// the providers the operator declares.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProvidersConfig {
    pub openai: ProviderEndpoint,
    pub anthropic: ProviderEndpoint,
    pub google: ProviderEndpoint,
    pub nvidia: ProviderEndpoint,
    pub bedrock: ProviderEndpoint,
    /// Providers beyond the built-ins, by name (`[providers.custom.vllm]`,
    /// `WARDEN_PROVIDERS__CUSTOM__VLLM__BASE_URL`: a variable's key is the lowercased
    /// name, so a name set through variables uses `_`, never `-`): OpenAI-compatible
    /// servers such as vLLM, llama.cpp, Ollama or a company gateway. Both planes need the same declarations: the proxy forwards to
    /// them, the control plane accepts their names and prices their usage.
    pub custom: BTreeMap<String, CustomProvider>,
}

/// A provider the operator declares. It speaks OpenAI's protocol (chat completions,
/// embeddings, and the Responses API where the server serves it); agents reach it with
/// `<name>/<model>` or, for the models listed in `models`, by the model's name alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomProvider {
    /// Base URL up to and including the API version (`http://10.0.0.5:8000/v1`).
    pub base_url: String,
    /// Sent as `Authorization: Bearer`; none: requests go without one (a local server).
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// Model names routed here without the `<name>/` prefix (exact names; listed by
    /// `GET /v1/models`).
    #[serde(default)]
    pub models: Vec<String>,
    /// Prices per million tokens, matched like the built-in table (the longest `model`
    /// the requested name starts with); usage of a model without one is recorded
    /// unpriced, at cost 0.
    #[serde(default)]
    pub prices: Vec<CustomPrice>,
}

/// One model's price at a declared provider, in US dollars per million tokens.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomPrice {
    pub model: String,
    pub input_per_million_usd: f64,
    pub output_per_million_usd: f64,
}

/// One provider's OpenAI-compatible endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEndpoint {
    /// Base URL up to and including the API version (`.../v1`); the proxy appends
    /// `/chat/completions` or `/embeddings`.
    pub base_url: String,
    /// The credential the proxy uses for keys without `use_managed_key`.
    #[serde(default)]
    pub api_key: Option<Secret>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 8081)),
            control_plane_url: "http://127.0.0.1:8080".to_owned(),
            max_body_bytes: 32 * 1024 * 1024,
            connect_timeout_ms: 5_000,
            first_byte_timeout_ms: 300_000,
            idle_timeout_ms: 120_000,
            usage_flush_interval_ms: 1_000,
            usage_batch_size: 1_000,
            usage_buffer_capacity: 200_000,
            usage_spool_dir: PathBuf::from("warden-usage-spool"),
            usage_spool_max_mb: 1_024,
            payload_capture_max_bytes: 1024 * 1024,
            payload_capture_buffer_mb: 256,
            ca_file: None,
            secrets_manager: SecretsManagerConfig::default(),
            worker_threads: 0,
            event_loops: std::thread::available_parallelism().map_or(1, |cores| cores.get()),
            mcp_allowed_origins: Vec::new(),
            mcp_call_timeout_secs: 60,
            shutdown_delay_ms: 0,
            listen_backlog: 4096,
            keepalive_timeout_secs: 75,
            guardrail_timeout_ms: 250,
        }
    }
}

impl Default for SecretsManagerConfig {
    fn default() -> Self {
        SecretsManagerConfig {
            endpoint_url: None,
            region: "us-east-1".to_owned(),
            cache_ttl_secs: 300,
            access_key_id: None,
            secret_access_key: None,
        }
    }
}

/// Each provider's own OpenAI-compatible endpoint: the default `base_url`.
const fn default_base_url(provider: Provider) -> &'static str {
    match provider {
        Provider::Operator(_) | Provider::Mcp => "",
        Provider::Openai => "https://api.openai.com/v1",
        Provider::Anthropic => "https://api.anthropic.com/v1",
        Provider::Google => "https://generativelanguage.googleapis.com/v1beta/openai",
        Provider::Nvidia => "https://integrate.api.nvidia.com/v1",
        Provider::Bedrock => "https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1",
    }
}

impl Default for ProvidersConfig {
    fn default() -> Self {
        let endpoint = |provider| ProviderEndpoint {
            base_url: default_base_url(provider).to_owned(),
            api_key: None,
        };
        ProvidersConfig {
            openai: endpoint(Provider::Openai),
            anthropic: endpoint(Provider::Anthropic),
            google: endpoint(Provider::Google),
            nvidia: endpoint(Provider::Nvidia),
            bedrock: endpoint(Provider::Bedrock),
            custom: BTreeMap::new(),
        }
    }
}

impl ProvidersConfig {
    /// Every provider configured here: the built-ins, then the declared ones with a
    /// well-formed name (see [`ProvidersConfig::catalog`] for the check).
    pub fn all(&self) -> impl Iterator<Item = Provider> + '_ {
        Provider::BUILT_IN.into_iter().chain(
            self.custom
                .keys()
                .filter_map(|name| declared_name(name).ok()),
        )
    }

    /// The base URL requests to `provider` go to, if it is configured.
    pub fn base_url(&self, provider: Provider) -> Option<&str> {
        match provider {
            Provider::Operator(name) => self.custom.get(name.as_str()).map(|c| &*c.base_url),
            Provider::Mcp => None,
            built_in => Some(&self.built_in(built_in).base_url),
        }
    }

    /// The proxy's own key for `provider`, if it has one.
    pub fn api_key(&self, provider: Provider) -> Option<&Secret> {
        match provider {
            Provider::Operator(name) => self.custom.get(name.as_str())?.api_key.as_ref(),
            Provider::Mcp => None,
            built_in => self.built_in(built_in).api_key.as_ref(),
        }
    }

    fn built_in(&self, provider: Provider) -> &ProviderEndpoint {
        match provider {
            Provider::Anthropic => &self.anthropic,
            Provider::Google => &self.google,
            Provider::Nvidia => &self.nvidia,
            Provider::Bedrock => &self.bedrock,
            Provider::Openai | Provider::Operator(_) | Provider::Mcp => &self.openai,
        }
    }

    /// The declared providers' names, routed models and prices, checked: what both planes
    /// route, accept and price by. An error names the declaration at fault.
    pub fn catalog(&self) -> Result<ProviderCatalog, String> {
        let mut declarations = Vec::with_capacity(self.custom.len());
        for (name, custom) in &self.custom {
            let provider = declared_name(name)?;
            if let Some(model) = custom.models.iter().find(|m| m.is_empty() || m.len() > 200) {
                return Err(format!(
                    "providers.custom.{name}.models: `{model}` is not a model name (1 to 200 characters)"
                ));
            }
            let prices = custom
                .prices
                .iter()
                .map(|p| DeclaredPrice {
                    model: p.model.clone(),
                    input_per_million_usd: p.input_per_million_usd,
                    output_per_million_usd: p.output_per_million_usd,
                })
                .collect();
            declarations.push((provider, custom.models.clone(), prices));
        }
        let catalog =
            ProviderCatalog::new(declarations).map_err(|e| format!("providers.custom: {e}"))?;
        for (name, custom) in &self.custom {
            for model in &custom.models {
                if catalog
                    .provider_serving(model)
                    .map(|p| p.to_string())
                    .as_deref()
                    != Some(name)
                {
                    return Err(format!(
                        "providers.custom: `{model}` is listed by more than one provider"
                    ));
                }
            }
        }
        Ok(catalog)
    }

    /// How the proxy authenticates to `provider` with its own configuration: with its
    /// key; with none, at a base URL the operator set (a local model server such as
    /// vLLM, llama.cpp or Ollama needs no key); or not at all (a provider's own
    /// endpoint without a key refuses every request).
    pub fn own_credential(&self, provider: Provider) -> OwnCredential<'_> {
        let Some(base_url) = self.base_url(provider) else {
            return OwnCredential::Missing;
        };
        match self.api_key(provider) {
            Some(key) => OwnCredential::Key(key),
            // A declared provider's base URL is always the operator's own.
            None if !provider.is_built_in() || base_url != default_base_url(provider) => {
                OwnCredential::Keyless
            }
            None => OwnCredential::Missing,
        }
    }
}

/// The provider a `providers.custom` key declares.
fn declared_name(name: &str) -> Result<Provider, String> {
    match Provider::parse(name) {
        Some(provider @ Provider::Operator(_)) => Ok(provider),
        _ => Err(format!(
            "providers.custom.{name}: a declared provider's name is 1 to {} lowercase letters, \
             digits, `-` or `_`, starting with a letter, and not a built-in provider's",
            warden_shared::registry::ProviderName::MAX_LEN
        )),
    }
}

/// See [`ProvidersConfig::own_credential`].
#[derive(Debug, Clone, Copy)]
pub enum OwnCredential<'a> {
    Key(&'a Secret),
    Keyless,
    Missing,
}
