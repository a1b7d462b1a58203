//! The proxy's Prometheus metrics, served on its own listener at `/metrics`.
//!
//! Labels stay bounded: providers are five, statuses are grouped by class, decisions are
//! the refusal codes, and a model label is the price table's model name or `other`.

use std::sync::Arc;

use warden_shared::registry::Provider;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

/// Cheap to clone: every metric is reference-counted inside.
#[derive(Clone)]
pub struct ProxyMetrics {
    registry: Arc<Registry>,
    pub requests: IntCounterVec,
    pub duration: HistogramVec,
    pub overhead: Histogram,
    pub tokens: IntCounterVec,
    pub cost_micros: IntCounterVec,
    pub snapshot_version: IntGauge,
    pub snapshot_age_seconds: IntGauge,
    pub keys_loaded: IntGauge,
    pub usage_queued: IntGauge,
    pub usage_in_flight: IntGauge,
    pub usage_flushed: IntCounter,
    pub usage_dropped: IntCounter,
    pub usage_unspooled: IntCounter,
    pub usage_set_aside: IntCounter,
    pub usage_batches_set_aside: IntCounter,
    pub usage_flush_failures: IntCounter,
    pub stream_reconnects: IntCounter,
    pub managed_key_reads: IntCounterVec,
    pub decisions_dropped: IntCounter,
    pub decisions_flush_failures: IntCounter,
    pub accept_failures: IntCounter,
    /// Rate limit grants the control plane did not answer (`crate::rate_grants`).
    pub rate_grant_failures: IntCounter,
    /// Rate limit allowances asked for, and the batches they went in.
    pub rate_grant_asks: IntCounter,
    pub rate_grant_batches: IntCounter,
    /// Budget allowance requests the control plane did not answer (`crate::budget_grants`).
    pub budget_grant_failures: IntCounter,
    /// Budget allowance requests sent by requests short of one (`crate::budget_grants`).
    pub budget_grant_asks: IntCounter,
    /// Guardrails' findings by action, and their failed scans (`crate::guardrails`).
    pub guardrail_findings: IntCounterVec,
    pub guardrail_failures: IntCounter,
    pub payload_captures: IntCounterVec,
    pub payload_capture_buffer: IntGauge,
    pub budget_reserved_micros: IntGauge,
    pub budget_pending_micros: IntGauge,
    pub budget_granted_micros: IntGauge,
    /// Each provider's series of `duration`, `tokens` and `cost_micros`, looked up once
    /// here rather than by label on every request.
    by_provider: Arc<Vec<(Provider, ProviderMetrics)>>,
}

/// One provider's children of the per-provider metric families.
pub struct ProviderMetrics {
    pub duration: Histogram,
    pub input_tokens: IntCounter,
    pub output_tokens: IntCounter,
    pub cost_micros: IntCounter,
}

impl ProxyMetrics {
    /// The metrics of a proxy that forwards to `providers` (each gets its series now, so
    /// the request path only looks them up).
    pub fn new(
        providers: impl IntoIterator<Item = Provider>,
    ) -> Result<ProxyMetrics, prometheus::Error> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "warden_proxy_requests_total",
                "Requests by provider, model, status class and decision",
            ),
            &["provider", "model", "status", "decision"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "warden_proxy_request_duration_seconds",
                "Total time of forwarded requests",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
            ]),
            &["provider"],
        )?;
        let overhead = Histogram::with_opts(
            HistogramOpts::new(
                "warden_proxy_overhead_seconds",
                "Time the proxy itself spends on a request (authentication, parsing, admission, usage), not waiting on the network",
            )
            .buckets(vec![0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.0025, 0.005, 0.01, 0.05]),
        )?;
        let tokens = IntCounterVec::new(
            Opts::new(
                "warden_proxy_tokens_total",
                "Tokens by provider and direction (input, output)",
            ),
            &["provider", "direction"],
        )?;
        let cost_micros = IntCounterVec::new(
            Opts::new(
                "warden_proxy_cost_microdollars_total",
                "List-price cost of forwarded requests, micro-dollars",
            ),
            &["provider"],
        )?;
        let gauge = |name: &str, help: &str| IntGauge::new(name, help);
        let counter = |name: &str, help: &str| IntCounter::new(name, help);
        let metrics = ProxyMetrics {
            snapshot_version: gauge(
                "warden_proxy_snapshot_version",
                "Version of the enforcement state applied",
            )?,
            snapshot_age_seconds: gauge(
                "warden_proxy_snapshot_age_seconds",
                "Seconds since the control plane was last heard",
            )?,
            keys_loaded: gauge("warden_proxy_keys_loaded", "Proxy keys in memory")?,
            usage_queued: gauge(
                "warden_proxy_usage_buffer_depth",
                "Usage records waiting to be sent",
            )?,
            usage_in_flight: gauge(
                "warden_proxy_usage_batch_in_flight",
                "Records of the batch being sent or retried",
            )?,
            usage_flushed: counter(
                "warden_proxy_usage_flushed_total",
                "Usage records acknowledged by the ledger",
            )?,
            usage_dropped: counter(
                "warden_proxy_usage_dropped_total",
                "Usage records dropped (queue full or batch refused)",
            )?,
            usage_unspooled: counter(
                "warden_proxy_usage_unspooled_total",
                "Usage records held in memory only because the spool was full or could not \
                 be written (lost if the proxy stops before they are sent)",
            )?,
            usage_set_aside: counter(
                "warden_proxy_usage_set_aside_total",
                "Usage records in batches set aside in the spool because the ledger refused \
                 them or failed on them repeatedly (`warden spool` lists and replays them)",
            )?,
            usage_batches_set_aside: counter(
                "warden_proxy_usage_batches_set_aside_total",
                "Usage batches set aside in the spool (see warden_proxy_usage_set_aside_total)",
            )?,
            usage_flush_failures: counter(
                "warden_proxy_usage_flush_failures_total",
                "Failed attempts to send a usage batch",
            )?,
            decisions_dropped: counter(
                "warden_proxy_policy_decisions_dropped_total",
                "Policy decision reports dropped (queue full or batch refused)",
            )?,
            accept_failures: counter(
                "warden_proxy_accept_failures_total",
                "Agent connections the listener failed to accept (out of file descriptors or \
                 memory pauses accepting for 100 ms)",
            )?,
            rate_grant_failures: counter(
                "warden_proxy_rate_grant_failures_total",
                "Requests for a rate limit's allowance the control plane did not answer; \
                 that bucket's minute is then counted by this proxy alone",
            )?,
            rate_grant_asks: counter(
                "warden_proxy_rate_grant_asks_total",
                "Rate limit allowances asked from the control plane, one per bucket and \
                 minute whose allowance on this proxy ran out",
            )?,
            rate_grant_batches: counter(
                "warden_proxy_rate_grant_batches_total",
                "Requests to the control plane carrying rate limit asks (the asks that \
                 came while one was on its way go together in the next)",
            )?,
            guardrail_findings: IntCounterVec::new(
                Opts::new(
                    "warden_proxy_guardrail_findings_total",
                    "Secrets and personal data guardrail policies found in requests, by what \
                     the policy did (block, redact, flag)",
                ),
                &["action"],
            )?,
            guardrail_failures: counter(
                "warden_proxy_guardrail_failures_total",
                "Guardrail scans that failed (took longer than guardrail_timeout_ms); each \
                 refused its request",
            )?,
            budget_grant_failures: counter(
                "warden_proxy_budget_grant_failures_total",
                "Requests for budgets' allowances (or their renewals) the control plane did \
                 not answer; the scopes asked for are then counted by this proxy alone for 10 s",
            )?,
            budget_grant_asks: counter(
                "warden_proxy_budget_grant_asks_total",
                "Requests to the control plane for budgets' allowances by requests short of \
                 one (a scope's concurrent requests wait for one ask)",
            )?,
            decisions_flush_failures: counter(
                "warden_proxy_policy_decisions_flush_failures_total",
                "Failed attempts to send a batch of policy decision reports",
            )?,
            stream_reconnects: counter(
                "warden_proxy_state_stream_reconnects_total",
                "Reconnections to the control plane's state stream",
            )?,
            managed_key_reads: IntCounterVec::new(
                Opts::new(
                    "warden_proxy_managed_key_reads_total",
                    "Reads of managed provider keys from Secrets Manager, by outcome \
                     (ok, error, unusable); cached keys are not read",
                ),
                &["outcome"],
            )?,
            payload_captures: IntCounterVec::new(
                Opts::new(
                    "warden_proxy_payload_captures_total",
                    "Request bodies of tenants with payload capture, by outcome (captured; \
                     too_large or buffer_full: recorded as omitted, with their size)",
                ),
                &["outcome"],
            )?,
            payload_capture_buffer: gauge(
                "warden_proxy_payload_capture_buffer_bytes",
                "Bytes of request bodies held for capture until their usage batch is written",
            )?,
            budget_reserved_micros: gauge(
                "warden_proxy_budget_reserved_microdollars",
                "Estimated cost reserved in budgets by requests in flight, summed over their \
                 scopes (0 when the proxy is idle)",
            )?,
            budget_pending_micros: gauge(
                "warden_proxy_budget_pending_microdollars",
                "Cost of finished requests counted in budgets while their usage awaits the \
                 ledger's acknowledgement, summed over their scopes",
            )?,
            budget_granted_micros: gauge(
                "warden_proxy_budget_granted_microdollars",
                "Money the control plane granted this proxy in budgets this month and the \
                 proxy has not given back, summed over their scopes",
            )?,
            by_provider: Arc::new(
                providers
                    .into_iter()
                    .map(|provider| {
                        let name = provider.as_str();
                        let metrics = ProviderMetrics {
                            duration: duration.with_label_values(&[name]),
                            input_tokens: tokens.with_label_values(&[name, "input"]),
                            output_tokens: tokens.with_label_values(&[name, "output"]),
                            cost_micros: cost_micros.with_label_values(&[name]),
                        };
                        (provider, metrics)
                    })
                    .collect(),
            ),
            registry: Arc::new(registry),
            requests,
            duration,
            overhead,
            tokens,
            cost_micros,
        };
        metrics.register_all()?;
        Ok(metrics)
    }

    fn register_all(&self) -> Result<(), prometheus::Error> {
        let r = &self.registry;
        r.register(Box::new(self.requests.clone()))?;
        r.register(Box::new(self.duration.clone()))?;
        r.register(Box::new(self.overhead.clone()))?;
        r.register(Box::new(self.tokens.clone()))?;
        r.register(Box::new(self.cost_micros.clone()))?;
        r.register(Box::new(self.managed_key_reads.clone()))?;
        r.register(Box::new(self.payload_captures.clone()))?;
        r.register(Box::new(self.guardrail_findings.clone()))?;
        for gauge in [
            &self.snapshot_version,
            &self.snapshot_age_seconds,
            &self.keys_loaded,
            &self.usage_queued,
            &self.usage_in_flight,
            &self.payload_capture_buffer,
            &self.budget_reserved_micros,
            &self.budget_pending_micros,
            &self.budget_granted_micros,
        ] {
            r.register(Box::new(gauge.clone()))?;
        }
        for counter in [
            &self.usage_flushed,
            &self.usage_dropped,
            &self.usage_unspooled,
            &self.usage_set_aside,
            &self.usage_batches_set_aside,
            &self.usage_flush_failures,
            &self.stream_reconnects,
            &self.decisions_dropped,
            &self.decisions_flush_failures,
            &self.accept_failures,
            &self.rate_grant_failures,
            &self.rate_grant_asks,
            &self.rate_grant_batches,
            &self.budget_grant_failures,
            &self.budget_grant_asks,
            &self.guardrail_failures,
        ] {
            r.register(Box::new(counter.clone()))?;
        }
        Ok(())
    }

    /// The series of a provider given to [`ProxyMetrics::new`] (the only ones requests
    /// are forwarded to).
    pub fn provider(&self, provider: Provider) -> Option<&ProviderMetrics> {
        self.by_provider
            .iter()
            .find(|(p, _)| *p == provider)
            .map(|(_, metrics)| metrics)
    }

    /// Adds a collector of another module (the MCP gateway's) to what `/metrics` shows.
    pub fn register(
        &self,
        collector: Box<dyn prometheus::core::Collector>,
    ) -> Result<(), prometheus::Error> {
        self.registry.register(collector)
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(%error, "cannot encode metrics");
        }
        out
    }
}

/// `2xx`, `4xx`, `5xx`: status classes keep the label small.
pub fn status_class(status: u16) -> &'static str {
    match status {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// The model label: the price table's name for the model's family, or `other`.
pub fn model_label(price: Option<&warden_shared::pricing::ModelPrice>) -> &'static str {
    price.map_or("other", |price| price.model)
}
