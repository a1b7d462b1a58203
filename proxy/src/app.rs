//! Builds the proxy exactly as production runs it: `build` binds the listener (port 0
//! allowed) and starts nothing else; `serve` runs the state stream follower, the usage
//! flusher and the accept loop (which deals connections to the event loops of
//! `event_loops`) until the shutdown future resolves.
//!
//! Connections are served from our own listener (`crate::connection` drives pingora's
//! HTTP/1 session) rather than by pingora's `Server`, which owns the process (its own
//! runtimes, signals, `run_forever` exiting): the proxy then starts beside the control
//! plane in one process (`warden dev`), in tests on port 0, and alone (`warden proxy`)
//! the same way.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use warden_shared::clock::{system_now_ms, Clock};
use warden_shared::outbound::Allowance;
use warden_shared::secret::Secret;
use warden_shared::wire::paths;

use crate::approval_claims::ApprovalClaims;
use crate::batch_queue::BatchReceiver;
use crate::budget_grants::{BudgetGrantCounters, BudgetGrants};
use crate::capture::{CaptureBuffer, CaptureMetrics};
use crate::config::OwnCredential;
use crate::config::{ProvidersConfig, ProxyConfig};
use crate::decisions::{self, ApprovalQueue, DecisionReport};
use crate::event_loops::{proxy_handler, Servers, DRAIN};
use crate::flush::FlushTarget;
use crate::guardrails::Guardrails;
use crate::managed_keys::ManagedKeys;
use crate::mcp::drift::{DriftReports, ReportTarget};
use crate::mcp::metrics::GatewayMetrics;
use crate::mcp::upstream::UpstreamClients;
use crate::mcp::{GatewayShared, McpGateway};
use crate::metrics::ProxyMetrics;
use crate::otel::{LostSpans, Tracer};
use crate::rate_grants::{RateGrantCounters, RateGrants};
use crate::rate_limit::RateWindows;
use crate::resources::Resources;
use crate::service::ProxyService;
use crate::state::EnforcementState;
use crate::sync::{self, StreamSource};
use crate::upstream::Upstreams;
use crate::usage::sink;
use crate::usage::spool::{OpenSpool, Spool};
use crate::usage::UsageRecord;
use warden_shared::ids::{new_id, IdKind};

/// More event loops than this is a typo, not a machine: each is a thread.
pub const MAX_EVENT_LOOPS: usize = 256;

/// Everything the proxy is configured with.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    pub proxy: ProxyConfig,
    pub providers: ProvidersConfig,
    /// The token the control plane's internal endpoints require.
    pub service_token: Secret,
    /// Private hosts or networks the MCP gateway may reach servers at
    /// (`outbound.allow_private`, the control plane's setting of the same name).
    pub allow_private: Vec<String>,
    /// What the request path reads the time from (rate windows, budget periods, expiries,
    /// usage timestamps): the system clock, or a manual one in tests.
    pub clock: Clock,
    /// Where spans go (`crate::otel`); `None`: tracing is off.
    pub tracer: Option<Tracer>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyStartupError {
    #[error("invalid provider configuration: {0}")]
    Providers(String),
    #[error("proxy.event_loops: at most {MAX_EVENT_LOOPS} (a thread each), not {0}")]
    EventLoops(usize),
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("metrics registry: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("cannot open the usage spool {}: {source}", dir.display())]
    Spool {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    #[error("{0}")]
    Outbound(String),
}

/// A bound proxy, ready to serve.
pub struct ProxyApp {
    pub addr: SocketAddr,
    state: Arc<EnforcementState>,
    metrics: ProxyMetrics,
    listener: TcpListener,
    /// One per event loop (one in all when connections share the runtime's workers).
    services: Vec<Arc<ProxyService>>,
    event_loops: usize,
    /// How long an agent's connection may wait for a request, in seconds.
    keepalive_secs: u64,
    usage: BatchReceiver<UsageRecord>,
    flush: FlushTarget,
    /// The usage spool and the batches an earlier run left in it (`None`: turned off).
    spool: Option<OpenSpool>,
    usage_capacity: usize,
    decisions: BatchReceiver<DecisionReport>,
    decisions_flush: FlushTarget,
    rates: Arc<RateWindows>,
    mcp: Arc<McpGateway>,
    clock: Clock,
    stream: StreamSource,
    client: reqwest::Client,
    budget_grants: BudgetGrants,
    rate_grants: RateGrants,
    draining: Arc<AtomicBool>,
    shutdown_delay: Duration,
}

pub async fn build(settings: ProxySettings) -> Result<ProxyApp, ProxyStartupError> {
    let ProxySettings {
        proxy: config,
        providers,
        service_token,
        allow_private,
        clock,
        tracer,
    } = settings;
    let allowance = Arc::new(Allowance::new(&allow_private).map_err(ProxyStartupError::Outbound)?);
    // The MCP gateway's client (reqwest 0.13, built without a TLS provider) uses the
    // process default: ring, as everything else here. Installed once; a second build in
    // the same process finds it installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let catalog = Arc::new(providers.catalog().map_err(ProxyStartupError::Providers)?);
    let metrics = ProxyMetrics::new(providers.all())?;
    if let Some(tracer) = &tracer {
        metrics.register(Box::new(LostSpans::new(tracer.clone())?))?;
    }
    let state = Arc::new(EnforcementState::default());
    if config.event_loops > MAX_EVENT_LOOPS {
        return Err(ProxyStartupError::EventLoops(config.event_loops));
    }
    // Checked before anything starts: the loops' copies below cannot fail then.
    Upstreams::new(&config, &providers).map_err(ProxyStartupError::Providers)?;
    warn_about_credentials(&providers);
    let batch_size = config.usage_batch_size.clamp(1, 1000);
    let (decision_sink, decisions) =
        decisions::channel(config.usage_buffer_capacity, batch_size, &metrics);
    let (usage_sink, usage) = sink::channel(
        config.usage_buffer_capacity,
        batch_size,
        metrics.clone(),
        decision_sink.clone(),
    );
    let rates = Arc::new(RateWindows::default());
    let captures = CaptureBuffer::new(
        config.payload_capture_buffer_mb.saturating_mul(1024 * 1024),
        config.payload_capture_max_bytes,
        CaptureMetrics {
            captures: metrics.payload_captures.clone(),
            buffer_bytes: metrics.payload_capture_buffer.clone(),
        },
    );
    let spool = open_spool(&config)?;
    let listener = bind_listener(config.listen, config.listen_backlog).map_err(|source| {
        ProxyStartupError::Bind {
            addr: config.listen,
            source,
        }
    })?;
    let addr = listener
        .local_addr()
        .map_err(|source| ProxyStartupError::Bind {
            addr: config.listen,
            source,
        })?;
    let base = config.control_plane_url.trim_end_matches('/').to_owned();
    let managed_keys =
        ManagedKeys::new(&config.secrets_manager, metrics.managed_key_reads.clone()).await;
    // One client for what the request path asks the control plane (rate limits' and
    // budgets' allowances, single-use approvals), connecting within a second.
    let allowances = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(1))
        .build()
        .map_err(ProxyStartupError::Client)?;
    let approval_claims = ApprovalClaims::new(allowances.clone(), &base, service_token.expose());
    let guardrails = Guardrails {
        timeout: Duration::from_millis(config.guardrail_timeout_ms),
        findings: metrics.guardrail_findings.clone(),
        failures: metrics.guardrail_failures.clone(),
    };
    let mcp = Arc::new(McpGateway::new(
        GatewayShared {
            state: state.clone(),
            upstreams: UpstreamClients::new(managed_keys.clone(), allowance),
            rates: rates.clone(),
            decisions: decision_sink.clone(),
            approvals: approval_queue(&base, &service_token, &decision_sink)?,
            approval_claims: approval_claims.clone(),
            guardrails: guardrails.clone(),
            usage: usage_sink.clone(),
            metrics: GatewayMetrics::new(&metrics)?,
            drifts: DriftReports::new(Some(ReportTarget {
                client: reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(2))
                    .build()?,
                url: format!("{base}{}", paths::MCP_TOOL_DRIFTS),
                service_token: service_token.expose().to_owned(),
            })),
            call_timeout: Duration::from_secs(config.mcp_call_timeout_secs.max(1)),
            clock: clock.clone(),
            tracer: tracer.clone(),
            captures: captures.clone(),
        },
        &config.mcp_allowed_origins,
        config.max_body_bytes,
    ));
    // One proxy per event loop, each with its own provider connections: a connection
    // is registered with the loop that opened it, so sharing one pool across loops
    // would send its readiness through another thread.
    let draining = Arc::new(AtomicBool::new(false));
    let rate_grants = RateGrants::new(
        allowances.clone(),
        &base,
        service_token.expose(),
        rates.clone(),
        RateGrantCounters {
            failures: metrics.rate_grant_failures.clone(),
            asks: metrics.rate_grant_asks.clone(),
            batches: metrics.rate_grant_batches.clone(),
        },
        clock.clone(),
    );
    // This instance's id: whose state acknowledgements and budget allowances they are.
    let proxy_id = new_id(IdKind::Instance, system_now_ms());
    let budget_grants = BudgetGrants::new(
        allowances,
        &base,
        service_token.expose(),
        &proxy_id,
        BudgetGrantCounters {
            failures: metrics.budget_grant_failures.clone(),
            asks: metrics.budget_grant_asks.clone(),
        },
    );
    let mut services = Vec::new();
    for _ in 0..config.event_loops.max(1) {
        let service = ProxyService::new(Resources {
            state: state.clone(),
            upstreams: Upstreams::new(&config, &providers).map_err(ProxyStartupError::Providers)?,
            usage: usage_sink.clone(),
            captures: captures.clone(),
            decisions: decision_sink.clone(),
            // Each event loop's own, like its provider connections.
            approvals: approval_queue(&base, &service_token, &decision_sink)?,
            rates: rates.clone(),
            rate_grants: rate_grants.clone(),
            budget_grants: budget_grants.clone(),
            approval_claims: approval_claims.clone(),
            guardrails: guardrails.clone(),
            metrics: metrics.clone(),
            providers: providers.clone(),
            catalog: catalog.clone(),
            managed_keys: managed_keys.clone(),
            mcp: mcp.clone(),
            max_body_bytes: config.max_body_bytes,
            clock: clock.clone(),
            draining: draining.clone(),
            tracer: tracer.clone(),
        });
        services.push(Arc::new(service));
    }
    drop((usage_sink, decision_sink));
    Ok(ProxyApp {
        addr,
        state,
        metrics,
        draining,
        shutdown_delay: Duration::from_millis(config.shutdown_delay_ms),
        listener,
        services,
        event_loops: config.event_loops,
        keepalive_secs: config.keepalive_timeout_secs.max(1),
        usage,
        spool,
        usage_capacity: config.usage_buffer_capacity,
        flush: FlushTarget {
            url: format!("{base}{}", paths::USAGE_BATCHES),
            service_token: service_token.expose().to_owned(),
            interval: Duration::from_millis(config.usage_flush_interval_ms.max(1)),
        },
        decisions,
        rates,
        mcp,
        clock,
        decisions_flush: FlushTarget {
            url: format!("{base}{}", paths::POLICY_DECISIONS),
            service_token: service_token.expose().to_owned(),
            interval: Duration::from_millis(config.usage_flush_interval_ms.max(1)),
        },
        stream: StreamSource {
            url: format!("{base}{}", paths::PROXY_STATE),
            acks_url: format!("{base}{}", paths::PROXY_ACKS),
            proxy_id,
            service_token: service_token.expose().to_owned(),
        },
        client: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()?,
        budget_grants,
        rate_grants,
    })
}

/// Binds the agents' listener with `backlog` (tokio's `bind` listens with 1,024, which a
/// fleet of agents reconnecting at once overflows).
fn bind_listener(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As tokio's `bind` does: a restarted proxy rebinds while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Where held requests' approvals are queued, with an HTTP client of its own.
fn approval_queue(
    base: &str,
    service_token: &Secret,
    fallback: &decisions::DecisionSink,
) -> Result<ApprovalQueue, reqwest::Error> {
    Ok(ApprovalQueue {
        client: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .build()?,
        url: format!("{base}{}", paths::POLICY_DECISIONS),
        service_token: service_token.expose().to_owned(),
        fallback: fallback.clone(),
    })
}

impl ProxyApp {
    /// Serves until `shutdown` resolves, then answers `/readyz` with 503 while it still
    /// accepts for `shutdown_delay_ms`, then stops accepting, lets open requests finish
    /// (up to 10 s) and sends the usage still queued.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let ProxyApp {
            state,
            metrics,
            listener,
            services,
            event_loops,
            keepalive_secs,
            usage,
            flush,
            spool,
            usage_capacity,
            decisions,
            decisions_flush,
            rates,
            mcp,
            clock,
            stream,
            client,
            budget_grants,
            rate_grants,
            draining,
            shutdown_delay,
            ..
        } = self;
        let budgets = state.budgets.clone();
        let follower = sync::spawn_follower(stream, state, metrics.clone())?;
        let decision_flusher = tokio::spawn(decisions::flush_forever(
            decisions,
            decisions_flush,
            client.clone(),
            metrics.clone(),
        ));
        let renewer = tokio::spawn(
            budget_grants
                .clone()
                .renew_forever(budgets.clone(), clock.clone()),
        );
        let asker = tokio::spawn(rate_grants.ask_forever());
        let forgetter = tokio::spawn(forget_stale(rates, mcp, clock.clone()));
        let accept_failures = metrics.accept_failures.clone();
        let spooled = spool.is_some();
        let outlet = sink::Outlet {
            target: flush,
            client,
            spool,
        };
        let mut flusher = sink::start(usage, outlet, metrics, budgets.clone(), usage_capacity);
        let (stop, stopping) = watch::channel(false);
        let handlers = services
            .into_iter()
            .map(|service| proxy_handler(service, keepalive_secs))
            .collect();
        let mut servers = Servers::start(handlers, event_loops > 0, &stopping)?;
        // Not ready first, while the listener still accepts, so that load balancers take
        // this proxy out before it closes (`shutdown_delay_ms`).
        let stopper = async move {
            shutdown.await;
            draining.store(true, Ordering::Relaxed);
            if !shutdown_delay.is_zero() {
                tracing::info!(
                    delay_ms = shutdown_delay.as_millis() as u64,
                    "shutting down: not ready, still accepting until the delay ends"
                );
                tokio::time::sleep(shutdown_delay).await;
            }
            let _ = stop.send(true);
        };
        // Accepting ends with the stop.
        tokio::join!(
            stopper,
            servers.accept(&listener, stopping, &accept_failures)
        );
        drop(listener);
        servers.finish().await;
        drop(follower);
        forgetter.abort();
        asker.abort();
        // The last handle on the usage queue goes with the proxies; the flushers then
        // spool and send what is left and end. What the ledger has not acknowledged by
        // then is safe in the spool when there is one, and sent on the next start.
        let _ = tokio::time::timeout(DRAIN, &mut flusher.taker).await;
        let sending = if spooled { SPOOLED_DRAIN } else { DRAIN };
        if tokio::time::timeout(sending, &mut flusher.sender)
            .await
            .is_err()
        {
            flusher.sender.abort();
            if spooled {
                tracing::warn!("the control plane did not acknowledge all usage before shutdown; the rest stays in the spool for the next start");
            } else {
                tracing::error!("the control plane did not acknowledge all usage before shutdown and there is no spool: the rest is lost");
            }
        }
        let _ = tokio::time::timeout(DRAIN, decision_flusher).await;
        // What the ledger acknowledged and what lies unused goes back to the other
        // proxies now rather than when it lapses.
        renewer.abort();
        budget_grants
            .give_back_unused(&budgets, clock.now_ms())
            .await;
        Ok(())
    }
}

/// Says at startup what the providers' configuration will do to requests: a provider
/// forwarded to without a key, or no provider usable at all.
fn warn_about_credentials(providers: &ProvidersConfig) {
    let mut usable = 0;
    for provider in providers.all() {
        match providers.own_credential(provider) {
            OwnCredential::Key(_) => usable += 1,
            OwnCredential::Keyless => {
                usable += 1;
                tracing::warn!(
                    provider = provider.as_str(),
                    base_url = providers.base_url(provider).unwrap_or_default(),
                    "no credential for this provider: requests to its base URL are sent without one \
                     (right for a local model server; set its api_key otherwise)"
                );
            }
            OwnCredential::Missing => {}
        }
    }
    if usable == 0 {
        tracing::warn!(
            "no provider has a credential or a base URL of its own: every request without a \
             managed key will be refused with 503 provider_not_configured \
             (set WARDEN_PROVIDERS__OPENAI__API_KEY, or a provider's BASE_URL for a local server)"
        );
    }
}

/// How long a stopping proxy with a spool waits for the ledger to acknowledge what is
/// left: it is on disk either way.
const SPOOLED_DRAIN: Duration = Duration::from_secs(2);

/// Opens the usage spool `config` names, if any.
fn open_spool(config: &ProxyConfig) -> Result<Option<OpenSpool>, ProxyStartupError> {
    if config.usage_spool_dir.as_os_str().is_empty() {
        return Ok(None);
    }
    let max_bytes = config.usage_spool_max_mb.saturating_mul(1 << 20);
    Spool::open(&config.usage_spool_dir, max_bytes)
        .map(Some)
        .map_err(|source| ProxyStartupError::Spool {
            dir: config.usage_spool_dir.clone(),
            source,
        })
}

/// Once a minute, drops what no request needs any more, so it does not pile up in a
/// long-running proxy: rate-limit windows of past minutes, and the MCP sessions and
/// definitions of servers deleted or disabled since.
async fn forget_stale(rates: Arc<RateWindows>, mcp: Arc<McpGateway>, clock: Clock) {
    let mut ticker = tokio::time::interval(Duration::from_secs(60));
    loop {
        ticker.tick().await;
        let minute = crate::rate_limit::minute_of(clock.now_ms());
        rates.forget_before(minute);
        mcp.forget_gone_servers();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_listener_queues_as_many_connections_as_configured() {
        let listener = bind_listener(([127, 0, 0, 1], 0).into(), 4096).unwrap();
        let port = listener.local_addr().unwrap().port();
        // For a listening socket, `ss` shows the backlog as Send-Q.
        let shown = std::process::Command::new("ss")
            .args(["-ltnH", &format!("sport = :{port}")])
            .output()
            .expect("ss (iproute2) is installed");
        let line = String::from_utf8_lossy(&shown.stdout).into_owned();
        let columns: Vec<&str> = line.split_whitespace().collect();
        // The kernel caps a backlog at `net.core.somaxconn`.
        let cap: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(4096);
        let expected = 4096.min(cap).to_string();
        assert_eq!(columns.get(2).copied(), Some(expected.as_str()), "{line}");
    }

    #[tokio::test]
    async fn too_many_event_loops_stop_the_proxy_at_startup() {
        let settings = ProxySettings {
            proxy: ProxyConfig {
                listen: ([127, 0, 0, 1], 0).into(),
                event_loops: MAX_EVENT_LOOPS + 1,
                ..ProxyConfig::default()
            },
            providers: ProvidersConfig::default(),
            service_token: Secret::new("token"),
            allow_private: Vec::new(),
            clock: Clock::system(),
            tracer: None,
        };
        let Err(error) = build(settings).await else {
            panic!("the proxy started with {} loops", MAX_EVENT_LOOPS + 1);
        };
        assert!(
            error
                .to_string()
                .starts_with("proxy.event_loops: at most 256"),
            "{error}"
        );
    }
}
