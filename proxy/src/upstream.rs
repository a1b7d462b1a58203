//! Connections to the providers: keep-alive connections kept idle by the thread that
//! used them (`idle_pool`), new ones through pingora's connector with TLS by rustls (SNI
//! always set to the provider's host), DNS resolved asynchronously and cached, and
//! timeouts for connecting, the first byte and silences.
//!
//! The proxy writes requests and reads answers itself rather than through pingora's
//! proxy (`ProxyHttp`'s upstream phases): pingora's replay buffer for a body read before choosing the upstream
//! holds 64 KiB and silently drops larger bodies, and an LLM request must be read (for
//! its model) before the provider is known. One path serves every body size.
//!
//! The request goes out in one write: header and body together (bodies up to
//! [`INLINE_BODY`]). pingora's HTTP/1 client flushes the header on its own, which made
//! two packets of every request and woke the provider twice; over loopback that second
//! send was an eighth of the proxy's CPU. A new connection comes from pingora's transport
//! connector (TCP, TLS, SNI) and the answer is read with its HTTP/1 client session.

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use pingora::connectors::{ConnectorOptions, TransportConnector};
use pingora::http::ResponseHeader;
use pingora::protocols::http::v1::client::HttpSession;
use pingora::protocols::l4::{self, socket::SocketAddr as PeerAddress};
use pingora::protocols::Stream;
use pingora::upstreams::peer::{HttpPeer, Peer};
use pingora::{Error, ErrorType, OrErr};
use tokio::io::AsyncWriteExt;
use warden_shared::registry::Provider;

use crate::buffered_io::BufferedIo;
use crate::config::{ProvidersConfig, ProxyConfig};
use crate::headers::is_header_value;
use crate::idle_deadline::IdleDeadline;
use crate::idle_pool;
use crate::log_throttle::{LogThrottle, LOG_INTERVAL};
use crate::refusal::Refusal;

/// How long a resolved address is reused.
const DNS_TTL: Duration = Duration::from_secs(60);
/// Bodies up to this size are copied behind the header and sent with it in one write;
/// larger ones follow the header in writes of their own (the copy would cost more than
/// the extra system call).
pub const INLINE_BODY: usize = 64 * 1024;

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

/// The providers' targets, the connector and the DNS cache.
pub struct Upstreams {
    /// This instance's part of its idle connections' keys (`idle_pool::Key`).
    owner: u64,
    connector: TransportConnector,
    /// A handful, each provider once: found by a scan. A hash map hashed the provider
    /// with SipHash, about 150 instructions a lookup, twice a request (three times
    /// traced).
    targets: Vec<(Provider, Target)>,
    dns: Mutex<HashMap<(String, u16), (SocketAddr, Instant)>>,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    idle_timeout: Duration,
}

/// A request sent and its response header received.
pub struct Exchange {
    session: HttpSession,
    /// Where the connection is kept once the answer is read.
    kept: idle_pool::Key,
    /// How long the provider may fall silent in the body (`idle_timeout_ms`).
    idle: IdleDeadline,
}

impl Exchange {
    pub fn response_header(&self) -> Option<&ResponseHeader> {
        self.session.resp_header()
    }

    /// The next piece of the answer's body, borrowed from the session's buffer (the
    /// relay copies what it passes on anyway); `None` at its end; a `ReadTimedout` error
    /// when the provider was silent for the idle timeout.
    pub async fn read_body(&mut self) -> pingora::Result<Option<&[u8]>> {
        let Exchange { session, idle, .. } = self;
        let mut read = pin!(session.read_body_ref());
        let read = poll_fn(|cx| match read.as_mut().poll(cx) {
            Poll::Ready(read) => Poll::Ready(Some(read)),
            Poll::Pending => idle.poll_expired(cx).map(|()| None),
        })
        .await;
        idle.read();
        read.unwrap_or_else(|| {
            Error::e_explain(ErrorType::ReadTimedout, "the provider fell silent")
        })
    }
}

/// Where `provider` is configured, for messages about its configuration.
fn config_key(provider: Provider) -> String {
    match provider {
        Provider::Operator(name) => format!("custom.{}", name.as_str()),
        built_in => built_in.to_string(),
    }
}

impl Upstreams {
    pub fn new(config: &ProxyConfig, providers: &ProvidersConfig) -> Result<Upstreams, String> {
        let mut targets = Vec::new();
        for provider in providers.all() {
            let base_url = providers.base_url(provider).unwrap_or_default();
            let target = Target::parse(base_url)
                .map_err(|e| format!("providers.{}: {e}", config_key(provider)))?;
            targets.push((provider, target));
            if let Some(key) = providers.api_key(provider) {
                if !is_header_value(key.expose().as_bytes()) {
                    return Err(format!(
                        "providers.{}.api_key holds characters an HTTP header cannot carry \
                         (a line break, say)",
                        config_key(provider)
                    ));
                }
            }
        }
        // Idle connections are kept by `idle_pool`, per thread; the connector's own pool
        // stays empty.
        let mut options = ConnectorOptions::new(0);
        options.ca_file = config
            .ca_file
            .as_ref()
            .map(|path| path.display().to_string());
        static OWNERS: AtomicU64 = AtomicU64::new(0);
        Ok(Upstreams {
            owner: OWNERS.fetch_add(1, Ordering::Relaxed),
            connector: TransportConnector::new(Some(options)),
            targets,
            dns: Mutex::default(),
            connect_timeout: Duration::from_millis(config.connect_timeout_ms),
            first_byte_timeout: Duration::from_millis(config.first_byte_timeout_ms),
            idle_timeout: Duration::from_millis(config.idle_timeout_ms),
        })
    }

    pub fn target(&self, provider: Provider) -> Option<&Target> {
        self.targets
            .iter()
            .find(|(of, _)| *of == provider)
            .map(|(_, target)| target)
    }

    /// Sends the request head `build` writes and `body` to `provider` and waits for the
    /// response header. A pooled connection the provider closed meanwhile is retried once
    /// on a fresh one, with a head written anew (the first went out with the body in its
    /// buffer; writing is cheaper than copying one for every request in case of a retry).
    pub async fn send(
        &self,
        provider: Provider,
        build: &(dyn Fn() -> Result<BytesMut, Refusal> + Sync),
        body: Bytes,
    ) -> Result<Exchange, Refusal> {
        let target = self
            .target(provider)
            .ok_or(Refusal::ProviderNotConfigured(provider))?;
        let peer = self
            .peer(target)
            .await
            .map_err(|()| Refusal::UpstreamUnreachable(provider))?;
        let kept = (self.owner, peer.reuse_hash());
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (stream, reused) = self
                .stream_to(&peer, kept)
                .await
                .map_err(|e| refusal_of(provider, &e))?;
            match self.exchange(stream, &peer, build()?, &body).await {
                Ok(session) => {
                    let idle = IdleDeadline::new(self.idle_timeout);
                    return Ok(Exchange {
                        session,
                        kept,
                        idle,
                    });
                }
                // A pooled connection the provider closed while it idled fails before
                // any answer (pingora marks such errors "retry if reused").
                Err(mut error) if attempt == 1 => {
                    error.retry.decide_reuse(reused);
                    if !error.retry() {
                        return Err(refusal_of(provider, &error));
                    }
                    tracing::debug!(%error, "pooled connection failed; retrying on a new one");
                }
                Err(error) => return Err(refusal_of(provider, &error)),
            }
        }
    }

    /// An idle connection to `peer` this thread kept under `kept`, else a new one (and
    /// whether it was kept), with the connecting half boxed. Connecting (TCP, TLS) is a future of
    /// several kilobytes that every request's future would otherwise reserve room for
    /// and move, while nearly every request finds a kept connection.
    async fn stream_to(
        &self,
        peer: &HttpPeer,
        kept: idle_pool::Key,
    ) -> pingora::Result<(Stream, bool)> {
        if let Some(stream) = idle_pool::take(kept) {
            return Ok((stream, true));
        }
        let stream = match peer.address() {
            PeerAddress::Inet(address) if !peer.tls() => {
                Box::pin(connect_plain(*address, self.connect_timeout)).await?
            }
            _ => Box::pin(self.connector.new_stream(peer)).await?,
        };
        Ok((stream, false))
    }

    /// Writes the request (one write when the body is inlined) and reads the response
    /// header, within the write and first-byte timeouts.
    async fn exchange(
        &self,
        mut stream: Stream,
        peer: &HttpPeer,
        mut wire: BytesMut,
        body: &Bytes,
    ) -> pingora::Result<HttpSession> {
        let write = async {
            if body.len() <= INLINE_BODY {
                wire.extend_from_slice(body);
                stream.write_all(&wire).await?;
            } else {
                stream.write_all(&wire).await?;
                stream.write_all(body).await?;
            }
            stream.flush().await
        };
        match tokio::time::timeout(self.idle_timeout, write).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                let mut error =
                    Error::because(ErrorType::WriteError, "while writing the request", error);
                // Nothing was answered: the provider cannot have acted on a request on a
                // connection it had already closed.
                error.retry = pingora::RetryType::ReusedOnly;
                return Err(error);
            }
            Err(_) => {
                return Err(Error::explain(
                    ErrorType::WriteTimedout,
                    "while writing the request",
                ))
            }
        }
        let mut session = HttpSession::new_with_options(stream, peer);
        session.read_timeout = Some(self.first_byte_timeout);
        session.read_response().await?;
        // The body's silences are limited by the exchange's `IdleDeadline`.
        session.read_timeout = None;
        Ok(session)
    }

    /// Keeps a fully read connection idle on this thread (when the provider keeps it
    /// alive).
    pub async fn release(&self, exchange: Exchange) {
        let Exchange {
            mut session, kept, ..
        } = exchange;
        session.respect_keepalive();
        if let Some(stream) = session.reuse().await {
            idle_pool::keep(kept, stream, self.idle_timeout);
        }
    }

    async fn peer(&self, target: &Target) -> Result<HttpPeer, ()> {
        let addr = self.resolve(&target.host, target.port).await?;
        let mut peer = HttpPeer::new(addr, target.tls, target.host.clone());
        let options = &mut peer.options;
        options.connection_timeout = Some(self.connect_timeout);
        options.total_connection_timeout = Some(self.connect_timeout);
        options.idle_timeout = Some(self.idle_timeout);
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
            .map_err(|error| {
                // Every request to the provider fails the same way while DNS does.
                static FAILURES: LogThrottle = LogThrottle::new(LOG_INTERVAL);
                if let Some(times) = FAILURES.hit() {
                    tracing::warn!(%host, %error, times, "cannot resolve a provider");
                }
            })?
            .next()
            .ok_or(())?;
        if let Ok(mut cache) = self.dns.lock() {
            cache.insert(key, (addr, Instant::now()));
        }
        Ok(addr)
    }
}

/// A plain TCP connection to a provider (a local server, a gateway in the cluster):
/// pingora's own connect (its errors typed as its connector types them), then tokio's
/// socket held as [`BufferedIo`] holds an agent's, not in pingora's stream type, whose
/// bookkeeping on every read (the time each read waited: two clock readings, receive
/// timestamps) served nothing here and was 5 % of the proxy's user time at 1,000 streams
/// (`perf`, 2026-11-30).
async fn connect_plain(address: SocketAddr, timeout: Duration) -> pingora::Result<Stream> {
    let tcp = match tokio::time::timeout(timeout, l4::ext::connect(&address, None)).await {
        Ok(connected) => connected?,
        Err(_) => {
            return Error::e_explain(
                ErrorType::ConnectTimedout,
                format!("connecting to {address}"),
            )
        }
    };
    tcp.set_nodelay(true)
        .or_err(ErrorType::ConnectError, "setting TCP_NODELAY")?;
    Ok(Box::new(BufferedIo::new(tcp)))
}

pub(crate) fn refusal_of(provider: Provider, error: &pingora::Error) -> Refusal {
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
    use super::{Target, Upstreams};
    use crate::config::{ProvidersConfig, ProxyConfig};
    use warden_shared::secret::Secret;

    #[test]
    fn a_configured_key_that_cannot_be_a_header_stops_the_proxy_at_startup() {
        let mut providers = ProvidersConfig::default();
        providers.nvidia.api_key = Some(Secret::new("nvapi-1\n"));
        let refused = Upstreams::new(&ProxyConfig::default(), &providers).err();
        assert!(
            refused
                .as_deref()
                .is_some_and(|e| e.starts_with("providers.nvidia.api_key") && !e.contains("nvapi")),
            "{refused:?}"
        );
        providers.nvidia.api_key = Some(Secret::new("nvapi-1"));
        assert!(Upstreams::new(&ProxyConfig::default(), &providers).is_ok());
    }

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
