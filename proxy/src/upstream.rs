//! Connections to the providers through pingora's connector: pooled keep-alive
//! connections, TLS with rustls (SNI always set to the provider's host), DNS resolved
//! asynchronously and cached, and timeouts for connecting, the first byte and silences.
//!
//! The proxy writes requests and reads answers itself rather than through `ProxyHttp`'s
//! upstream phases: pingora's replay buffer for a body read before choosing the upstream
//! holds 64 KiB and silently drops larger bodies, and an LLM request must be read (for
//! its model) before the provider is known. One path serves every body size.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::connectors::http::Connector;
use pingora::connectors::ConnectorOptions;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;
use pingora::{ErrorSource, ErrorType};
use warden_shared::registry::Provider;

use crate::config::{ProvidersConfig, ProxyConfig};
use crate::refusal::Refusal;

/// How long a resolved address is reused.
const DNS_TTL: Duration = Duration::from_secs(60);

/// A provider's base URL, parsed once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// The path before `/chat/completions` (`/v1`, `/v1beta/openai`); no trailing slash.
    pub path_prefix: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("{url}: the scheme must be http or https")),
        };
        let host = uri
            .host()
            .ok_or_else(|| format!("{url}: no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(Target {
            tls,
            host,
            port,
            path_prefix: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    /// `Host` header value.
    pub fn authority(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        if self.port == default {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The providers' targets, the connection pool and the DNS cache.
pub struct Upstreams {
    connector: Connector,
    targets: HashMap<Provider, Target>,
    dns: Mutex<HashMap<(String, u16), (SocketAddr, Instant)>>,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    idle_timeout: Duration,
}

/// A request sent and its response header received.
pub struct Exchange {
    pub session: HttpSession,
    pub peer: HttpPeer,
}

impl Upstreams {
    pub fn new(config: &ProxyConfig, providers: &ProvidersConfig) -> Result<Upstreams, String> {
        let mut targets = HashMap::new();
        for provider in Provider::ALL {
            let endpoint = providers.endpoint(provider);
            targets.insert(provider, Target::parse(&endpoint.base_url)?);
        }
        let mut options = ConnectorOptions::new(256);
        options.ca_file = config
            .ca_file
            .as_ref()
            .map(|path| path.display().to_string());
        Ok(Upstreams {
            connector: Connector::new(Some(options)),
            targets,
            dns: Mutex::default(),
            connect_timeout: Duration::from_millis(config.connect_timeout_ms),
            first_byte_timeout: Duration::from_millis(config.first_byte_timeout_ms),
            idle_timeout: Duration::from_millis(config.idle_timeout_ms),
        })
    }

    pub fn target(&self, provider: Provider) -> Option<&Target> {
        self.targets.get(&provider)
    }

    /// Sends the header `build` makes and `body` to `provider` and waits for the response
    /// header. A pooled connection the provider closed meanwhile is retried once on a
    /// fresh one, with a header built anew (pingora keeps the one it wrote; building is
    /// cheaper than cloning one for every request in case of a retry).
    pub async fn send(
        &self,
        provider: Provider,
        build: &(dyn Fn() -> Result<RequestHeader, Refusal> + Sync),
        body: Bytes,
    ) -> Result<Exchange, Refusal> {
        let target = self
            .target(provider)
            .ok_or(Refusal::ProviderNotConfigured(provider))?;
        let peer = self
            .peer(target)
            .await
            .map_err(|()| Refusal::UpstreamUnreachable(provider))?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (mut session, reused) = self
                .connector
                .get_http_session(&peer)
                .await
                .map_err(|e| refusal_of(provider, &e))?;
            // The connector does not apply the peer's read and write timeouts to the
            // session (pingora's proxy phases do); a pooled session keeps the last ones.
            session.set_read_timeout(Some(self.first_byte_timeout));
            session.set_write_timeout(Some(self.idle_timeout));
            match exchange(&mut session, build()?, body.clone()).await {
                Ok(()) => {
                    session.set_read_timeout(Some(self.idle_timeout));
                    return Ok(Exchange { session, peer });
                }
                Err(error)
                    if reused && attempt == 1 && error.esource() == &ErrorSource::Upstream =>
                {
                    tracing::debug!(%error, "pooled connection failed; retrying on a new one");
                }
                Err(error) => return Err(refusal_of(provider, &error)),
            }
        }
    }

    /// Returns a fully read connection to the pool.
    pub async fn release(&self, exchange: Exchange) {
        self.connector
            .release_http_session(exchange.session, &exchange.peer, Some(self.idle_timeout))
            .await;
    }

    async fn peer(&self, target: &Target) -> Result<HttpPeer, ()> {
        let addr = self.resolve(&target.host, target.port).await?;
        let mut peer = HttpPeer::new(addr, target.tls, target.host.clone());
        peer.options.connection_timeout = Some(self.connect_timeout);
        peer.options.total_connection_timeout = Some(self.connect_timeout);
        peer.options.idle_timeout = Some(self.idle_timeout);
        Ok(peer)
    }

    /// Resolves without blocking the runtime (pingora's own resolution is synchronous).
    async fn resolve(&self, host: &str, port: u16) -> Result<SocketAddr, ()> {
        let key = (host.to_owned(), port);
        if let Ok(cache) = self.dns.lock() {
            if let Some((addr, at)) = cache.get(&key) {
                if at.elapsed() < DNS_TTL {
                    return Ok(*addr);
                }
            }
        }
        let addr = tokio::net::lookup_host((host, port))
            .await
            .map_err(|error| tracing::warn!(%host, %error, "cannot resolve a provider"))?
            .next()
            .ok_or(())?;
        if let Ok(mut cache) = self.dns.lock() {
            cache.insert(key, (addr, Instant::now()));
        }
        Ok(addr)
    }
}

async fn exchange(
    session: &mut HttpSession,
    header: RequestHeader,
    body: Bytes,
) -> pingora::Result<()> {
    session.write_request_header(Box::new(header)).await?;
    session.write_request_body(body, true).await?;
    session.finish_request_body().await?;
    session.read_response_header().await
}

fn refusal_of(provider: Provider, error: &pingora::Error) -> Refusal {
    match error.etype() {
        ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout => {
            Refusal::UpstreamTimeout(provider)
        }
        ErrorType::ConnectRefused
        | ErrorType::ConnectNoRoute
        | ErrorType::ConnectError
        | ErrorType::TLSHandshakeFailure
        | ErrorType::InvalidCert => Refusal::UpstreamUnreachable(provider),
        _ => Refusal::UpstreamFailed(provider),
    }
}

#[cfg(test)]
mod tests {
    use super::Target;

    #[test]
    fn base_urls_parse_into_targets() {
        let target = Target::parse("https://generativelanguage.googleapis.com/v1beta/openai/");
        assert_eq!(
            target,
            Ok(Target {
                tls: true,
                host: "generativelanguage.googleapis.com".into(),
                port: 443,
                path_prefix: "/v1beta/openai".into(),
            })
        );
        let local = Target::parse("http://127.0.0.1:9000/v1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(local.authority(), "127.0.0.1:9000");
        assert!(Target::parse("ftp://x/v1").is_err());
    }
}
