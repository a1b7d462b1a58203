//! `warden_proxy_trace_spans_lost_total{reason}`: spans the proxy recorded that never
//! reached the collector, read from the span queue's counters when `/metrics` is
//! scraped (the queue exists before the metrics do, and counts with two atomics).

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, Opts};

use super::Tracer;

pub struct LostSpans {
    tracer: Tracer,
    counter: IntCounterVec,
}

impl LostSpans {
    pub fn new(tracer: Tracer) -> Result<LostSpans, prometheus::Error> {
        let counter = IntCounterVec::new(
            Opts::new(
                "warden_proxy_trace_spans_lost_total",
                "Spans recorded but not exported, by reason: queue_full (the collector is \
                 behind and the span queue was full) or export_failed (the collector refused \
                 the batch or could not be reached)",
            ),
            &["reason"],
        )?;
        Ok(LostSpans { tracer, counter })
    }
}

impl Collector for LostSpans {
    fn desc(&self) -> Vec<&Desc> {
        self.counter.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let (dropped, failed) = self.tracer.lost();
        for (reason, count) in [("queue_full", dropped), ("export_failed", failed)] {
            let series = self.counter.with_label_values(&[reason]);
            // The queue's counts only grow: the series catches up with them.
            series.inc_by(count.saturating_sub(series.get()));
        }
        self.counter.collect()
    }
}
