//! The MCP gateway: agents reach their tenant's MCP servers through the proxy at `/mcp`
//! (every server's tools the key may use, named `<server>__<tool>`) and `/mcp/{server}`
//! (one server's, under their own names), with the same proxy keys as model requests.
//!
//! The protocol (Streamable HTTP: JSON-RPC over POST, SSE answers, `MCP-Session-Id`,
//! `MCP-Protocol-Version`, `Origin` checks) is the official SDK's (`rmcp`) server,
//! hosted inside pingora's request: the request is authenticated here, then handed to
//! the SDK with the caller attached, and its answer is written back as it streams.
//! [`handler`] decides tool calls, [`upstream`] holds the sessions with the servers,
//! [`drift`] keeps tools to their approved definitions.
//!
//! Legacy (pre-2026-07-28) clients get sessions; a session lives in the proxy that
//! opened it, so replicas behind a load balancer need affinity on `MCP-Session-Id` for
//! those clients. Current clients are served statelessly.

pub mod address_guard;
pub mod drift;
pub mod handler;
mod listing;
pub mod metrics;
pub mod upstream;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

pub use handler::{Caller, GatewayShared};

use crate::refusal::Refusal;
use crate::request_body::read_body;
use handler::Gateway;

/// The gateway, shared by every event loop.
pub struct McpGateway {
    service: StreamableHttpService<Gateway, LocalSessionManager>,
    shared: Arc<GatewayShared>,
}

impl McpGateway {
    /// `allowed_origins`: browser origins that may call the gateway; a request with any
    /// other `Origin` is refused (agents send none), so a web page cannot use an
    /// operator's browser against it.
    pub fn new(shared: GatewayShared, allowed_origins: &[String], max_body_bytes: usize) -> Self {
        let shared = Arc::new(shared);
        let for_sessions = shared.clone();
        let config = StreamableHttpServerConfig::default()
            // Every request carries a key: the DNS-rebinding guard for unauthenticated
            // local servers (a Host allowlist) is not what protects this endpoint.
            .disable_allowed_hosts()
            .with_allowed_origins(allowed_origins.iter().cloned())
            .enforce_origin_validation()
            .with_legacy_session_mode(true)
            .with_json_response(true)
            .with_sse_keep_alive(Some(Duration::from_secs(15)))
            .with_max_request_body_bytes(max_body_bytes);
        let service = StreamableHttpService::new(
            move || Ok(Gateway::new(for_sessions.clone())),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        McpGateway { service, shared }
    }

    /// Forgets the sessions with, and definitions seen of, servers no longer in the
    /// state (deleted or disabled since): a long-running proxy does not keep them.
    pub fn forget_gone_servers(&self) {
        let current = self.shared.state.mcp_server_ids();
        let keep = |id: &str| current.contains(id);
        self.shared.upstreams.retain_servers(&keep);
        self.shared.drifts.retain_servers(&keep);
    }

    /// Answers one HTTP request of the MCP transport for `caller`.
    pub async fn serve(
        &self,
        session: &mut ServerSession,
        caller: Caller,
        max_body_bytes: usize,
    ) -> Result<(), Refusal> {
        let body = if session.req_header().method == http::Method::POST {
            read_body(session, max_body_bytes).await?
        } else {
            Bytes::new()
        };
        let header = session.req_header();
        let mut request = http::Request::builder()
            .method(header.method.clone())
            .uri(header.uri.clone())
            .body(Full::new(body))
            .map_err(|_| Refusal::BadRequest("the request cannot be read".into()))?;
        *request.headers_mut() = header.headers.clone();
        request.extensions_mut().insert(caller);
        let response = self.service.handle(request).await;
        write_response(session, response).await;
        Ok(())
    }
}

/// Writes the SDK's answer: JSON with its length, an event stream chunk by chunk as the
/// SDK produces it (until it ends or the agent goes away).
async fn write_response(
    session: &mut ServerSession,
    response: http::Response<http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>>,
) {
    let (parts, mut body) = response.into_parts();
    let Ok(mut header) = ResponseHeader::build(parts.status, Some(parts.headers.len() + 1)) else {
        return;
    };
    for (name, value) in &parts.headers {
        let _ = header.append_header(name.clone(), value.clone());
    }
    let streamed = !parts.headers.contains_key(http::header::CONTENT_LENGTH);
    if streamed {
        let _ = header.insert_header(http::header::TRANSFER_ENCODING, "chunked");
    }
    if session
        .write_response_header(Box::new(header))
        .await
        .is_err()
    {
        return;
    }
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if session.write_response_body(data, false).await.is_err() {
            return;
        }
    }
    let _ = session.write_response_body(Bytes::new(), true).await;
}
