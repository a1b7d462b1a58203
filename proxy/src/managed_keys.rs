//! Tenants' managed provider keys, read from AWS Secrets Manager (or a compatible
//! endpoint such as an emulator) by the reference the control plane streams, and kept
//! in memory for `cache_ttl_secs`.
//!
//! The value never leaves this module except as the credential of an upstream request:
//! it is not logged, not returned, not put in metrics. A secret holds the provider key
//! either as its whole `SecretString` or as the `api_key` field of a JSON object in it.
//! Concurrent requests for a reference that is not cached wait for one read; failures
//! are not cached, so a fixed secret works on the next request.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_secretsmanager::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_secretsmanager::error::DisplayErrorContext;
use moka::future::Cache;
use prometheus::IntCounterVec;
use warden_shared::secret::Secret;

use crate::config::SecretsManagerConfig;
use crate::headers::is_header_value;

/// Most references held at once; far above any real number of tenants × providers.
const CACHE_CAPACITY: u64 = 100_000;

/// Why a managed key could not be read. Deliberately without the secret's content.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ManagedKeyError {
    #[error("Secrets Manager could not return the secret: {0}")]
    Read(String),
    #[error(
        "the secret holds no usable key (empty, binary, JSON without `api_key`, or \
         characters an HTTP header cannot carry)"
    )]
    Unusable,
}

/// Reads one secret once, outside a proxy (the control plane reads an MCP server's
/// credential this way when an operator approves the server).
pub async fn read_secret(
    config: &SecretsManagerConfig,
    secret_ref: &str,
) -> Result<Arc<Secret>, ManagedKeyError> {
    let reads = IntCounterVec::new(
        prometheus::Opts::new("warden_secret_reads", "unregistered"),
        &["outcome"],
    )
    .map_err(|error| ManagedKeyError::Read(error.to_string()))?;
    ManagedKeys::new(config, reads)
        .await
        .resolve(secret_ref)
        .await
}

#[derive(Clone)]
pub struct ManagedKeys {
    client: aws_sdk_secretsmanager::Client,
    cache: Cache<String, Arc<Secret>>,
    /// `warden_proxy_managed_key_reads_total{outcome}`.
    reads: IntCounterVec,
}

impl ManagedKeys {
    /// A client for `config`'s endpoint and region. No request is made until a key is
    /// needed; credentials come from `config` when given, from the AWS default chain
    /// (environment, profile, web identity, ECS or EC2 roles) otherwise.
    pub async fn new(config: &SecretsManagerConfig, reads: IntCounterVec) -> ManagedKeys {
        // rustls with ring, the crypto provider the rest of the proxy uses.
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(config.region.clone()))
            .http_client(http);
        if let Some(endpoint) = &config.endpoint_url {
            loader = loader.endpoint_url(endpoint);
        }
        if let (Some(id), Some(secret)) = (&config.access_key_id, &config.secret_access_key) {
            loader = loader.credentials_provider(Credentials::new(
                id.expose(),
                secret.expose(),
                None,
                None,
                "warden-proxy-config",
            ));
        }
        let sdk = loader.load().await;
        ManagedKeys {
            client: aws_sdk_secretsmanager::Client::new(&sdk),
            cache: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(Duration::from_secs(config.cache_ttl_secs.max(1)))
                .build(),
            reads,
        }
    }

    /// The provider key stored under `secret_ref`, from memory when read recently.
    pub async fn resolve(&self, secret_ref: &str) -> Result<Arc<Secret>, ManagedKeyError> {
        self.cache
            .try_get_with_by_ref(secret_ref, self.read(secret_ref))
            .await
            .map_err(|error| (*error).clone())
    }

    async fn read(&self, secret_ref: &str) -> Result<Arc<Secret>, ManagedKeyError> {
        let result = self
            .client
            .get_secret_value()
            .secret_id(secret_ref)
            .send()
            .await;
        let outcome = match result {
            Ok(output) => output
                .secret_string()
                .and_then(provider_key)
                .map(|key| Arc::new(Secret::new(key)))
                .ok_or(ManagedKeyError::Unusable),
            Err(error) => {
                // The SDK's error names the secret and the failure, never the value.
                Err(ManagedKeyError::Read(
                    DisplayErrorContext(&error).to_string(),
                ))
            }
        };
        let label = match &outcome {
            Ok(_) => "ok",
            Err(ManagedKeyError::Read(_)) => "error",
            Err(ManagedKeyError::Unusable) => "unusable",
        };
        self.reads.with_label_values(&[label]).inc();
        if let Err(error) = &outcome {
            tracing::warn!(secret_ref, %error, "cannot read a managed provider key");
        }
        outcome
    }
}

/// The key in a secret's string: the string itself, or its JSON `api_key` field, without
/// surrounding whitespace (a pasted key's trailing newline). `None` when that is empty or
/// holds what a header cannot carry: the key goes into one, and a line break inside it
/// would split the request sent to the provider.
fn provider_key(secret: &str) -> Option<String> {
    let trimmed = secret.trim();
    let key = if trimmed.starts_with('{') {
        let value: serde_json::Value = serde_json::from_str(trimmed).ok()?;
        value.get("api_key")?.as_str()?.trim().to_owned()
    } else {
        trimmed.to_owned()
    };
    (!key.is_empty() && is_header_value(key.as_bytes())).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::provider_key;

    #[test]
    fn a_secret_holds_the_key_plain_or_as_json_api_key() {
        assert_eq!(provider_key(" sk-plain\n").as_deref(), Some("sk-plain"));
        assert_eq!(
            provider_key(r#"{"api_key": "sk-json", "note": "x"}"#).as_deref(),
            Some("sk-json")
        );
        assert_eq!(provider_key(r#"{"key": "sk-wrong-field"}"#), None);
        assert_eq!(provider_key(r#"{"api_key": ""}"#), None);
        assert_eq!(provider_key("   "), None);
        // A key that would break the header it goes into is no key.
        assert_eq!(provider_key("sk-1\r\nx-injected: 1"), None);
        assert_eq!(provider_key(r#"{"api_key": "sk-1\nx"}"#), None);
        assert_eq!(provider_key("sk-\u{7f}"), None);
    }
}
