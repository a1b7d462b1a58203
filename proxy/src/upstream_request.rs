//! The request the proxy sends a provider: its header (path, framing, the provider's
//! way of authenticating) and the credential that goes in it.

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use http::HeaderValue;
use warden_shared::registry::Provider;
use warden_shared::secret::Secret;

use crate::config::{OwnCredential, ProvidersConfig};
use crate::endpoint::Endpoint;
use crate::headers::is_header_value;
use crate::managed_keys::ManagedKeys;
use crate::otel::{Traceparent, TRACEPARENT, TRACESTATE};
use crate::refusal::Refusal;
use crate::state::{EnforcementState, KeyView};
use crate::upstream::{Target, Upstreams, INLINE_BODY};

/// The agent's headers passed on to the provider.
#[derive(Debug, Default)]
pub struct ClientHeaders {
    pub user_agent: Option<HeaderValue>,
    /// The Anthropic API version and beta features the agent's SDK asked for; the
    /// provider gets `2023-06-01` when it names no version.
    pub anthropic_version: Option<HeaderValue>,
    pub anthropic_beta: Option<HeaderValue>,
    /// The W3C trace context: the agent's, passed on as it came, or the proxy's own
    /// span's when tracing is on.
    pub traceparent: Option<ParentHeader>,
    pub tracestate: Option<HeaderValue>,
}

impl ClientHeaders {
    /// The headers of the agent's request `provider` is sent: Anthropic's own are looked
    /// up only for Anthropic.
    pub fn of(headers: &http::HeaderMap, provider: Provider) -> ClientHeaders {
        let anthropic = |name: &str| {
            (provider == Provider::Anthropic)
                .then(|| headers.get(name).cloned())
                .flatten()
        };
        ClientHeaders {
            user_agent: headers.get(http::header::USER_AGENT).cloned(),
            anthropic_version: anthropic("anthropic-version"),
            anthropic_beta: anthropic("anthropic-beta"),
            traceparent: headers.get(&TRACEPARENT).cloned().map(ParentHeader::Agent),
            tracestate: headers.get(&TRACESTATE).cloned(),
        }
    }
}

/// The `traceparent` a provider is sent.
#[derive(Debug)]
pub enum ParentHeader {
    /// The agent's, as it came.
    Agent(HeaderValue),
    /// That of the proxy's span of the attempt.
    Span(Traceparent),
}

impl ParentHeader {
    fn as_bytes(&self) -> &[u8] {
        match self {
            ParentHeader::Agent(value) => value.as_bytes(),
            ParentHeader::Span(traceparent) => traceparent.as_bytes(),
        }
    }
}

/// What the upstream header says of the body.
pub struct UpstreamBody {
    pub length: usize,
    pub streaming: bool,
}

/// The request head as it goes to the provider: request line, headers and the blank
/// line, in a buffer with room left for a body small enough to go in the same write
/// ([`crate::upstream::INLINE_BODY`]).
///
/// Written directly rather than through pingora's `RequestHeader` (a header map, a case
/// map, then its own rendering): the same bytes, a quarter of the instructions. Names
/// are lowercase, as pingora wrote them for a map built without case.
pub fn upstream_header(
    upstreams: &Upstreams,
    client: &ClientHeaders,
    provider: Provider,
    endpoint: Endpoint,
    body: &UpstreamBody,
    credential: &str,
) -> Result<BytesMut, Refusal> {
    let target = upstreams
        .target(provider)
        .ok_or(Refusal::ProviderNotConfigured(provider))?;
    // Both sources of credentials refuse values a header cannot carry (the proxy's
    // configuration at startup, managed keys when read), so this is a last guard
    // against header injection, not a path a request is expected to take.
    request_head(target, provider, endpoint, body, client, credential)
        .ok_or(Refusal::ProviderNotConfigured(provider))
}

/// [`upstream_header`] for a provider at `target`; `None` when the credential cannot
/// stand in a header.
fn request_head(
    target: &Target,
    provider: Provider,
    endpoint: Endpoint,
    &UpstreamBody { length, streaming }: &UpstreamBody,
    client: &ClientHeaders,
    credential: &str,
) -> Option<BytesMut> {
    if !is_header_value(credential.as_bytes()) {
        return None;
    }
    let inline = if length <= INLINE_BODY { length } else { 0 };
    let mut head = BytesMut::with_capacity(256 + credential.len() + inline);
    head.put_slice(b"POST ");
    head.put_slice(target.path_prefix.as_bytes());
    head.put_slice(endpoint.path().as_bytes());
    head.put_slice(b" HTTP/1.1\r\n");
    let mut line = |name: &[u8], value: &[u8]| {
        head.put_slice(name);
        head.put_slice(b": ");
        head.put_slice(value);
        head.put_slice(b"\r\n");
    };
    line(b"host", target.authority().as_bytes());
    line(b"content-type", b"application/json");
    line(
        b"content-length",
        itoa::Buffer::new().format(length).as_bytes(),
    );
    line(
        b"accept",
        if streaming {
            b"text/event-stream"
        } else {
            b"application/json"
        },
    );
    if let Some(agent) = &client.user_agent {
        line(b"user-agent", agent.as_bytes());
    }
    if let Some(parent) = &client.traceparent {
        line(b"traceparent", parent.as_bytes());
        if let Some(state) = &client.tracestate {
            line(b"tracestate", state.as_bytes());
        }
    }
    match provider {
        Provider::Anthropic => {
            if !credential.is_empty() {
                line(b"x-api-key", credential.as_bytes());
            }
            let version = client.anthropic_version.as_ref();
            line(
                b"anthropic-version",
                version.map_or(b"2023-06-01".as_slice(), HeaderValue::as_bytes),
            );
            if let Some(beta) = &client.anthropic_beta {
                line(b"anthropic-beta", beta.as_bytes());
            }
        }
        // A keyless server gets no authorization header at all.
        _ if credential.is_empty() => {}
        _ => {
            head.put_slice(b"authorization: Bearer ");
            head.put_slice(credential.as_bytes());
            head.put_slice(b"\r\n");
        }
    }
    head.put_slice(b"\r\n");
    Some(head)
}

/// The provider credential: the tenant's managed key (its reference in `state`, its
/// value from Secrets Manager through `managed_keys`, cached), or the proxy's own from
/// its configuration (`providers`).
pub async fn credential<'s>(
    state: &EnforcementState,
    managed_keys: &ManagedKeys,
    providers: &'s ProvidersConfig,
    view: &KeyView,
    provider: Provider,
) -> Result<Credential<'s>, Refusal> {
    if view.key.use_managed_key {
        let managed = state
            .managed_key(&view.key.tenant_id, provider)
            .ok_or(Refusal::ManagedKeyMissing(provider))?;
        // Boxed: the AWS SDK's request future is over ten kilobytes, and every forwarded
        // request's future would otherwise reserve (and move) room for it.
        return Box::pin(managed_keys.resolve(&managed.secret_ref))
            .await
            .map(Credential::Managed)
            .map_err(|_| Refusal::ManagedKeyUnavailable(provider));
    }
    match providers.own_credential(provider) {
        OwnCredential::Key(key) => Ok(Credential::Configured(key)),
        OwnCredential::Keyless => Ok(Credential::Keyless),
        OwnCredential::Missing => Err(Refusal::ProviderNotConfigured(provider)),
    }
}

/// A provider credential, borrowed from the configuration or shared with the cache.
pub enum Credential<'s> {
    Configured(&'s Secret),
    Managed(Arc<Secret>),
    /// A server at an operator's base URL that takes no key: no authorization header.
    Keyless,
}

impl Credential<'_> {
    /// The key, or the empty string for a keyless server (the header is then left out).
    pub fn expose(&self) -> &str {
        match self {
            Credential::Configured(secret) => secret.expose(),
            Credential::Managed(secret) => secret.expose(),
            Credential::Keyless => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(provider: Provider, body: UpstreamBody, agent: Option<&str>, key: &str) -> String {
        let target = Target::parse("https://api.example.com:8443/v1beta/openai/").expect("url");
        let client = ClientHeaders {
            user_agent: agent.map(|a| HeaderValue::from_str(a).expect("value")),
            ..ClientHeaders::default()
        };
        let head = request_head(
            &target,
            provider,
            Endpoint::ChatCompletions,
            &body,
            &client,
            key,
        )
        .expect("head");
        String::from_utf8(head.to_vec()).expect("ascii")
    }

    #[test]
    fn the_head_names_path_framing_and_credential_as_the_provider_expects() {
        let plain = UpstreamBody {
            length: 1234,
            streaming: false,
        };
        assert_eq!(
            head(Provider::Openai, plain, Some("OpenAI/Python 1.0"), "sk-1"),
            "POST /v1beta/openai/chat/completions HTTP/1.1\r\n\
             host: api.example.com:8443\r\n\
             content-type: application/json\r\n\
             content-length: 1234\r\n\
             accept: application/json\r\n\
             user-agent: OpenAI/Python 1.0\r\n\
             authorization: Bearer sk-1\r\n\r\n"
        );
        let streamed = UpstreamBody {
            length: 0,
            streaming: true,
        };
        assert_eq!(
            head(Provider::Anthropic, streamed, None, "sk-ant"),
            "POST /v1beta/openai/chat/completions HTTP/1.1\r\n\
             host: api.example.com:8443\r\n\
             content-type: application/json\r\n\
             content-length: 0\r\n\
             accept: text/event-stream\r\n\
             x-api-key: sk-ant\r\n\
             anthropic-version: 2023-06-01\r\n\r\n"
        );
    }

    #[test]
    fn a_credential_that_would_break_the_header_is_refused() {
        let target = Target::parse("http://127.0.0.1:9000/v1").expect("url");
        let body = UpstreamBody {
            length: 2,
            streaming: false,
        };
        for key in ["sk-1\r\nx-injected: 1", "sk\n", "sk\u{7f}"] {
            let head = request_head(
                &target,
                Provider::Openai,
                Endpoint::Embeddings,
                &body,
                &ClientHeaders::default(),
                key,
            );
            assert!(head.is_none(), "{key:?}");
        }
    }

    #[test]
    fn the_messages_api_carries_the_agents_anthropic_version_and_betas() {
        let target = Target::parse("https://api.anthropic.com/v1").expect("url");
        let client = ClientHeaders {
            user_agent: None,
            anthropic_version: Some(HeaderValue::from_static("2024-01-01")),
            anthropic_beta: Some(HeaderValue::from_static("prompt-caching-2024-07-31")),
            traceparent: Some(ParentHeader::Agent(HeaderValue::from_static(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ))),
            tracestate: Some(HeaderValue::from_static("agent=1")),
        };
        let body = UpstreamBody {
            length: 2,
            streaming: false,
        };
        let head = request_head(
            &target,
            Provider::Anthropic,
            Endpoint::Messages,
            &body,
            &client,
            "sk-ant",
        )
        .expect("head");
        let head = String::from_utf8(head.to_vec()).expect("ascii");
        assert!(head.starts_with("POST /v1/messages HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("x-api-key: sk-ant\r\nanthropic-version: 2024-01-01\r\nanthropic-beta: prompt-caching-2024-07-31\r\n"), "{head}");
        assert!(head.contains("traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\ntracestate: agent=1\r\n"), "{head}");
    }
}
