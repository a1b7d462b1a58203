//! Prometheus metrics of the management API: requests and latency by route template
//! (counted by `api::http_metrics::track`).
//!
//! Labels use the matched route template (`/api/v1/agents/{agent_id}`), never the raw
//! path, so label cardinality stays bounded whatever clients send.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

use crate::gauges::Gauges;
use crate::proxy_state::confirm::Confirmation;

/// The control plane's own registry and the HTTP metrics in it.
pub struct HttpMetrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    enforcement_writes: IntCounterVec,
    enforcement_wait: HistogramVec,
    ingest_dropped: IntCounterVec,
    /// The state operators alert on, read when scraped.
    pub gauges: Gauges,
}

impl HttpMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "warden_http_requests_total",
                "Management API requests by method, route template and status.",
            ),
            &["method", "route", "status"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "warden_http_request_duration_seconds",
                "Management API request latency by method, route template and status.",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            &["method", "route", "status"],
        )?;
        let enforcement_writes = IntCounterVec::new(
            Opts::new(
                "warden_enforcement_writes_total",
                "Management writes that changed what the proxies enforce, by whether every \
                 connected proxy confirmed them within enforcement_wait_ms (applied) or not \
                 (pending).",
            ),
            &["outcome"],
        )?;
        let enforcement_wait = HistogramVec::new(
            HistogramOpts::new(
                "warden_enforcement_wait_seconds",
                "How long enforcement writes waited for the connected proxies to apply them.",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            &["outcome"],
        )?;
        let ingest_dropped = IntCounterVec::new(
            Opts::new(
                "warden_ingest_records_dropped_total",
                "Records the proxies sent that the control plane dropped, by kind (usage, \
                 tool_call, decision, tool_drift) and reason (tenant_deleted: their tenant \
                 was deleted while they were on their way).",
            ),
            &["kind", "reason"],
        )?;
        registry.register(Box::new(ingest_dropped.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(enforcement_writes.clone()))?;
        registry.register(Box::new(enforcement_wait.clone()))?;
        let gauges = Gauges::register(&registry)?;
        Ok(HttpMetrics {
            gauges,
            registry,
            requests,
            latency,
            enforcement_writes,
            enforcement_wait,
            ingest_dropped,
        })
    }

    /// The registry other parts of the control plane add their metrics to.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The registry in Prometheus's text exposition format.
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut buffer) {
            tracing::error!(%error, "cannot encode metrics");
        }
        String::from_utf8(buffer).unwrap_or_default()
    }

    pub fn observe(&self, method: &str, route: &str, status: &str, seconds: f64) {
        self.requests
            .with_label_values(&[method, route, status])
            .inc();
        self.latency
            .with_label_values(&[method, route, status])
            .observe(seconds);
    }
}

impl HttpMetrics {
    /// Counts and times one enforcement write's wait for the proxies.
    pub fn observe_enforcement_wait(&self, confirmation: Confirmation, seconds: f64) {
        let outcome = match confirmation {
            Confirmation::Applied => "applied",
            Confirmation::Pending { .. } => "pending",
        };
        self.enforcement_writes.with_label_values(&[outcome]).inc();
        self.enforcement_wait
            .with_label_values(&[outcome])
            .observe(seconds);
    }
}

impl HttpMetrics {
    /// Counts `count` records of `kind` an ingest endpoint dropped for `reason`.
    pub fn count_ingest_dropped(&self, kind: &str, reason: &str, count: usize) {
        if count > 0 {
            self.ingest_dropped
                .with_label_values(&[kind, reason])
                .inc_by(count as u64);
        }
    }
}
