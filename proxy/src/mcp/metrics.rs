//! The gateway's Prometheus series: tool calls by server, tool and decision, and their
//! latency by server. Server and tool names come from tenants, so the label values are
//! bounded: the first [`MAX_TOOL_SERIES`] (server, tool) pairs seen get their own
//! series, later ones count under `other`.

use dashmap::DashSet;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};

use crate::metrics::ProxyMetrics;

/// Most distinct (server, tool) label pairs; far above one tenant's tools.
pub const MAX_TOOL_SERIES: usize = 1000;

#[derive(Clone)]
pub struct GatewayMetrics {
    calls: IntCounterVec,
    duration: HistogramVec,
    /// The (server, tool) pairs with series of their own.
    labelled: std::sync::Arc<DashSet<(String, String)>>,
}

impl GatewayMetrics {
    pub fn new(metrics: &ProxyMetrics) -> Result<GatewayMetrics, prometheus::Error> {
        let calls = IntCounterVec::new(
            Opts::new(
                "warden_proxy_tool_calls_total",
                "MCP tool calls through the gateway by server, tool and decision (allowed or the refusal code)",
            ),
            &["server", "tool", "decision"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "warden_proxy_tool_call_duration_seconds",
                "Time of forwarded MCP tool calls, gateway and server together",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0,
            ]),
            &["server"],
        )?;
        metrics.register(Box::new(calls.clone()))?;
        metrics.register(Box::new(duration.clone()))?;
        Ok(GatewayMetrics {
            calls,
            duration,
            labelled: Default::default(),
        })
    }

    /// Counts one call; `seconds` for calls that reached the server.
    pub fn count(&self, server: &str, tool: &str, decision: &str, seconds: Option<f64>) {
        let (server, tool) = self.labels(server, tool);
        self.calls
            .with_label_values(&[server, tool, decision])
            .inc();
        if let Some(seconds) = seconds {
            self.duration.with_label_values(&[server]).observe(seconds);
        }
    }

    fn labels<'a>(&self, server: &'a str, tool: &'a str) -> (&'a str, &'a str) {
        let pair = (server.to_owned(), tool.to_owned());
        if self.labelled.contains(&pair) {
            return (server, tool);
        }
        if self.labelled.len() < MAX_TOOL_SERIES {
            self.labelled.insert(pair);
            return (server, tool);
        }
        ("other", "other")
    }
}
