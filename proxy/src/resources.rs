//! What every request shares: the enforcement state and rate windows it is checked
//! against, the provider connections and credentials it is sent with, the queues its
//! usage and decisions go to, the metrics, and the body limit. `app` builds one per
//! event loop; `service` answers with it and lends it to `forward`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use warden_shared::catalog::ProviderCatalog;
use warden_shared::clock::Clock;

use crate::approval_claims::ApprovalClaims;
use crate::budget_grants::BudgetGrants;
use crate::capture::CaptureBuffer;
use crate::config::ProvidersConfig;
use crate::decisions::{ApprovalQueue, DecisionSink};
use crate::guardrails::Guardrails;
use crate::managed_keys::ManagedKeys;
use crate::mcp::McpGateway;
use crate::metrics::ProxyMetrics;
use crate::otel::Tracer;
use crate::rate_grants::RateGrants;
use crate::rate_limit::RateWindows;
use crate::state::EnforcementState;
use crate::upstream::Upstreams;
use crate::usage::sink::UsageSink;

pub struct Resources {
    pub state: Arc<EnforcementState>,
    /// This event loop's own provider connections (see `crate::app`).
    pub upstreams: Upstreams,
    pub usage: UsageSink,
    /// Request bodies held for payload capture, bounded across the process.
    pub captures: Arc<CaptureBuffer>,
    pub decisions: DecisionSink,
    /// Where a held request's approval is queued before its 403 is answered.
    pub approvals: ApprovalQueue,
    pub rates: Arc<RateWindows>,
    /// Where shared rate limits' allowances are asked for.
    pub rate_grants: RateGrants,
    /// Where budgets' allowances are asked for.
    pub budget_grants: BudgetGrants,
    /// Where single-use approvals are claimed.
    pub approval_claims: ApprovalClaims,
    /// Guardrails' time limit and metrics.
    pub guardrails: Guardrails,
    pub metrics: ProxyMetrics,
    pub providers: ProvidersConfig,
    /// The declared providers' routed models and prices.
    pub catalog: Arc<ProviderCatalog>,
    pub managed_keys: ManagedKeys,
    /// The MCP gateway, shared by every event loop.
    pub mcp: Arc<McpGateway>,
    pub max_body_bytes: usize,
    /// The request path's time (see `ProxySettings::clock`).
    pub clock: Clock,
    /// True from the shutdown signal on: `/readyz` answers 503 so that load balancers
    /// stop sending new requests before the listener closes.
    pub draining: Arc<AtomicBool>,
    /// Where the request's spans go; `None`: tracing is off.
    pub tracer: Option<Tracer>,
}
