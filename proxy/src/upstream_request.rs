//! The request the proxy sends a provider: its header (path, framing, the provider's
//! way of authenticating) and the credential that goes in it.

use std::sync::Arc;

use http::HeaderValue;
use pingora::http::RequestHeader;
use warden_shared::registry::Provider;
use warden_shared::secret::Secret;

use crate::admission::Admitted;
use crate::forward::Endpoint;
use crate::refusal::Refusal;
use crate::service::ProxyService;
use crate::state::KeyView;

/// What the upstream header says of the body.
pub struct UpstreamBody {
    pub length: usize,
    pub streaming: bool,
}

pub fn upstream_header(
    service: &ProxyService,
    user_agent: Option<&HeaderValue>,
    admitted: &Admitted,
    endpoint: Endpoint,
    &UpstreamBody { length, streaming }: &UpstreamBody,
    credential: &str,
) -> Result<RequestHeader, Refusal> {
    let provider = admitted.route.provider;
    let target = service
        .upstreams
        .target(provider)
        .ok_or(Refusal::ProviderNotConfigured(provider))?;
    let path = format!("{}{}", target.path_prefix, endpoint.path());
    let build = |header: &mut RequestHeader| -> pingora::Result<()> {
        header.insert_header(http::header::HOST, target.authority())?;
        // pingora copies a `&str` value; static values are shared instead.
        header.insert_header(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )?;
        header.insert_header(http::header::CONTENT_LENGTH, length.to_string())?;
        header.insert_header(
            http::header::ACCEPT,
            HeaderValue::from_static(if streaming {
                "text/event-stream"
            } else {
                "application/json"
            }),
        )?;
        if let Some(agent) = user_agent {
            header.insert_header(http::header::USER_AGENT, agent.clone())?;
        }
        match provider {
            Provider::Anthropic => {
                header.insert_header("x-api-key", credential)?;
                header.insert_header("anthropic-version", "2023-06-01")?;
            }
            _ => {
                header.insert_header(http::header::AUTHORIZATION, format!("Bearer {credential}"))?
            }
        }
        Ok(())
    };
    let mut header = RequestHeader::build_no_case("POST", path.as_bytes(), Some(8))
        .map_err(|_| Refusal::BadRequest("cannot build the upstream request".into()))?;
    build(&mut header)
        .map_err(|_| Refusal::BadRequest("cannot build the upstream request".into()))?;
    Ok(header)
}

/// The provider credential: the tenant's managed key (from Secrets Manager, cached), or
/// the proxy's own from its configuration.
pub async fn credential<'s>(
    service: &'s ProxyService,
    view: &KeyView,
    provider: Provider,
) -> Result<Credential<'s>, Refusal> {
    if view.key.use_managed_key {
        let managed = service
            .state
            .managed_key(&view.key.tenant_id, provider)
            .ok_or(Refusal::ManagedKeyMissing(provider))?;
        // Boxed: the AWS SDK's request future is over ten kilobytes, and every forwarded
        // request's future would otherwise reserve (and move) room for it.
        return Box::pin(service.managed_keys.resolve(&managed.secret_ref))
            .await
            .map(Credential::Managed)
            .map_err(|_| Refusal::ManagedKeyUnavailable(provider));
    }
    service
        .providers
        .endpoint(provider)
        .api_key
        .as_ref()
        .map(Credential::Configured)
        .ok_or(Refusal::ProviderNotConfigured(provider))
}

/// A provider credential, borrowed from the configuration or shared with the cache.
pub enum Credential<'s> {
    Configured(&'s Secret),
    Managed(Arc<Secret>),
}

impl Credential<'_> {
    pub fn expose(&self) -> &str {
        match self {
            Credential::Configured(secret) => secret.expose(),
            Credential::Managed(secret) => secret.expose(),
        }
    }
}
