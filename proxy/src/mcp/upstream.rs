//! The gateway's side toward the tenants' MCP servers: one MCP client session per server
//! and event loop, opened on first use with the server's own credential (never the
//! agent's) and shared by every agent of the tenant, like a pooled connection. A session
//! that fails is dropped and the next use opens a new one.
//!
//! The client is the official SDK's (`rmcp`) Streamable HTTP client: the handshake,
//! session ids, protocol versions and SSE answers are its job. It connects to public
//! addresses only, unless the operator allows others ([`super::address_guard`]).

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use tokio::sync::Mutex;
use warden_shared::mcp::fingerprint;
use warden_shared::outbound::Allowance;
use warden_shared::snapshot::McpServerState;

use super::address_guard::{check_literal, GuardedResolver};
use crate::managed_keys::ManagedKeys;

/// How long opening a session (the handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long listing a server's tools may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a server could not be reached or answered. Never carries the credential.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error("the server's credential cannot be read: {0}")]
    Credential(String),
    #[error("the server's address is not allowed: {0}")]
    Forbidden(String),
    #[error("the server cannot be reached: {0}")]
    Connect(String),
    #[error("the server did not answer in time")]
    Timeout,
    #[error("the server failed the request: {0}")]
    Failed(String),
}

/// A tool as its server lists it, with the fingerprint of its definition.
#[derive(Debug, Clone)]
pub struct ListedTool {
    pub tool: Tool,
    pub fingerprint: String,
}

type Session = RunningService<RoleClient, ClientConfig>;

/// One server's session, and what it was opened for: a changed URL or credential opens
/// a new one.
struct Open {
    url: String,
    secret_ref: Option<String>,
    session: Arc<Session>,
}

/// A server's session as one thread of the proxy uses it.
type SessionKey = (String, std::thread::ThreadId);

/// The sessions of this proxy, by server and by thread. A session's tasks run on the
/// runtime that opened it, and each event loop is a runtime of its own thread: a session
/// per loop keeps a call on the loop its agent's connection is served by, instead of
/// waking another loop's thread twice per call.
#[derive(Clone)]
pub struct UpstreamClients {
    sessions: Arc<DashMap<SessionKey, Arc<Mutex<Option<Open>>>>>,
    managed_keys: ManagedKeys,
    /// The private hosts and networks the operator allows servers at.
    allowance: Arc<Allowance>,
}

impl UpstreamClients {
    pub fn new(managed_keys: ManagedKeys, allowance: Arc<Allowance>) -> UpstreamClients {
        UpstreamClients {
            sessions: Arc::new(DashMap::new()),
            managed_keys,
            allowance,
        }
    }

    /// The server's tools, listed now (every page), each with its fingerprint.
    pub async fn list_tools(
        &self,
        server: &McpServerState,
    ) -> Result<Vec<ListedTool>, UpstreamError> {
        // A session the server forgot (it restarted) fails once; a new one is tried.
        for attempt in 0..2 {
            let session = self.session(server).await?;
            match tokio::time::timeout(LIST_TIMEOUT, session.list_all_tools()).await {
                Ok(Ok(tools)) => return Ok(tools.into_iter().map(listed).collect()),
                Ok(Err(error)) => {
                    self.forget(&server.id, &session).await;
                    if attempt == 1 {
                        return Err(UpstreamError::Failed(error.to_string()));
                    }
                }
                Err(_) => {
                    self.forget(&server.id, &session).await;
                    return Err(UpstreamError::Timeout);
                }
            }
        }
        Err(UpstreamError::Timeout)
    }

    /// Calls `params` on the server. Not retried: the server may have acted on it.
    pub async fn call_tool(
        &self,
        server: &McpServerState,
        params: CallToolRequestParams,
        timeout: Duration,
    ) -> Result<CallToolResult, UpstreamError> {
        let session = self.session(server).await?;
        match tokio::time::timeout(timeout, session.call_tool(params)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => {
                if session.is_closed() {
                    self.forget(&server.id, &session).await;
                }
                Err(UpstreamError::Failed(error.to_string()))
            }
            Err(_) => Err(UpstreamError::Timeout),
        }
    }

    async fn session(&self, server: &McpServerState) -> Result<Arc<Session>, UpstreamError> {
        let slot = self
            .sessions
            .entry((server.id.clone(), std::thread::current().id()))
            .or_insert_with(|| Arc::new(Mutex::new(None)))
            .clone();
        // One handshake per server at a time; the others wait for its session.
        let mut open = slot.lock().await;
        if let Some(current) = open.as_ref() {
            if current.url == server.url
                && current.secret_ref == server.secret_ref
                && !current.session.is_closed()
            {
                return Ok(current.session.clone());
            }
        }
        let credential = match &server.secret_ref {
            Some(secret_ref) => Some(
                self.managed_keys
                    .resolve(secret_ref)
                    .await
                    .map_err(|error| UpstreamError::Credential(error.to_string()))?
                    .expose()
                    .to_owned(),
            ),
            None => None,
        };
        let session = Arc::new(connect(&server.url, credential, &self.allowance).await?);
        *open = Some(Open {
            url: server.url.clone(),
            secret_ref: server.secret_ref.clone(),
            session: session.clone(),
        });
        Ok(session)
    }

    /// Closes the sessions of servers `keep` refuses (deleted or disabled ones): a
    /// session dropped by its last holder ends its tasks and connections.
    pub fn retain_servers(&self, keep: &impl Fn(&str) -> bool) {
        self.sessions.retain(|(server_id, _), _| keep(server_id));
    }

    /// Drops `failed` wherever it is held (a task on a multi-threaded runtime may have
    /// moved to another thread since it took the session).
    async fn forget(&self, server_id: &str, failed: &Arc<Session>) {
        let slots: Vec<_> = self
            .sessions
            .iter()
            .filter(|entry| entry.key().0 == server_id)
            .map(|entry| entry.value().clone())
            .collect();
        for slot in slots {
            let mut open = slot.lock().await;
            if open
                .as_ref()
                .is_some_and(|current| Arc::ptr_eq(&current.session, failed))
            {
                *open = None;
            }
        }
    }
}

/// The HTTP client of the sessions with servers. Connections are pooled (the SDK's
/// default opens one per message, which cost the gateway more CPU than everything else
/// it does per call; `load-tests/mcp.sh`), and redirects are never followed: a server
/// could otherwise send the gateway, with its credential, somewhere its registration
/// was not allowed to point. Names resolve through the address guard, and no proxy of
/// the environment is used (it would resolve them instead, unguarded).
fn http_client(allowance: &Arc<Allowance>) -> Result<reqwest_mcp::Client, UpstreamError> {
    reqwest_mcp::Client::builder()
        .redirect(reqwest_mcp::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(GuardedResolver {
            allowance: allowance.clone(),
        })
        .pool_idle_timeout(Duration::from_secs(60))
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|error| UpstreamError::Connect(error.to_string()))
}

/// Opens an MCP session with the server at `url`, presenting `credential` as a bearer
/// token when there is one; `allowance` names the private hosts it may be at.
pub async fn connect(
    url: &str,
    credential: Option<String>,
    allowance: &Arc<Allowance>,
) -> Result<Session, UpstreamError> {
    check_literal(url, allowance)
        .map_err(|refused| UpstreamError::Forbidden(refused.to_string()))?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(token) = credential {
        config = config.auth_header(token);
    }
    let transport = StreamableHttpClientTransport::with_client(http_client(allowance)?, config);
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("warden-mcp-gateway", env!("CARGO_PKG_VERSION")),
    );
    match tokio::time::timeout(CONNECT_TIMEOUT, info.serve(transport)).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(error)) => Err(UpstreamError::Connect(error.to_string())),
        Err(_) => Err(UpstreamError::Timeout),
    }
}

/// A tool definition as a server lists it now, for an operator's approval.
#[derive(Debug, Clone)]
pub struct ToolDefinition {
    pub name: String,
    pub fingerprint: String,
    /// The definition as JSON (name, description, schemas, annotations).
    pub definition: serde_json::Value,
}

/// Opens a session with the server at `url`, lists every tool and closes it: what the
/// control plane pins when an operator approves a server, under its own allowance.
pub async fn fetch_definitions(
    url: &str,
    credential: Option<String>,
    allowance: &Allowance,
) -> Result<Vec<ToolDefinition>, UpstreamError> {
    let session = connect(url, credential, &Arc::new(allowance.clone())).await?;
    let tools = match tokio::time::timeout(LIST_TIMEOUT, session.list_all_tools()).await {
        Ok(Ok(tools)) => Ok(tools),
        Ok(Err(error)) => Err(UpstreamError::Failed(error.to_string())),
        Err(_) => Err(UpstreamError::Timeout),
    };
    let _ = session.cancel().await;
    Ok(tools?
        .into_iter()
        .map(|tool| {
            let ListedTool { tool, fingerprint } = listed(tool);
            ToolDefinition {
                name: tool.name.to_string(),
                fingerprint,
                definition: serde_json::to_value(&tool).unwrap_or_default(),
            }
        })
        .collect())
}

fn listed(tool: Tool) -> ListedTool {
    let definition = serde_json::to_value(&tool).unwrap_or_default();
    ListedTool {
        fingerprint: fingerprint(&definition),
        tool,
    }
}

#[cfg(test)]
mod tests {
    use prometheus::{IntCounterVec, Opts};

    use super::*;
    use crate::config::SecretsManagerConfig;

    #[tokio::test]
    async fn the_sessions_of_servers_no_longer_kept_are_dropped() {
        let reads = IntCounterVec::new(Opts::new("reads", "reads"), &["outcome"]).unwrap();
        let keys = ManagedKeys::new(&SecretsManagerConfig::default(), reads).await;
        let clients = UpstreamClients::new(keys, Arc::new(Allowance::default()));
        let this_thread = std::thread::current().id();
        let other_thread = std::thread::spawn(|| std::thread::current().id())
            .join()
            .unwrap();
        for server in ["mcp_kept", "mcp_gone"] {
            for thread in [this_thread, other_thread] {
                clients
                    .sessions
                    .insert((server.to_owned(), thread), Arc::new(Mutex::new(None)));
            }
        }
        clients.retain_servers(&|id| id == "mcp_kept");
        let mut left: Vec<String> = clients
            .sessions
            .iter()
            .map(|entry| entry.key().0.clone())
            .collect();
        left.sort();
        assert_eq!(left, ["mcp_kept", "mcp_kept"]);
    }
}
